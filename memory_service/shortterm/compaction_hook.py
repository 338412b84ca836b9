"""The compaction hook: what an agent call runs around its reasoning.

Before reasoning, flush first (the long-term pipeline's callback sees the messages about to be
summarised away), then compact when a trigger fires. ``force_compact_and_retry`` handles a
context-overflow error: flush, compact harder, retry once. Apart from the policies
(``compaction``) because this is where short-term memory meets the flush pipeline.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from memory_service.context import RuntimeContext
from memory_service.errors import MemoryServiceError
from memory_service.llm import ContextOverflowError
from memory_service.shortterm.compaction import CompactionResult, Compactor
from memory_service.shortterm.flush_hook import FlushCallback, FlushReason
from memory_service.shortterm.state import AgentState

log = logging.getLogger(__name__)

T = TypeVar("T")


class CompactionHook:
    """Runs before reasoning: flush, then compact when a trigger fires."""

    def __init__(self, compactor: Compactor, *, flush: FlushCallback | None = None) -> None:
        self.compactor = compactor
        self.flush = flush

    def run_flush(self, state: AgentState, ctx: RuntimeContext, reason: FlushReason) -> dict:
        """Call the flush callback; a failure is logged and returned, never raised."""
        if self.flush is None:
            return {}
        try:
            self.flush(state, ctx, reason)
        except Exception as exc:  # a failed flush must not block the conversation
            log.warning("flush before compaction failed for %s: %s", ctx.session_id, exc)
            return {"flush_error": f"{type(exc).__name__}: {exc}"}
        return {"flushed": True}

    def before_reasoning(self, state: AgentState, ctx: RuntimeContext) -> CompactionResult:
        """Compact when needed; an LLM failure is reported in the result, state unchanged."""
        trigger = self.compactor.needs_compaction(state)
        if trigger is None:
            tokens = state.token_estimate
            return CompactionResult(False, "not_needed", 0, len(state.messages), tokens, tokens)
        flushed = self.run_flush(state, ctx, "pre_compaction")
        try:
            result = self.compactor.compact(state, reason=trigger)
        except MemoryServiceError as exc:
            log.warning("compaction of %s failed: %s", ctx.session_id, exc)
            tokens = state.token_estimate
            result = CompactionResult(
                False, "failed", 0, len(state.messages), tokens, tokens, error=exc
            )
        return replace(result, **flushed)

    def force_compact_and_retry(
        self, state: AgentState, ctx: RuntimeContext, call: Callable[[AgentState], T]
    ) -> T:
        """``call(state)``; on ``ContextOverflowError`` flush, compact with the smaller tail,
        and call once more. A second overflow, or a compaction failure, is raised."""
        try:
            return call(state)
        except ContextOverflowError as overflow:
            self.run_flush(state, ctx, "overflow")
            result = self.compactor.compact(state, reason="overflow", aggressive=True)
            if not result.performed:
                raise overflow
            log.info("context overflow in %s: compacted, retrying", ctx.session_id)
            return call(state)
