"""Edge answers a small agent or tenant scope from memory (``qdrant.scope_mirror``): what a
recall returns must follow every write to that scope at once (record, supersede, update,
delete, forget), a user's writes must not make it read the scope again, and the bounds
(points per owner, points in all) must hold while recall stays right."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from indexing.embeddings import Embedder
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.evaluation.datasets.synthetic import scale_texts
from memory_service.longterm.qdrant.backend import QdrantLongTermMemory
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.layout import DENSE
from memory_service.longterm.qdrant.query_plan import OwnerSearch, QueryPlan
from memory_service.longterm.qdrant.scope_mirror import ScopeMirror, ScopeMirrors
from tests.support.backends import LONGTERM_BACKENDS

ALICE = RuntimeContext("acme", "alice", agent_id="support")
TENANT = ALICE.in_scope("tenant")
AGENT = ALICE.in_scope("agent")
SHARED = ["user", "agent", "tenant"]


@pytest.fixture
def memory(tmp_path: Path, embedder: Embedder) -> Iterator[QdrantLongTermMemory]:
    backend = LONGTERM_BACKENDS["qdrant-edge"](tmp_path, embedder)
    assert isinstance(backend, QdrantLongTermMemory) and backend._mirrors is not None
    backend.record(ALICE, [Fact("Alice prefers tea over coffee")])
    backend.record(ALICE, [Fact("Support hours are 9 to 5 on weekdays", scope="agent")])
    try:
        yield backend
    finally:
        backend.close()


def _texts(memory: QdrantLongTermMemory, query: str) -> list[str]:
    return [r.fact.text for r in memory.retrieve(ALICE, query, 10, scopes=SHARED)]


def test_every_write_to_a_held_scope_shows_in_the_next_recall(memory):
    question = "how many days of paid leave do employees get"
    assert not any("leave" in t for t in _texts(memory, question))  # the tenant is held empty

    memory.record(ALICE, [Fact("Employees get 20 days of paid leave", key="leave", scope="tenant")])
    assert "Employees get 20 days of paid leave" in _texts(memory, question)

    memory.record(ALICE, [Fact("Employees get 25 days of paid leave", key="leave", scope="tenant")])
    found = _texts(memory, question)
    assert "Employees get 25 days of paid leave" in found
    assert "Employees get 20 days of paid leave" not in found  # superseded: hidden at once

    newest = next(
        r.fact for r in memory.retrieve(ALICE, question, 10, scopes=SHARED) if "25" in r.fact.text
    )
    memory.update(TENANT, [replace(newest, tags=("hr",))])
    assert [
        r.fact.tags
        for r in memory.retrieve(ALICE, question, 10, scopes=SHARED)
        if r.fact.key == "leave"
    ] == [("hr",)]

    assert memory.delete(TENANT, [newest.id]) == 1
    assert not any("leave" in t for t in _texts(memory, question))

    assert "Support hours are 9 to 5 on weekdays" in _texts(memory, "when is support open")
    memory.forget(AGENT)
    assert "Support hours are 9 to 5 on weekdays" not in _texts(memory, "when is support open")


def test_a_users_writes_leave_the_held_scopes_as_they_are(memory):
    """Only a write to the owner itself makes the mirror read it again (a busy service records
    users' facts all the time; shared memory rarely changes)."""
    mirrors = memory._mirrors
    assert mirrors is not None
    held = mirrors.of(AGENT)
    memory.record(ALICE, [Fact("Alice moved to Porto in May")])
    memory.record(RuntimeContext("acme", "bob"), [Fact("Bob works nights")])
    assert mirrors.of(AGENT) is held
    memory.record(ALICE, [Fact("Tickets are answered within a day", scope="agent")])
    again = mirrors.of(AGENT)
    assert again is not held and again is not None and len(again) == 2


def test_an_owner_over_the_limit_is_asked_of_the_engine_with_the_same_answers(memory, embedder):
    facts = [Fact(f"Office rule number {i}: keep desk {i} tidy", scope="tenant") for i in range(12)]
    memory.record(ALICE, facts)
    small = ScopeMirrors(memory.engine, limit=5)
    assert small.of(TENANT) is None  # 12 points: over the limit
    assert small.of(AGENT) is not None
    asked = QdrantLongTermMemory(
        memory.engine, embedder, retrieval=memory.retrieval, hold_shared_scopes=False
    )
    for question in ("which desk should be tidy", "office rule seven", "support hours"):
        got = memory.retrieve(ALICE, question, 5, scopes=SHARED)
        want = asked.retrieve(ALICE, question, 5, scopes=SHARED)
        assert [(r.fact.id, r.ranks) for r in got] == [(r.fact.id, r.ranks) for r in want]
        assert [r.score for r in got] == pytest.approx([r.score for r in want], abs=1e-6)


def test_the_mirrors_hold_no_more_points_than_their_budget(memory):
    memory.record(ALICE, [Fact(f"Team rule {i}", scope="tenant") for i in range(4)])
    mirrors = ScopeMirrors(memory.engine, budget=4)
    tenant = mirrors.of(TENANT)
    assert tenant is not None and len(tenant) == 4
    agent = mirrors.of(AGENT)  # 1 more point: the least recently used (the tenant) goes
    assert agent is not None and mirrors._held == 1
    assert mirrors.of(TENANT) is not tenant  # read again when asked for
    assert mirrors._held == 4


def test_a_held_scope_scores_a_query_as_edge_does_whatever_its_last_bits(memory, embedder):
    """Qdrant leaves a query whose squared length is within 1e-6 of 1 as it is, and divides
    any other by its length, then Edge rounds it to float16: a mirror that always divides
    moved a component across a float16 step now and then (5e-6 off Edge's cosine; the same
    question ranked two ways). Unit queries nudged in their last bits, and one far from unit
    length, score alike from the mirror and from Edge."""
    memory.record(ALICE, [Fact(t, scope="tenant") for t in scale_texts(6, 40, seed=13)[0]])
    scope = OwnerFilter.of(TENANT)
    mirror = ScopeMirror(memory.engine.scroll(scope, with_vectors=True), "float16")
    assert memory.engine.vector_datatype == "float16"
    view = memory._view(None)
    queries = []
    for question in scale_texts(6, 40, seed=13)[1][:4]:
        unit = embedder.embed([question])[0].astype(np.float32)
        queries += [unit * np.float32(1 + k * 1e-7) for k in range(-4, 5)] + [unit * 3]
    for query in queries:
        plan = QueryPlan.of(
            [OwnerSearch(scope, scope)],
            dense=query.tolist(),
            sparse=None,
            limit=50,
            threshold=-1,
            asked_terms=None,
        )
        (answer,) = memory.engine.query(plan)
        edge = {h.id: h.score for h in answer[DENSE]}
        held = mirror.candidates(
            ("dense",),
            view,
            memory.expiry,
            None,
            dense=query.tolist(),
            sparse=None,
            limit=50,
            threshold=-1,
            term_ids=None,
        )
        mine = {h.id: h.score for h in held.legs["dense"]}
        assert mine.keys() == edge.keys() and len(edge) == 40
        assert max(abs(mine[i] - edge[i]) for i in edge) < 2e-7
