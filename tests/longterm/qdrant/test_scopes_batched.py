"""A recall over several scopes asks Qdrant once (every scope's legs in one batched request):
each scope's candidates must be exactly what asking it alone gives (the base's per-scope
default, ``LongTermHooks._candidates_each``), hits, order, scores and facts, on Edge and on
qdrant-client's local mode, with filters, a read about the past and a key race."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from indexing.embeddings import Embedder
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import Fact, utcnow
from memory_service.evaluation.datasets.synthetic import scale_texts
from memory_service.longterm.fusion import LegHit
from memory_service.longterm.qdrant.backend import QdrantLongTermMemory
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.scope_mirror import ScopeMirrors
from memory_service.longterm.store_hooks import LongTermHooks
from memory_service.longterm.store_values import Candidates
from tests.support.backends import LONGTERM_BACKENDS

ALICE = RuntimeContext("acme", "alice", agent_id="support")
NOW = utcnow()
KINDS = ("fact", "preference", "event")


@pytest.fixture(params=["qdrant-edge", "qdrant-local"])
def memory(request, tmp_path: Path, embedder: Embedder) -> Iterator[QdrantLongTermMemory]:
    backend = LONGTERM_BACKENDS[request.param](tmp_path, embedder)
    assert isinstance(backend, QdrantLongTermMemory)
    _fill(backend)
    try:
        yield backend
    finally:
        backend.close()


def _fill(memory: QdrantLongTermMemory) -> None:
    """30 facts in each of the user's, the agent's and the tenant's memory (different banks:
    each scope's BM25 IDF differs), of varied kinds and importance, a few keyed, some keys
    shared between scopes, one superseded per scope (visible only in the past)."""
    for index, scope in ((1, "user"), (2, "agent"), (3, "tenant")):
        bank, _ = scale_texts(index, 30, seed=11)
        facts = [
            Fact(
                text,
                kind=KINDS[i % 3],
                importance=3 + i % 6,
                key=f"k{i}" if i % 5 == 0 else None,
                created_at=NOW - timedelta(days=1 + i % 5, minutes=i),
                scope=scope,
            )
            for i, text in enumerate(bank)
        ]
        memory.record(ALICE, facts)
        newer = replace(facts[0], text=f"{facts[0].text} (updated)", created_at=NOW)
        memory.record(ALICE, [newer])


def _questions() -> list[str]:
    return [q for i in (1, 2, 3) for q in scale_texts(i, 30, seed=11)[1][:3]]


def _snapshot(found: list[Candidates]) -> list[dict]:
    """Each scope's legs (ids, scores, order, session, time, matched terms) and its hits'
    facts."""
    out = []
    for cands in found:
        ids = sorted({h.id for hits in cands.legs.values() for h in hits})
        out.append({"legs": dict(cands.legs), "facts": {i: cands.fact(i) for i in ids}})
    return out


def _assert_same(got: list[Candidates], want: list[Candidates]) -> None:
    """The same candidates, scores to float32 precision: qdrant-client's local mode returns a
    cosine that differs in the 8th decimal between its first few identical queries over a
    filtered history (measured), and a scope held in memory sums a dot product in another
    order than Edge (differences up to 3e-8 measured)."""
    got_snapshot, want_snapshot = _snapshot(got), _snapshot(want)
    for mine, theirs in zip(got_snapshot, want_snapshot, strict=True):
        assert mine["facts"] == theirs["facts"]
        assert mine["legs"].keys() == theirs["legs"].keys()
        for leg, hits in mine["legs"].items():
            assert [_placed(h) for h in hits] == [_placed(h) for h in theirs["legs"][leg]]
            for hit, other in zip(hits, theirs["legs"][leg], strict=True):
                assert hit.score == pytest.approx(other.score, abs=1e-6)


def _placed(hit: LegHit) -> tuple:
    """What fusion reads of a hit besides its score (an engine's hit also carries its
    payload, a scope held in memory's does not)."""
    return hit.id, hit.session_id, hit.created_at, hit.matched


VIEWS = [
    None,
    FactFilter(kinds=("fact", "preference"), min_importance=5),
    FactFilter(as_of=NOW - timedelta(hours=12)),
]


def _engine_only(memory: QdrantLongTermMemory, embedder: Embedder) -> QdrantLongTermMemory:
    """The same collection with every scope asked of the engine: none held in memory."""
    return QdrantLongTermMemory(
        memory.engine,
        embedder,
        retrieval=memory.retrieval,
        expiry=memory.expiry,
        hold_shared_scopes=False,
    )


@pytest.mark.parametrize("legs", [("bm25", "dense"), ("bm25",), ("dense",)])
@pytest.mark.parametrize("view_at", range(len(VIEWS)))
def test_one_batched_request_gives_each_scope_what_asking_it_alone_gives(
    memory, embedder, legs, view_at
):
    """On Edge the agent's and the tenant's scopes are answered from memory
    (``qdrant.scope_mirror``): the reference asks the engine for each scope alone."""
    owners = ALICE.visible_scopes()
    assert [o.scope for o in owners] == ["user", "agent", "tenant"]
    view = memory._view(VIEWS[view_at])
    reference = _engine_only(memory, embedder)
    scopes_with_hits = set()
    for question in _questions():
        request = memory._search_request(question, legs, 40, 0.0, view)
        batched = memory._candidates_each(owners, request)
        alone = LongTermHooks._candidates_each(reference, owners, request)
        _assert_same(batched, alone)
        scopes_with_hits |= {i for i, c in enumerate(batched) if c.legs[legs[0]]}
    assert scopes_with_hits == {0, 1, 2}  # the comparison is not of empties


class _OneScopeAtATime(QdrantLongTermMemory):
    """The Qdrant backend with the base's per-scope default: one engine request per scope."""

    _candidates_each = LongTermHooks._candidates_each

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, hold_shared_scopes=False, **kwargs)


def test_a_recall_over_three_scopes_fuses_what_each_scope_alone_returns(memory, embedder):
    """The whole recall against the same backend, on the same engine, asking one scope at a
    time: same hits, scores, ranks and per-leg scores."""
    reference = _OneScopeAtATime(
        memory.engine, embedder, retrieval=memory.retrieval, expiry=memory.expiry
    )
    for question in _questions():
        for filter in (None, VIEWS[1]):
            got = memory.retrieve(ALICE, question, 10, filter=filter)
            want = reference.retrieve(ALICE, question, 10, filter=filter)
            _assert_same_recall(got, want)
            assert got


def _assert_same_recall(got, want) -> None:
    """The same hits and ranks; scores to float32 precision (``_assert_same``)."""
    assert [(r.fact, r.ranks) for r in got] == [(r.fact, r.ranks) for r in want]
    for mine, theirs in zip(got, want, strict=True):
        assert mine.score == pytest.approx(theirs.score, abs=1e-6)
        assert mine.scores.keys() == theirs.scores.keys()
        for leg, score in mine.scores.items():
            assert score == pytest.approx(theirs.scores[leg], abs=1e-6)


def test_a_lost_key_race_in_one_scope_is_asked_again_for_that_scope_only(tmp_path, embedder):
    """On a server (local mode stands in) a shared scope's hit that lost its key race is left
    out of that scope's legs (asked again without it); the other scopes' answers are those of
    the first, batched round."""
    memory = LONGTERM_BACKENDS["qdrant-local"](tmp_path, embedder)
    assert isinstance(memory, QdrantLongTermMemory) and memory.engine.shared
    try:
        _fill(memory)
        tenant = ALICE.in_scope("tenant")
        older = Fact(
            "Tickets are closed after seven days",
            key="tickets",
            created_at=NOW - timedelta(hours=2),
            scope="tenant",
        )
        newer = replace(older, text="Tickets are closed after three days", created_at=NOW)
        memory.record(ALICE, [older])
        fid = memory.record(ALICE, [replace(newer, key=None)])[0].id  # a rival writer's point
        memory.engine.set_payload(OwnerFilter.of(tenant, ids=[fid]), {fid: {"key": "tickets"}})

        owners = ALICE.visible_scopes()
        view = memory._view(None)
        question = "after how many days are tickets closed"
        legs = ("bm25", "dense")
        request = memory._search_request(question, legs, 40, 0.0, view)
        batched = memory._candidates_each(owners, request)
        alone = LongTermHooks._candidates_each(memory, owners, request)
        _assert_same(batched, alone)
        tenant = {batched[2].fact(h.id).text for hits in batched[2].legs.values() for h in hits}
        assert "Tickets are closed after three days" in tenant
        assert "Tickets are closed after seven days" not in tenant
    finally:
        memory.close()


def test_a_shared_scope_is_held_in_memory_only_by_the_engines_one_writer(memory):
    """Edge (one writing process) holds an agent's or tenant's memory and answers from it,
    an empty one too; a server (qdrant-client here) is written by other replicas, so it never
    does. A user's own scope is always asked of the engine."""
    lone_agent = RuntimeContext("acme", "alice", agent_id="nobody").visible_scopes()[1]
    assert lone_agent.scope == "agent"
    held = ScopeMirrors.can_hold(memory.engine)
    assert held is (not memory.engine.shared)
    if not held:
        with pytest.raises(ValueError):
            ScopeMirrors(memory.engine)
        return
    mirrors = ScopeMirrors(memory.engine)
    empty, tenant = mirrors.of(lone_agent), mirrors.of(ALICE.visible_scopes()[2])
    assert empty is not None and len(empty) == 0
    assert tenant is not None and len(tenant) == 31  # 30 and the superseding one
    assert mirrors.of(ALICE) is None


def test_wider_scopes_above_the_first_scopes_floor_recall_the_same(tmp_path, embedder):
    """Edge asks the first scope, then the wider ones only for hits above its ``depth``-th
    score per leg (nothing at or below it reaches the merged cut). With more user facts than
    the depth, so the floors apply, the recall is the one asking every scope in full."""
    memory = LONGTERM_BACKENDS["qdrant-edge"](tmp_path, embedder)
    assert isinstance(memory, QdrantLongTermMemory) and not memory.engine.shared
    try:
        questions = []
        for index, scope, count in ((4, "user", 80), (5, "agent", 40), (6, "tenant", 40)):
            bank, asked = scale_texts(index, count, seed=13)
            questions += asked[:4]
            memory.record(
                ALICE,
                [
                    Fact(t, scope=scope, key=f"k{i % 9}" if i % 3 == 0 else None)
                    for i, t in enumerate(bank)
                ],
            )
        reference = _OneScopeAtATime(
            memory.engine, embedder, retrieval=memory.retrieval, expiry=memory.expiry
        )
        owners, view = ALICE.visible_scopes(), memory._view(None)
        depth = memory.retrieval.depth(10)
        request = memory._search_request(questions[0], ("bm25", "dense"), depth, 0.0, view)
        first = memory._candidates(owners[0], request)
        assert all(len(hits) == depth for hits in first.legs.values())  # the floors apply
        wide = 0
        for question in questions:
            for mode in ("hybrid", "bm25", "dense"):
                got = memory.retrieve(ALICE, question, 10, mode=mode)
                want = reference.retrieve(ALICE, question, 10, mode=mode)
                _assert_same_recall(got, want)
                wide += sum(r.fact.scope != "user" for r in got)
        assert wide > 0  # shared facts reach the answers: the comparison is not trivial
    finally:
        memory.close()
