"""Shared fixtures: the real bundled embedding model, loaded once, and backend factories.

``LONGTERM_BACKENDS`` maps a backend name to a factory ``(tmp_path, embedder) -> memory``; the
contract suite runs every test against every entry, with the same assertions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from indexing.embeddings import CachedEmbedder, Embedder, SentenceTransformerEmbedder  # noqa: E402
from memory_service.longterm.files.backend import FileSystemLongTermMemory  # noqa: E402
from memory_service.longterm.protocol import LongTermMemory  # noqa: E402
from tests.chat_script import Script  # noqa: E402
from tests.llm_server import chat_model, llm_server  # noqa: E402, F401 - shared fixtures

BackendFactory = Callable[[Path, Embedder], LongTermMemory]


def _files(tmp_path: Path, embedder: Embedder) -> LongTermMemory:
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


LONGTERM_BACKENDS: dict[str, BackendFactory] = {
    "files": _files,
    "qdrant-edge": _qdrant_edge,
    "qdrant-local": _qdrant_local,
}


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    return CachedEmbedder(SentenceTransformerEmbedder(num_threads=2))


@pytest.fixture(params=sorted(LONGTERM_BACKENDS))
def memory(request, tmp_path: Path, embedder: Embedder) -> Iterator[LongTermMemory]:
    backend = LONGTERM_BACKENDS[request.param](tmp_path, embedder)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A fresh workspace folder (created on first write)."""
    return tmp_path / "workspace"


@pytest.fixture
def longterm(workspace: Path, embedder: Embedder) -> Iterator[LongTermMemory]:
    """The files backend on ``workspace``: the default a pipeline test runs over."""
    memory = FileSystemLongTermMemory(workspace, embedder)
    yield memory
    memory.close()


@pytest.fixture
def script(llm_server):  # noqa: F811 - the fixture imported above
    """The loopback LLM server answers from a ``Script`` (scripted replies, in order)."""
    script = Script()
    llm_server.responder = script
    return script


PG_DSN = os.environ.get("MEMORY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema for one test (``MEMORY_POSTGRES__SCHEMA_NAME``), dropped
    after it, so tests of the replica-state tables never meet each other's rows."""
    import uuid

    import psycopg

    schema = f"t_{uuid.uuid4().hex[:16]}"
    yield schema
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_database(pg_schema: str) -> Iterator[object]:
    """A ``pgdb.Database`` on the test PostgreSQL, in a schema of its own."""
    from memory_service.pgdb import Database

    database = Database(PG_DSN, schema=pg_schema, pool_max=4)
    yield database
    database.close()
