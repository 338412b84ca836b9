"""Two open facts with one key on Qdrant (two writers recorded the key at the same moment):
reads keep the newest, as the files backend does, and the next write or maintenance closes
the older. The race is injected as the losing writer leaves it: a point stored open through
the engine, bypassing supersession."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from indexing.embeddings import Embedder
from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import Fact, utcnow
from memory_service.longterm.qdrant.backend import QdrantLongTermMemory
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.pipeline.consolidation import Consolidator
from memory_service.pipeline.maintenance import MemoryMaintenance
from memory_service.pipeline.transfer import export_records
from tests.support.backends import LONGTERM_BACKENDS

ALICE = RuntimeContext("acme", "alice")
BOB = RuntimeContext("acme", "bob")
GLOBEX_ALICE = RuntimeContext("globex", "alice")
NOW = utcnow()
LIMA = Fact("Alice lives in Lima", key="city", created_at=NOW - timedelta(hours=2))
OSLO = Fact("Alice lives in Oslo", key="city", created_at=NOW - timedelta(hours=1))
QUERY = "which city does Alice live in"


@pytest.fixture(params=["qdrant-edge", "qdrant-local"])
def memory(request, tmp_path: Path, embedder: Embedder) -> Iterator[QdrantLongTermMemory]:
    backend = LONGTERM_BACKENDS[request.param](tmp_path, embedder)
    assert isinstance(backend, QdrantLongTermMemory)
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture
def server(tmp_path: Path, embedder: Embedder) -> Iterator[QdrantLongTermMemory]:
    """A Qdrant server's collection (qdrant-client's local mode stands in): other processes
    write it too, so its searches resolve races. An Edge folder has one writing process (its
    folder lock) that serialises each user's writes: no race arises there and its searches
    skip the check (lists, gets and exports resolve on every engine)."""
    backend = LONGTERM_BACKENDS["qdrant-local"](tmp_path, embedder)
    assert isinstance(backend, QdrantLongTermMemory) and backend.engine.shared
    try:
        yield backend
    finally:
        backend.close()


def test_only_a_server_is_written_by_other_processes(memory):
    assert memory.engine.shared is ("qdrant-edge" not in memory.engine.description)


def race(memory: QdrantLongTermMemory, ctx: RuntimeContext, fact: Fact) -> str:
    """Store ``fact`` open whatever else holds its key, as a writer that read before another
    wrote leaves it: recorded without its key, then given it through the engine."""
    fid = memory.record(ctx, [replace(fact, key=None)])[0].id
    memory.engine.set_payload(OwnerFilter.of(ctx, ids=[fid]), {fid: {"key": fact.key}})
    return fid


def open_points(memory: QdrantLongTermMemory, ctx: RuntimeContext, key: str) -> list[str]:
    """The texts stored open under ``key`` (what the points say, not what reading shows)."""
    points = memory.engine.scroll(OwnerFilter.of(ctx, keys=[key], open_only=True))
    return sorted(p.payload["text"] for p in points)


def texts(facts) -> list[str]:
    return [f.text for f in facts]


def recalled(memory: QdrantLongTermMemory, ctx: RuntimeContext, **kwargs) -> list[str]:
    return [r.fact.text for r in memory.retrieve(ctx, QUERY, 5, **kwargs)]


@pytest.mark.parametrize("racer", ["newer", "older"])
def test_reads_keep_only_the_newest_fact_of_a_key(server, racer):
    """Whichever writer stored its fact through the race, the newer one is what every read
    shows; the older reads as superseded by it, by id and in an export."""
    if racer == "newer":  # the racing writer's fact is the newer one
        lima = server.record(ALICE, [LIMA])[0].id
        oslo = race(server, ALICE, OSLO)
    else:
        oslo = server.record(ALICE, [OSLO])[0].id
        lima = race(server, ALICE, LIMA)
    assert open_points(server, ALICE, "city") == ["Alice lives in Lima", "Alice lives in Oslo"]

    assert "Alice lives in Oslo" in recalled(server, ALICE)
    assert "Alice lives in Lima" not in recalled(server, ALICE)
    assert "Alice lives in Lima" not in recalled(server, ALICE, mode="bm25")
    assert texts(server.list(ALICE).items) == ["Alice lives in Oslo"]
    assert texts(server.list(ALICE, filter=FactFilter(key="city")).items) == [OSLO.text]

    # get by id hides nothing (erasure, import, audits), but says the older one is closed
    older = server.get(ALICE, [lima])[0]
    assert (older.superseded_by, older.valid_to) == (oslo, OSLO.created_at)
    assert server.get(ALICE, [oslo])[0].superseded_by is None
    exported = {r["text"]: r for r in export_records(server, "acme", "alice")}
    assert exported["Alice lives in Lima"]["superseded_by"] == oslo
    assert exported["Alice lives in Oslo"]["superseded_by"] is None
    assert server.count_user(ALICE) == 2  # both are stored (and erased) until maintenance


def test_a_hidden_fact_leaves_no_hole_in_a_leg(server):
    """The older fact, nearest to the query, would fill a one-deep leg: it is asked again
    without it, so the newer fact still comes back."""
    server.record(ALICE, [LIMA])
    race(server, ALICE, OSLO)
    server.retrieval = server.retrieval.with_changes(min_candidates=1, candidate_multiplier=1)
    assert texts(r.fact for r in server.retrieve(ALICE, LIMA.text, 1, mode="dense")) == [
        "Alice lives in Oslo"
    ]
    assert texts(r.fact for r in server.retrieve(ALICE, "Lima", 1, mode="bm25")) == []


def test_as_of_shows_the_older_fact_until_the_newer_was_recorded(server):
    lima = server.record(ALICE, [LIMA])[0].id
    oslo = race(server, ALICE, OSLO)
    between = FactFilter(as_of=NOW - timedelta(minutes=90))
    hits = server.retrieve(ALICE, QUERY, 5, filter=between)
    assert [(r.fact.id, r.fact.valid_to) for r in hits] == [(lima, OSLO.created_at)]
    assert texts(server.list(ALICE, filter=between).items) == ["Alice lives in Lima"]
    later = FactFilter(as_of=NOW - timedelta(minutes=30))
    assert [r.fact.id for r in server.retrieve(ALICE, QUERY, 5, filter=later)] == [oslo]


def test_the_next_write_of_the_key_closes_the_older_fact(memory):
    lima = memory.record(ALICE, [LIMA])[0].id
    oslo = race(memory, ALICE, OSLO)
    rome = memory.record(ALICE, [Fact("Alice lives in Rome", key="city")])[0]
    assert (rome.status, rome.superseded_ids) == ("superseded", (oslo,))
    assert open_points(memory, ALICE, "city") == ["Alice lives in Rome"]
    stored = {f.id: f for f in memory.list(ALICE, include_inactive=True).items}
    assert (stored[lima].superseded_by, stored[lima].valid_to) == (oslo, OSLO.created_at)
    assert stored[oslo].superseded_by == rome.id
    assert recalled(memory, ALICE)[0] == "Alice lives in Rome"
    for moment, holder in [
        (NOW - timedelta(minutes=90), lima),
        (NOW - timedelta(minutes=30), oslo),
    ]:
        assert [f.id for f in memory.list(ALICE, filter=FactFilter(as_of=moment)).items] == [holder]


def test_recording_the_older_text_again_revives_it_as_the_newest(memory):
    """A lost fact reads as closed, so recording its text again writes it anew (as files)."""
    memory.record(ALICE, [LIMA])
    race(memory, ALICE, OSLO)
    back = memory.record(ALICE, [Fact("Alice lives in Lima", key="city")])[0]
    assert back.status == "superseded"
    assert texts(memory.list(ALICE).items) == ["Alice lives in Lima"]
    assert open_points(memory, ALICE, "city") == ["Alice lives in Lima"]


def test_maintenance_closes_the_older_fact(memory, tmp_path):
    lima = memory.record(ALICE, [LIMA])[0].id
    oslo = race(memory, ALICE, OSLO)
    maintenance = MemoryMaintenance(
        longterm=memory, workspace=tmp_path / "workspace", consolidator=Consolidator(model=None)
    )
    report = maintenance.run_user(ALICE, force=True, consolidate=False)
    assert report.counts["superseded"] == 1
    assert open_points(memory, ALICE, "city") == ["Alice lives in Oslo"]
    closed = memory.engine.scroll(OwnerFilter.of(ALICE, ids=[lima]))[0].payload
    assert closed["superseded_by"] == oslo
    assert datetime.fromisoformat(closed["valid_to"]) == OSLO.created_at
    again = maintenance.run_user(ALICE, force=True, consolidate=False)
    assert again.counts["superseded"] == 0


def test_a_key_race_stays_inside_one_owner(memory):
    """Another user's, tenant's, agent's or the tenant's shared fact with the same key and a
    later time races with nothing of Alice's: her one fact of that key stays hers."""
    memory.record(ALICE, [LIMA])
    others = [
        BOB,
        GLOBEX_ALICE,
        scope_context("acme", "agent", "helper"),
        scope_context("acme", "tenant"),
    ]
    for other in others:
        race(memory, other, OSLO)
    assert texts(memory.list(ALICE).items) == ["Alice lives in Lima"]
    assert memory.get(ALICE, [memory.list(ALICE).items[0].id])[0].superseded_by is None
    assert recalled(memory, ALICE, scopes=["user"])[0] == "Alice lives in Lima"
    assert "Alice lives in Oslo" not in recalled(memory, ALICE)  # hers hides the tenant's
    assert memory.settle_stored_facts(ALICE)["superseded"] == 0
    for other in others:
        assert open_points(memory, other, "city") == ["Alice lives in Oslo"]
        assert texts(memory.list(other).items) == ["Alice lives in Oslo"]
    # a race inside Bob's memory is resolved for Bob alone
    race(memory, BOB, replace(LIMA, text="Bob lives in Lima", created_at=NOW))
    assert texts(memory.list(BOB).items) == ["Bob lives in Lima"]
    assert texts(memory.list(ALICE).items) == ["Alice lives in Lima"]
    assert memory.settle_stored_facts(BOB)["superseded"] == 1
    assert open_points(memory, ALICE, "city") == ["Alice lives in Lima"]


def test_a_raced_key_still_hides_the_tenants_fact(server):
    """The user's newest fact holds the key over the tenant's shared one, race or not."""
    server.record(ALICE, [LIMA])
    race(server, ALICE, OSLO)
    shared = Fact("Everyone at acme lives in Paris", key="city", scope="tenant")
    server.record(ALICE, [shared])
    found = recalled(server, ALICE)
    assert "Alice lives in Oslo" in found
    assert "Alice lives in Lima" not in found and shared.text not in found
