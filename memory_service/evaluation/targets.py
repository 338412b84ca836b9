"""The targets a recall run is held to, as data, and their verdicts from the result document.

The issue that asked ``bench`` to "print the targets met" sets them for hybrid against the
single legs (``bm25``, ``dense``) and against plain hybrid (preset ``rrf-plain``), all measured
in the same run: recall@10 of at least 0.70, at least 3 points over the better leg at each k,
and a p50 latency within 2x of plain hybrid's. Verdicts are computed from the document alone
(no run state), so a saved JSON can be judged again, and a target whose inputs the run lacks
says "not measured" instead of failing or vanishing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

HYBRID = "hybrid"
LEGS: tuple[str, ...] = ("bm25", "dense")
PLAIN_PRESET = "rrf-plain"
# Recall figures are means over questions: 0.73 - 0.70 must count as the 0.03 it is.
TOLERANCE = 1e-9


def baseline_mode(preset: str) -> str:
    """The result row label of hybrid asked on a second backend built with ``preset``."""
    return f"{HYBRID} ({preset})"


@dataclass(frozen=True, slots=True)
class Verdict:
    """One target judged: the numbers it used, whether it could be measured, whether it is met
    (never met when not measured), and the numbers as one line for people."""

    name: str
    description: str
    threshold: float
    values: dict[str, float | str]
    shown: str
    measured: bool
    met: bool

    @property
    def status(self) -> str:
        if not self.measured:
            return "not measured"
        return "met" if self.met else "NOT met"

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status}


def _row(doc: dict, mode: str) -> dict | None:
    return next((r for r in doc.get("results", []) if r.get("mode") == mode), None)


def _recall(row: dict, k: int) -> float | None:
    return row.get("recall", {}).get(str(k))


def _pct(value: float) -> str:
    return f"{100.0 * value:.1f}%"


def _measured(target: Target, values: dict, shown: str, met: bool) -> Verdict:
    return Verdict(target.name, target.description, target.threshold, values, shown, True, met)


def _unmeasured(target: Target, why: str) -> Verdict:
    return Verdict(target.name, target.description, target.threshold, {}, why, False, False)


@dataclass(frozen=True, slots=True)
class RecallFloor:
    """Hybrid recall@k must reach ``threshold`` (a fraction)."""

    name: str
    description: str
    threshold: float
    k: int

    def judge(self, doc: dict) -> Verdict:
        hybrid = _row(doc, HYBRID)
        if hybrid is None:
            return _unmeasured(self, f"no {HYBRID} mode in this run")
        value = _recall(hybrid, self.k)
        if value is None:
            return _unmeasured(self, f"k={self.k} not in this run")
        met = value >= self.threshold - TOLERANCE
        values, shown = {"hybrid": value}, f"hybrid {_pct(value)}"
        if (ceiling := doc.get("recall_ceiling")) is not None:
            values["ceiling"] = ceiling  # what a perfect ranking would reach
            shown += f" (perfect ranking {_pct(ceiling)})"
        return _measured(self, values, shown, met)


@dataclass(frozen=True, slots=True)
class LegMargin:
    """Hybrid recall@k must beat the better single leg's by ``threshold`` (a fraction)."""

    name: str
    description: str
    threshold: float
    k: int

    def judge(self, doc: dict) -> Verdict:
        rows = {mode: _row(doc, mode) for mode in (HYBRID, *LEGS)}
        missing = [mode for mode, row in rows.items() if row is None]
        if missing:
            return _unmeasured(self, f"no {' or '.join(missing)} mode in this run")
        recalls = {mode: _recall(row, self.k) for mode, row in rows.items()}
        if any(value is None for value in recalls.values()):
            return _unmeasured(self, f"k={self.k} not in this run")
        best = max(LEGS, key=lambda leg: recalls[leg])
        margin = recalls[HYBRID] - recalls[best]
        values = {"hybrid": recalls[HYBRID], "best_leg": best, "best_leg_recall": recalls[best]}
        values["margin"] = margin
        shown = (
            f"hybrid {_pct(recalls[HYBRID])}, best leg {best} {_pct(recalls[best])} "
            f"({100.0 * margin:+.1f} points)"
        )
        met = margin >= self.threshold - TOLERANCE
        return _measured(self, values, shown, met)


@dataclass(frozen=True, slots=True)
class LatencyRatio:
    """Hybrid p50 must be at most ``threshold`` times plain hybrid's (the same run, data and
    backend kind). A run whose own preset is the plain one is its own baseline."""

    name: str
    description: str
    threshold: float
    baseline_preset: str = PLAIN_PRESET

    def judge(self, doc: dict) -> Verdict:
        hybrid = _row(doc, HYBRID)
        if hybrid is None:
            return _unmeasured(self, f"no {HYBRID} mode in this run")
        plain = _row(doc, baseline_mode(self.baseline_preset))
        if plain is None and doc.get("preset") == self.baseline_preset:
            plain = hybrid
        if plain is None:
            why = f"no {baseline_mode(self.baseline_preset)} row (--baseline-preset)"
            return _unmeasured(self, why)
        ours, theirs = hybrid["latency_ms"]["p50"], plain["latency_ms"]["p50"]
        if ours is None or not theirs:
            return _unmeasured(self, "no latency measured")
        ratio = ours / theirs
        values = {"hybrid_p50_ms": ours, "plain_p50_ms": theirs, "ratio": ratio}
        shown = f"hybrid {ours:.1f} ms, plain {theirs:.1f} ms ({ratio:.2f}x)"
        met = ratio <= self.threshold + TOLERANCE
        return _measured(self, values, shown, met)


Target = RecallFloor | LegMargin | LatencyRatio

TARGETS: tuple[Target, ...] = (
    RecallFloor("hybrid_recall@10", "hybrid recall@10 >= 70%", 0.70, k=10),
    *(
        LegMargin(
            f"hybrid_over_best_leg@{k}",
            f"hybrid recall@{k} >= best single leg + 3 points",
            0.03,
            k=k,
        )
        for k in (5, 10, 25)
    ),
    LatencyRatio(
        "hybrid_p50_vs_plain",
        f"hybrid p50 <= 2x plain hybrid ({PLAIN_PRESET}) p50",
        2.0,
    ),
)


def applies(doc: dict) -> bool:
    """Targets are about hybrid against the legs: a run needs hybrid and at least one leg."""
    modes = {r.get("mode") for r in doc.get("results", [])}
    return HYBRID in modes and bool(modes.intersection(LEGS))


def evaluate(doc: dict, targets: Sequence[Target] = TARGETS) -> list[Verdict]:
    """Every target judged against the result document, in the order given."""
    return [target.judge(doc) for target in targets]


def tally(verdicts: Sequence[dict]) -> str:
    """The summary line, from verdicts as the document stores them (``Verdict.to_dict``)."""
    met = sum(1 for v in verdicts if v["met"])
    unmeasured = sum(1 for v in verdicts if not v["measured"])
    line = f"targets met: {met} of {len(verdicts)}"
    return f"{line} ({unmeasured} not measured)" if unmeasured else line
