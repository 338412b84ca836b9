"""Access metadata over the files backend: batched writes, flushed on close, seen by a new
process; the interval setting."""

from __future__ import annotations

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.backend import FileSystemLongTermMemory

ALICE = RuntimeContext("acme", "alice")


def test_close_writes_the_counts_a_fresh_process_reads(tmp_path, embedder):
    memory = FileSystemLongTermMemory(tmp_path, embedder)
    memory.record(ALICE, [Fact("Alice is allergic to peanuts"), Fact("Alice likes tea")])
    for _ in range(3):
        memory.retrieve(ALICE, "peanuts", 1)
    access_file = OwnerPaths.of(tmp_path, ALICE).access_file
    assert not access_file.exists()  # nothing written per search
    memory.close()
    assert access_file.exists()
    fresh = FileSystemLongTermMemory(tmp_path, embedder)
    counts = {f.text: f.access_count for f in fresh.list(ALICE).items}
    assert counts == {"Alice is allergic to peanuts": 3, "Alice likes tea": 0}
    fresh.forget(ALICE)
    assert not access_file.exists()


def test_a_zero_interval_writes_after_every_recall(tmp_path, embedder):
    memory = FileSystemLongTermMemory(tmp_path, embedder, access_flush_s=0)
    memory.record(ALICE, [Fact("Alice is allergic to peanuts")])
    memory.retrieve(ALICE, "peanuts", 1)
    assert memory.access.pending(ALICE) == {}
    assert OwnerPaths.of(tmp_path, ALICE).access_file.exists()


def test_tracking_can_be_switched_off(tmp_path, embedder):
    memory = FileSystemLongTermMemory(tmp_path, embedder, track_access=False)
    memory.record(ALICE, [Fact("Alice is allergic to peanuts")])
    memory.retrieve(ALICE, "peanuts", 1)
    memory.close()
    assert memory.list(ALICE).items[0].access_count == 0
