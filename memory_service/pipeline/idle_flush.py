"""The background offline flush: sessions that went quiet with messages not yet flushed.

The post-call flush is governed by the ``FlushTrigger``; with ``never`` (or ``throttled``) the
last messages of a conversation would wait for a compaction that may never come. The scheduler
calls ``IdleFlusher.run`` every sweep: a session untouched for ``idle`` whose state holds
unflushed messages is flushed once (reason ``idle``). A flush that failed keeps its dead letter
and is not tried again for the same messages (``idle_tried_through`` in the flush's bookkeeping),
so a model that is down costs one dead letter per batch of messages, not one per sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ConflictError, UserErasedError
from memory_service.domain.facts import utcnow
from memory_service.pipeline.flush import EXTRA_KEY, TRIED_KEY, MemoryFlushManager
from memory_service.shortterm.session import ShortTermMemory

log = logging.getLogger(__name__)


@dataclass(slots=True)
class IdleFlushReport:
    """What one sweep did: sessions looked at, flushed, failed."""

    sessions: int = 0
    flushed: int = 0
    failed: int = 0


class IdleFlusher:
    """Flushes idle sessions of the users it is given."""

    def __init__(
        self,
        shortterm: ShortTermMemory,
        flush: MemoryFlushManager,
        *,
        idle: timedelta,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.shortterm = shortterm
        self.flush = flush
        self.idle = idle
        self._clock = clock

    def run(self, users: Iterable[RuntimeContext]) -> IdleFlushReport:
        """One sweep over ``users``; one session's failure never stops the others."""
        report = IdleFlushReport()
        now = self._clock()
        for user in users:
            for info in self.shortterm.list_sessions(user):
                if now - info.updated_at < self.idle:
                    continue
                report.sessions += 1
                ctx = replace(user, session_id=info.session_id)
                try:
                    status = self._flush_session(ctx)
                except UserErasedError:  # erased during the sweep: nothing to flush
                    log.info("idle flush of %s/%s: the user was erased", *_who(ctx))
                    status = "nothing"
                except Exception:  # noqa: BLE001 - the sweep must go on
                    log.exception("idle flush of %s failed", ctx)
                    status = "failed"
                report.flushed += status == "flushed"
                report.failed += status == "failed"
        return report

    def _flush_session(self, ctx: RuntimeContext) -> str:
        state = self.shortterm.load(ctx)
        pending = state.unflushed()
        if not pending:
            return "nothing"
        last = max(m.seq for m in pending if m.seq is not None)
        book = state.extra.setdefault(EXTRA_KEY, {})
        if book.get(TRIED_KEY, -1) >= last:
            return "nothing"  # tried already: its dead letter keeps the messages
        result = self.flush.flush(state, ctx, "idle")
        if result.status == "skipped":  # hooks off or no model: change nothing
            return "nothing"
        book[TRIED_KEY] = last
        try:
            self.shortterm.save(state, ctx)
        except ConflictError:  # the session woke up: its own flushes take it from here
            log.info("idle flush of %s: the session changed meanwhile", ctx)
        return "failed" if result.status == "failed" else "flushed"


def _who(ctx: RuntimeContext) -> tuple[str, str]:
    return ctx.tenant_id, ctx.user_id
