"""A long-term store knows the embedding model its vectors came from, and never mixes two.

Model A is the bundled MiniLM as served by default; model B is the same MiniLM served
int8-quantised (``MEMORY_EMBEDDING__QUANTIZE=true``): another name, and vectors that move
enough to change scores (cosines differ by ~0.02), so a store that mixed them would rank one
model's query against the other's facts. A store of A opened with B stops with one line naming
``MEMORY_EMBEDDING__MODEL`` and changes nothing; ``reembed`` (``memory-service reembed``)
moves it to B in batches, and a re-embed stopped part-way goes on where it stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psycopg
import pytest
from qdrant_client import QdrantClient

from indexing.embeddings import Embedder
from indexing.hashing import content_hash
from indexing.onnx_embeddings import OnnxEmbedder
from memory_service.config import QdrantSettings
from memory_service.config.settings import PostgresSettings
from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.errors import ConfigurationError
from memory_service.domain.facts import Fact
from memory_service.domain.paths import OwnerPaths, WorkspacePaths
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.files.embedder_records import FilesEmbedderRecords
from memory_service.longterm.files.vector_cache import load_vectors, model_cache_path
from memory_service.longterm.postgres.backend import open_postgres_records
from memory_service.longterm.protocol import LongTermMemory
from memory_service.longterm.qdrant.backend import (
    QdrantLongTermMemory,
    open_engine,
    open_qdrant,
)
from memory_service.longterm.qdrant.client_engine import ClientEngine
from memory_service.longterm.qdrant.embedder_records import QdrantEmbedderRecords
from memory_service.longterm.qdrant.engine import QdrantEngine
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.layout import EMBEDDER_FIELD
from memory_service.longterm.qdrant.payload import payload_of
from memory_service.longterm.qdrant.points import StoredPoint
from memory_service.longterm.store_embedder import EmbedderRecords, reembed
from tests.support import pgvector
from tests.support.server import ServerProcess, clean_env, write_keys
from tests.support.waiting import wait_until

ALICE = RuntimeContext("acme", "alice")
BOB = RuntimeContext("acme", "bob")
BOT = scope_context("acme", "agent", "helpdesk")
FACTS = {
    ALICE: [
        "Alice works as a nurse in Paris",
        "Alice has a cat called Miso",
        "Alice runs five kilometres every morning",
        "Alice is allergic to peanuts",
        "Alice's daughter studies law in Lyon",
    ],
    BOB: [
        "Bob flies planes for a cargo airline",
        "Bob lives in Lima with his husband",
        "Bob collects vinyl records of Peruvian cumbia",
        "Bob drives an old red Volvo",
    ],
    BOT: [
        "The helpdesk answers in French on weekends",
        "Refunds above 500 euros need a manager's approval",
        "The office wifi password rotates every Monday",
    ],
}
COUNT = sum(len(texts) for texts in FACTS.values())
BACKENDS = ["files", "qdrant-edge", "qdrant-local", "postgres"]


@pytest.fixture(scope="module")
def model_b() -> OnnxEmbedder:
    """The bundled model served int8: another name, other vectors."""
    return OnnxEmbedder(threads=1, quantize=True)


class _SharedClient(ClientEngine):
    def close(self) -> None:  # every opening shares the one local client: the store closes it
        pass


class Store:
    """One store of a backend, opened again as a new process would: by the memory (the rule
    applies) or by its records (``reembed``)."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind, self.root = kind, root
        self.client = QdrantClient(location=":memory:") if kind == "qdrant-local" else None

    def open(self, embedder: Embedder) -> LongTermMemory:
        if self.kind == "files":
            return FileSystemLongTermMemory(self.root, embedder)
        if self.kind == "postgres":
            return pgvector.postgres_memory(self.root, embedder)
        if self.kind == "qdrant-edge":
            return open_qdrant(QdrantSettings(path=self.root / "qdrant"), self.root, embedder)
        return QdrantLongTermMemory(self._engine(embedder.dimension), embedder)

    def _engine(self, dimension: int) -> QdrantEngine:
        if self.client is not None:
            return _SharedClient.attach(self.client, "memories", dimension)
        return open_engine(QdrantSettings(path=self.root / "qdrant"), self.root, dimension)

    @contextmanager
    def records(self, dimension: int = 384) -> Iterator[EmbedderRecords]:
        if self.kind == "files":
            yield FilesEmbedderRecords(self.root)
            return
        if self.kind == "postgres":
            with open_postgres_records(self._postgres()) as records:
                yield records
            return
        engine = self._engine(dimension)
        try:
            yield QdrantEmbedderRecords(engine)
        finally:
            engine.close()

    def _postgres(self) -> PostgresSettings:
        return PostgresSettings(
            dsn=pgvector.dsn(), schema_name=pgvector.schema_for(self.root), pool_max=2
        )

    def _rows(self, sql: str) -> list[tuple]:
        with psycopg.connect(pgvector.dsn()) as conn:
            conn.execute(f"SET search_path TO {pgvector.schema_for(self.root)}, public")
            return conn.execute(sql).fetchall()

    def content(self) -> dict[str, object]:
        """What the store holds: every file's bytes (files), or the record and every point's
        payload and vectors (Qdrant), or the record and every row (PostgreSQL)."""
        if self.kind == "files":
            return {
                str(p.relative_to(self.root)): p.read_bytes()
                for p in sorted(self.root.rglob("*"))
                if p.is_file() and not p.name.endswith(".lock")
            }
        if self.kind == "postgres":
            record = self._rows("SELECT name, record FROM longterm_embedder ORDER BY name")
            rows = self._rows(
                "SELECT id::text, fact::text, embedding::text, embedder FROM longterm_facts "
                "ORDER BY id"
            )
            return {"record": record, **{row[0]: row[1:] for row in rows}}
        engine = self._engine(384)
        try:
            out: dict[str, object] = {"record": engine.embedder_record()}
            for ctx in FACTS:
                for point in engine.scroll(OwnerFilter.of(ctx), with_vectors=True):
                    dense = np.round(np.asarray(point.dense, dtype=np.float32), 6).tolist()
                    out[point.id] = (point.payload, dense, point.sparse)
            return out
        finally:
            engine.close()

    def vectors(self, embedder: Embedder) -> dict[str, np.ndarray]:
        """Every stored fact's dense vector by its text: from ``embedder``'s caches (files),
        or the points' (Qdrant, each named ``embedder``'s)."""
        out: dict[str, np.ndarray] = {}
        if self.kind == "files":
            for ctx, texts in FACTS.items():
                cache = model_cache_path(OwnerPaths.of(self.root, ctx), embedder.name, 384)
                known = load_vectors(cache, 384)
                out.update({t: known[content_hash(t)] for t in texts if content_hash(t) in known})
            return out
        if self.kind == "postgres":
            rows = self._rows(
                "SELECT fact->>'text', embedding::real[], embedder FROM longterm_facts"
            )
            for text, dense, name in rows:
                assert name == embedder.name
                out[text] = np.asarray(dense, dtype=np.float32)
            return out
        engine = self._engine(384)
        try:
            for ctx in FACTS:
                for point in engine.scroll(OwnerFilter.of(ctx), with_vectors=True):
                    assert point.payload[EMBEDDER_FIELD] == embedder.name
                    out[point.payload["text"]] = np.asarray(point.dense, dtype=np.float32)
            return out
        finally:
            engine.close()

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path) -> Iterator[Store]:
    made = Store(request.param, tmp_path / "store")
    yield made
    made.close()


def _fill(store: Store, embedder: Embedder) -> None:
    memory = store.open(embedder)
    try:
        for ctx, texts in FACTS.items():
            memory.record(ctx, [Fact(t) for t in texts])
    finally:
        memory.close()


# --- refused ----------------------------------------------------------------------------------


def test_a_store_of_another_model_is_refused_and_left_as_it_was(store, embedder, model_b):
    _fill(store, embedder)
    before = store.content()
    with pytest.raises(ConfigurationError) as refused:
        store.open(model_b)
    message = refused.value.message
    assert message.startswith("MEMORY_EMBEDDING__MODEL: ") and "\n" not in message
    assert f"holds vectors of {embedder.name} (384 dimensions)" in message
    assert f"not of the configured {model_b.name} (384 dimensions)" in message
    assert "memory-service reembed" in message
    settings = f"MEMORY_EMBEDDING__MODEL={embedder.name} with MEMORY_EMBEDDING__QUANTIZE=false"
    assert f"configure it again ({settings})" in message  # the int8 switch is the difference
    assert store.content() == before  # nothing written, nothing mixed
    memory = store.open(embedder)  # the model that made it still opens it (the lock let go)
    try:
        hits = memory.retrieve(ALICE, "what does Alice do for a living?", top_k=1)
        assert hits[0].fact.text == "Alice works as a nurse in Paris"
    finally:
        memory.close()


def test_a_minilm_store_is_refused_by_e5_and_moved_to_it_by_reembed(store, embedder):
    """The two bundled models: a store of MiniLM's vectors opened with multilingual-e5-small
    (the same 384 dimensions, so nothing but the record tells them apart) is refused and left
    as it was; a re-embed moves it, and recall then reads e5's vectors."""
    from indexing.e5_embeddings import E5Embedder

    e5 = E5Embedder(threads=1)
    _fill(store, embedder)
    before = store.content()
    with pytest.raises(ConfigurationError) as refused:
        store.open(e5)
    assert refused.value.message.startswith("MEMORY_EMBEDDING__MODEL: ")
    assert f"not of the configured {e5.name} (384 dimensions)" in refused.value.message
    assert store.content() == before
    with store.records() as records:
        moved = reembed(records, e5)
    assert (moved.done, moved.left) == (COUNT, 0)
    memory = store.open(e5)
    try:
        hits = memory.retrieve(BOB, "which city does Bob live in?", top_k=1)
        assert hits[0].fact.text == "Bob lives in Lima with his husband"
    finally:
        memory.close()
    with pytest.raises(ConfigurationError, match=r"^MEMORY_EMBEDDING__MODEL: "):
        store.open(embedder)


def test_a_new_store_records_the_model_that_opens_it(store, embedder, model_b):
    memory = store.open(model_b)
    memory.close()
    with store.records() as records:
        record = records.read()
    assert record is not None and record.embedder.model == model_b.name
    assert record.embedder.dimension == 384 and record.previous is None
    with pytest.raises(ConfigurationError, match=r"^MEMORY_EMBEDDING__MODEL: "):
        store.open(embedder)  # empty, but recorded: the next fact would be B's


# --- re-embedded -----------------------------------------------------------------------------


def test_reembed_moves_every_fact_and_goes_on_after_a_stop(store, embedder, model_b):
    _fill(store, embedder)
    with store.records() as records:
        first = reembed(records, model_b, limit=5)
    assert (first.done, first.left) == (5, COUNT - 5)
    for model in (model_b, embedder):  # part-way: neither model may read it
        with pytest.raises(ConfigurationError, match=r"part-way through a re-embed") as refused:
            store.open(model)
        assert refused.value.message.startswith("MEMORY_EMBEDDING__MODEL: ")
    with store.records() as records:
        rest = reembed(records, model_b)
        again = reembed(records, model_b)
    assert (rest.done, rest.left) == (COUNT - 5, 0)  # none embedded twice
    assert (again.done, again.left) == (0, 0)

    stored = store.vectors(model_b)
    assert set(stored) == {t for texts in FACTS.values() for t in texts}
    texts = list(stored)
    closer_to_b = np.einsum("ij,ij->i", np.stack([stored[t] for t in texts]), model_b.embed(texts))
    closer_to_a = np.einsum("ij,ij->i", np.stack([stored[t] for t in texts]), embedder.embed(texts))
    assert (closer_to_b > 0.98).all() and (closer_to_b > closer_to_a + 0.005).all()

    memory = store.open(model_b)
    try:
        query = "which city does Bob live in?"
        assert memory.retrieve(BOB, query, top_k=1)[0].fact.text.startswith("Bob lives in Lima")
        agent = memory.retrieve(BOT, "how much money can be refunded without a boss?", top_k=1)
        assert agent[0].fact.text.startswith("Refunds above 500 euros")
        memory.record(ALICE, [Fact("Alice speaks Portuguese")])  # B's store now takes B's
    finally:
        memory.close()
    with pytest.raises(ConfigurationError, match=r"holds vectors of .*#int8"):
        store.open(embedder)


def test_files_reembed_leaves_no_cache_of_the_old_model(tmp_path, embedder, model_b):
    store = Store("files", tmp_path)
    _fill(store, embedder)
    memory = store.open(embedder)
    memory.retrieve(ALICE, "pets", top_k=3)  # the index writes A's cache
    memory.close()
    paths = OwnerPaths.of(tmp_path, ALICE)
    old = model_cache_path(paths, embedder.name, 384)
    assert old.is_file()
    with store.records() as records:
        reembed(records, model_b)
    assert not old.exists()
    assert model_cache_path(paths, model_b.name, 384).is_file()


def test_an_unreadable_record_is_refused_not_guessed(tmp_path, embedder):
    store = Store("files", tmp_path)
    _fill(store, embedder)
    record = WorkspacePaths(tmp_path).embedder_record
    record.write_text('{"model": "bundled:all-MiniLM-L6-v2"', encoding="utf-8")  # cut short
    before = store.content()
    with pytest.raises(ConfigurationError) as refused:
        store.open(embedder)
    message = refused.value.message
    assert "embedding-model record is unreadable" in message and "\n" not in message
    assert "MEMORY_EMBEDDING__MODEL" in message
    assert store.content() == before


def test_an_erase_reaches_a_store_of_another_model(tmp_path, embedder, model_b):
    """A user is erased from the files store used before a switch to Qdrant, even when that
    store holds another model's vectors: an erase embeds nothing."""
    from memory_service.config import load_settings
    from memory_service.services import build_services
    from memory_service.services.erasure_stores import build_erasure

    _fill(Store("files", tmp_path), embedder)
    settings = load_settings(workspace=tmp_path, longterm={"backend": "qdrant"})
    services = build_services(settings, embedder=model_b)
    try:
        erasure = build_erasure(services)
        try:
            receipt = erasure.erase(ALICE, by="test")
        finally:
            erasure.close()
    finally:
        services.close()
    assert receipt.removed["facts.files"] == len(FACTS[ALICE])
    assert FileSystemLongTermMemory(tmp_path, embedder).count_user(ALICE) == 0
    assert FileSystemLongTermMemory(tmp_path, embedder).count_user(BOB) == len(FACTS[BOB])


# --- stores from before records --------------------------------------------------------------


def test_a_files_store_without_a_record_is_the_configured_models(tmp_path, embedder, model_b):
    store = Store("files", tmp_path)
    _fill(store, embedder)
    record = WorkspacePaths(tmp_path).embedder_record
    record.unlink()  # as a workspace written before stores recorded their model
    memory = store.open(embedder)
    memory.close()
    assert embedder.name in record.read_text(encoding="utf-8")


def test_an_edge_store_without_a_record_or_stamps_opens_and_reembeds(tmp_path, embedder, model_b):
    """Points written before points named their model: no record, no ``embedder`` field."""
    engine = open_engine(QdrantSettings(path=tmp_path / "qdrant"), tmp_path, 384)
    texts = FACTS[ALICE]
    try:
        facts = [Fact(t).stamped(ALICE) for t in texts]
        vectors = embedder.embed(texts)
        engine.upsert(
            [
                StoredPoint(f.id, payload_of(ALICE, f, embedder=None), v.tolist(), _terms(f))
                for f, v in zip(facts, vectors, strict=True)
            ]
        )
        assert engine.embedder_record() is None
    finally:
        engine.close()
    store = Store("qdrant-edge", tmp_path)
    memory = store.open(embedder)  # taken to be the configured model's, and recorded
    try:
        hits = memory.retrieve(ALICE, "what does Alice do for a living?", top_k=1)
        assert hits[0].fact.text == "Alice works as a nurse in Paris"
    finally:
        memory.close()
    with store.records() as records:
        moved = reembed(records, model_b)
    assert (moved.done, moved.left) == (len(texts), 0)  # the unstamped points too
    engine = open_engine(QdrantSettings(path=tmp_path / "qdrant"), tmp_path, 384)
    try:
        stamps = {p.payload.get(EMBEDDER_FIELD) for p in engine.scroll(OwnerFilter.of(ALICE))}
    finally:
        engine.close()
    assert stamps == {model_b.name}


def _terms(fact: Fact):
    from indexing.sparse import document_vector
    from indexing.tokenize import tokenize

    return document_vector(tokenize(fact.text))


# --- what a user runs ------------------------------------------------------------------------


def _cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_service.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


@pytest.mark.subprocess
@pytest.mark.parametrize("backend", ["files", "qdrant"])
def test_the_cli_and_serve_refuse_another_model_and_reembed_moves_the_store(tmp_path, backend):
    workspace = tmp_path / "ws"
    repo = str(Path(__file__).resolve().parents[2])
    base = clean_env(
        workspace,
        MEMORY_LONGTERM__BACKEND=backend,
        MEMORY_EMBEDDING__THREADS="1",
        PYTHONPATH=repo,
    )
    int8 = {**base, "MEMORY_EMBEDDING__QUANTIZE": "true"}
    scope = ["--tenant", "acme", "--user", "bob"]
    done = _cli(base, "record", *scope, *FACTS[BOB])
    assert done.returncode == 0, done.stderr

    def search(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return _cli(env, "search", *scope, "--json", "which city does Bob live in?")

    refused = search(int8)
    assert refused.returncode != 0 and refused.stdout == ""
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("memory-service: error: MEMORY_EMBEDDING__MODEL: ")

    keys = tmp_path / "keys.json"
    write_keys(keys, {"acme": "user"})
    server = ServerProcess(workspace, keys, backend=backend, env={"PYTHONPATH": repo})
    server.env["MEMORY_EMBEDDING__QUANTIZE"] = "true"
    assert server.run_to_exit() == 2
    said = [line for line in server.output().splitlines() if line.strip()]
    assert said[-1].startswith("memory-service: error: MEMORY_EMBEDDING__MODEL: "), said
    assert not any("Traceback" in line for line in said)

    part = _cli(int8, "reembed", "--limit", "2")
    assert part.returncode == 0, part.stderr
    assert "re-embedded 2 facts of " in part.stdout
    assert f"{len(FACTS[BOB]) - 2} left" in part.stdout
    assert "re-embedding facts: 2/2 (100%)" in part.stderr  # off a terminal: a log line
    assert "part-way through a re-embed" in search(int8).stderr
    assert "part-way through a re-embed" in search(base).stderr

    rest = _cli(int8, "reembed", "--json")
    assert rest.returncode == 0, rest.stderr
    assert '"reembedded": 2' in rest.stdout and '"left": 0' in rest.stdout

    found = search(int8)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)[0]["text"] == "Bob lives in Lima with his husband"
    assert search(base).returncode != 0  # B's store now: A is refused


@pytest.mark.subprocess
def test_a_killed_reembed_goes_on_where_it_stopped(tmp_path, embedder, model_b):
    """SIGKILL once the first owner's vectors of the new model are on disk: the next run
    embeds only the rest, and the store then opens with the new model."""
    users = {
        RuntimeContext("acme", f"u{i}"): [f"u{i} note {n} about {i * n}" for n in range(100)]
        for i in range(6)
    }
    memory = FileSystemLongTermMemory(tmp_path, embedder)
    for ctx, texts in users.items():
        memory.record(ctx, [Fact(t) for t in texts])
    memory.close()
    env = clean_env(
        tmp_path,
        MEMORY_EMBEDDING__QUANTIZE="true",
        MEMORY_EMBEDDING__THREADS="1",
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    caches = [model_cache_path(OwnerPaths.of(tmp_path, ctx), model_b.name, 384) for ctx in users]
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_service.cli", "reembed"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: any(c.exists() for c in caches), timeout_s=120)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    kept = sum(len(load_vectors(c, 384)) for c in caches)
    assert 0 < kept < 600  # killed part-way, what landed kept
    with pytest.raises(ConfigurationError, match=r"part-way through a re-embed"):
        FileSystemLongTermMemory(tmp_path, model_b)

    rest = _cli(env, "reembed", "--json")
    assert rest.returncode == 0, rest.stderr
    outcome = json.loads(rest.stdout)
    assert (outcome["reembedded"], outcome["left"]) == (600 - kept, 0)
    memory = FileSystemLongTermMemory(tmp_path, model_b)
    try:
        hit = memory.retrieve(RuntimeContext("acme", "u5"), "u5 note 7 about 35", top_k=1)
        assert hit[0].fact.text == "u5 note 7 about 35"
    finally:
        memory.close()
