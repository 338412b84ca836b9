"""Access metadata (``access_count``, ``last_accessed_at``), counted without a write per hit.

A recall notes its hits here, in memory; the notes are written to the backend in one batch
per user every ``flush_every_s`` seconds (checked when a recall notes its hits) and on close,
so a search costs a dictionary update, not a write. Reads (get, list) add the notes not yet
written, so a process sees its own recalls at once; another process sees them after the
next flush. A crash loses at most ``flush_every_s`` of counts: they are hints for ranking
and maintenance, never the memory itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from memory_service.context import RuntimeContext
from memory_service.facts import Fact, parse_time

UserKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class AccessMark:
    """How many times a fact was recalled since the last write, and when last."""

    count: int
    last: datetime

    def add(self, other: AccessMark) -> AccessMark:
        return AccessMark(self.count + other.count, max(self.last, other.last))


def applied(fact: Fact, mark: AccessMark | None) -> Fact:
    """``fact`` with ``mark`` added to its stored access metadata."""
    if mark is None:
        return fact
    stored_last = parse_time(fact.last_accessed_at)
    last = mark.last if stored_last is None else max(stored_last, mark.last)
    return replace(fact, access_count=fact.access_count + mark.count, last_accessed_at=last)


Writer = Callable[[RuntimeContext, Mapping[str, AccessMark]], None]


class AccessLog:
    """Recall hits per user, in memory, flushed to ``write`` in batches."""

    def __init__(
        self,
        write: Writer,
        *,
        flush_every_s: float = 30.0,
        enabled: bool = True,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self.flush_every_s = flush_every_s
        self.enabled = enabled
        self._monotonic = monotonic
        self._pending: dict[UserKey, dict[str, AccessMark]] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._last_flush = monotonic()

    def note(self, ctx: RuntimeContext, ids: Iterable[str], when: datetime) -> None:
        """Count one access of each of ``ids``; flush everything when the interval is up."""
        if not self.enabled:
            return
        with self._lock:
            marks = self._pending.setdefault((ctx.tenant_id, ctx.user_id), {})
            for fid in ids:
                old = marks.get(fid)
                marks[fid] = AccessMark(1, when) if old is None else old.add(AccessMark(1, when))
            due = self._monotonic() - self._last_flush >= self.flush_every_s
        if due:
            self.flush()

    def pending(self, ctx: RuntimeContext) -> dict[str, AccessMark]:
        with self._lock:
            return dict(self._pending.get((ctx.tenant_id, ctx.user_id), {}))

    def overlay(self, ctx: RuntimeContext, facts: Iterable[Fact]) -> list[Fact]:
        """``facts`` with the notes not yet written added."""
        marks = self.pending(ctx)
        return [applied(f, marks.get(f.id)) for f in facts]

    def forget(self, ctx: RuntimeContext, ids: Iterable[str] | None = None) -> None:
        """Drop the notes of deleted facts (all of the user's when ``ids`` is None)."""
        with self._lock:
            key = (ctx.tenant_id, ctx.user_id)
            if ids is None:
                self._pending.pop(key, None)
                return
            marks = self._pending.get(key, {})
            for fid in ids:
                marks.pop(fid, None)

    def flush(self) -> int:
        """Write every user's notes (one batch per user); how many facts were written.
        A failed write keeps its notes for the next flush."""
        with self._flushing:
            with self._lock:
                taken, self._pending = self._pending, {}
                self._last_flush = self._monotonic()
            written = 0
            for number, ((tenant, user), marks) in enumerate(taken.items()):
                if not marks:
                    continue
                try:
                    self._write(RuntimeContext(tenant, user), marks)
                except Exception:
                    self._put_back(dict(list(taken.items())[number:]))
                    raise
                written += len(marks)
            return written

    def _put_back(self, taken: dict[UserKey, dict[str, AccessMark]]) -> None:
        with self._lock:
            for key, marks in taken.items():
                current = self._pending.setdefault(key, {})
                for fid, mark in marks.items():
                    old = current.get(fid)
                    current[fid] = mark if old is None else old.add(mark)
