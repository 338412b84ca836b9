"""A run's memory: peak RSS as the kernel counts it, and peak PSS sampled beside it.

Why both: RSS counts a page once per mapping, and Qdrant Edge maps its vector files twice
(one mapping for random, one for sequential reads), so each resident vector page is counted
twice in RSS, ~150 MB at 100k facts. PSS (``/proc/self/smaps_rollup``) counts each physical
page once (shared ones split between the processes that map them): the memory the process
actually holds. The kernel keeps no peak of PSS, so a thread samples it.
"""

from __future__ import annotations

import resource
import threading
from pathlib import Path
from types import TracebackType

ROLLUP = Path("/proc/self/smaps_rollup")
SAMPLE_S = 0.25


def peak_rss_mb() -> float:
    """Peak resident memory of this process (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def pss_mb() -> float | None:
    """This process's proportional set size now; None where the kernel does not report it."""
    try:
        for line in ROLLUP.read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


class PeakPss:
    """``with PeakPss() as peak: ...``; ``peak.mb``: the largest PSS sampled meanwhile (every
    ``SAMPLE_S`` and at both ends), None where PSS cannot be read."""

    def __init__(self, interval_s: float = SAMPLE_S) -> None:
        self.interval_s = interval_s
        self.mb: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-pss", daemon=True)

    def sample(self) -> None:
        now = pss_mb()
        if now is not None and (self.mb is None or now > self.mb):
            self.mb = now

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> PeakPss:
        self.sample()
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()
