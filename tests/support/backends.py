"""The long-term backends every contract test runs over.

``LONGTERM_BACKENDS`` maps a backend name to a factory ``(tmp_path, embedder) -> memory``; the
contract suite runs every test against every entry, with the same assertions.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from indexing.embeddings import Embedder
from memory_service.longterm.protocol import LongTermMemory

BackendFactory = Callable[[Path, Embedder], LongTermMemory]


def _files(tmp_path: Path, embedder: Embedder) -> LongTermMemory:
    from memory_service.longterm.files.backend import FileSystemLongTermMemory

    return FileSystemLongTermMemory(tmp_path / "workspace", embedder)


_edge_templates: dict[int, Path] = {}


def _empty_edge_shard(dimension: int) -> Path:
    """A new, closed Edge shard of ``dimension``, made once per process by the real
    ``EdgeEngine`` and removed at exit. Why: creating a shard (its payload indexes, each
    flushed) took 0.9-1.4 s per test on two loaded cores; copying this one and loading the copy
    takes 0.3-0.5 s."""
    template = _edge_templates.get(dimension)
    if template is None:
        from memory_service.longterm.qdrant.edge.engine import EdgeEngine

        root = Path(tempfile.mkdtemp(prefix="edge-template-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        template = root / "memories"
        EdgeEngine.acquire(template, dimension).close()
        _edge_templates[dimension] = template
    return template


def _qdrant_edge(tmp_path: Path, embedder: Embedder) -> LongTermMemory:
    """Qdrant Edge in ``tmp_path/qdrant``, opened on a copy of an empty shard: every test gets
    its own folder and starts from no point (checked here)."""
    from memory_service.config import QdrantSettings
    from memory_service.longterm.qdrant.backend import open_qdrant

    settings = QdrantSettings(path=tmp_path / "qdrant")
    folder = tmp_path / "qdrant" / settings.collection
    fresh = not folder.exists()  # else a test reopens its own folder
    if fresh:
        shutil.copytree(_empty_edge_shard(embedder.dimension), folder)
    memory = open_qdrant(settings, tmp_path, embedder)
    points = memory.engine._shard.info().points_count if fresh else 0
    if not folder.samefile(memory.engine.folder) or points:
        memory.close()
        raise AssertionError(f"Edge opened {memory.engine.folder} with {points} points")
    return memory


def _qdrant_local(tmp_path: Path, embedder: Embedder) -> LongTermMemory:
    """qdrant-client's ``:memory:`` local mode: the stand-in for a Qdrant server."""
    from memory_service.config import QdrantSettings
    from memory_service.longterm.qdrant.backend import open_qdrant

    return open_qdrant(QdrantSettings(url=":memory:"), tmp_path, embedder)


LONGTERM_BACKENDS: dict[str, BackendFactory] = {
    "files": _files,
    "qdrant-edge": _qdrant_edge,
    "qdrant-local": _qdrant_local,
}
