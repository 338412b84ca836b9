"""Where hybrid recall loses cross-lingual and Chinese hits that the dense leg holds, and
which principled fusion and threshold variants win them back, for the configured embedder
(``MEMORY_EMBEDDING__MODEL``), on the bundled Chinese and mixed-language set
(``--dataset synthetic-zh``), scored once by ``benchmarks.lab.zh_threshold`` (``--cache``).

Ranking variants (R@1/3/5, MRR per category, threshold 0): the embedder's tuning as it is;
the lexical leg standardised within the question's script (``ByScript.lexical_within``); the
dense leg's weight; both. Threshold variants (shares answered per language and false
injections per probe language at 0.45): the standout rule on raw cosines or on cosines
centred per script of the memory.

    python -m benchmarks.lab.zh_crosslingual [--users 18] [--cache FILE]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.lab.zh_threshold import Asked, Memory, _best_cover, _group, cached_load
from memory_service.config.retrieval import HYBRID, RetrievalConfig
from memory_service.evaluation import metrics
from memory_service.evaluation.datasets import synthetic_zh
from memory_service.longterm.fusion import ByScript, LegHit, fuse_legs


def fused(
    memory: Memory,
    a: Asked,
    config: RetrievalConfig,
    k: int,
    *,
    mode: str = "hybrid",
    centre: bool = True,
    within: bool = False,
    weights: dict[str, float] | None = None,
) -> list[int]:
    """The hybrid top ``k`` as the service fuses it at threshold 0."""
    depth = config.depth(k)
    order_d = [int(i) for i in np.argsort(-a.cos, kind="stable")]
    order_b = [int(i) for i in np.argsort(-a.bm25, kind="stable") if a.bm25[i] > 0]
    legs = {
        "bm25": [
            LegHit(str(i), float(a.bm25[i]), matched=memory.terms[i] & set(a.terms))
            for i in order_b[:depth]
        ],
        "dense": [
            LegHit(str(i), float(a.cos[i]), matched=memory.terms[i] & set(a.terms))
            for i in order_d[:depth]
        ],
    }
    scripts = ByScript(
        lambda fid: memory.scripts[int(fid)],
        centre,
        (weights or {}).get(a.script, 1.0),
        a.script if within else None,
    )
    hits = fuse_legs(mode, legs, config, k, query_terms=a.terms, scripts=scripts)
    return [int(h.id) for h in hits]


def ranking(memories: list[Memory], config: RetrievalConfig, **variant) -> dict[str, list[float]]:
    per: dict[str, list[list[float]]] = defaultdict(list)
    for m in memories:
        for a in m.asked:
            if not a.gold:
                continue
            ranked = [frozenset({str(i)}) for i in fused(m, a, config, 25, **variant)]
            gold = frozenset(str(i) for i in a.gold)
            per[a.category].append(
                [metrics.recall_at_k(ranked, gold, k) for k in (1, 3, 5)]
                + [metrics.reciprocal_rank(ranked, gold)]
            )
    return {c: list(np.mean(v, axis=0)) for c, v in sorted(per.items())}


def rise(memory: Memory, a: Asked, centred: bool) -> float:
    """How far the best cosine stands above the mean; ``centred``: each cosine less the mean
    of its memory's script first."""
    cos = a.cos
    if centred:
        scripts = np.array(memory.scripts)
        cos = cos.copy()
        for s in set(memory.scripts):
            cos[scripts == s] -= a.cos[scripts == s].mean()
    return float(cos.max() - cos.mean())


def rates(memories: list[Memory], standout: float, weight: float, centred: bool):
    got: dict[str, list[float]] = defaultdict(list)
    for m in memories:
        for a in m.asked:
            ok = bool((a.cos >= 0.45).any()) and (
                rise(m, a, centred) + weight * _best_cover(a) >= standout
            )
            got[_group(a)].append(float(ok))
            if a.gold:
                got["real " + a.category].append(float(ok))
    return {k: float(np.mean(v)) for k, v in sorted(got.items())}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=synthetic_zh.DEFAULT_USERS)
    parser.add_argument("--cache", type=Path, help="keep the scored questions in this pickle")
    parser.add_argument("--grid", action="store_true", help="the threshold rule's grid")
    args = parser.parse_args(argv)
    memories = cached_load(args.users, args.cache)
    print("ranking per category (R@1/3/5, MRR), default preset:")
    variants: list[tuple[str, dict]] = [
        ("bm25", {"mode": "bm25"}),
        ("dense", {"mode": "dense"}),
        ("hybrid plain", {"centre": False}),
        ("hybrid centred", {}),
        ("hybrid centred within", {"within": True}),
    ]
    for cjk, other in ((1.5, 1.5), (2.0, 2.0), (1.5, 1.0), (2.0, 1.0), (3.0, 1.0)):
        weights = {"cjk": cjk, "other": other}
        shown = f"dense cjk {cjk} other {other}"
        variants.append((f"hybrid centred {shown}", {"weights": weights}))
        variants.append((f"hybrid centred within {shown}", {"within": True, "weights": weights}))
    for label, variant in variants:
        for cat, row in ranking(memories, HYBRID, **variant).items():
            print(f"  {label:44} {cat:12} " + " ".join(f"{100 * x:5.1f}" for x in row))
    if args.grid:
        print("threshold 0.45 (centred, standout, weight): shares in %")
        for centred in (False, True):
            for standout in np.arange(0.05, 0.16, 0.0025):
                for weight in (0.0, 0.1, 0.2, 0.3, 0.5):
                    row = rates(memories, float(standout), weight, centred)
                    shown = " ".join(f"{k}={100 * v:.1f}" for k, v in row.items())
                    print(f"  {centred} {standout:.4f} {weight:.1f} {shown}")


if __name__ == "__main__":
    main()
