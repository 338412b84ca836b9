"""Recall from an owner's rows kept in the process answers what the statement answers, and
sees every change to the owner's rows at once, whoever made it: another process, or a person
with psql."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import ExpiryPolicy, FactFilter
from memory_service.domain.facts import Fact
from memory_service.longterm.near_duplicates import OFF
from memory_service.longterm.postgres.owner_cache import OwnerCache, OwnerRows
from tests.support.clock import Clock
from tests.support.pgvector import postgres_memory

ALICE = RuntimeContext("kept-tenant", "alice")
BOB = RuntimeContext("kept-tenant", "bob")
T0 = datetime(2025, 3, 1, tzinfo=UTC)


def _facts() -> list[Fact]:
    facts = [
        Fact("Alice is allergic to peanuts", kind="fact", tags=("health",), created_at=T0),
        Fact("Alice works as a nurse at the city hospital", created_at=T0 + timedelta(hours=1)),
        Fact("Alice plays the cello on Sundays", tags=("music",), created_at=T0 + timedelta(2)),
        Fact("Alice's cat is named Biscuit", kind="event", created_at=T0 + timedelta(3)),
        Fact("Alice lives in Paris", key="city", created_at=T0 + timedelta(4)),
        Fact("Alice drinks green tea every morning", created_at=T0 + timedelta(5)),
        Fact(
            "Alice had a peanut-free birthday cake",
            created_at=T0 + timedelta(6),
            expires_at=(T0 + timedelta(7)).isoformat(),
        ),
        Fact("爱丽丝喜欢喝绿茶", created_at=T0 + timedelta(8)),
    ]
    return facts


@pytest.fixture
def clock() -> Clock:
    return Clock(T0 + timedelta(days=10))


@pytest.fixture
def pair(embedder, tmp_path, clock):
    """Two services over one schema, as two processes: ``kept`` keeps owners' rows in
    memory, ``statement`` scores every recall in PostgreSQL."""
    kept = postgres_memory(tmp_path, embedder, near_duplicates=OFF, clock=clock)
    statement = postgres_memory(tmp_path, embedder, near_duplicates=OFF, kept_facts=0, clock=clock)
    kept.record(ALICE, _facts())
    kept.record(ALICE, [Fact("Alice lives in Berlin", key="city", created_at=T0 + timedelta(9))])
    kept.record(BOB, [Fact("Bob is allergic to shellfish", created_at=T0)])
    yield kept, statement
    kept.close()
    statement.close()


def _found(memory, query, **options):
    return [(r.fact.id, r.fact.text, r.scores) for r in memory.retrieve(ALICE, query, **options)]


QUERIES = [
    ("which food is Alice allergic to?", {}),
    ("peanuts", {"mode": "bm25"}),
    ("what does she do for a living", {"mode": "dense"}),
    ("where does Alice live", {}),
    ("where does Alice live", {"filter": FactFilter(as_of=T0 + timedelta(days=6))}),
    ("Alice", {"filter": FactFilter(kinds=("event",))}),
    ("Alice music", {"filter": FactFilter(tags_any=("music",))}),
    ("绿茶", {}),
    ("cake birthday peanut", {"mode": "bm25"}),
]


@pytest.mark.parametrize(("query", "options"), QUERIES)
def test_kept_rows_answer_what_the_statement_answers(pair, query, options):
    kept, statement = pair
    first = _found(kept, query, top_k=10, **options)
    again = _found(kept, query, top_k=10, **options)  # from the rows kept by the first
    theirs = _found(statement, query, top_k=10, **options)
    assert [f[:2] for f in again] == [f[:2] for f in first] == [f[:2] for f in theirs]
    for (_, _, mine), (_, _, other) in zip(again, theirs, strict=True):
        assert mine.keys() == other.keys()
        for leg, score in mine.items():
            assert score == pytest.approx(other[leg], abs=1e-5)


def test_a_fact_kept_in_memory_expires_when_its_time_comes(pair, clock):
    kept, _ = pair
    clock.now = T0 + timedelta(days=6.5)
    before = kept.retrieve(ALICE, "birthday cake", 5, mode="bm25")
    assert "Alice had a peanut-free birthday cake" in [r.fact.text for r in before]
    clock.now = T0 + timedelta(days=7.5)  # the rows are kept: nothing was written between
    after = kept.retrieve(ALICE, "birthday cake", 5, mode="bm25")
    assert "Alice had a peanut-free birthday cake" not in [r.fact.text for r in after]


def test_a_write_by_another_process_is_recalled_at_once(pair):
    kept, other = pair
    assert not kept.retrieve(ALICE, "saxophone", 5, mode="bm25")
    (added,) = other.record(ALICE, [Fact("Alice started saxophone lessons")])
    assert [r.fact.id for r in kept.retrieve(ALICE, "saxophone", 5, mode="bm25")] == [added.id]
    other.delete(ALICE, [added.id])
    assert not kept.retrieve(ALICE, "saxophone", 5, mode="bm25")
    (city,) = kept.retrieve(ALICE, "where does Alice live", 1)
    assert city.fact.text == "Alice lives in Berlin"
    other.record(ALICE, [Fact("Alice lives in Lyon", key="city")])
    (city,) = kept.retrieve(ALICE, "where does Alice live", 1)
    assert city.fact.text == "Alice lives in Lyon"


def test_an_edit_made_in_the_database_by_hand_is_recalled_at_once(pair):
    kept, _ = pair
    (hit,) = kept.retrieve(ALICE, "cello", 1, mode="bm25")
    with kept.database.connection() as conn:
        conn.execute(
            "UPDATE longterm_facts SET fact = jsonb_set(fact, '{text}', to_jsonb(%s::text)) "
            "WHERE id = %s",
            ("Alice plays the cello on Saturdays", hit.fact.id),
        )
    (edited,) = kept.retrieve(ALICE, "cello", 1, mode="bm25")
    assert edited.fact.text == "Alice plays the cello on Saturdays"
    with kept.database.connection() as conn:
        conn.execute("DELETE FROM longterm_facts WHERE id = %s", (hit.fact.id,))
    assert kept.retrieve(ALICE, "cello", 1, mode="bm25") == []
    assert kept.retrieve(ALICE, "peanuts", 1, mode="bm25")
    with kept.database.connection() as conn:
        conn.execute("TRUNCATE longterm_facts")
    assert kept.retrieve(ALICE, "peanuts", 1, mode="bm25") == []


def test_access_counts_written_by_another_process_are_read(embedder, tmp_path):
    kept = postgres_memory(tmp_path, embedder, near_duplicates=OFF)
    other = postgres_memory(tmp_path, embedder, near_duplicates=OFF, access_flush_s=0)
    try:
        kept.record(ALICE, [Fact("Alice keeps bees")])
        assert kept.retrieve(ALICE, "bees", 1, mode="bm25")[0].fact.access_count == 0
        for _ in range(3):
            other.retrieve(ALICE, "bees", 1, mode="bm25")  # each flushed at once
        assert kept.retrieve(ALICE, "bees", 1, mode="bm25")[0].fact.access_count == 3
    finally:
        kept.close()
        other.close()


def test_owners_larger_than_the_bound_are_recalled_all_the_same(embedder, tmp_path):
    small = postgres_memory(tmp_path, embedder, near_duplicates=OFF, kept_facts=4)
    try:
        small.record(ALICE, [Fact(f"Alice note {i} about gardening") for i in range(6)])
        small.record(BOB, [Fact("Bob grows tomatoes in his garden")])
        for _ in range(2):
            assert len(small.retrieve(ALICE, "gardening", 10, mode="bm25")) == 6
            assert [r.fact.text for r in small.retrieve(BOB, "garden tomatoes", 1)] == [
                "Bob grows tomatoes in his garden"
            ]
    finally:
        small.close()


def _rows(version: int, size: int) -> OwnerRows:
    return OwnerRows(
        version=version,
        ids=[str(i) for i in range(size)],
        rows=[("{}", 0, None)] * size,
        sessions=[None] * size,
        texts=[f"fact {i}" for i in range(size)],
        created=[None] * size,
        keys=[None] * size,
        is_open=np.ones(size, dtype=bool),
        doc_len=np.ones(size),
        terms=[np.zeros(0, dtype=np.int64)] * size,
        tfs=[np.zeros(0, dtype=np.int64)] * size,
        matrix=np.zeros((size, 2), dtype=np.float32),
        deadlines=np.full(size, np.inf),
    )


def test_the_cache_keeps_at_most_its_bound_least_recently_recalled_out_first():
    cache = OwnerCache(max_facts=10)
    cache.put(("t", "a"), _rows(1, 4))
    cache.put(("t", "b"), _rows(1, 4))
    assert cache.get(("t", "a"), 1) is not None  # a recalled: b is the oldest now
    assert cache.get(("t", "a"), 2) is None  # a version that moved is no answer
    cache.put(("t", "c"), _rows(1, 4))
    assert cache.facts <= 10
    assert cache.get(("t", "b"), 1) is None
    assert cache.get(("t", "a"), 1) is not None and cache.get(("t", "c"), 1) is not None
    cache.put(("t", "d"), _rows(1, 11))
    assert cache.get(("t", "d"), 1) is None and not cache.kept_whole(("t", "d"))
    cache.drop(("t", "d"))
    assert cache.kept_whole(("t", "d"))


def test_expiry_by_importance_is_read_from_the_kept_rows_columns(embedder, tmp_path, clock):
    """With the importance TTL, a kept row expires by its importance and age (no fact is
    parsed for it), as the statement has it: 7 days below 5, 30 days from 5, never at 10."""
    expiry = ExpiryPolicy(by_importance=True)
    kept = postgres_memory(tmp_path, embedder, near_duplicates=OFF, clock=clock, expiry=expiry)
    statement = postgres_memory(
        tmp_path, embedder, near_duplicates=OFF, kept_facts=0, clock=clock, expiry=expiry
    )
    try:
        clock.now = T0
        kept.record(
            ALICE,
            [
                Fact("Alice's garden gnome is blue", importance=3, created_at=T0),
                Fact("Alice's garden shed is red", importance=7, created_at=T0),
                Fact("Alice's garden gate is green", importance=10, created_at=T0),
            ],
        )
        for days, left in ((1, 3), (10, 2), (40, 1)):
            clock.now = T0 + timedelta(days=days)
            for memory in (kept, statement):
                found = memory.retrieve(ALICE, "garden", 5, mode="bm25")
                assert len(found) == left, (days, memory is kept)
    finally:
        kept.close()
        statement.close()


def test_forget_keeps_no_version_of_the_owner_and_a_new_owner_of_that_id_reads_its_own(pair):
    """Forget (an erase's) leaves no row naming the owner in the versions, and what another
    process kept of the forgotten owner is never taken for a later owner of the same id."""
    kept, other = pair
    assert kept.retrieve(ALICE, "peanuts", 1, mode="bm25")
    other.forget(ALICE)
    with kept.database.connection() as conn:
        named = conn.execute(
            "SELECT count(*) FROM longterm_versions WHERE owner = %s", (ALICE.owner,)
        ).fetchone()[0]
    assert named == 0
    assert kept.retrieve(ALICE, "peanuts", 1, mode="bm25") == []
    other.record(ALICE, [Fact("Alice has no allergy to peanuts at all")])
    assert [r.fact.text for r in kept.retrieve(ALICE, "peanuts", 5, mode="bm25")] == [
        "Alice has no allergy to peanuts at all"
    ]
