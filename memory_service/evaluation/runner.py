"""Ingest each memory into a fresh backend, then ask its questions in every mode, side by side.

One memory (user) per conversation or question. Facts are recorded in batches, and the
mapping from fact id to evidence refs is taken from what ``record`` returns, so two memories
with one text (merged into one fact) carry both refs. Timing: ``record`` calls (embedding
included) make the ingest rate; the first retrieve per memory (the index build) is timed on its
own; then every question is asked once per mode, modes interleaved so noise hits all alike.

With baselines (``--baseline-preset``, by default ``rrf-plain`` and ``rrf``), each memory is
also recorded into one more fresh backend of the same kind per baseline preset, and every
question is asked there in hybrid mode too, right after the run's own modes: other fusions
measured on the same data, under the same machine noise. Their outcomes carry the label
``hybrid (<preset>)``; their ingest is not timed.

With a threshold sweep (``injection.InjectionSweep``) and at least two memories, each memory
is also asked its own and the previous memory's questions at every threshold of the sweep,
after the timed questions.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError
from memory_service.evaluation.backends import FreshBackends
from memory_service.evaluation.dataset import Conversation, Dataset, MemoryItem, Question
from memory_service.evaluation.embedding import ColdQueryEmbedder
from memory_service.evaluation.injection import InjectionSweep
from memory_service.evaluation.targets import HYBRID, baseline_mode
from memory_service.longterm.protocol import LongTermMemory
from memory_service.observe.progress import Progress

TENANT = "bench"
# The baselines' own tenants: on a shared Qdrant server every backend uses one collection, and a
# baseline must not find (and merge into) facts another backend recorded with its preset.
BASELINE_TENANT = "bench-baseline"


def baseline_tenant(index: int) -> str:
    """The tenant of the ``index``-th baseline (0: ``bench-baseline``, then ``-2``, ``-3``...)."""
    return BASELINE_TENANT if index == 0 else f"{BASELINE_TENANT}-{index + 1}"


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
    # Per asked question: the share of its gold ids some memory carries, the recall a perfect
    # ranking reaches once k covers them (the ceiling no retriever can pass).
    reachable: dict[str, float] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    baseline_presets: tuple[str, ...] = ()
    injection: InjectionSweep | None = None
    query_embedding_ms: list[float] = field(default_factory=list)  # the model alone, per query

    @property
    def ingest_per_s(self) -> float | None:
        return self.items_recorded / self.record_s if self.record_s > 0 else None

    @property
    def baseline_preset(self) -> str | None:
        """The first baseline's preset (the latency target's), or None."""
        return self.baseline_presets[0] if self.baseline_presets else None

    @property
    def baseline_mode(self) -> str | None:
        return baseline_mode(self.baseline_preset) if self.baseline_preset else None

    @property
    def baseline_modes(self) -> tuple[str, ...]:
        return tuple(baseline_mode(p) for p in self.baseline_presets)

    @property
    def labels(self) -> tuple[str, ...]:
        """Every result row: the run's modes, then the baselines (which are not modes)."""
        return (*self.modes, *self.baseline_modes)


@dataclass(frozen=True, slots=True)
class _Lane:
    """One way each question is asked: on which backend, in which mode, under which label."""

    memory: LongTermMemory
    ctx: RuntimeContext
    mode: str
    label: str
    refs_by_fact: dict[str, frozenset[str]]


def _batches(items: Sequence[MemoryItem], size: int) -> list[Sequence[MemoryItem]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _ingest(
    memory: LongTermMemory,
    ctx: RuntimeContext,
    conversation: Conversation,
    batch_size: int,
    on_batch: Callable[[int, float], None] | None = None,
) -> dict[str, frozenset[str]]:
    """Record every item; ``on_batch(items, seconds)`` after each ``record`` call."""
    refs_by_fact: dict[str, set[str]] = {}
    for batch in _batches(conversation.items, batch_size):
        started = time.perf_counter()
        recorded = memory.record(ctx, [item.to_fact() for item in batch])
        elapsed = time.perf_counter() - started
        for item, outcome in zip(batch, recorded, strict=True):
            refs_by_fact.setdefault(outcome.id, set()).update(item.refs)
        if on_batch is not None:
            on_batch(len(batch), elapsed)
    return {fact_id: frozenset(refs) for fact_id, refs in refs_by_fact.items()}


def _counted(result: RunResult, progress: Progress) -> Callable[[int, float], None]:
    """The ingest tally of the run's own backend (the baseline's second ingest is not timed)."""

    def on_batch(items: int, seconds: float) -> None:
        result.record_s += seconds
        result.items_recorded += items
        progress.update(items)

    return on_batch


def _ask_once(lane: _Lane, question: Question, depth: int, threshold: float) -> Outcome:
    started = time.perf_counter()
    recalls = lane.memory.retrieve(lane.ctx, question.text, depth, threshold, mode=lane.mode)
    latency_ms = 1000.0 * (time.perf_counter() - started)
    ranked = tuple(lane.refs_by_fact.get(r.fact.id, frozenset()) for r in recalls)
    return Outcome(
        question.qid,
        question.category,
        lane.label,
        question.gold,
        question.stale,
        ranked,
        latency_ms,
    )


def _ask(
    conversation: Conversation,
    lanes: Sequence[_Lane],
    result: RunResult,
    threshold: float,
    progress: Progress,
) -> None:
    """Each question on every lane in turn; a question one lane refuses is skipped in all."""
    refs_by_fact = lanes[0].refs_by_fact
    carried = set().union(*refs_by_fact.values()) if refs_by_fact else set()
    for question in conversation.questions:
        unreachable = question.gold - carried
        result.unreachable_gold += len(unreachable)
        result.questions_with_unreachable_gold += bool(unreachable)
        try:
            asked = [_ask_once(lane, question, result.depth, threshold) for lane in lanes]
        except InvalidInputError as exc:  # e.g. a question over the 4 KiB query limit
            result.skipped[f"query refused by retrieve ({exc.code})"] += 1
        else:
            result.outcomes.extend(asked)
            if question.gold:
                result.reachable[question.qid] = 1.0 - len(unreachable) / len(question.gold)
        progress.update(1)


def _mark_queries(conversation: Conversation, *embedders: object) -> None:
    """Questions go to the model on every ask, in every backend (see ``ColdQueryEmbedder``)."""
    for embedder in {id(e): e for e in embedders}.values():
        if isinstance(embedder, ColdQueryEmbedder):
            embedder.mark_queries(q.text for q in conversation.questions)


def _build_indexes(memory: LongTermMemory, ctx: RuntimeContext, modes: Sequence[str]) -> float:
    """The first retrieve per mode builds the indexes: milliseconds it took."""
    started = time.perf_counter()
    for mode in modes:
        memory.retrieve(ctx, WARM_UP_QUERY, 1, mode=mode)
    return 1000.0 * (time.perf_counter() - started)


def _baseline_lane(
    stack: ExitStack,
    baseline: FreshBackends,
    conversation: Conversation,
    batch_size: int,
    label: str,
    tenant: str = BASELINE_TENANT,
) -> _Lane:
    """The conversation recorded into a fresh baseline backend, its index built, untimed."""
    memory = stack.enter_context(baseline.fresh())
    ctx = RuntimeContext(tenant, conversation.user_id)
    refs_by_fact = _ingest(memory, ctx, conversation, batch_size)
    _build_indexes(memory, ctx, (HYBRID,))
    return _Lane(memory, ctx, HYBRID, label, refs_by_fact)


def run(
    dataset: Dataset,
    backends: FreshBackends,
    *,
    modes: Sequence[str],
    ks: Sequence[int],
    batch_size: int = 64,
    threshold: float = 0.0,
    show_progress: bool = True,
    baseline: FreshBackends | Sequence[FreshBackends] | None = None,
    sweep: InjectionSweep | None = None,
) -> RunResult:
    """Every conversation of ``dataset`` through a fresh backend; every question in every mode,
    and in hybrid mode on a fresh backend of each ``baseline`` too when given; with ``sweep``
    (and two memories or more), each memory's own and foreign questions at its thresholds."""
    depth = max(*ks, 10)  # nDCG@10 is always reported
    result = RunResult(dataset, tuple(modes), depth)
    if baseline is None:
        baselines: tuple[FreshBackends, ...] = ()
    elif isinstance(baseline, FreshBackends):
        baselines = (baseline,)
    else:
        baselines = tuple(baseline)
    result.baseline_presets = tuple(b.settings.longterm.retrieval_preset for b in baselines)
    conversations = [c for c in dataset.conversations if c.questions]
    if sweep is not None and len(conversations) > 1:
        result.injection = sweep
    if dropped := len(dataset.conversations) - len(conversations):
        result.skipped["memories without questions (not ingested)"] = dropped
    total = sum(len(c.items) + len(c.questions) for c in conversations)
    started = time.perf_counter()
    with Progress(total, f"bench {dataset.name}/{dataset.unit}", enabled=show_progress) as bar:
        for n, conversation in enumerate(conversations):
            ctx = RuntimeContext(TENANT, conversation.user_id)
            _mark_queries(conversation, backends.embedder, *(b.embedder for b in baselines))
            with ExitStack() as stack:
                memory = stack.enter_context(backends.fresh())
                bar.stage(f"ingest {conversation.id}")
                refs_by_fact = _ingest(memory, ctx, conversation, batch_size, _counted(result, bar))
                result.facts_stored += len(refs_by_fact)
                result.index_build_ms.append(_build_indexes(memory, ctx, result.modes))
                lanes = [_Lane(memory, ctx, m, m, refs_by_fact) for m in result.modes]
                for b, (other, label) in enumerate(
                    zip(baselines, result.baseline_modes, strict=True)
                ):
                    bar.stage(f"baseline ingest {conversation.id} ({label})")
                    lanes.append(
                        _baseline_lane(
                            stack, other, conversation, batch_size, label, baseline_tenant(b)
                        )
                    )
                bar.stage(f"query {conversation.id}")
                _ask(conversation, lanes, result, threshold, bar)
                if result.injection is not None:
                    bar.stage(f"threshold sweep {conversation.id}")
                    foreign = conversations[n - 1].questions  # the last one's for the first
                    result.injection.ask(
                        memory,
                        ctx,
                        conversation.questions,
                        foreign,
                        refs_by_fact,
                        conversation.probes,
                    )
    result.skipped = +result.skipped
    result.wall_s = time.perf_counter() - started
    if isinstance(backends.embedder, ColdQueryEmbedder):
        result.query_embedding_ms = list(backends.embedder.query_ms)
    return result
