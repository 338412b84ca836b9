"""One lock per session inside a process: concurrent appends to a session take turns.

Two appends that load the same version cannot both save it (the store's optimistic version
refuses the second), so without turns a burst of plain appends to one session retries, and
under enough load runs out of retries. Taking turns in the process leaves the store's version
check for what it is there for: writers in other processes, and clients that name a version.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator
from contextlib import contextmanager


class KeyedLocks:
    """A ``threading.Lock`` per key, kept only while some thread holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Hashable, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: Hashable) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key) or (threading.Lock(), 0)
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:  # keys in use (a test sees that none are left behind)
        with self._guard:
            return len(self._locks)
