"""Ingest each memory into a fresh backend, then ask its questions in every mode, side by side.

One memory (user) per conversation or question. Facts are recorded in batches, and the
mapping from fact id to evidence refs is taken from what ``record`` returns, so two memories
with one text (merged into one fact) carry both refs. Timing: ``record`` calls (embedding
included) make the ingest rate; the first retrieve per memory (the index build) is timed on its
own; then every question is asked once per mode, modes interleaved so noise hits all alike.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from memory_service.bench.backends import FreshBackends
from memory_service.bench.dataset import Conversation, Dataset, MemoryItem
from memory_service.bench.embedding import ColdQueryEmbedder
from memory_service.context import RuntimeContext
from memory_service.errors import InvalidInputError
from memory_service.longterm.base import LongTermMemory
from memory_service.progress import Progress

TENANT = "bench"
WARM_UP_QUERY = "index warm-up"


@dataclass(frozen=True, slots=True)
class Outcome:
    """One question asked in one mode: the refs of each retrieved memory, best first."""

    qid: str
    category: str
    mode: str
    gold: frozenset[str]
    stale: frozenset[str]
    ranked: tuple[frozenset[str], ...]
    latency_ms: float


@dataclass(slots=True)
class RunResult:
    dataset: Dataset
    modes: tuple[str, ...]
    depth: int
    outcomes: list[Outcome] = field(default_factory=list)
    items_recorded: int = 0
    facts_stored: int = 0
    record_s: float = 0.0
    index_build_ms: list[float] = field(default_factory=list)
    unreachable_gold: int = 0
    questions_with_unreachable_gold: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0

    @property
    def ingest_per_s(self) -> float | None:
        return self.items_recorded / self.record_s if self.record_s > 0 else None


def _batches(items: Sequence[MemoryItem], size: int) -> list[Sequence[MemoryItem]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _ingest(
    memory: LongTermMemory,
    ctx: RuntimeContext,
    conversation: Conversation,
    batch_size: int,
    result: RunResult,
    progress: Progress,
) -> dict[str, frozenset[str]]:
    refs_by_fact: dict[str, set[str]] = {}
    for batch in _batches(conversation.items, batch_size):
        started = time.perf_counter()
        recorded = memory.record(ctx, [item.to_fact() for item in batch])
        result.record_s += time.perf_counter() - started
        for item, outcome in zip(batch, recorded, strict=True):
            refs_by_fact.setdefault(outcome.id, set()).update(item.refs)
        result.items_recorded += len(batch)
        progress.update(len(batch))
    result.facts_stored += len(refs_by_fact)
    return {fact_id: frozenset(refs) for fact_id, refs in refs_by_fact.items()}


def _ask(
    memory: LongTermMemory,
    ctx: RuntimeContext,
    conversation: Conversation,
    refs_by_fact: dict[str, frozenset[str]],
    result: RunResult,
    threshold: float,
    progress: Progress,
) -> None:
    carried = set().union(*refs_by_fact.values()) if refs_by_fact else set()
    for question in conversation.questions:
        unreachable = question.gold - carried
        result.unreachable_gold += len(unreachable)
        result.questions_with_unreachable_gold += bool(unreachable)
        asked = []
        try:
            for mode in result.modes:
                started = time.perf_counter()
                recalls = memory.retrieve(ctx, question.text, result.depth, threshold, mode=mode)
                latency_ms = 1000.0 * (time.perf_counter() - started)
                ranked = tuple(refs_by_fact.get(r.fact.id, frozenset()) for r in recalls)
                asked.append(
                    Outcome(
                        question.qid,
                        question.category,
                        mode,
                        question.gold,
                        question.stale,
                        ranked,
                        latency_ms,
                    )
                )
        except InvalidInputError as exc:  # e.g. a question over the 4 KiB query limit
            result.skipped[f"query refused by retrieve ({exc.code})"] += 1
        else:
            result.outcomes.extend(asked)
        progress.update(1)


def run(
    dataset: Dataset,
    backends: FreshBackends,
    *,
    modes: Sequence[str],
    ks: Sequence[int],
    batch_size: int = 64,
    threshold: float = 0.0,
    show_progress: bool = True,
) -> RunResult:
    """Every conversation of ``dataset`` through a fresh backend; every question in every mode."""
    depth = max(*ks, 10)  # nDCG@10 is always reported
    result = RunResult(dataset, tuple(modes), depth)
    embedder = backends.embedder
    conversations = [c for c in dataset.conversations if c.questions]
    if dropped := len(dataset.conversations) - len(conversations):
        result.skipped["memories without questions (not ingested)"] = dropped
    total = sum(len(c.items) + len(c.questions) for c in conversations)
    started = time.perf_counter()
    with Progress(total, f"bench {dataset.name}/{dataset.unit}", enabled=show_progress) as bar:
        for conversation in conversations:
            ctx = RuntimeContext(TENANT, conversation.user_id)
            if isinstance(embedder, ColdQueryEmbedder):
                embedder.mark_queries(q.text for q in conversation.questions)
            with backends.fresh() as memory:
                bar.stage(f"ingest {conversation.id}")
                refs_by_fact = _ingest(memory, ctx, conversation, batch_size, result, bar)
                build_started = time.perf_counter()
                for mode in result.modes:
                    memory.retrieve(ctx, WARM_UP_QUERY, 1, mode=mode)
                result.index_build_ms.append(1000.0 * (time.perf_counter() - build_started))
                bar.stage(f"query {conversation.id}")
                _ask(memory, ctx, conversation, refs_by_fact, result, threshold, bar)
    result.skipped = +result.skipped
    result.wall_s = time.perf_counter() - started
    return result
