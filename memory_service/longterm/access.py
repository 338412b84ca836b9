"""Access metadata (``access_count``, ``last_accessed_at``), counted without a write per hit.

A recall notes its hits here, in memory; the notes are written to the backend in one batch
per owner (a user, or an agent's or the tenant's shared memory, whichever holds the fact)
every ``flush_every_s`` seconds (checked when a recall notes its hits) and on close,
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

from memory_service.domain.context import SCOPE_OWNER_USER, RuntimeContext
from memory_service.domain.facts import Fact, parse_time


def owner_context(ctx: RuntimeContext) -> RuntimeContext:
    """The memory ``ctx`` addresses, as one value per owner: the user's (tenant, user), or the
    agent's or tenant's shared memory for no user (session, trace and the caller's agent
    dropped), so every caller of one owner notes into, and reads from, one batch."""
    if ctx.scope == "user":
        return RuntimeContext(ctx.tenant_id, ctx.user_id)
    agent = ctx.agent_id if ctx.scope == "agent" else None
    return RuntimeContext(ctx.tenant_id, SCOPE_OWNER_USER, agent_id=agent, scope=ctx.scope)


def fact_owner(ctx: RuntimeContext, fact: Fact) -> RuntimeContext:
    """The owner of ``fact`` as read by ``ctx``: a shared fact's own scope, else ``ctx``'s."""
    if fact.scope is None or fact.scope == "user":
        return owner_context(ctx.in_scope("user"))
    return owner_context(ctx.in_scope(fact.scope, fact.agent_id))


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
    """Recall hits per owner, in memory, flushed to ``write`` in batches (one per owner)."""

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
        self._pending: dict[RuntimeContext, dict[str, AccessMark]] = {}
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._last_flush = monotonic()

    def note(self, ctx: RuntimeContext, facts: Iterable[Fact], when: datetime) -> None:
        """Count one access of each of ``facts`` (recalled by ``ctx``), on its owner; flush
        everything when the interval is up."""
        if not self.enabled:
            return
        owners: dict[tuple[str | None, str | None], dict[str, AccessMark]] = {}
        with self._lock:
            for fact in facts:
                placed = (fact.scope, fact.agent_id)  # all fact_owner reads of the fact
                marks = owners.get(placed)
                if marks is None:
                    owner = fact_owner(ctx, fact)
                    marks = owners[placed] = self._pending.setdefault(owner, {})
                old = marks.get(fact.id)
                mark = AccessMark(1, when)
                marks[fact.id] = mark if old is None else old.add(mark)
            due = self._monotonic() - self._last_flush >= self.flush_every_s
        if due:
            self.flush()

    def pending(self, ctx: RuntimeContext) -> dict[str, AccessMark]:
        """The notes not yet written of the memory ``ctx`` addresses."""
        with self._lock:
            return dict(self._pending.get(owner_context(ctx), {}))

    def overlay(self, ctx: RuntimeContext, facts: Iterable[Fact]) -> list[Fact]:
        """``facts`` (read by ``ctx``) with the notes not yet written on their owners added."""
        with self._lock:
            return [applied(f, self._pending.get(fact_owner(ctx, f), {}).get(f.id)) for f in facts]

    def forget(self, ctx: RuntimeContext, ids: Iterable[str] | None = None) -> None:
        """Drop the notes of deleted facts (all of the user's when ``ids`` is None)."""
        with self._lock:
            key = owner_context(ctx)
            if ids is None:
                self._pending.pop(key, None)
                return
            marks = self._pending.get(key, {})
            for fid in ids:
                marks.pop(fid, None)

    def flush(self) -> int:
        """Write every owner's notes (one batch per owner); how many facts were written.
        A failed write keeps its notes for the next flush."""
        with self._flushing:
            with self._lock:
                taken, self._pending = self._pending, {}
                self._last_flush = self._monotonic()
            written = 0
            for number, (owner, marks) in enumerate(taken.items()):
                if not marks:
                    continue
                try:
                    self._write(owner, marks)
                except Exception:
                    self._put_back(dict(list(taken.items())[number:]))
                    raise
                written += len(marks)
            return written

    def _put_back(self, taken: dict[RuntimeContext, dict[str, AccessMark]]) -> None:
        with self._lock:
            for key, marks in taken.items():
                current = self._pending.setdefault(key, {})
                for fid, mark in marks.items():
                    old = current.get(fid)
                    current[fid] = mark if old is None else old.add(mark)
