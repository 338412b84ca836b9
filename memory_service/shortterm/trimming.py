"""Importance-scored trimming: the LLM-free compaction policy that drops what matters least.

Each message of the conversation is scored (``ImportanceWeights``) by its relevance to the
current turn (cosine similarity of the embedder's vectors), by recency (a half-life in
messages) and by who said it. Messages are grouped into units first: an assistant message that
calls tools and the results of those calls are one unit, scored by its best message, so a call
is never kept without its results or the other way round. The lowest-scored units are dropped
until at most ``keep_last`` conversation messages (``overflow_keep_last`` on an overflow) and
``trim_token_ratio`` of the window remain. Never dropped: system messages, the summary of an
earlier compaction, and the latest turn (the last user message and all after it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from indexing.embeddings import Embedder
from memory_service.agent_state import AgentState
from memory_service.config.memory_settings import CompactionSettings, ImportanceWeights
from memory_service.messages import Msg, estimate_tokens
from memory_service.shortterm.compaction_base import CompactionResult, pinned, summary_trigger

MAX_SCORED_CHARS = 2_000  # of each message, embedded for relevance


@dataclass(slots=True)
class Unit:
    """Messages that stay or go together (a tool call and its results), by index."""

    indexes: list[int]
    protected: bool = False
    score: float = 0.0
    tokens: int = 0


def units_of(messages: Sequence[Msg]) -> list[Unit]:
    """Consecutive messages grouped so that a tool result follows its call into the unit."""
    units: list[Unit] = []
    for i, message in enumerate(messages):
        if message.role == "tool" and units and _calls_tools(messages[units[-1].indexes[0]]):
            units[-1].indexes.append(i)
        else:
            units.append(Unit([i]))
    return units


def _calls_tools(message: Msg) -> bool:
    return message.role == "assistant" and bool(message.tool_calls)


def latest_turn_start(messages: Sequence[Msg]) -> int:
    """Index of the last user message (not a summary); ``len`` when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user" and messages[i].mark is None:
            return i
    return len(messages)


def score_messages(
    messages: Sequence[Msg], query: str, embedder: Embedder, weights: ImportanceWeights
) -> list[float]:
    """Each message's score: relevance to ``query`` + recency + role, as weighted."""
    if not messages:
        return []
    relevance = [0.0] * len(messages)
    if query.strip() and weights.relevance > 0:
        texts = [query[:MAX_SCORED_CHARS], *(m.content[:MAX_SCORED_CHARS] for m in messages)]
        vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
        similarity = vectors[1:] @ vectors[0]  # rows are normalised: the cosine
        relevance = [max(0.0, min(1.0, float(s))) for s in similarity]
    role = {"user": weights.user, "assistant": weights.assistant, "tool": weights.tool}
    last = len(messages) - 1
    scores = []
    for i, message in enumerate(messages):
        recency = math.pow(0.5, (last - i) / weights.half_life_messages)
        scores.append(
            weights.relevance * relevance[i]
            + weights.recency * recency
            + weights.role * role.get(message.role, weights.assistant)
        )
    return scores


class ImportanceTrimmer:
    """The ``importance`` policy: no LLM, the embedder scores what to keep."""

    def __init__(
        self, embedder: Embedder, config: CompactionSettings | None = None, *, context_window: int
    ) -> None:
        self.embedder = embedder
        self.config = config or CompactionSettings(policy="importance")
        self.window = self.config.context_window or context_window

    def needs_compaction(self, state: AgentState) -> str | None:
        return summary_trigger(state, self.config, self.window)

    def compact(
        self, state: AgentState, *, reason: str = "forced", aggressive: bool = False
    ) -> CompactionResult:
        config = self.config
        keep = config.overflow_keep_last if aggressive else config.keep_last
        messages = list(state.messages)
        before = state.token_estimate
        units = self._units(messages)
        budget = int(config.trim_token_ratio * self.window)
        if aggressive:
            budget //= 2
        count = sum(len(u.indexes) for u in units if not pinned(messages[u.indexes[0]]))
        tokens = sum(u.tokens for u in units)
        dropped: set[int] = set()
        for unit in sorted((u for u in units if not u.protected), key=lambda u: u.score):
            if count <= keep and tokens <= budget:
                break
            dropped.update(unit.indexes)
            count -= len(unit.indexes)
            tokens -= unit.tokens
        if not dropped:
            return CompactionResult(False, "nothing_to_compact", 0, count, before, before)
        state.replace_messages([m for i, m in enumerate(messages) if i not in dropped])
        state.compaction_count += 1
        state.compaction_backoff = None
        state.flags.pop("needs_compaction", None)
        return CompactionResult(True, reason, len(dropped), count, before, state.token_estimate)

    def _units(self, messages: list[Msg]) -> list[Unit]:
        """Units with their scores, token costs and protection."""
        turn = latest_turn_start(messages)
        query = messages[turn].content if turn < len(messages) else ""
        scores = score_messages(messages, query, self.embedder, self.config.importance_weights)
        units = units_of(messages)
        for unit in units:
            first = messages[unit.indexes[0]]
            unit.protected = pinned(first) or first.mark == "summary" or unit.indexes[-1] >= turn
            unit.score = max(scores[i] for i in unit.indexes)
            unit.tokens = sum(estimate_tokens(messages[i].content) for i in unit.indexes)
        return units
