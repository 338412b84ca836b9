"""Importance-scored trimming: the LLM-free compaction policy that drops what matters least.

Each message of the conversation is scored as the architecture article defines it
(``ImportanceWeights``): S = α·R + β·T + γ·Ro, with R its relevance to the current turn (the
cosine of the embedder's vectors; the share of the turn's words it holds without an embedder;
0.5 without a turn), T = 1 / (1 + λ·hours since it was created) and Ro its role's weight.
Messages are grouped into units first: an assistant message that calls tools and the results
of those calls are one unit, scored by its best message, so a call is never kept without its
results or the other way round. The lowest-scored units are dropped until at most
``keep_last`` conversation messages (``overflow_keep_last`` on an overflow) and
``trim_token_ratio`` of the window remain. What is kept stays in conversation order: a model
reads a conversation in the order it was said, so the score decides what stays, never where.
Never dropped: system messages (scored, weight 0.9, but they carry instructions), the summary
of an earlier compaction, and the latest turn (the last user message and all after it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from indexing.embeddings import Embedder
from indexing.tokenize import tokenize
from memory_service.config.memory_settings import CompactionSettings, ImportanceWeights
from memory_service.domain.agent_state import AgentState
from memory_service.domain.facts import utcnow
from memory_service.domain.messages import Msg, message_tokens
from memory_service.shortterm.compaction_base import CompactionResult, pinned, summary_trigger

MAX_SCORED_CHARS = 2_000  # of each message, embedded for relevance
NO_QUERY_RELEVANCE = 0.5  # R when there is no current turn to compare with


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
    messages: Sequence[Msg],
    query: str,
    embedder: Embedder | None,
    weights: ImportanceWeights,
    now: datetime,
) -> list[float]:
    """Each message's score S = α·R + β·T + γ·Ro (see the module docstring)."""
    if not messages:
        return []
    relevance = relevance_of(messages, query, embedder)
    scores = []
    for message, r in zip(messages, relevance, strict=True):
        hours = max(0.0, (now - (message.created_at or now)).total_seconds() / 3600)
        recency = 1.0 / (1.0 + weights.recency_decay_per_hour * hours)
        scores.append(
            weights.relevance * r
            + weights.recency * recency
            + weights.role * weights.role_weight(message.role)
        )
    return scores


def relevance_of(messages: Sequence[Msg], query: str, embedder: Embedder | None) -> list[float]:
    """R per message: cosine to ``query`` (clamped to 0..1) with an embedder, else the share
    of the query's words found in the message, and 0.5 for all when there is no query."""
    if not query.strip():
        return [NO_QUERY_RELEVANCE] * len(messages)
    if embedder is not None:
        texts = [m.content[:MAX_SCORED_CHARS] for m in messages]
        asked = np.asarray(embedder.embed_query([query[:MAX_SCORED_CHARS]]), dtype=np.float32)
        similarity = np.asarray(embedder.embed(texts), dtype=np.float32) @ asked[0]  # cosines
        return [max(0.0, min(1.0, float(s))) for s in similarity]
    words = set(tokenize(query))
    if not words:
        return [NO_QUERY_RELEVANCE] * len(messages)
    return [len(words & set(tokenize(m.content))) / len(words) for m in messages]


class ImportanceTrimmer:
    """The ``importance`` policy: no LLM, the embedder scores what to keep."""

    def __init__(
        self,
        embedder: Embedder | None,
        config: CompactionSettings | None = None,
        *,
        context_window: int,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.embedder = embedder  # None: relevance by the share of the turn's words
        self._clock = clock
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
        weights = self.config.importance_weights
        scores = score_messages(messages, query, self.embedder, weights, self._clock())
        units = units_of(messages)
        for unit in units:
            first = messages[unit.indexes[0]]
            unit.protected = pinned(first) or first.mark == "summary" or unit.indexes[-1] >= turn
            unit.score = max(scores[i] for i in unit.indexes)
            unit.tokens = sum(_tokens(messages[i]) for i in unit.indexes)
        return units


def _tokens(message: Msg) -> int:
    return message.tokens if message.tokens is not None else message_tokens(message)
