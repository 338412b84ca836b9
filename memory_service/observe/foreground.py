"""The calls someone is waiting for, counted across the process, so that work nobody waits
for can step aside while they run.

Why: the service runs in one process, and work in the background (Qdrant Edge's rewrite of a
shard without deleted text) shares its GIL and its cores with the requests. A library that
holds the GIL through each of its calls delays every request that wants it meanwhile:
searches beside such a rewrite took about twice their usual time (``benchmarks/RESULTS.md``).
The request's outermost middleware and the long-term store mark their calls here; background
work waits for a moment with none under way before each small step (``wait_idle``), for a
bounded time, so it always makes progress.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Foreground:
    """How many calls are under way; ``wait_idle`` until none is."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._under_way = 0

    @contextmanager
    def call(self) -> Iterator[None]:
        """One call under way for the ``with`` block (nested calls count once each)."""
        with self._idle:
            self._under_way += 1
        try:
            yield
        finally:
            with self._idle:
                self._under_way -= 1
                if not self._under_way:
                    self._idle.notify_all()

    @property
    def under_way(self) -> int:
        return self._under_way

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is under way, at most ``timeout`` seconds; whether none is."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._under_way, timeout)


FOREGROUND = Foreground()  # the process's: every request and store call marks it
