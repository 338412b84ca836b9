"""One agent call, start to end, with every memory hook in its place (the seeds' order):

1. load the session's ``AgentState`` by context;
2. compaction check: when a trigger fires, flush first (the messages about to be summarised
   reach long-term memory), then compact; again before every later model round, counting
   the call's own messages (its user message and tool rounds), so a call with many tool
   rounds compacts its history before the round that would not fit;
3. system prompt (``prompt``): instructions + MEMORY.md within ``memory_load_token_budget``
   + recalled facts by relevance and by importance;
4. the model loop (``loop``) with the memory tools, at most ``max_tool_iterations``
   completions; a big tool result is evicted as the tool returns (its preview stays in the
   context for the rest of the call); on a context overflow: flush, compact harder, retry
   once;
5. append the user message and everything the loop produced (``ShortTermMemory.append``
   evicts big tool results again, from their full text, and logs the messages);
6. post-call flush, as the ``FlushTrigger`` says;
7. save the state (the flush watermark and its throttle clock).

``disable_memory_hooks`` leaves out MEMORY.md, recall, every flush and the memory tools;
``disable_memory_tools`` offers no tools. Nothing here is specific to a backend, and sessions
are reached only through ``ShortTermMemory``'s public methods.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

from memory_service.config.memory_settings import MemorySettings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ConflictError, InvalidInputError
from memory_service.domain.messages import MEMORY_PRUNE, Msg
from memory_service.harness.loop import run_tool_loop
from memory_service.harness.outcome import ChatOutcome, MemoryPrompt, RecalledFact, Turn
from memory_service.harness.prompt import PromptBuilder
from memory_service.llm import ChatModel, Usage, require_model
from memory_service.longterm.protocol import LongTermMemory
from memory_service.observe.telemetry import sink
from memory_service.pipeline.flush import EXTRA_KEY, MemoryFlushManager
from memory_service.pipeline.flush_result import FlushResult
from memory_service.pipeline.maintenance import MemoryMaintenance
from memory_service.shortterm.compaction_base import CompactionResult
from memory_service.shortterm.session import AppendResult, ShortTermMemory
from memory_service.stores.memory_docs import MemoryDocs
from memory_service.stores.usage import RECORD_ERRORS, UsageStore
from memory_service.stores.usage.files import FilesUsageStore
from memory_service.tools.memory_tools import MemoryTools

log = logging.getLogger(__name__)


def _fingerprint(state: AgentState) -> tuple:
    """What the hooks change in a state before the reply is appended."""
    return (
        state.last_flushed_index,
        state.compaction_count,
        len(state.messages),
        json.dumps(state.extra.get(EXTRA_KEY), sort_keys=True),
    )


class MemoryHarness:
    """Runs agent calls over one set of services; thread-safe as its parts are."""

    def __init__(
        self,
        *,
        model: ChatModel | None,
        shortterm: ShortTermMemory,
        longterm: LongTermMemory,
        workspace: Path,
        config: MemorySettings | None = None,
        flush: MemoryFlushManager | None = None,
        usage: UsageStore | None = None,
        maintenance: MemoryMaintenance | None = None,
        docs: MemoryDocs | None = None,
    ) -> None:
        self.model = model
        self.shortterm = shortterm
        self.longterm = longterm
        self.workspace = Path(workspace)
        self.config = config or MemorySettings()
        self.flush = flush
        self.usage = usage or FilesUsageStore(self.workspace)
        self.tools = MemoryTools(
            self.workspace,
            longterm,
            shortterm,
            maintenance=maintenance,
            # the tools are part of the memory pipeline: off with it, or on their own
            enabled=not (self.config.disable_memory_tools or self.config.disable_memory_hooks),
            docs=docs,
            summary_chars=self.config.memory_summary_length,
        )
        self.prompts = PromptBuilder(
            longterm,
            self.workspace,
            self.config,
            tools_enabled=self.tools.enabled,
            tidy_tools=MEMORY_PRUNE in self.tools.names(),
            docs=docs,
        )

    @property
    def hooks(self) -> bool:
        return not self.config.disable_memory_hooks

    # -- the call -------------------------------------------------------------------------

    def call(self, ctx: RuntimeContext, message: str) -> ChatOutcome:
        """One user message in, the assistant's reply out; see the module docstring."""
        model = require_model(self.model, "the chat endpoint (POST /v1/chat)")
        if ctx.session_id is None:
            raise InvalidInputError("a chat call needs a session_id", code="missing_session_id")
        if not isinstance(message, str) or not message.strip():
            raise InvalidInputError("message must not be empty")
        user_msg = Msg.user(message)
        collector = self.flush.collecting() if self.flush else contextlib.nullcontext([])
        with collector as flushes:
            state = self.shortterm.load(ctx)
            saved = _fingerprint(state)
            compaction = self.shortterm.check_compaction(state, ctx)  # flush first, inside
            saved = self._save_if_changed(state, ctx, saved)
            prompt = self.system_prompt(ctx, message)
            turn, overflow = self._reason(model, state, ctx, prompt, user_msg)
            self._save_if_changed(state, ctx, saved)
            appended = self._append_turn(ctx, user_msg, turn)
            self._post_call_flush(appended.state, ctx)
        return ChatOutcome(
            reply=turn.messages[-1].content if turn.messages else "",
            session_id=ctx.session_id,
            version=appended.state.version,
            prompt=prompt,
            flushes=list(flushes),
            compaction=compaction,
            overflow_retry=overflow,
            tool_calls=turn.tools,
            evicted=appended.evicted,
            usage=self._usage(ctx, turn, compaction, flushes),
            iterations=turn.iterations,
        )

    def system_prompt(self, ctx: RuntimeContext, query: str) -> MemoryPrompt:
        """The system prompt of a call with input ``query`` (see ``PromptBuilder``)."""
        return self.prompts.system_prompt(ctx, query)

    def recall(
        self, ctx: RuntimeContext, query: str, *, exclude: set[str] | None = None
    ) -> list[RecalledFact]:
        """The facts recalled for ``query`` (see ``PromptBuilder.recall``)."""
        return self.prompts.recall(ctx, query, exclude=exclude)

    def _reason(
        self,
        model: ChatModel,
        state: AgentState,
        ctx: RuntimeContext,
        prompt: MemoryPrompt,
        user_msg: Msg,
    ) -> tuple[Turn, bool]:
        """The model loop; on a context overflow, flush + compact harder + retry once."""
        turn = Turn()
        system = Msg.system(prompt.text)

        def keep_result(result: Msg) -> Msg:
            kept = self.shortterm.evict_tool_result(ctx, result)
            if kept.mark == "tool_result" and result.tool_call_id is not None:
                turn.evicted_results[result.tool_call_id] = result
            return kept

        def attempt(current: AgentState) -> Turn:
            self.shortterm.discard_evicted(ctx, turn.messages)  # an overflowed attempt's
            turn.messages, turn.evicted_results = [], {}
            # compacted once, the history has nothing more to give in this call: it does not
            # grow while the call runs (its messages are appended at the end)
            spent: list[bool] = []

            def before_round() -> list[Msg]:
                if not spent:
                    pending = [user_msg, *turn.messages]
                    result = self.shortterm.check_compaction(current, ctx, pending)
                    if result.performed or result.usage is not None:
                        turn.round_compactions.append(result)
                    if result.performed or result.reason == "nothing_to_compact":
                        spent.append(True)
                return [system, *current.context(), user_msg]

            context = [system, *current.context(), user_msg]
            run_tool_loop(
                model,
                self.tools,
                ctx,
                context,
                turn,
                limit=self.config.max_tool_iterations,
                before_round=before_round,
                keep_result=keep_result,
            )
            return turn

        retried: list[bool] = []

        def compacted(result: CompactionResult) -> None:
            turn.overflow_compaction = result.usage
            retried.append(result.performed)  # a compaction between rounds is not a retry

        try:
            self.shortterm.force_compact_and_retry(state, ctx, attempt, compacted)
        except BaseException:  # nothing of a failed call stays: its early files neither
            self.shortterm.discard_evicted(ctx, turn.messages)
            raise
        return turn, any(retried)

    # -- saving ---------------------------------------------------------------------------

    def _append_turn(self, ctx: RuntimeContext, user_msg: Msg, turn: Turn) -> AppendResult:
        """The user message and the turn into the session: each tool result evicted during
        the call goes in whole (its early file taken back), so the append evicts it once
        more and the session log keeps its full text, as for any appended message."""
        full = [
            turn.evicted_results.get(m.tool_call_id, m) if m.mark == "tool_result" else m
            for m in turn.messages
        ]
        self.shortterm.discard_evicted(ctx, turn.messages)
        return self.shortterm.append(ctx, [user_msg, *full], compact=False)

    def _save_if_changed(self, state: AgentState, ctx: RuntimeContext, saved: tuple) -> tuple:
        """Persist what a hook changed (flush watermark, compaction) before going on."""
        now = _fingerprint(state)
        if now != saved:
            self.shortterm.save(state, ctx)
        return now

    def _save_flush_progress(self, state: AgentState, ctx: RuntimeContext) -> None:
        """Save the post-call flush's watermark; if another writer got there first, carry
        the watermark over to its state. If that fails too, the next flush sends the same
        messages again and recording them is a no-op (facts are idempotent)."""
        try:
            self.shortterm.save(state, ctx)
            return
        except ConflictError:
            fresh = self.shortterm.load(ctx)
        if fresh.incarnation != state.incarnation or fresh.next_seq <= state.last_flushed_index:
            return
        fresh.mark_flushed(state.last_flushed_index)
        fresh.extra[EXTRA_KEY] = state.extra.get(EXTRA_KEY, {})
        try:
            self.shortterm.save(fresh, ctx)
        except ConflictError:
            log.warning("flush watermark of %s not saved: the session kept changing", ctx)

    def _post_call_flush(self, state: AgentState, ctx: RuntimeContext) -> None:
        if not self.hooks or self.flush is None:
            return
        before = _fingerprint(state)
        self.flush.after_call(state, ctx)
        if _fingerprint(state) != before:
            self._save_flush_progress(state, ctx)

    def _usage(
        self,
        ctx: RuntimeContext,
        turn: Turn,
        compaction: CompactionResult,
        flushes: list[FlushResult],
    ) -> dict[str, Usage]:
        """Tokens of this call by purpose; chat and compaction are added to the tenant's
        usage file here (each flush adds its own)."""
        usage = {"chat": turn.usage}
        sink().tokens("chat", turn.usage.prompt_tokens, turn.usage.completion_tokens)
        summaries = [c.usage for c in (compaction, *turn.round_compactions) if c.usage]
        if summaries:
            usage["compaction"] = sum(summaries, Usage())
        overflow = turn.overflow_compaction
        try:
            self.usage.record(ctx.tenant_id, tokens=usage)
            if overflow is not None:  # a second compaction call: counted as one more
                self.usage.record(ctx.tenant_id, tokens={"compaction": overflow})
        except RECORD_ERRORS as exc:
            log.warning("could not record usage for %s: %s", ctx.tenant_id, exc)
        if overflow is not None:
            usage["compaction"] = usage.get("compaction", Usage()) + overflow
        flush_usage = sum((f.usage for f in flushes), Usage())
        if flush_usage.total_tokens:
            usage["flush"] = flush_usage
        return usage
