"""Flush: durable facts out of a conversation, into long-term memory.

``MemoryFlushManager`` sends the messages the flush has not seen yet (everything after the
``AgentState.last_flushed_index`` watermark) to the memory model, MEMORY.md riding along as
read-only context, and records the facts it answers (``pipeline/extraction.py``: the prompt, the
reply grammar and the recording; ``pipeline/transcript.py``: what the model sees of the
conversation, in batches that fit its window).

Four paths call it: after each agent call (``after_call``, governed by the ``FlushTrigger``);
as the ``ShortTermMemory`` flush callback, before compaction and on a context overflow; and the
scheduler's idle flush (``idle_flush.py``) for a session that went quiet. The model reads
MEMORY.md and today's ledger (``extraction.todays_ledger``) so it does not repeat them.
A failed or malformed reply is retried (``MemorySettings.flush_retries``); if it still fails the
watermark stays where it was, so the next flush sends those messages again, and the messages
are appended to the user's dead-letter file (``stores/dead_letters/files.py``) and counted. Token
usage of every flush is added to the tenant's usage file. ``extract_and_record`` runs the same
extraction and recording on messages outside a session: ``pipeline/replay.py`` replays dead
letters with it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from datetime import datetime
from pathlib import Path

from memory_service.config.memory_settings import MemorySettings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import FlushFailedError, MemoryServiceError
from memory_service.domain.facts import Fact, parse_time, utcnow
from memory_service.domain.messages import Msg
from memory_service.llm import NOT_CONFIGURED_MESSAGE, ChatModel, LlmNotConfiguredError
from memory_service.longterm.protocol import LongTermMemory
from memory_service.observe.telemetry import sink
from memory_service.observe.tracing import using_ids
from memory_service.pipeline.extraction import DEFAULT_FLUSH_PROMPT, Extractor, todays_ledger
from memory_service.pipeline.flush_result import FlushResult
from memory_service.pipeline.memory_md import memory_md_for_model
from memory_service.pipeline.transcript import TranscriptBatch, with_positions
from memory_service.shortterm.flush_callback import FlushReason
from memory_service.stores.dead_letters import DeadLetterStore
from memory_service.stores.dead_letters.files import FilesDeadLetterStore
from memory_service.stores.dead_letters.record import DeadLetterRecord
from memory_service.stores.memory_docs import MemoryDocs
from memory_service.stores.memory_docs.files import documents
from memory_service.stores.usage import RECORD_ERRORS, UsageStore
from memory_service.stores.usage.files import FilesUsageStore

log = logging.getLogger(__name__)

EXTRA_KEY = "memory_flush"  # the flush's bookkeeping in AgentState.extra
TRIED_KEY = "idle_tried_through"  # seq of the last message an idle flush was tried on

__all__ = [  # what other parts import from here
    "EXTRA_KEY",
    "TRIED_KEY",
    "MemoryFlushManager",
]


_collector: ContextVar[list[FlushResult] | None] = ContextVar("flush_collector", default=None)


class MemoryFlushManager:
    """Flushes sessions of every tenant into ``longterm``. Also the ``FlushCallback`` of
    ``ShortTermMemory`` (``manager(state, ctx, reason)``)."""

    def __init__(
        self,
        longterm: LongTermMemory,
        model: ChatModel | None,
        workspace: Path,
        *,
        config: MemorySettings | None = None,
        usage: UsageStore | None = None,
        dead_letters: DeadLetterStore | None = None,
        clock: Callable[[], datetime] = utcnow,
        docs: MemoryDocs | None = None,
    ) -> None:
        self.longterm = longterm
        self.config = config or MemorySettings()
        self.workspace = Path(workspace)
        self.docs = documents(docs, self.workspace)  # MEMORY.md, read-only context
        self.usage = usage or FilesUsageStore(self.workspace)
        self.dead_letters = dead_letters or FilesDeadLetterStore(self.workspace)
        self.extractor = Extractor(
            longterm,
            model.with_model(self.config.model) if model is not None else None,
            prompt=self.config.flush_prompt or DEFAULT_FLUSH_PROMPT,
            retries=self.config.flush_retries,
        )
        self._clock = clock

    @property
    def model(self) -> ChatModel | None:
        """The memory model (None: flushes are skipped, replays refused)."""
        return self.extractor.model

    @property
    def prompt(self) -> str:
        return self.extractor.prompt

    def __call__(self, state: AgentState, ctx: RuntimeContext, reason: str) -> FlushResult:
        """The ``FlushCallback``: a failed flush raises ``FlushFailedError`` (after its dead
        letter is written), so the compaction result reports ``flush_error``."""
        result = self.flush(state, ctx, reason)  # type: ignore[arg-type]
        if result.status == "failed":
            raise FlushFailedError(f"{result.error}; the messages are kept in {result.dead_letter}")
        return result

    @contextlib.contextmanager
    def collecting(self) -> Iterator[list[FlushResult]]:
        """Every flush run inside the block (on this thread, by any path) is appended to the
        yielded list: the harness reports flushes that ran inside ShortTermMemory."""
        results: list[FlushResult] = []
        token = _collector.set(results)
        try:
            yield results
        finally:
            _collector.reset(token)

    # -- entry points ---------------------------------------------------------------------

    def after_call(self, state: AgentState, ctx: RuntimeContext) -> FlushResult:
        """The post-call flush, if the trigger says so. The time of the last one is kept in
        ``state.extra`` so a throttle survives a restart (the state is stored)."""
        now = self._clock()
        last = parse_time(state.extra.get(EXTRA_KEY, {}).get("last_post_call_at"))
        if not self.config.flush_trigger.due(last, now):
            return self._report(FlushResult("post_call", "skipped", detail="trigger"))
        result = self.flush(state, ctx, "post_call")
        if result.status not in ("nothing_to_flush", "skipped"):
            state.extra.setdefault(EXTRA_KEY, {})["last_post_call_at"] = now.isoformat()
        return result

    def flush(self, state: AgentState, ctx: RuntimeContext, reason: FlushReason) -> FlushResult:
        """Flush ``state.unflushed()``; moves the watermark only past what was recorded. Runs
        under the trace ``ctx`` carries, so its log lines name the request that caused it."""
        with using_ids(ctx.trace_id, ctx.span_id):
            result = self._flush(state, ctx, reason)
            if result.status not in ("nothing_to_flush", "skipped", "failed"):  # failed: _fail
                log.info(
                    "flush of %s/%s/%s (%s): %s, %d facts created",
                    ctx.tenant_id,
                    ctx.user_id,
                    ctx.session_id,
                    reason,
                    result.status,
                    result.facts_created,
                    extra={"flush_status": result.status, "facts_created": result.facts_created},
                )
        return result

    def _flush(self, state: AgentState, ctx: RuntimeContext, reason: FlushReason) -> FlushResult:
        result = FlushResult(reason, through_seq=state.last_flushed_index)
        if self.config.disable_memory_hooks:
            result.status, result.detail = "skipped", "disabled"
            return self._report(result)
        pending = state.unflushed()
        if not pending:
            return self._report(result)
        if reason == "expiry" and _dead_lettered(state, pending):
            result.status, result.detail = "skipped", "dead_lettered"  # the state may go
            return self._report(result)
        memory_md, _ = memory_md_for_model(
            self.docs.read(ctx), self.config.memory_load_token_budget
        )
        today = self._today(ctx) if self.model is not None else ""
        batches = self.extractor.batches(pending, memory_md, today)
        if not batches:  # only instructions, hints or memory-tool output: nothing to extract
            state.mark_flushed(max(m.seq for m in pending if m.seq is not None))
            result.through_seq = state.last_flushed_index
            return self._report(result)
        if self.model is None:
            if reason == "end":  # the session stays as it is: nothing to keep aside
                raise LlmNotConfiguredError(
                    "ending a session flushes it to long-term memory first; "
                    + NOT_CONFIGURED_MESSAGE
                )
            result.status, result.detail = "skipped", "no_model"
            if reason not in ("post_call", "idle"):  # about to leave the state: keep them
                self._fail(result, ctx, pending, "no LLM is configured for the flush")
                if reason == "expiry":  # nothing will ever flush it: the dead letter keeps it
                    result.status = "skipped"
            return self._report(self._account(result, ctx))

        def advance(batch: TranscriptBatch) -> None:
            state.mark_flushed(batch.through_seq)
            result.through_seq = state.last_flushed_index

        failure = self.extractor.record(ctx, batches, memory_md, result, advance, today)
        if failure is not None:
            self._fail(
                result,
                ctx,
                failure.rest,
                failure.error,
                facts=failure.facts,
                reply=failure.reply,
            )
        if result.status != "failed":
            result.status = "flushed" if result.facts else "no_reply"
        return self._report(self._account(result, ctx))

    def extract_and_record(
        self, ctx: RuntimeContext, messages: Sequence[Msg], reason: str = "replay"
    ) -> tuple[FlushResult, list[Msg]]:
        """Extract and record facts from ``messages`` outside any session state: the flush's
        own batching, retries and dedup, but no watermark and no new dead letter (the caller
        keeps what failed). Returns the result and the messages not recorded (the failed
        batch onward; ``[]`` when everything went through). Usage is counted under
        ``<reason>`` purposes (``flush_replay``...) so replays are told apart from flushes."""
        result = FlushResult(reason)
        if self.model is None:
            if reason == "end":  # the session stays as it is: nothing to keep aside
                raise LlmNotConfiguredError(
                    "ending a session flushes it to long-term memory first; "
                    + NOT_CONFIGURED_MESSAGE
                )
            result.status, result.detail = "skipped", "no_model"
            return result, list(messages)
        messages = with_positions(messages)
        memory_md, _ = memory_md_for_model(
            self.docs.read(ctx), self.config.memory_load_token_budget
        )
        today = self._today(ctx)
        batches = self.extractor.batches(messages, memory_md, today)
        if not batches:
            return result, []
        failure = self.extractor.record(ctx, batches, memory_md, result, lambda _batch: None, today)
        if failure is not None:
            result.status, result.error = "failed", failure.error
        else:
            result.status = "flushed" if result.facts else "no_reply"
        self._account(result, ctx, purpose=f"flush_{reason}")
        return result, failure.rest if failure is not None else []

    # -- steps ----------------------------------------------------------------------------

    def _today(self, ctx: RuntimeContext) -> str:
        """Today's ledger for the model (within the MEMORY.md budget); a backend that cannot
        list right now leaves it out rather than failing the flush."""
        try:
            return todays_ledger(
                self.longterm, ctx, self._clock(), self.config.memory_load_token_budget
            )
        except (MemoryServiceError, OSError) as exc:
            log.warning("today's ledger left out of the flush for %s: %s", ctx.tenant_id, exc)
            return ""

    def _fail(
        self,
        result: FlushResult,
        ctx: RuntimeContext,
        messages: Sequence[Msg],
        error: str | None,
        *,
        facts: Sequence[Fact] = (),
        reply: str | None = None,
    ) -> None:
        """Keep what could not be flushed: a line in the user's dead-letter file (or row)."""
        result.status, result.error = "failed", error
        letters = self.dead_letters.box(ctx)
        record = DeadLetterRecord.of_flush(
            ctx,
            reason=result.reason,
            error=error,
            attempts=result.attempts,
            messages=messages,
            facts=[f.text for f in facts],
            reply=reply,
            at=self._clock(),
        )
        letters.append(record, ctx)  # refused once the user is erased: nothing to keep
        result.dead_letter = letters.relative
        log.error(  # the error may quote the model's reply: its code only
            "flush of %s/%s/%s failed (%s); %d messages kept in %s",
            ctx.tenant_id,
            ctx.user_id,
            ctx.session_id,
            (error or "").split(":", 1)[0],
            len(messages),
            letters.relative,
        )

    def _account(
        self, result: FlushResult, ctx: RuntimeContext, *, purpose: str = "flush"
    ) -> FlushResult:
        """Tokens and outcome counters, per tenant, under ``purpose`` (``flush``, or
        ``flush_replay`` for a replayed dead letter); a usage-file problem never fails a flush."""
        if not result.attempts and result.status != "failed":
            return result
        counters = {
            f"{purpose}_runs": 1,
            f"{purpose}_facts_created": result.facts_created,
            f"{purpose}_failures": int(result.status == "failed"),
            f"{purpose}_dead_letters": int(result.dead_letter is not None),
        }
        tokens = {purpose: result.usage} if result.attempts else {}
        if result.attempts:
            sink().tokens(purpose, result.usage.prompt_tokens, result.usage.completion_tokens)
        try:
            self.usage.record(ctx.tenant_id, tokens=tokens, counters=counters)
        except RECORD_ERRORS as exc:
            log.warning("could not record flush usage for %s: %s", ctx.tenant_id, exc)
        return result

    @staticmethod
    def _report(result: FlushResult) -> FlushResult:
        sink().pipeline("flush", result.status)
        collected = _collector.get()
        if collected is not None:
            collected.append(result)
        return result


def _dead_lettered(state: AgentState, pending: Sequence[Msg]) -> bool:
    """Whether an idle flush already tried these messages and left them in a dead letter."""
    last = max(m.seq for m in pending if m.seq is not None)
    return state.extra.get(EXTRA_KEY, {}).get(TRIED_KEY, -1) >= last
