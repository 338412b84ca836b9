"""The bench's memory figures: peak PSS sampled beside the kernel's peak RSS."""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

from memory_service.evaluation import memory_use
from memory_service.evaluation.memory_use import PeakPss, pss_mb

MB = 1024 * 1024


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS")


def test_the_peak_is_what_was_held_meanwhile_not_at_the_end():
    before = pss_mb()
    with PeakPss(interval_s=0.02) as peak:
        held = bytearray(os.urandom(1)) * (120 * MB)  # touched: resident
        time.sleep(0.2)
        del held
    assert peak.mb is not None and before is not None
    assert peak.mb >= before + 100
    assert pss_mb() < peak.mb - 80  # freed by the end: a figure read at the end misses it


def test_a_file_mapped_twice_counts_twice_in_rss_and_once_in_pss(tmp_path):
    """Why the bench prints PSS: Qdrant Edge maps its vector files twice."""
    path = tmp_path / "vectors"
    path.write_bytes(os.urandom(64 * MB))
    with open(path, "rb") as handle:
        first = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        second = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        rss, pss = _rss_mb(), pss_mb()
        for page in range(0, 64 * MB, mmap.PAGESIZE):  # every page through both mappings
            first[page], second[page]
        rss_added, pss_added = _rss_mb() - rss, pss_mb() - pss
        first.close()
        second.close()
    assert rss_added > 120
    assert 50 < pss_added < 80


def test_a_kernel_without_smaps_rollup_gives_no_pss_and_no_error(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_use, "ROLLUP", tmp_path / "absent")
    with PeakPss(interval_s=0.01) as peak:
        time.sleep(0.05)
    assert pss_mb() is None and peak.mb is None
