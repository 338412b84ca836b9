"""The rewrite of an Edge shard without deleted text, off the request that deleted it.

Why: a rewrite copies the whole collection (seconds at a few thousand points), and a delete
that waited for it answered in seconds while its user's calls waited too. A delete now owes
the rewrite (the marker beside the folder says so) and asks ``Compaction`` for it; the
rewrite runs on a thread of its own, once for any number of deletes asked while it was busy,
and again after, so a delete made during a rewrite is paid by the next one, once it has
rested as long as the last one took: under a stream of deletes, rewrites (each of which holds
the calls off for its swap) take at most half the time rather than all of it. What the copy
must replay is kept by ``RewriteJournal``: the writes made while the copy ran.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)


class Compaction:
    """Runs ``job`` on a background thread when asked; asked while it runs, it runs once
    more after resting as long as the run took, so nothing asked is left unpaid. ``stop``
    waits for a run under way (not for a rest)."""

    def __init__(self, job: Callable[[], object], name: str) -> None:
        self._job = job
        self._name = name
        self._cond = threading.Condition()
        self._asked = False
        self._running = False
        self._stopped = False

    def request(self) -> None:
        with self._cond:
            if self._stopped:
                return
            self._asked = True
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name=self._name, daemon=True).start()

    def _run(self) -> None:
        took = 0.0
        while True:
            with self._cond:
                if self._asked and took:
                    self._cond.wait_for(lambda: self._stopped, took)
                if not self._asked or self._stopped:
                    self._running = False
                    self._cond.notify_all()
                    return
                self._asked = False
            began = time.monotonic()
            try:
                self._job()
            except Exception:  # noqa: BLE001 - the marker stays: maintenance or close pays it
                log.exception("%s failed; the next maintenance pass retries it", self._name)
            took = time.monotonic() - began

    def wait(self, timeout: float | None = None) -> bool:
        """Whether no run is under way or asked for (within ``timeout`` seconds)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._running, timeout)

    def stop(self) -> None:
        """No run after this one; returns once a run under way has finished."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()  # a rest ends
            self._cond.wait_for(lambda: not self._running)


class RewriteJournal:
    """The writes made to a shard while a rewrite copied it: the ids written (their state in
    the old shard is copied again at the swap) and the deletes' filters (applied again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ids: set[str] = set()
        self.deletes: list[Any] = []

    def wrote(self, ids: Iterable[str]) -> None:
        with self._lock:
            self.ids.update(ids)

    def deleted(self, where: Any) -> None:
        with self._lock:
            self.deletes.append(where)
