"""Compaction: keep a growing session inside the model's window.

The default policy (the seeds' one) summarises everything before the last ``keep_last``
messages, previous summary included, into five blocks and keeps the tail verbatim:

    [system messages] [summary, marked "summary"] [tail: the latest messages, unchanged]

The tail never starts with a tool result whose call was cut off: call and results stay
together. A failed LLM call changes nothing; the error is raised (``compact``) or reported
(``CompactionHook``, in ``compaction_hook``). ``SlidingWindow`` is the LLM-free alternative:
drop whole old user rounds; ``ImportanceTrimmer`` (``trimming``) drops the lowest-scored
messages instead. What the policies share is in ``compaction_base``. The summary's prompt
and its parsing live in ``summary``.
"""

from __future__ import annotations

from collections.abc import Sequence

from indexing.embeddings import Embedder
from memory_service.config.memory_settings import CompactionSettings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.errors import ConfigurationError
from memory_service.domain.messages import Msg, estimate_tokens
from memory_service.llm import ChatModel
from memory_service.observe.telemetry import sink
from memory_service.shortterm.compaction_base import (
    CompactionResult,
    Compactor,
    summary_trigger,
    token_trigger,
)
from memory_service.shortterm.compaction_base import pinned as _pinned
from memory_service.shortterm.summary import (
    DEFAULT_SUMMARY_PROMPT,
    parse_summary,
    render_line,
    render_summary,
)
from memory_service.shortterm.trimming import ImportanceTrimmer

__all__ = [
    "ConversationCompactor",
    "SlidingWindow",
    "build_compactor",
    "split_tail",
]

TRANSCRIPT_SHARE = 0.6  # of the window, at most, for the transcript sent to the summariser


# -- splitting -----------------------------------------------------------------------------


def split_tail(messages: Sequence[Msg], keep_last: int) -> int:
    """Index where the verbatim tail starts, so that it never begins with an orphaned tool
    result: the cut moves back to the assistant message that made the call; if that leaves
    nothing to summarise, it moves forward past the results instead."""
    n = len(messages)
    cut = max(0, n - keep_last)
    if cut == 0:
        return 0
    back = cut
    while 0 < back < n and messages[back].role == "tool":
        back -= 1
    if back > 0 and any(m.mark != "summary" for m in messages[:back]):
        return back
    forward = cut
    while forward < n and messages[forward].role == "tool":
        forward += 1
    return forward


# -- the summary policy --------------------------------------------------------------------


class ConversationCompactor:
    """LLM summary of the older messages; the latest ``keep_last`` stay verbatim."""

    def __init__(
        self,
        model: ChatModel,
        config: CompactionSettings | None = None,
        *,
        context_window: int | None = None,
    ) -> None:
        self.config = config or CompactionSettings()
        self.model = model.with_model(self.config.model)
        self.window = context_window or self.config.context_window or model.context_window
        self.prompt = self.config.summary_prompt or DEFAULT_SUMMARY_PROMPT

    def needs_compaction(self, state: AgentState) -> str | None:
        return summary_trigger(state, self.config, self.window)

    def compact(
        self,
        state: AgentState,
        *,
        reason: str = "forced",
        aggressive: bool = False,
        keep_last: int | None = None,
    ) -> CompactionResult:
        if keep_last is None:
            keep_last = self.config.overflow_keep_last if aggressive else self.config.keep_last
        pinned = [m for m in state.messages if _pinned(m)]
        conversation = [m for m in state.messages if not _pinned(m)]
        cut = split_tail(conversation, keep_last)
        head, tail = conversation[:cut], conversation[cut:]
        before = state.token_estimate
        if not any(m.mark != "summary" for m in head):
            return CompactionResult(False, "nothing_to_compact", 0, len(tail), before, before)

        reply = self.model.complete(
            [Msg.system(self.prompt), Msg.user(self._request(state, head))]
        )  # raises: nothing has been changed yet
        sink().tokens("compaction", reply.usage.prompt_tokens, reply.usage.completion_tokens)
        blocks = parse_summary(reply.text)

        summary = Msg(
            "user",
            render_summary(blocks, state.compaction_count + 1),
            mark="summary",
            metadata={
                "compaction": state.compaction_count + 1,
                "replaced": len(head),
                "through_seq": max((m.seq for m in head if m.seq is not None), default=None),
            },
        )
        state.replace_messages([*pinned, summary, *tail])
        state.summary = blocks
        state.compaction_count += 1
        state.compaction_backoff = None
        state.flags.pop("needs_compaction", None)
        return CompactionResult(
            True,
            reason,
            removed=len(head),
            kept=len(tail),
            tokens_before=before,
            tokens_after=state.token_estimate,
            summary=dict(blocks),
            usage=reply.usage,
        )

    def _request(self, state: AgentState, head: Sequence[Msg]) -> str:
        previous = [m for m in head if m.mark == "summary"]
        lines = [
            render_line(m, self.config.max_chars_per_message) for m in head if m.mark != "summary"
        ]
        budget = int(self.window * TRANSCRIPT_SHARE) - estimate_tokens(self.prompt)
        used = sum(estimate_tokens(line) for line in lines)
        dropped = 0
        while lines and used > budget:  # the oldest lines go first; the summary never
            used -= estimate_tokens(lines.pop(0))
            dropped += 1
        parts = []
        if previous or state.summary:
            text = previous[-1].content if previous else render_summary(state.summary or {}, 0)
            parts.append(f"<previous_summary>\n{text}\n</previous_summary>")
        if dropped:
            lines.insert(0, f"[... {dropped} older messages omitted to fit the window ...]")
        parts.append("<conversation>\n" + "\n".join(lines) + "\n</conversation>")
        parts.append("Write the five blocks now.")
        return "\n\n".join(parts)


# -- the sliding window policy -------------------------------------------------------------


class SlidingWindow:
    """Keep the last ``window_rounds`` user rounds (a round starts at a user message);
    system messages and an existing summary stay. No LLM."""

    def __init__(self, config: CompactionSettings | None = None, *, context_window: int) -> None:
        self.config = config or CompactionSettings(policy="sliding_window")
        self.window = self.config.context_window or context_window

    @staticmethod
    def _round_starts(messages: Sequence[Msg]) -> list[int]:
        return [i for i, m in enumerate(messages) if m.role == "user" and m.mark is None]

    def needs_compaction(self, state: AgentState) -> str | None:
        if len(self._round_starts(state.messages)) > self.config.window_rounds:
            return "rounds"
        if token_trigger(state, self.config, self.window):
            return "tokens"
        return None

    def compact(
        self, state: AgentState, *, reason: str = "forced", aggressive: bool = False
    ) -> CompactionResult:
        keep = self.config.window_rounds
        if aggressive:
            keep = max(1, min(keep, len(self._round_starts(state.messages))) // 2)
        kept_always = [m for m in state.messages if _pinned(m) or m.mark == "summary"]
        conversation = [m for m in state.messages if not (_pinned(m) or m.mark == "summary")]
        starts = self._round_starts(conversation)
        before = state.token_estimate
        if len(starts) <= keep:
            return CompactionResult(
                False, "nothing_to_compact", 0, len(conversation), before, before
            )
        cut = starts[-keep]
        state.replace_messages([*kept_always, *conversation[cut:]])
        state.compaction_count += 1
        state.compaction_backoff = None
        state.flags.pop("needs_compaction", None)
        return CompactionResult(
            True, reason, cut, len(conversation) - cut, before, state.token_estimate
        )


def build_compactor(
    config: CompactionSettings,
    model: ChatModel | None,
    *,
    context_window: int,
    embedder: Embedder | None = None,
) -> Compactor | None:
    """The configured policy; None when it needs an LLM and none is configured. The
    ``importance`` policy needs the embedder instead."""
    if config.policy == "sliding_window":
        return SlidingWindow(config, context_window=context_window)
    if config.policy == "importance":
        if embedder is None:
            raise ConfigurationError(
                "MEMORY_COMPACTION__POLICY: the importance policy needs the embedder"
            )
        return ImportanceTrimmer(embedder, config, context_window=context_window)
    if model is None:
        return None
    return ConversationCompactor(model, config, context_window=context_window)
