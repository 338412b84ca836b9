"""Stored terms follow the tokenizer: what an older tokenizer indexed is indexed again on open.

Qdrant's sparse vectors and PostgreSQL's session-log ``tsvector`` are made from
``indexing.tokenize`` when a fact or message is written. Version 1 neither folded accents nor
indexed CJK characters alone, so a version-2 query ("Zurich", "鸭") would miss every fact
stored before the upgrade. Each store records the version beside the terms and makes the old
ones again when opened. ``V1`` is what version 1 made of the texts here, frozen.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from qdrant_client import QdrantClient

from indexing.sparse import document_vector
from indexing.tokenize import TOKENIZER_VERSION
from memory_service.config import QdrantSettings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.domain.messages import Msg
from memory_service.longterm.qdrant.backend import QdrantLongTermMemory, open_qdrant
from memory_service.longterm.qdrant.client_engine import ClientEngine
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.layout import TERMS_FIELD

ALICE = RuntimeContext("acme", "alice")
TEAM = RuntimeContext("acme", "alice", scope="tenant")
ZURICH = "Alice moved to Zürich in 2021"
DUCK = "王小明喜欢吃北京烤鸭"
V1 = {
    ZURICH: ["alic", "move", "zürich", "2021"],
    DUCK: ["王小", "小明", "明喜", "喜欢", "欢吃", "吃北", "北京", "京烤", "烤鸭"],
}


class _SharedClient(ClientEngine):
    def close(self) -> None:  # every opening shares the one local client: the fixture closes it
        pass


class _Opener:
    """Opens the same collection again: an Edge folder, or one qdrant-client local store."""

    def __init__(self, kind: str, tmp_path, embedder) -> None:
        self.kind, self.tmp_path, self.embedder = kind, tmp_path, embedder
        self.client = QdrantClient(location=":memory:") if kind == "qdrant-local" else None
        self.opened: list[QdrantLongTermMemory] = []

    def open(self) -> QdrantLongTermMemory:
        if self.client is None:
            memory = open_qdrant(
                QdrantSettings(path=self.tmp_path / "qdrant"), self.tmp_path, self.embedder
            )
        else:
            engine = _SharedClient.attach(self.client, "memories", self.embedder.dimension)
            memory = QdrantLongTermMemory(engine, self.embedder)
        self.opened.append(memory)
        return memory

    def reopen(self, memory: QdrantLongTermMemory) -> QdrantLongTermMemory:
        if self.client is None:  # an Edge folder has one owner: close it first
            memory.close()
        return self.open()

    def close(self) -> None:
        for memory in self.opened:
            memory.close()
        if self.client is not None:
            self.client.close()


@pytest.fixture(params=["qdrant-edge", "qdrant-local"])
def opener(request, tmp_path, embedder):
    made = _Opener(request.param, tmp_path, embedder)
    yield made
    made.close()


def _as_version_1(memory: QdrantLongTermMemory, ctx: RuntimeContext) -> None:
    """Rewrite the owner's points as version 1 wrote them: its terms, no version field."""
    points = memory.engine.scroll(OwnerFilter.of(ctx), with_vectors=True)
    old = []
    for point in points:
        payload = {k: v for k, v in point.payload.items() if k != TERMS_FIELD}
        old.append(replace(point, payload=payload, sparse=document_vector(V1[payload["text"]])))
    memory.engine.upsert(old)


def _bm25(memory, ctx, query) -> list[str]:
    return [r.fact.text for r in memory.retrieve(ctx, query, 5, mode="bm25")]


def test_every_write_records_the_tokenizer_version(opener):
    memory = opener.open()
    memory.record(ALICE, [Fact("Alice lives in Paris", key="user.city")])
    memory.record(ALICE, [Fact("Alice lives in Berlin", key="user.city")])  # closes Paris
    fid = memory.record(ALICE, [Fact(ZURICH)])[0].id
    stored = memory.get(ALICE, [fid])[0]
    assert memory.update(ALICE, [replace(stored, importance=9)]) == 1
    assert memory.engine.stale_terms(TOKENIZER_VERSION, 10) == []
    points = memory.engine.scroll(OwnerFilter.of(ALICE))
    assert {p.payload[TERMS_FIELD] for p in points} == {TOKENIZER_VERSION}


def test_opening_indexes_again_what_an_older_tokenizer_made(opener):
    memory = opener.open()
    memory.record(ALICE, [Fact(ZURICH), Fact(DUCK)])
    memory.record(TEAM, [Fact(DUCK)])
    _as_version_1(memory, ALICE)
    _as_version_1(memory, TEAM)
    stored = memory.engine.scroll(OwnerFilter.of(ALICE), with_vectors=True)
    dense_before = {p.id: p.dense for p in stored}
    # what an upgrade without re-indexing would answer: version 2's query terms miss
    assert _bm25(memory, ALICE, "Zurich") == []
    assert _bm25(memory, ALICE, "鸭") == []

    reopened = opener.reopen(memory)
    assert reopened.reindexed == 3
    assert _bm25(reopened, ALICE, "Zurich") == [ZURICH]
    assert _bm25(reopened, ALICE, "鸭") == [DUCK, DUCK]  # hers and the tenant's (she reads both)
    assert reopened.engine.stale_terms(TOKENIZER_VERSION, 10) == []  # the tenant's too
    after = reopened.engine.scroll(OwnerFilter.of(ALICE), with_vectors=True)
    assert {p.id: p.dense for p in after} == dense_before  # only the sparse vector changed
    assert all(p.payload[TERMS_FIELD] == TOKENIZER_VERSION for p in after)
    assert {f.text for f in reopened.list(ALICE).items} == {ZURICH, DUCK}

    assert opener.reopen(reopened).reindexed == 0  # done once


def test_session_log_terms_are_made_again_by_a_newer_tokenizer(pg_database, tmp_path):
    from memory_service.stores.shortterm.session_logs.postgres import PostgresSessionLogStore

    store = PostgresSessionLogStore(pg_database, tmp_path)
    ctx = ALICE.with_session("s1")
    store.append(ctx, [Msg("user", ZURICH, seq=1), Msg("user", DUCK, seq=2)])
    with pg_database.connection() as conn:
        assert {r[0] for r in conn.execute("SELECT terms_version FROM session_log")} == {
            TOKENIZER_VERSION
        }
        for text, terms in V1.items():  # as version 1 wrote them
            vector = " ".join(f"'{t}'" for t in terms)
            conn.execute(
                "UPDATE session_log SET terms = %s::tsvector, terms_version = 1 WHERE body = %s",
                (vector, text),
            )
    assert store.search(ctx, "Zurich") == []

    again = PostgresSessionLogStore(pg_database, tmp_path)
    assert again.retermed == 2
    assert [h.snippet for h in again.search(ctx, "Zurich")] == [ZURICH]
    assert [h.snippet for h in again.search(ctx, "鸭")] == [DUCK]
    assert PostgresSessionLogStore(pg_database, tmp_path).retermed == 0


def test_facts_an_older_replica_keeps_writing_do_not_hold_up_the_open(embedder, caplog):
    """During a rolling upgrade a replica of the older version may write a fact's old terms
    again right after this one re-indexed it: the open re-indexes each point once, says so,
    and leaves the rest for the next open (here the re-indexing never takes)."""

    class OlderReplicaOverwrites(_SharedClient):
        def set_terms(self, points, version) -> None:
            pass

    client = QdrantClient(location=":memory:")
    try:
        memory = QdrantLongTermMemory(
            _SharedClient.attach(client, "memories", embedder.dimension), embedder
        )
        memory.record(ALICE, [Fact(ZURICH), Fact(DUCK)])
        _as_version_1(memory, ALICE)
        engine = OlderReplicaOverwrites.attach(client, "memories", embedder.dimension)
        with caplog.at_level("WARNING"):
            assert QdrantLongTermMemory(engine, embedder).reindexed == 2
        assert "older tokenizer" in caplog.text
    finally:
        client.close()


@pytest.mark.postgres
def test_postgres_indexes_again_what_an_older_tokenizer_made(embedder, pgvector_dsn, tmp_path):
    """The PostgreSQL backend keeps each fact's terms in its row: a row an older tokenizer
    wrote (its terms, its version) is made again when the store opens, and a query with
    version 2's terms finds it."""
    from memory_service.longterm.postgres.rows import term_key
    from tests.support.pgvector import postgres_memory

    memory = postgres_memory(tmp_path, embedder)
    try:
        memory.record(ALICE, [Fact(ZURICH), Fact(DUCK)])
        with memory.database.connection() as conn:
            for text, terms in V1.items():
                keys = [term_key(t) for t in terms]
                conn.execute(
                    "UPDATE longterm_facts SET terms = %s, tfs = %s, doc_len = %s, "
                    "terms_version = 1 WHERE fact->>'text' = %s",
                    (keys, [1] * len(keys), len(keys), text),
                )
        assert _bm25(memory, ALICE, "Zurich") == []  # version 2's query terms miss
        assert _bm25(memory, ALICE, "鸭") == []
    finally:
        memory.close()
    reopened = postgres_memory(tmp_path, embedder)
    try:
        assert reopened.reindexed == 2
        assert _bm25(reopened, ALICE, "Zurich") == [ZURICH]
        assert _bm25(reopened, ALICE, "鸭") == [DUCK]
    finally:
        reopened.close()
    again = postgres_memory(tmp_path, embedder)
    try:
        assert again.reindexed == 0  # done once
    finally:
        again.close()


@pytest.mark.postgres
def test_postgres_reindex_at_open_passes_by_an_owner_being_written(embedder, tmp_path):
    """A process opening while another writes one owner re-indexes every other owner's
    rows and leaves that owner's for its next open, without waiting for the writer (which
    may be waiting for a row the re-index holds)."""
    from memory_service.domain.context import RuntimeContext
    from memory_service.longterm.postgres.rows import term_key
    from tests.support.pgvector import postgres_memory

    bob = RuntimeContext(ALICE.tenant_id, "bob")
    writer = postgres_memory(tmp_path, embedder)
    try:
        writer.record(ALICE, [Fact(ZURICH)])
        writer.record(bob, [Fact(ZURICH)])
        with writer.database.connection() as conn:
            keys = [term_key(t) for t in V1[ZURICH]]
            conn.execute(
                "UPDATE longterm_facts SET terms = %s, tfs = %s, terms_version = 1",
                (keys, [1] * len(keys)),
            )
        with writer._write_lock(ALICE):  # a write of Alice's under way, not committed
            writer.record(ALICE, [Fact(DUCK)])
            opened = postgres_memory(tmp_path, embedder)
            try:
                assert opened.reindexed == 1  # Bob's
                assert _bm25(opened, bob, "Zurich") == [ZURICH]
            finally:
                opened.close()
    finally:
        writer.close()
    reopened = postgres_memory(tmp_path, embedder)
    try:
        assert reopened.reindexed == 1  # Alice's, at the next open
        assert _bm25(reopened, ALICE, "Zurich") == [ZURICH]
    finally:
        reopened.close()
