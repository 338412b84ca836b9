"""When an Edge write is durable: its write-ahead log fsynced, segments flushed on a timer.

That a process killed after such a write leaves it in the folder is
``tests/longterm/qdrant/test_engines.py::test_writes_are_durable_when_record_returns``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import qdrant_edge as qe

from memory_service.longterm.qdrant.edge.commit import EdgeCommit
from memory_service.longterm.qdrant.edge.shard import open_shard

DIMENSION = 4


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _point(n: int) -> qe.Point:
    vectors = {"dense": [1.0, 0.0, 0.0, float(n)], "bm25": qe.SparseVector([n], [1.0])}
    return qe.Point(n, vectors, {"user_id": "alice", "text": f"fact {n}"})


@pytest.fixture
def shard(tmp_path: Path):
    opened = open_shard(tmp_path / "shard", DIMENSION)
    yield opened
    opened.close()


def _fsynced(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return seen


def test_a_write_fsyncs_the_write_ahead_log_and_flushes_no_segment(tmp_path, shard, monkeypatch):
    clock = Clock()
    commit = EdgeCommit(tmp_path / "shard", clock=clock)
    seen = _fsynced(monkeypatch)

    shard.update(qe.UpdateOperation.upsert_points([_point(1)]))
    commit.after_write(shard)

    wal = tmp_path / "shard" / "wal"
    assert commit.flushes == 0
    assert any(Path(p).parent == wal and Path(p).name.startswith("open-") for p in seen)
    assert str(wal) in seen  # the folder too, where Edge creates its segments
    assert not any("segments" in p for p in seen)


def test_segments_are_flushed_once_the_interval_has_passed(tmp_path, shard):
    clock = Clock()
    commit = EdgeCommit(tmp_path / "shard", interval_s=5.0, clock=clock)

    for n, advance in enumerate((1.0, 1.0, 3.5, 1.0)):
        clock.now += advance
        shard.update(qe.UpdateOperation.upsert_points([_point(n)]))
        commit.after_write(shard)

    assert commit.flushes == 1  # at the third write, 5.5 s after the start


def test_a_shard_without_a_wal_folder_is_flushed_after_every_write(tmp_path, shard):
    commit = EdgeCommit(tmp_path / "elsewhere", clock=Clock())

    for n in range(3):
        shard.update(qe.UpdateOperation.upsert_points([_point(n)]))
        commit.after_write(shard)

    assert commit.flushes == 3
