"""The false-injection sweep: what a recall threshold saves and costs when memories go into
the prompt.

The harness injects the top ``recall_by_relevance`` (6) hybrid recalls of each user message.
With no threshold it injects six memories whatever the message is about. Here every memory's
own questions and another memory's questions (the previous memory's, in turn: nothing in this
one is about them) are asked in hybrid mode at that top k, at each threshold of the sweep:
the own questions give recall@k (what a threshold costs) and the share that still injects
anything (answered), the foreign ones the share that still injects at least one memory (a false
injection: what it saves) and how many on average. A dataset's probes (off-topic questions,
``Conversation.probes``) are asked too, their false injections counted per probe category (the
language they are asked in), and the own questions' answered share per question category.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memory_service.config.memory_settings import MemorySettings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError
from memory_service.evaluation import metrics
from memory_service.evaluation.dataset import Question
from memory_service.longterm.protocol import LongTermMemory

# 0 is the retrieve default; the rest bracket the MiniLM cosines of LoCoMo questions, from a
# foreign conversation's best fact to their own (benchmarks/RESULTS.md, the threshold sweep).
SWEEP: tuple[float, ...] = (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)
INJECT_TOP_K: int = MemorySettings.model_fields["recall_by_relevance"].default
HARNESS_THRESHOLD: float = MemorySettings.model_fields["recall_threshold"].default


@dataclass(slots=True)
class InjectionSweep:
    """Per threshold: the own questions' recall@``top_k`` and, per foreign question, how many
    memories it injected."""

    thresholds: tuple[float, ...] = SWEEP
    top_k: int = INJECT_TOP_K
    recall: dict[float, list[float]] = field(default_factory=dict)
    injected: dict[float, list[int]] = field(default_factory=dict)
    answered: dict[float, dict[str, list[float]]] = field(default_factory=dict)
    probed: dict[float, dict[str, list[int]]] = field(default_factory=dict)
    refused: int = 0

    def ask(
        self,
        memory: LongTermMemory,
        ctx: RuntimeContext,
        own: Sequence[Question],
        foreign: Sequence[Question],
        refs_by_fact: Mapping[str, frozenset[str]],
        probes: Sequence[Question] = (),
    ) -> None:
        """``own`` (this memory's questions), ``foreign`` (another memory's) and ``probes``
        (questions about nothing in any memory) at every threshold; a question retrieve
        refuses (over the query limit) is counted, not asked."""
        for threshold in self.thresholds:
            answered = self.answered.setdefault(threshold, defaultdict(list))
            for question in own:
                if not question.gold:
                    continue
                recalls = self._retrieve(memory, ctx, question, threshold)
                if recalls is not None:
                    ranked = [refs_by_fact.get(r.fact.id, frozenset()) for r in recalls]
                    got = metrics.recall_at_k(ranked, question.gold, self.top_k)
                    self.recall.setdefault(threshold, []).append(got)
                    answered[question.category].append(float(bool(recalls)))
            for question in foreign:
                recalls = self._retrieve(memory, ctx, question, threshold)
                if recalls is not None:
                    self.injected.setdefault(threshold, []).append(len(recalls))
            probed = self.probed.setdefault(threshold, defaultdict(list))
            for question in probes:
                recalls = self._retrieve(memory, ctx, question, threshold)
                if recalls is not None:
                    probed[question.category].append(len(recalls))

    def _retrieve(self, memory, ctx, question: Question, threshold: float) -> list | None:
        try:
            return memory.retrieve(ctx, question.text, self.top_k, threshold, mode="hybrid")
        except InvalidInputError:
            self.refused += 1
            return None

    def summary(self) -> dict:
        """The document's ``injection`` section: one row per threshold (rates as fractions)."""
        rows = []
        for threshold in self.thresholds:
            injected = self.injected.get(threshold, [])
            rows.append(
                {
                    "threshold": threshold,
                    "recall": metrics.mean(self.recall.get(threshold, [])),
                    "false_injection": metrics.mean([float(n > 0) for n in injected]),
                    "injected_per_question": metrics.mean([float(n) for n in injected]),
                }
            )
            answered = self.answered.get(threshold, {})
            if any(answered.values()):
                every = [a for values in answered.values() for a in values]
                rows[-1]["answered"] = metrics.mean(every)
                rows[-1]["answered_by_category"] = {
                    c: metrics.mean(v) for c, v in sorted(answered.items())
                }
            if probed := self.probed.get(threshold):
                rows[-1]["false_injection_by_probe"] = {
                    c: metrics.mean([float(n > 0) for n in v]) for c, v in probed.items()
                }
        own = len(self.recall.get(self.thresholds[0], []))
        foreign = len(self.injected.get(self.thresholds[0], []))
        summary = {
            "top_k": self.top_k,
            "default": HARNESS_THRESHOLD,  # the harness's recall_threshold
            "own_questions": own,
            "foreign_questions": foreign,
        }
        if probes := self.probed.get(self.thresholds[0]):
            summary["probes"] = {c: len(v) for c, v in probes.items()}
        if self.refused:
            summary["refused"] = self.refused
        return {**summary, "rows": rows}
