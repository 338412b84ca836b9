"""The compaction hook: what an agent call runs around its reasoning.

Before reasoning, flush first (the long-term pipeline's callback sees the messages about to be
summarised away), then compact when a trigger fires. A failed compaction is remembered in the
state (``CompactionBackoff``): until it is due, the trigger answers ``backoff`` and neither the
flush nor the summariser is called, so a model that cannot summarise is not paid on every
append. ``force_compact_and_retry`` handles a context-overflow error: flush, compact harder,
retry once (whatever the back-off says: the call cannot go on otherwise). Apart from the
policies (``compaction``) because this is where short-term memory meets the flush pipeline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TypeVar

from memory_service.config.memory_settings import CompactionSettings
from memory_service.domain.agent_state import AgentState, CompactionBackoff
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import MemoryServiceError
from memory_service.domain.facts import utcnow
from memory_service.domain.messages import Msg
from memory_service.llm import ContextOverflowError
from memory_service.observe.telemetry import sink
from memory_service.observe.tracing import using_ids
from memory_service.shortterm.compaction_base import CompactionResult, Compactor
from memory_service.shortterm.flush_callback import FlushCallback, FlushReason

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_BACKOFF_FACTOR = 16  # the wait doubles with each failure in a row, up to this factor


def backoff_after(
    state: AgentState,
    error: MemoryServiceError,
    config: CompactionSettings,
    now: datetime,
) -> CompactionBackoff:
    """The back-off after one more failure: ``retry_after_messages`` more messages or
    ``retry_after_minutes``, doubled for each earlier failure in a row."""
    failures = (state.compaction_backoff.failures if state.compaction_backoff else 0) + 1
    factor = min(2 ** (failures - 1), MAX_BACKOFF_FACTOR)
    return CompactionBackoff(
        failures=failures,
        retry_at_seq=state.next_seq + config.retry_after_messages * factor,
        retry_after=now + timedelta(minutes=config.retry_after_minutes * factor),
        error_code=error.code,
        error_message=error.message,
    )


def waiting_error(backoff: CompactionBackoff) -> MemoryServiceError:
    """The remembered failure, as the result of a compaction that waits."""
    return MemoryServiceError(
        f"{backoff.error_message} (compaction failed {backoff.failures} time(s) in a row; "
        f"backing off: next try once the session has {backoff.retry_at_seq} messages in all, "
        f"or after {backoff.retry_after.isoformat()}, whichever comes first)",
        code=backoff.error_code or None,
    )


def count_compaction(result: CompactionResult, ctx: RuntimeContext) -> None:
    """A compaction that was attempted, in the metrics and the log (sizes, never text)."""
    outcome = "ok" if result.performed else result.reason
    sink().pipeline("compaction", outcome)
    log.info(
        "compaction of %s/%s/%s: %s, %d messages summarised, %d kept",
        ctx.tenant_id,
        ctx.user_id,
        ctx.session_id,
        outcome,
        result.removed,
        result.kept,
        extra={"compaction": outcome, "removed": result.removed, "kept": result.kept},
    )


def with_pending(state: AgentState, pending: Sequence[Msg]) -> AgentState:
    """``state`` as the next model round sees it: a copy with ``pending`` appended (``state``
    itself when there is nothing pending)."""
    if not pending:
        return state
    projected = state.copy()
    projected.append(*pending)
    return projected


class CompactionHook:
    """Runs before reasoning: flush, then compact when a trigger fires."""

    def __init__(
        self,
        compactor: Compactor,
        *,
        flush: FlushCallback | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.compactor = compactor
        self.flush = flush
        self.clock = clock

    def run_flush(self, state: AgentState, ctx: RuntimeContext, reason: FlushReason) -> dict:
        """Call the flush callback; a failure is logged and returned, never raised. Nothing
        runs when ``flush_before_compaction`` is off."""
        if self.flush is None or not self.compactor.config.flush_before_compaction:
            return {}
        try:
            self.flush(state, ctx, reason)
        except Exception as exc:  # a failed flush must not block the conversation
            log.warning("flush before compaction failed for %s: %s", ctx.session_id, exc)
            return {"flush_error": f"{type(exc).__name__}: {exc}"}
        return {"flushed": True}

    def before_reasoning(
        self, state: AgentState, ctx: RuntimeContext, pending: Sequence[Msg] = ()
    ) -> CompactionResult:
        """Compact when needed and not backing off. ``pending``: the messages of the call in
        progress that the state does not hold yet (its user message and tool rounds), which
        the next model round is sent too: the triggers count them, and the state's own
        history is what is compacted. An LLM failure is reported in the result and
        remembered in ``state.compaction_backoff``; the messages stay unchanged."""
        trigger = self.compactor.needs_compaction(with_pending(state, pending))
        tokens = state.token_estimate
        if trigger is None:
            return CompactionResult(False, "not_needed", 0, len(state.messages), tokens, tokens)
        now = self.clock()
        backoff = state.compaction_backoff
        if backoff is not None and not backoff.due(state.next_seq, now):
            error = waiting_error(backoff)
            return CompactionResult(
                False, "backoff", 0, len(state.messages), tokens, tokens, error=error
            )
        with using_ids(ctx.trace_id, ctx.span_id):
            result = self._compact(state, ctx, trigger, now)
            count_compaction(result, ctx)
        return result

    def _compact(
        self, state: AgentState, ctx: RuntimeContext, trigger: str, now: datetime
    ) -> CompactionResult:
        flushed = self.run_flush(state, ctx, "pre_compaction")
        try:
            result = self.compactor.compact(state, reason=trigger)
        except MemoryServiceError as exc:
            state.compaction_backoff = backoff_after(state, exc, self.compactor.config, now)
            log.warning(
                "compaction of %s failed (%d in a row; next try at %d messages): %s",
                ctx.session_id,
                state.compaction_backoff.failures,
                state.compaction_backoff.retry_at_seq,
                exc,
            )
            tokens = state.token_estimate
            result = CompactionResult(
                False, "failed", 0, len(state.messages), tokens, tokens, error=exc
            )
        return replace(result, **flushed)

    def force_compact_and_retry(
        self,
        state: AgentState,
        ctx: RuntimeContext,
        call: Callable[[AgentState], T],
        on_compacted: Callable[[CompactionResult], None] | None = None,
    ) -> T:
        """``call(state)``; on ``ContextOverflowError`` flush, compact with the smaller tail,
        and call once more. A second overflow, or a compaction failure, is raised.
        ``on_compacted`` gets the overflow's compaction (its usage is the caller's to count)."""
        try:
            return call(state)
        except ContextOverflowError as overflow:
            self.run_flush(state, ctx, "overflow")
            result = self.compactor.compact(state, reason="overflow", aggressive=True)
            count_compaction(result, ctx)
            if on_compacted is not None:
                on_compacted(result)
            if not result.performed:
                raise overflow
            log.info("context overflow in %s: compacted, retrying", ctx.session_id)
            return call(state)
