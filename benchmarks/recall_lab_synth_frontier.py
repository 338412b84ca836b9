"""Issue 15 item 6, the last 0.2 points: can any fusion setting or stemmer meet the synthetic
target (hybrid >= dense at R@5, R@10 and MRR) without giving up LoCoMo?

``recall_lab_synth``'s method (the service's tokenizer, ``fact_terms`` and ``fuse_legs`` on both
legs' candidate lists; its default rows equal ``memory-service bench`` to the decimal), on the
three sets at once:

- ``--grid``: every combination of the BM25 weight, BM25's ``min_spread`` and
  ``lexical_coverage`` (the three knobs that set how far a lexical match can lift a memory),
  each point checked against issue 15's targets that dev can show: synthetic hybrid >= dense at
  R@5, R@10 and MRR; turns no loss against dev 65.7 / 75.1 / 82.4; facts hybrid >= best leg + 3
  at every k;
- ``--stemmers``: Snowball (the default) against Krovetz (KStem, Lucene's ``KStemFilter``, the
  light English stemmer of Elasticsearch), with recall@10 per conversation. Krovetz needs
  ``pip install krovetzstemmer`` (not a dependency of the service).

    .venv/bin/python benchmarks/recall_lab_synth_frontier.py --grid --stemmers \
        --json benchmarks/results/synth-frontier.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recall_lab import KS, Conv, Scores, evaluate  # noqa: E402
from recall_lab_issue15 import load_sets  # noqa: E402
from recall_lab_synth import ranker, service_legs  # noqa: E402

import indexing.tokenize as tokenize_module  # noqa: E402
from memory_service.config.retrieval import (  # noqa: E402
    BM25_MIN_SPREAD,  # noqa: E402
    PRESETS,
    RetrievalConfig,
)

SETS = ("synthetic", "locomo-turns", "locomo-facts")
TURNS_TODAY = {5: 0.657, 10: 0.751, 25: 0.824}  # issue 15: "no loss against today" (dev)
WEIGHTS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05)
MIN_SPREADS = (BM25_MIN_SPREAD, 1.0, 1.5)  # ln 2 is the default
COVERAGES = (0.5, 1.0)
EPS = 1e-9


def _scores(sets: dict[str, list[Conv]], config: RetrievalConfig, modes: Sequence[str]):
    legs = {name: service_legs(convs, config) for name, convs in sets.items()}
    return {
        name: {mode: evaluate(convs, ranker(config, legs[name], mode)) for mode in modes}
        for name, convs in sets.items()
    }


def _single(by_mode: dict[str, Scores]) -> dict[str, Scores]:
    return {mode: s for mode, s in by_mode.items() if mode != "hybrid"}


def _row(s: Scores) -> list[float]:
    return [round(100 * s.recall[k], 1) for k in KS] + [round(100 * s.mrr, 1)]


def verdicts(hybrid: dict[str, Scores], legs: dict[str, dict[str, Scores]]) -> dict[str, bool]:
    """Issue 15's dev-measurable targets for one setting (``legs``: each set's single legs)."""
    synth, dense = hybrid["synthetic"], legs["synthetic"]["dense"]
    facts, fact_legs = hybrid["locomo-facts"], legs["locomo-facts"]
    return {
        "synthetic >= dense at R@5, R@10, MRR": all(
            synth.recall[k] >= dense.recall[k] - EPS for k in (5, 10)
        )
        and synth.mrr >= dense.mrr - EPS,
        "turns no loss": all(
            hybrid["locomo-turns"].recall[k] >= v - 0.0005 for k, v in TURNS_TODAY.items()
        ),
        "facts >= best leg + 3": all(
            facts.recall[k] >= max(leg.recall[k] for leg in fact_legs.values()) + 0.03 - EPS
            for k in KS
        ),
    }


def grid(sets: dict[str, list[Conv]]) -> list[dict]:
    base = PRESETS["hybrid"]
    single = _scores(sets, base, ("bm25", "dense"))
    for name in sets:
        for mode, s in single[name].items():
            print(f"{name:13s} {mode:6s} {_row(s)}", flush=True)
    legs = {name: service_legs(convs, base) for name, convs in sets.items()}
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
        point = {
            "bm25_weight": weight,
            "bm25_min_spread": spread,
            "lexical_coverage": coverage,
            **{name: _row(s) for name, s in hybrid.items()},
            "targets": verdict,
        }
        out.append(point)
        met = "".join("y" if v else "." for v in verdict.values())
        print(
            f"{weight:4.2f} {spread:4.2f} {coverage:3.1f}: {_row(hybrid['synthetic'])} | "
            f"{_row(hybrid['locomo-turns'])} | {_row(hybrid['locomo-facts'])}  [{met}]",
            flush=True,
        )
    return out


def _krovetz() -> Callable[[str], str]:
    try:
        from krovetzstemmer import Stemmer
    except ImportError:
        raise SystemExit(
            "--stemmers needs Krovetz: pip install krovetzstemmer (not a service dependency)"
        ) from None
    stemmer = Stemmer()

    @lru_cache(maxsize=65536)
    def stem(word: str) -> str:  # the same guards as ``indexing.tokenize.stem``
        if word.endswith("'s"):
            word = word[:-2]
        if not word.isascii() or not word.isalpha():
            return word
        return stemmer.stem(word)

    return stem


def stemmers(sets: dict[str, list[Conv]]) -> dict:
    snowball = tokenize_module.stem
    out = {}
    try:
        for label, stem in (("snowball", snowball), ("krovetz", _krovetz())):
            tokenize_module.stem = stem
            scores = _scores(sets, PRESETS["hybrid"], ("bm25", "dense", "hybrid"))
            hybrid = {name: by_mode["hybrid"] for name, by_mode in scores.items()}
            out[label] = {
                "rows": {n: {m: _row(s) for m, s in by.items()} for n, by in scores.items()},
                "hybrid_r10_per_conversation": {
                    n: {c: round(100 * r[10], 1) for c, r in s.per_conv.items()}
                    for n, s in hybrid.items()
                },
                "targets": verdicts(hybrid, {n: _single(by) for n, by in scores.items()}),
            }
            print(f"\n=== {label}: {tokenize_module.tokenize('living lives dancing dance')}")
            for name, by_mode in scores.items():
                for mode, s in by_mode.items():
                    print(f"  {name:13s} {mode:6s} {_row(s)}")
                per = out[label]["hybrid_r10_per_conversation"][name]
                print(f"  {name:13s} hybrid R@10 per conversation {per}")
            print(f"  targets: {out[label]['targets']}", flush=True)
    finally:
        tokenize_module.stem = snowball
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", action="store_true", help="weights x min_spread x coverage")
    parser.add_argument("--stemmers", action="store_true", help="Snowball against Krovetz")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if not (args.grid or args.stemmers):
        parser.error("choose --grid and/or --stemmers")
    sets = load_sets(SETS)
    doc: dict = {}
    if args.grid:
        doc["grid"] = grid(sets)
    if args.stemmers:
        doc["stemmers"] = stemmers(sets)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
