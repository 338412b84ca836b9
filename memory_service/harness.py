"""One agent call, start to end, with every memory hook in its place (the seeds' order):

1. load the session's ``AgentState`` by context;
2. compaction check: when a trigger fires, flush first (the messages about to be summarised
   reach long-term memory), then compact;
3. system prompt = instructions + MEMORY.md within ``memory_load_token_budget`` (beyond it, a
   hint to use memory_search) + recalled facts: ``recall_by_relevance`` by relevance to the
   input and ``recall_by_importance`` by importance, deduplicated by id;
4. the model loop with the memory tools, at most ``max_tool_iterations`` completions; on a
   context overflow: flush, compact harder, retry once;
5. append the user message and everything the loop produced (``ShortTermMemory.append``
   evicts big tool results and logs the messages);
6. post-call flush, as the ``FlushTrigger`` says;
7. save the state (the flush watermark and its throttle clock).

``disable_memory_hooks`` leaves out MEMORY.md, recall and every flush; ``disable_memory_tools``
offers no tools. Nothing here is specific to a backend.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from indexing.hashing import content_hash
from memory_service.config import MemorySettings
from memory_service.context import RuntimeContext
from memory_service.errors import ConflictError, InvalidInputError
from memory_service.facts import Fact
from memory_service.limits import MAX_QUERY_BYTES  # the input, cut to what recall takes
from memory_service.llm import ChatModel, Usage, require_model
from memory_service.longterm.base import LongTermMemory
from memory_service.longterm.ledger import parse_ledger
from memory_service.messages import Msg, estimate_tokens
from memory_service.paths import UserPaths
from memory_service.pipeline.consolidation import priority
from memory_service.pipeline.flush import (
    EXTRA_KEY,
    FlushResult,
    MemoryFlushManager,
    memory_md_for_model,
)
from memory_service.shortterm.compaction import CompactionResult
from memory_service.shortterm.session import ShortTermMemory
from memory_service.shortterm.state import AgentState
from memory_service.tools import MemoryTools, ToolOutcome
from memory_service.usage import UsageLedger

log = logging.getLogger(__name__)

DEFAULT_INSTRUCTIONS = """\
You are a helpful assistant with a long-term memory of this user. What you know about them is
below: MEMORY.md (their consolidated memory) and memories recalled for this message. Use it
whenever it matters (respect their allergies, preferences and earlier decisions) without
reciting it unprompted. If something you remember conflicts with what the user says now,
trust the user."""

TOOLS_NOTE = """\
Tools: memory_search finds what you remember (memory_get reads the lines it points to),
memory_save records something important right away, session_search finds what was said in
earlier sessions."""

MAX_PRIORITY_SCAN = 10_000  # facts read to pick the most important ones
OUT_OF_TOOL_CALLS = "(no answer: the tool-call budget of this turn was used up)"


@dataclass(frozen=True, slots=True)
class RecalledFact:
    """A fact put into the prompt, and why: ``relevance`` (with its score) or ``importance``."""

    id: str
    text: str
    via: str
    importance: int
    kind: str
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "via": self.via,
            "importance": self.importance,
            "kind": self.kind,
            "score": self.score,
        }


@dataclass(slots=True)
class MemoryPrompt:
    """The system prompt of one call and what went into it."""

    text: str
    recalled: list[RecalledFact] = field(default_factory=list)
    memory_md_tokens: int = 0  # tokens of MEMORY.md shown
    memory_md_total_tokens: int = 0
    memory_md_truncated: bool = False


@dataclass(slots=True)
class _Turn:
    """What the model loop produced; usage and tool outcomes survive an overflow retry."""

    messages: list[Msg] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    tools: list[ToolOutcome] = field(default_factory=list)
    iterations: int = 0


@dataclass(slots=True)
class ChatOutcome:
    """The reply and everything memory did for it."""

    reply: str
    session_id: str
    version: int
    prompt: MemoryPrompt
    flushes: list[FlushResult]
    compaction: CompactionResult | None
    overflow_retry: bool
    tool_calls: list[ToolOutcome]
    evicted: list[str]
    usage: dict[str, Usage]
    iterations: int

    @property
    def flushed_facts(self) -> list[dict[str, Any]]:
        return [f.to_dict() for result in self.flushes for f in result.facts]

    def to_dict(self) -> dict[str, Any]:
        total = sum(self.usage.values(), Usage())
        return {
            "reply": self.reply,
            "session_id": self.session_id,
            "version": self.version,
            "memory": {
                "recalled": [r.to_dict() for r in self.prompt.recalled],
                "memory_md": {
                    "tokens": self.prompt.memory_md_tokens,
                    "total_tokens": self.prompt.memory_md_total_tokens,
                    "truncated": self.prompt.memory_md_truncated,
                },
                "flushed_facts": self.flushed_facts,
                "flushes": [f.to_dict() for f in self.flushes],
                "compaction": self.compaction.to_dict() if self.compaction else None,
                "overflow_retry": self.overflow_retry,
                "tool_calls": [t.to_dict() for t in self.tool_calls],
                "evicted": list(self.evicted),
            },
            "usage": {
                **{purpose: u.to_dict() for purpose, u in self.usage.items()},
                "total": total.to_dict(),
            },
            "iterations": self.iterations,
        }


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
        usage: UsageLedger | None = None,
    ) -> None:
        self.model = model
        self.shortterm = shortterm
        self.longterm = longterm
        self.workspace = Path(workspace)
        self.config = config or MemorySettings()
        self.flush = flush
        self.usage = usage or UsageLedger(self.workspace)
        self.tools = MemoryTools(
            self.workspace, longterm, shortterm, enabled=not self.config.disable_memory_tools
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
            appended = self.shortterm.append(ctx, [user_msg, *turn.messages], compact=False)
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

    def _reason(
        self,
        model: ChatModel,
        state: AgentState,
        ctx: RuntimeContext,
        prompt: MemoryPrompt,
        user_msg: Msg,
    ) -> tuple[_Turn, bool]:
        """The model loop; on a context overflow, flush + compact harder + retry once."""
        turn = _Turn()
        system = Msg.system(prompt.text)

        def attempt(current: AgentState) -> _Turn:
            turn.messages = []
            self._loop(model, ctx, [system, *current.context(), user_msg], turn)
            return turn

        hook = self.shortterm.hook
        if hook is None:
            return attempt(state), False
        before = state.compaction_count
        hook.force_compact_and_retry(state, ctx, attempt)
        return turn, state.compaction_count > before

    def _loop(self, model: ChatModel, ctx: RuntimeContext, context: list[Msg], turn: _Turn) -> None:
        tools = self.tools.schemas()
        limit = self.config.max_tool_iterations
        for iteration in range(1, limit + 1):
            last = iteration == limit
            reply = model.complete(
                [*context, *turn.messages],
                tools=tools or None,
                tool_choice="none" if tools and last else None,
            )
            turn.usage = turn.usage + reply.usage
            turn.iterations += 1
            if not reply.tool_calls:
                turn.messages.append(reply.message)
                return
            if last:  # the model ignored tool_choice=none: keep its words, drop the calls
                turn.messages.append(Msg.assistant(reply.text or OUT_OF_TOOL_CALLS))
                return
            turn.messages.append(reply.message)
            for call in reply.tool_calls:
                outcome = self.tools.run(ctx, call)
                turn.tools.append(outcome)
                turn.messages.append(Msg.tool(call.id, outcome.text, name=call.name))

    # -- the prompt -----------------------------------------------------------------------

    def system_prompt(self, ctx: RuntimeContext, query: str) -> MemoryPrompt:
        """Instructions + MEMORY.md within budget (else a hint) + recalled facts."""
        parts = [self.config.instructions or DEFAULT_INSTRUCTIONS]
        if self.tools.enabled:
            parts.append(TOOLS_NOTE)
        prompt = MemoryPrompt(text="")
        shown_hashes: set[str] = set()
        if self.hooks:
            paths = UserPaths.of(self.workspace, ctx)
            shown, memory_md = memory_md_for_model(paths, self.config.memory_load_token_budget)
            if memory_md:
                prompt.memory_md_total_tokens = estimate_tokens(memory_md)
                prompt.memory_md_tokens = estimate_tokens(shown)
                prompt.memory_md_truncated = shown != memory_md
                if shown:
                    parts.append(f"## Long-term memory (MEMORY.md)\n\n{shown}")
                if prompt.memory_md_truncated:
                    parts.append(self._truncation_hint(prompt))
                shown_hashes = {
                    content_hash(line.fact.text)
                    for line in parse_ledger(shown, default_created_at=None)
                }
            prompt.recalled = self.recall(ctx, query, exclude=shown_hashes)
            if prompt.recalled:
                lines = "\n".join(f"- {r.text}" for r in prompt.recalled)
                parts.append(f"## Recalled memories\n\n{lines}")
        prompt.text = "\n\n".join(parts)
        return prompt

    def _truncation_hint(self, prompt: MemoryPrompt) -> str:
        size = f"about {prompt.memory_md_tokens} of {prompt.memory_md_total_tokens} tokens"
        if self.tools.enabled:
            return (
                f"(MEMORY.md is longer than shown here: {size}. Use memory_search to look up "
                "anything else you may know about the user.)"
            )
        return f"(MEMORY.md is longer than shown here: {size}.)"

    def recall(
        self, ctx: RuntimeContext, query: str, *, exclude: set[str] | None = None
    ) -> list[RecalledFact]:
        """Facts by relevance to ``query``, then by importance, once each (by id); facts
        whose text MEMORY.md already shows (``exclude``, content hashes) are left out."""
        out: list[RecalledFact] = []
        seen: set[str] = set()
        skip = exclude or set()

        def take(fact: Fact, via: str, score: float | None = None) -> bool:
            if fact.id in seen or fact.content_hash in skip:
                return False
            seen.add(fact.id)
            out.append(RecalledFact(fact.id, fact.text, via, fact.importance, fact.kind, score))
            return True

        query = query.encode("utf-8")[:MAX_QUERY_BYTES].decode("utf-8", errors="ignore").strip()
        if self.config.recall_by_relevance and query:
            for recall in self.longterm.retrieve(ctx, query, self.config.recall_by_relevance):
                take(recall.fact, "relevance", round(recall.score, 6))
        wanted = self.config.recall_by_importance
        if wanted:
            extra = len(seen) + len(skip)  # enough candidates after dedup
            added = 0
            for fact in self._most_important(ctx, wanted + extra):
                if added >= wanted:
                    break
                added += take(fact, "importance")
        return out

    def _most_important(self, ctx: RuntimeContext, count: int) -> list[Fact]:
        """The ``count`` most important active facts (newest first among equals)."""
        best: list[Fact] = []
        cursor: str | None = None
        scanned = 0
        while scanned < MAX_PRIORITY_SCAN:
            page = self.longterm.list(ctx, limit=1000, cursor=cursor)
            scanned += len(page.items)
            best = heapq.nsmallest(count, [*best, *page.items], key=priority)
            cursor = page.next_cursor
            if cursor is None:
                break
        return best

    # -- saving ---------------------------------------------------------------------------

    def _save_if_changed(self, state: AgentState, ctx: RuntimeContext, saved: tuple) -> tuple:
        """Persist what a hook changed (flush watermark, compaction) before going on."""
        now = _fingerprint(state)
        if now != saved:
            self.shortterm.store.save(state, ctx)
        return now

    def _save_flush_progress(self, state: AgentState, ctx: RuntimeContext) -> None:
        """Save the post-call flush's watermark; if another writer got there first, carry
        the watermark over to its state. If that fails too, the next flush sends the same
        messages again and recording them is a no-op (facts are idempotent)."""
        try:
            self.shortterm.store.save(state, ctx)
            return
        except ConflictError:
            fresh = self.shortterm.load(ctx)
        if fresh.incarnation != state.incarnation or fresh.next_seq <= state.last_flushed_index:
            return
        fresh.mark_flushed(state.last_flushed_index)
        fresh.extra[EXTRA_KEY] = state.extra.get(EXTRA_KEY, {})
        try:
            self.shortterm.store.save(fresh, ctx)
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
        turn: _Turn,
        compaction: CompactionResult,
        flushes: list[FlushResult],
    ) -> dict[str, Usage]:
        """Tokens of this call by purpose; chat and compaction are added to the tenant's
        usage file here (each flush adds its own)."""
        usage = {"chat": turn.usage}
        if compaction.usage is not None:
            usage["compaction"] = compaction.usage
        try:
            self.usage.record(ctx.tenant_id, tokens=usage)
        except (OSError, TimeoutError) as exc:
            log.warning("could not record usage for %s: %s", ctx.tenant_id, exc)
        flush_usage = sum((f.usage for f in flushes), Usage())
        if flush_usage.total_tokens:
            usage["flush"] = flush_usage
        return usage
