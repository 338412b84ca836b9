"""Issue 15 item 6's lab: where the default hybrid lost to dense on the bundled synthetic set.

``recall_lab_issue15``'s method (the service's tokenizer, BM25 and ``fuse_legs`` on both legs'
candidate lists, vectors of the configured embedder cached under ``benchmarks/results/lab/``),
with the lexical leg indexing what the service indexes (``fact_terms``: the fact, its source
text and its day), so the LoCoMo facts rows include provenance as ``memory-service bench``
does. Winners are confirmed end to end with ``memory-service bench`` (``benchmarks/RESULTS.md``).

    .venv/bin/python benchmarks/recall_lab_synth.py              # presets x modes, 3 sets
    .venv/bin/python benchmarks/recall_lab_synth.py --diagnose   # synthetic: where hybrid loses
    .venv/bin/python benchmarks/recall_lab_synth.py --diagnose --before   # ... without coverage
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dataclasses import replace  # noqa: E402

from recall_lab import Conv, Legs, evaluate  # noqa: E402
from recall_lab import leg_lists as lab_leg_lists  # noqa: E402
from recall_lab_issue15 import TOP_K, load_sets  # noqa: E402

from indexing.tokenize import tokenize  # noqa: E402
from memory_service.config.retrieval import PRESETS, RetrievalConfig  # noqa: E402
from memory_service.longterm.fusion import fact_terms, fuse_legs  # noqa: E402


def service_legs(convs: Sequence[Conv], config: RetrievalConfig) -> dict[str, Legs]:
    """Both legs' score rows, the lexical one over ``fact_terms`` as every backend indexes;
    each conversation keeps its memories' term sets (``extra["terms"]``) for query coverage."""
    out = {}
    for c in convs:
        facts = [item.to_fact() for item in c.items]
        terms = [fact_terms(f, config) for f in facts]
        c.extra["terms"] = [frozenset(t) for t in terms]
        bm25 = c.bm25(doc_tokens=lambda i, terms=terms: terms[i])
        out[c.id] = Legs(bm25, c.dense())
    return out


def leg_lists(conv: Conv, legs: Legs, row: int, depth: int):
    """``recall_lab.leg_lists`` plus what a backend reports of each hit: the query terms its
    memory contains (both legs, as the files backend does)."""
    hits = lab_leg_lists(conv, legs, row, depth)
    query = set(tokenize(conv.questions[row]))
    held = conv.extra["terms"]
    for leg in ("bm25", "dense"):
        hits[leg] = [replace(h, matched=frozenset(query & held[int(h.id)])) for h in hits[leg]]
    return hits


def ranker(config: RetrievalConfig, legs: dict[str, Legs], mode: str = "hybrid"):
    def rank(conv: Conv, row: int) -> list[int]:
        hits = leg_lists(conv, legs[conv.id], row, config.depth(TOP_K))
        terms = tokenize(conv.questions[row])
        return [int(h.id) for h in fuse_legs(mode, hits, config, TOP_K, query_terms=terms)]

    return rank


def table(sets, configs: Sequence[RetrievalConfig], modes=("hybrid",)) -> None:
    for name, convs in sets.items():
        print(f"\n{name}: R@5 / R@10 / R@25  MRR", flush=True)
        cache: dict[tuple[bool, bool], dict[str, Legs]] = {}
        for config in configs:
            key = (config.date_terms, config.source_terms)
            if key not in cache:
                cache[key] = service_legs(convs, config)
            for mode in modes:
                scores = evaluate(convs, ranker(config, cache[key], mode))
                print(f"  {config.name:34s} {mode:7s}", scores.row(), flush=True)


def diagnose(convs: Sequence[Conv], config: RetrievalConfig) -> None:
    """Per synthetic question hybrid ranks the gold fact below dense: list lengths, each leg's
    z-score of the gold fact and of the fact hybrid put first."""
    legs = service_legs(convs, config)
    depth = config.depth(TOP_K)
    for conv in convs:
        for row, gold in enumerate(conv.gold):
            hits = leg_lists(conv, legs[conv.id], row, depth)
            terms = tokenize(conv.questions[row])
            fused = fuse_legs("hybrid", hits, config, TOP_K, query_terms=terms)
            dense = fuse_legs("dense", hits, config, TOP_K)

            def first(ranked, gold=gold, refs=conv.refs):
                return next((i for i, h in enumerate(ranked) if refs[int(h.id)] & gold), 99)

            if first(fused) <= first(dense):
                continue
            b = np.array([h.score for h in hits["bm25"]])
            d = np.array([h.score for h in hits["dense"]])
            g = fused[first(fused)] if first(fused) < 99 else None
            top = fused[0]

            def z(leg, hit, arr):
                s = hit.scores[leg] if hit else None
                if s is None or arr.size == 0:
                    return "-"
                return f"{(s - arr.mean()) / max(arr.std(), config.min_spread[leg], 1e-12):+.2f}"

            print(
                f"{conv.categories[row]:10s} n={len(conv.items)} bm25 {b.size} "
                f"(top {b[:3].round(2).tolist()} mean {b.mean() if b.size else 0:.2f} "
                f"sd {b.std() if b.size else 0:.2f}) dense sd {d.std():.3f}; "
                f"gold at {first(fused) + 1} (dense {first(dense) + 1}); "
                f"gold z b/d {z('bm25', g, b)}/{z('dense', g, d)}, "
                f"top z b/d {z('bm25', top, b)}/{z('dense', top, d)} | "
                f"{conv.questions[row]!r} -> {conv.items[int(top.id)].text!r}"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="synthetic,locomo-turns,locomo-facts")
    parser.add_argument("--diagnose", action="store_true")
    parser.add_argument("--before", action="store_true", help="diagnose without query coverage")
    args = parser.parse_args(argv)
    sets = load_sets(args.sets.split(","))
    if args.diagnose:
        config = PRESETS["hybrid"]
        diagnose(
            sets["synthetic"], config.with_changes(lexical_coverage=0.0) if args.before else config
        )
        return 0
    hybrid = PRESETS["hybrid"]
    configs = [
        hybrid.with_changes(name="hybrid, no coverage (before)", lexical_coverage=0.0),
        *(
            hybrid.with_changes(name=f"hybrid, coverage^{p:g}", lexical_coverage=p)
            for p in (0.25, 0.5, 0.75, 1.0)
        ),
        PRESETS["rrf"],
    ]
    table(sets, configs[:1], ("bm25", "dense", "hybrid"))
    table(sets, configs[1:], ("hybrid",))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
