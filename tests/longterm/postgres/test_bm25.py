"""The PostgreSQL backend's BM25 leg gives the files backend's scores: the same owner
statistics (N, mean length, document frequency over the open facts), the same terms."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.near_duplicates import OFF
from tests.support.pgvector import postgres_memory

CTX = RuntimeContext("bm25-tenant", "reader")
WORDS = [
    "garden",
    "kitchen",
    "violin",
    "marathon",
    "passport",
    "coffee",
    "bicycle",
    "harbor",
    "lantern",
    "meadow",
    "orchard",
    "pottery",
    "quartz",
    "saddle",
    "tundra",
    "walnut",
    "yacht",
    "zephyr",
    "anchor",
    "blossom",
]


def _facts() -> list[Fact]:
    rng = random.Random(3)
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    facts = [
        Fact(
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14))) + f" note {i}",
            created_at=t0 + timedelta(hours=i),
        )
        for i in range(60)
    ]
    # words that are all stop words: a document of its date's terms alone, between others
    facts.insert(30, Fact("it is what it was", created_at=t0 + timedelta(minutes=5)))
    # a key superseded: the older fact leaves the statistics of a read about now
    facts += [
        Fact("violin lessons on Monday", key="lesson", created_at=t0),
        Fact("violin lessons on Friday", key="lesson", created_at=t0 + timedelta(days=9)),
    ]
    return facts


@pytest.fixture(scope="module")
def both(embedder, pgvector_dsn, tmp_path_factory):
    """The same facts in the files backend and in PostgreSQL."""
    folder = tmp_path_factory.mktemp("bm25")
    files = FileSystemLongTermMemory(folder / "ws", embedder, near_duplicates=OFF)
    postgres = postgres_memory(folder, embedder, near_duplicates=OFF)
    facts = _facts()
    for memory in (files, postgres):
        memory.record(CTX, facts[:-1])
        memory.record(CTX, facts[-1:])  # the key's older fact superseded
    yield {"files": files, "postgres": postgres}
    files.close()
    postgres.close()


@pytest.mark.parametrize("query", ["violin harbor", "coffee coffee garden", "quartz", "note 7"])
def test_bm25_scores_are_the_files_backends(both, query):
    found = {}
    for name, memory in both.items():
        recalls = memory.retrieve(CTX, query, top_k=20, mode="bm25")
        found[name] = [(r.fact.id, r.scores["bm25"]) for r in recalls]
    assert found["files"]
    assert [i for i, _ in found["postgres"]] == [i for i, _ in found["files"]]
    for (_, mine), (_, theirs) in zip(found["postgres"], found["files"], strict=True):
        assert mine == pytest.approx(theirs, rel=1e-9)


def _postings(memory, fact_ids=None) -> int:
    """How many (fact, term) entries the owner's rows (or those of ``fact_ids``) hold."""
    with memory.database.connection() as conn:
        if fact_ids is None:
            where, params = "owner = %s", (CTX.owner,)
        else:
            where, params = "id = ANY(%s::uuid[])", (list(fact_ids),)
        sql = f"SELECT COALESCE(sum(cardinality(terms)), 0) FROM longterm_facts WHERE {where}"
        return conn.execute(sql, params).fetchone()[0]


def test_a_delete_takes_its_facts_postings_and_scores_stay_the_files_backends(embedder, tmp_path):
    """A deleted fact leaves no term behind (its terms would still count in the owner's
    document frequencies), whether deleted by id or with its whole owner."""
    files = FileSystemLongTermMemory(tmp_path / "ws", embedder, near_duplicates=OFF)
    postgres = postgres_memory(tmp_path, embedder, near_duplicates=OFF)
    try:
        facts = _facts()[:30]
        for memory in (files, postgres):
            memory.record(CTX, facts)
        doomed = [f.id for f in postgres.list(CTX, limit=100).items if "violin" in f.text]
        assert doomed and _postings(postgres, doomed) > 0
        for memory in (files, postgres):
            assert memory.delete(CTX, doomed) == len(doomed)
        assert _postings(postgres, doomed) == 0
        for query in ("violin harbor", "coffee garden"):
            scores = [
                [
                    (r.fact.id, r.scores["bm25"])
                    for r in m.retrieve(CTX, query, top_k=20, mode="bm25")
                ]
                for m in (files, postgres)
            ]
            assert [i for i, _ in scores[1]] == [i for i, _ in scores[0]]
            for (_, mine), (_, theirs) in zip(scores[1], scores[0], strict=True):
                assert mine == pytest.approx(theirs, rel=1e-9)
        assert _postings(postgres) > 0
        postgres.forget(CTX)
        assert _postings(postgres) == 0
    finally:
        files.close()
        postgres.close()
