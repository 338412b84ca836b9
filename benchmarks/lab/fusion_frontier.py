"""Can any setting of the lexical leg's three knobs meet the synthetic target (hybrid >= dense
at R@5, R@10 and MRR) without giving up LoCoMo?

``--grid`` runs every combination of the BM25 weight, BM25's ``min_spread`` and
``lexical_coverage`` (the knobs that set how far a lexical match can lift a memory) on the
three sets with the service's legs, and checks each point against the targets dev can show:
synthetic hybrid >= dense at R@5, R@10 and MRR; LoCoMo turns no loss against 65.7 / 75.1 / 82.4;
facts hybrid >= best leg + 3 at every k. No point meets all three: synthetic R@10 stays at 99.0
until the BM25 weight is 0.05, where turns lose 22 points (RESULTS.md, "Lexical leg: the
fusion frontier"); the stemmer decides it instead (``benchmarks.lab.stemming``).

    python -m benchmarks.lab.fusion_frontier --data ../shared/data/locomo-dev.json \
        --json benchmarks/results/fusion-frontier.json
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.lab.common import (
    KS,
    SETS,
    Conv,
    Scores,
    add_arguments,
    evaluate,
    ranker,
    service_legs,
    sets_of,
)
from memory_service.config.retrieval import BM25_MIN_SPREAD, PRESETS

TURNS_TARGET = {5: 0.657, 10: 0.751, 25: 0.824}  # LoCoMo dev turns, hybrid: no loss below
WEIGHTS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05)
MIN_SPREADS = (BM25_MIN_SPREAD, 1.0, 1.5)  # ln 2 is the default
COVERAGES = (0.5, 1.0)
EPS = 1e-9


def verdicts(
    hybrid: Mapping[str, Scores], legs: Mapping[str, Mapping[str, Scores]]
) -> dict[str, bool]:
    """The dev-measurable targets for one setting (``legs``: each set's single legs)."""
    synth, dense = hybrid["synthetic"], legs["synthetic"]["dense"]
    facts, fact_legs = hybrid["locomo-facts"], legs["locomo-facts"]
    return {
        "synthetic >= dense at R@5, R@10, MRR": all(
            synth.recall[k] >= dense.recall[k] - EPS for k in (5, 10)
        )
        and synth.mrr >= dense.mrr - EPS,
        "turns no loss": all(
            hybrid["locomo-turns"].recall[k] >= v - 0.0005 for k, v in TURNS_TARGET.items()
        ),
        "facts >= best leg + 3": all(
            facts.recall[k] >= max(leg.recall[k] for leg in fact_legs.values()) + 0.03 - EPS
            for k in KS
        ),
    }


def grid(sets: Mapping[str, list[Conv]]) -> list[dict]:
    """Every point of the grid: its hybrid rows per set and which targets it meets."""
    base = PRESETS["hybrid"]
    legs = {name: service_legs(convs, base) for name, convs in sets.items()}
    single = {
        name: {mode: evaluate(convs, ranker(base, legs[name], mode)) for mode in ("bm25", "dense")}
        for name, convs in sets.items()
    }
    for name in sets:
        for mode, s in single[name].items():
            print(f"{name:13s} {mode:6s} {s.percent()}", flush=True)
    out = []
    print("\nbm25 weight, min_spread, coverage: synthetic | turns | facts (R@5/10/25, MRR)")
    for weight, spread, coverage in itertools.product(WEIGHTS, MIN_SPREADS, COVERAGES):
        config = base.with_changes(
            weights={"bm25": weight, "dense": 1.0},
            min_spread={"bm25": spread, "dense": 0.0},
            lexical_coverage=coverage,
        )
        hybrid = {
            name: evaluate(convs, ranker(config, legs[name], "hybrid"))
            for name, convs in sets.items()
        }
        verdict = verdicts(hybrid, single)
        out.append(
            {
                "bm25_weight": weight,
                "bm25_min_spread": spread,
                "lexical_coverage": coverage,
                **{name: s.percent() for name, s in hybrid.items()},
                "targets": verdict,
            }
        )
        met = "".join("y" if v else "." for v in verdict.values())
        rows = " | ".join(str(hybrid[name].percent()) for name in SETS)
        print(f"{weight:4.2f} {spread:4.2f} {coverage:3.1f}: {rows}  [{met}]", flush=True)
    return out


def main(argv: Sequence[str] | None = None, *, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--json", type=Path, help="write the grid here")
    args = parser.parse_args(argv)
    args.sets = ",".join(SETS)  # the targets need all three
    points = grid(sets_of(args, embedder))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"grid": points}, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
