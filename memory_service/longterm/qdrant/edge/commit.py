"""When a write to a Qdrant Edge shard is durable: its write-ahead log is on disk.

Why not ``flush()`` after every write: a flush writes and fsyncs every segment file (vectors,
payloads, each payload index), a large share of a batched record (RESULTS.md, "Record
rate"). Edge writes every update to its WAL (``wal/`` in the shard's
folder, memory-mapped segment files) before it applies it, and ``load`` replays the WAL past
the segments' last flush, so fsyncing the WAL files (far cheaper) makes a write as durable as a
flush does. This is Qdrant's own design: a server fsyncs its WAL and flushes segments on a
timer. Segments are flushed here at the first write ``FLUSH_INTERVAL_S`` after the last
flush, and on close, so the WAL Edge keeps for replay stays short. A shard without a ``wal``
folder (another Edge layout) is flushed after every write: nothing else makes it durable.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import qdrant_edge as qe

from memory_service.stores.fsutil import fsync_dir

FLUSH_INTERVAL_S = 5.0  # Qdrant's own default ``flush_interval_sec``
WAL_FOLDER = "wal"


class EdgeCommit:
    """Makes each write of one shard durable, and flushes its segments now and then."""

    def __init__(
        self,
        folder: Path,
        *,
        interval_s: float = FLUSH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.wal = folder / WAL_FOLDER
        self.interval_s = interval_s
        self._clock = clock
        self._flushed_at = clock()
        self._lock = threading.Lock()
        self.flushes = 0  # segment flushes, for tests and benchmarks

    def after_write(self, shard: qe.EdgeShard) -> None:
        """Return only once the write just made survives a crash of the process or the host."""
        if self._clock() - self._flushed_at >= self.interval_s or not self.wal.is_dir():
            self.flush(shard)
        else:
            self._sync_wal()

    def flush(self, shard: qe.EdgeShard) -> None:
        """Write the segments to disk (the WAL before them needs no replay then)."""
        with self._lock:
            shard.flush()
            self._flushed_at = self._clock()
            self.flushes += 1

    def _sync_wal(self) -> None:
        """fsync each WAL file (Linux writes back a shared mapping's dirty pages on any
        descriptor's fsync) and the folder, where Edge creates and renames its segments. A
        file renamed or removed meanwhile (another write rolled the log over) means a scan
        again, so the segment under its new name is not missed."""
        while True:
            try:
                with os.scandir(self.wal) as entries:
                    for entry in entries:
                        if entry.is_file(follow_symlinks=False):
                            _fsync_file(entry.path)
            except FileNotFoundError:
                continue
            fsync_dir(self.wal)
            return


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
