"""A shard's rewrite without deleted text, under a stream of deletes: each rewrite starts from
a copy of one empty shard kept beside the folder (made once, with every payload index), and
the background compaction rests as long as its last run took before it runs again; its copy
steps aside for the calls under way."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import qdrant_edge as qe

from memory_service.config import QdrantSettings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.longterm.qdrant import backend as qdrant_backend
from memory_service.longterm.qdrant.edge import engine as edge_engine
from memory_service.longterm.qdrant.edge.compaction import Compaction
from memory_service.longterm.qdrant.edge.engine import EMPTY_SUFFIX
from memory_service.longterm.qdrant.edge.shard import CONFIG_FILE, copy_of_empty, open_shard
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.layout import PAYLOAD_INDEXES
from memory_service.observe.foreground import FOREGROUND

ALICE = RuntimeContext("acme", "alice", "s1")


def _indexes(folder: Path, dimension: int) -> set[str]:
    shard = open_shard(folder, dimension)
    try:
        return set(shard.info().payload_schema)
    finally:
        shard.close()


def test_every_rewrite_starts_from_a_copy_of_one_empty_shard(tmp_path, embedder):
    settings = QdrantSettings(path=tmp_path / "qdrant")
    memory = qdrant_backend.open_qdrant(settings, tmp_path, embedder)
    folder = memory.engine.folder
    empty = folder.with_name(folder.name + EMPTY_SUFFIX)
    try:
        memory.record(ALICE, [Fact(f"Alice fact number {i}") for i in range(4)])
        ids = [f.id for f in memory.list(ALICE, limit=10).items]
        assert memory.delete(ALICE, ids[:1]) == 1
        assert memory.engine.compaction.wait(timeout=60)
        made = (empty / CONFIG_FILE).stat().st_mtime_ns
        assert memory.delete(ALICE, ids[1:2]) == 1
        assert memory.engine.compaction.wait(timeout=60)
        assert (empty / CONFIG_FILE).stat().st_mtime_ns == made  # kept, not made again
        left = sorted(f.text for f in memory.list(ALICE, limit=10).items)
        assert len(left) == 2 and all(t.startswith("Alice fact number") for t in left)
        assert memory.retrieve(ALICE, "Alice fact number", top_k=5)  # the copy is searched
    finally:
        memory.close()
    assert _indexes(folder, embedder.dimension) >= set(PAYLOAD_INDEXES)
    shard = open_shard(empty, embedder.dimension)
    try:  # the template never holds a point: nothing written reaches it
        assert shard.count(qe.CountRequest(exact=True)) == 0
    finally:
        shard.close()


def _rewrite_in_background(memory) -> tuple[list[int], threading.Event]:
    copied: list[int] = []
    done = threading.Event()

    def rewrite() -> None:
        memory.engine.rewrite_without_deleted(on_copied=copied.append, step_aside=True)
        done.set()

    threading.Thread(target=rewrite, daemon=True).start()
    return copied, done


@pytest.fixture
def ten_facts(tmp_path, embedder):
    memory = qdrant_backend.open_qdrant(QdrantSettings(path=tmp_path / "q"), tmp_path, embedder)
    memory.record(ALICE, [Fact(f"Alice fact number {i}") for i in range(10)])
    yield memory
    memory.close()


def test_a_rewrite_copies_nothing_while_a_call_is_under_way(ten_facts, monkeypatch):
    """The copy shares the process's GIL with the calls: it waits for a moment with none
    under way before each page (here for as long as the test runs), and goes on after."""
    monkeypatch.setattr(edge_engine, "STEP_ASIDE_S", 600.0)
    with FOREGROUND.call():
        copied, done = _rewrite_in_background(ten_facts)
        assert not done.wait(0.5)
        assert copied == []  # not one page while the call was under way
    assert done.wait(60)
    assert copied[-1] == 10
    assert len(ten_facts.retrieve(ALICE, "Alice fact number", top_k=10)) == 10


@pytest.mark.parametrize("step_aside", [True, False], ids=["stepping-aside", "at-once"])
def test_a_rewrite_copies_each_point_as_it_was(ten_facts, step_aside):
    """Payload, dense and sparse vectors read back from the new shard as from the old, the
    point written during the copy (the journal's replay) too."""
    alice = OwnerFilter("acme", "alice")
    engine = ten_facts.engine

    pages: list[int] = []

    def written_during_copy(copied: int) -> None:
        pages.append(copied)
        if len(pages) == 1:  # after the first page: the copy has begun
            ten_facts.record(ALICE, [Fact("Alice wrote this mid-copy")])

    before_copy = {p.id: p for p in engine.scroll(alice, with_vectors=True)}
    engine.rewrite_without_deleted(on_copied=written_during_copy, step_aside=step_aside)
    after = {p.id: p for p in engine.scroll(alice, with_vectors=True)}
    assert set(before_copy) < set(after)  # the mid-copy record is in the new shard
    for point_id, was in before_copy.items():
        now = after[point_id]
        assert (now.payload, now.dense, now.sparse) == (was.payload, was.dense, was.sparse)
    mid_copy = [p for i, p in after.items() if i not in before_copy]
    assert mid_copy and all(p.sparse and p.sparse.indices for p in mid_copy)


def test_a_rewrite_goes_on_under_calls_that_never_stop(ten_facts, monkeypatch):
    """Calls always under way delay each page by ``STEP_ASIDE_S`` at most: the deleted text
    still leaves the folder."""
    monkeypatch.setattr(edge_engine, "STEP_ASIDE_S", 0.01)
    with FOREGROUND.call():
        copied, done = _rewrite_in_background(ten_facts)
        assert done.wait(60)
    assert copied[-1] == 10


def test_an_empty_shard_of_another_layout_is_made_again(tmp_path):
    template = tmp_path / "c.empty"
    open_shard(template, 8).close()  # another model's dimension
    fresh = copy_of_empty(tmp_path / "c.rewrite", template, 16)
    fresh.close()
    assert _indexes(tmp_path / "c.rewrite", 16) >= set(PAYLOAD_INDEXES)
    assert _indexes(template, 16) >= set(PAYLOAD_INDEXES)  # made again for this layout


def test_asked_while_it_runs_it_runs_again_after_resting_as_long(tmp_path):
    runs: list[tuple[float, float]] = []
    first_running = threading.Event()

    def job() -> None:
        began = time.monotonic()
        first_running.set()
        time.sleep(0.3)
        runs.append((began, time.monotonic()))

    compaction = Compaction(job, "test-compaction")
    compaction.request()
    assert first_running.wait(5)
    compaction.request()  # during the run: owed, paid once more after a rest
    compaction.request()  # asked twice: still one more run
    assert compaction.wait(timeout=10)
    assert len(runs) == 2
    (began, ended), (again, _) = runs
    assert again - ended >= (ended - began) - 0.01


def test_stop_ends_a_rest_and_nothing_more_runs():
    runs: list[float] = []
    ran = threading.Event()

    def job() -> None:
        time.sleep(0.5)
        runs.append(time.monotonic())
        ran.set()

    compaction = Compaction(job, "test-compaction")
    compaction.request()
    time.sleep(0.1)
    compaction.request()  # owed after the rest
    assert ran.wait(5)
    compaction.stop()  # during the rest
    assert compaction.wait(timeout=0)  # nothing under way once stop returns
    time.sleep(0.6)
    assert len(runs) == 1
    compaction.request()  # stopped: asking starts nothing
    assert compaction.wait(timeout=0) and len(runs) == 1
