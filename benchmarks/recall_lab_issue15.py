"""Issue 15's lab: why the default lost to dense on synthetic, the fix, and stemmers side by side.

The same offline method as ``recall_lab`` (the service's tokenizer, BM25 and ``fuse_legs`` on
both legs' candidate lists; vectors of the configured embedder cached under
``benchmarks/results/lab/``), on three sets at once: the bundled synthetic set and LoCoMo dev
turns and facts. Winners are confirmed end to end with ``memory-service bench``
(``benchmarks/RESULTS.md``, "Issue 15").

    .venv/bin/python benchmarks/recall_lab_issue15.py                 # presets x modes, 3 sets
    .venv/bin/python benchmarks/recall_lab_issue15.py --diagnose      # synthetic: where it lost
    .venv/bin/python benchmarks/recall_lab_issue15.py --stemmers      # light vs snowball
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from recall_lab import (  # noqa: E402
    CACHE,
    DATA,
    Conv,
    VectorStore,
    all_legs,
    evaluate,
    leg_lists,
    service_ranker,
)

import indexing.tokenize as tokenize_module  # noqa: E402
from memory_service.bench.dataset import Dataset, MemoryItem  # noqa: E402
from memory_service.bench.datasets.locomo import load_locomo  # noqa: E402
from memory_service.bench.datasets.synthetic import generate  # noqa: E402
from memory_service.config.retrieval import PRESETS, RetrievalConfig  # noqa: E402

TOP_K = 25  # what ``memory-service bench`` asks (max of its k, at least 10)


class ServiceVectors(VectorStore):
    """The lab's vector cache, filled by the embedder the service builds (ONNX by default), so
    the lab's dense leg is the bench's."""

    def __init__(self) -> None:
        super().__init__(CACHE / "vectors-service.npz")
        from memory_service.config import load_settings
        from memory_service.services import build_embedder

        self._embedder = build_embedder(load_settings())


def convs_of(dataset: Dataset, store: VectorStore) -> list[Conv]:
    """The dataset's memories as lab conversations (one text recorded twice is one fact)."""
    out = []
    for c in dataset.conversations:
        if not c.questions:
            continue
        merged: dict[str, MemoryItem] = {}
        refs: dict[str, set[str]] = {}
        newest = {i.key: i for i in c.items if i.key}  # a newer fact closes the older one
        for item in c.items:
            if item.key and newest[item.key] is not item:
                continue
            key = " ".join(item.text.split()).casefold()
            merged.setdefault(key, item)
            refs.setdefault(key, set()).update(item.refs)
        items = list(merged.values())
        out.append(
            Conv(
                c.id,
                items,
                [frozenset(refs[k]) for k in merged],
                [q.text for q in c.questions],
                [q.gold for q in c.questions],
                [q.category for q in c.questions],
                store.embed([i.text for i in items]),
                store.embed([q.text for q in c.questions]),
            )
        )
    return out


def load_sets(names: Sequence[str]) -> dict[str, list[Conv]]:
    store = ServiceVectors()
    sets: dict[str, list[Conv]] = {}
    for name in names:
        if name == "synthetic":
            sets[name] = convs_of(generate(), store)
        else:
            unit = name.split("-")[1]
            sets[name] = convs_of(load_locomo(json.loads(DATA.read_text()), unit=unit), store)
    return sets


def table(sets: dict[str, list[Conv]], configs: Sequence[RetrievalConfig], modes=None) -> None:
    """R@5/10/25 and MRR of each config (and mode) on each set."""
    for name, convs in sets.items():
        print(f"\n{name}: R@5 / R@10 / R@25  MRR")
        legs = {d: all_legs(convs, date_terms=d) for d in (False, True)}
        for config in configs:
            for mode in modes or ("hybrid",):
                ranker = service_ranker(config, legs[config.date_terms], TOP_K, mode)
                print(f"  {config.name:28s} {mode:7s}", evaluate(convs, ranker).row())


def diagnose(convs: list[Conv]) -> None:
    """Per synthetic question hybrid lost on: how long each leg's list was, and the z-score the
    BM25 leg gave the top candidate it put above the gold fact."""
    from memory_service.longterm.fusion import fuse_legs

    config = PRESETS["hybrid"]
    legs = all_legs(convs, date_terms=True)
    depth = config.depth(TOP_K)
    lengths: dict[str, list[int]] = {"lost": [], "all": []}
    for conv in convs:
        for row, gold in enumerate(conv.gold):
            hits = leg_lists(conv, legs[conv.id], row, depth)
            fused = fuse_legs("hybrid", hits, config, TOP_K)
            dense = fuse_legs("dense", hits, config, TOP_K)

            def first(ranked, gold=gold, refs=conv.refs):
                return next((i for i, h in enumerate(ranked) if refs[int(h.id)] & gold), 99)

            lengths["all"].append(len(hits["bm25"]))
            if first(fused) > first(dense) and (first(fused) >= 5 or first(fused) > 0):
                lengths["lost"].append(len(hits["bm25"]))
                top = fused[0]
                print(
                    f"{conv.categories[row]:10s} bm25 list {len(hits['bm25']):3d} of "
                    f"{len(conv.items)}; gold at {first(fused) + 1} (dense {first(dense) + 1}); "
                    f"top: bm25 rank {top.ranks['bm25']} score {top.scores['bm25']}, "
                    f"dense rank {top.ranks['dense']} | {conv.questions[row]!r} -> "
                    f"{conv.items[int(top.id)].text!r}"
                )
    for what, values in lengths.items():
        print(f"BM25 list length ({what} questions): median {np.median(values):.0f}")


_VOWELS = set("aeiouy")


def light_stem(word: str) -> str:
    """The hand-written light English stemmer ``indexing.tokenize`` had before issue 15 (plurals,
    -ing, -ed, -ly, -ies), kept here to measure against the Snowball stemmer that replaced it."""
    if word.endswith("'s"):
        word = word[:-2]
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ingly", "edly", "ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            root = word[: -len(suffix)]
            if not _VOWELS.intersection(root):
                return word
            if len(root) >= 4 and root[-1] == root[-2] and root[-1] not in "lsz":
                root = root[:-1]  # running -> run, stopped -> stop
            return root
    if word.endswith("ly") and len(word) > 5:
        return word[:-2]
    return word


def zscore_floor_variant(relative: float = 0.0, legs_with_floor=("bm25",), absolute=None):
    """``zscore_fusion`` whose spread for a leg with a no-match score is at least ``relative``
    times the mean distance of its values from that score."""
    import math

    from indexing.fusion import FusedCandidate

    def fuse(legs, *, weights=None, floors=None, min_spreads=None):  # noqa: ARG001
        order: dict[str, int] = {}
        ranks: dict[str, dict] = {}
        for leg, hits in legs.items():
            for rank, (item, _) in enumerate(hits, start=1):
                if item not in order:
                    order[item] = len(order)
                    ranks[item] = {name: None for name in legs}
                if ranks[item][leg] is None:
                    ranks[item][leg] = rank
        total = dict.fromkeys(order, 0.0)
        for leg, hits in legs.items():
            weight = 1.0 if weights is None else float(weights.get(leg, 1.0))
            if not hits or weight == 0.0:
                continue
            best: dict[str, float] = {}
            for item, score in hits:
                best.setdefault(item, float(score))
            floor = float(floors[leg]) if floors and leg in floors else min(best.values())
            values = [best.get(item, floor) for item in order]
            mean = sum(values) / len(values)
            spread = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
            if leg in legs_with_floor:
                spread = max(spread, relative * mean if absolute is None else absolute)
            if spread <= 1e-12:
                continue
            for item, value in zip(order, values, strict=True):
                total[item] += weight * (value - mean) / spread
        fused = [FusedCandidate(item, total[item], ranks[item]) for item in order]
        return sorted(fused, key=lambda c: (-c.score, order[c.id]))

    return fuse


def minmax_variant():
    """Relative score fusion: each leg's values (floors for what it did not return) mapped
    onto 0..1 between its floor and its best, then summed with weights."""
    from indexing.fusion import FusedCandidate

    def fuse(legs, *, weights=None, floors=None, min_spreads=None):  # noqa: ARG001
        order: dict[str, int] = {}
        ranks: dict[str, dict] = {}
        for leg, hits in legs.items():
            for rank, (item, _) in enumerate(hits, start=1):
                if item not in order:
                    order[item] = len(order)
                    ranks[item] = {name: None for name in legs}
                if ranks[item][leg] is None:
                    ranks[item][leg] = rank
        total = dict.fromkeys(order, 0.0)
        for leg, hits in legs.items():
            weight = 1.0 if weights is None else float(weights.get(leg, 1.0))
            if not hits or weight == 0.0:
                continue
            best: dict[str, float] = {}
            for item, score in hits:
                best.setdefault(item, float(score))
            floor = float(floors[leg]) if floors and leg in floors else min(best.values())
            top = max(best.values())
            if top - floor <= 1e-12:
                continue
            for item in order:
                total[item] += weight * (best.get(item, floor) - floor) / (top - floor)
        fused = [FusedCandidate(item, total[item], ranks[item]) for item in order]
        return sorted(fused, key=lambda c: (-c.score, order[c.id]))

    return fuse


def zscore_variant(centre: str, scale: str):
    """``zscore_fusion`` with another centre (``mean`` | ``floor``) and scale (``std`` | ``rms``:
    the root mean square distance from 0, the no-evidence score of both legs)."""
    import math

    from indexing.fusion import FusedCandidate

    def fuse(legs, *, weights=None, floors=None, min_spreads=None):  # noqa: ARG001
        order: dict[str, int] = {}
        ranks: dict[str, dict] = {}
        for leg, hits in legs.items():
            for rank, (item, _) in enumerate(hits, start=1):
                if item not in order:
                    order[item] = len(order)
                    ranks[item] = {name: None for name in legs}
                if ranks[item][leg] is None:
                    ranks[item][leg] = rank
        total = dict.fromkeys(order, 0.0)
        for leg, hits in legs.items():
            weight = 1.0 if weights is None else float(weights.get(leg, 1.0))
            if not hits or weight == 0.0:
                continue
            best: dict[str, float] = {}
            for item, score in hits:
                best.setdefault(item, float(score))
            floor = float(floors[leg]) if floors and leg in floors else min(best.values())
            values = [best.get(item, floor) for item in order]
            mean = sum(values) / len(values)
            if scale == "std":
                spread = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
            else:
                spread = math.sqrt(sum(v * v for v in values) / len(values))
            if spread <= 1e-12:
                continue
            middle = mean if centre == "mean" else floor
            for item, value in zip(order, values, strict=True):
                total[item] += weight * (value - middle) / spread
        fused = [FusedCandidate(item, total[item], ranks[item]) for item in order]
        return sorted(fused, key=lambda c: (-c.score, order[c.id]))

    return fuse


def variants(sets) -> None:
    import memory_service.longterm.fusion as retrieval

    hybrid = PRESETS["hybrid"]
    original = retrieval.zscore_fusion
    floors = (0.35, 0.69, 1.0, 1.5)
    for label, fuse, weights in (
        ("z mean/std, no minimum spread (before)", original, (0.5, 0.75)),
        ("z mean/rms", zscore_variant("mean", "rms"), (0.5, 0.75)),
        ("min-max (relative score fusion)", minmax_variant(), (0.5, 0.75, 1.5)),
        *((f"z spread >= {c} x mean (bm25)", zscore_floor_variant(c), ()) for c in (0.3, 1.0)),
        *((f"z spread >= {a} (bm25)", zscore_floor_variant(absolute=a), ()) for a in floors),
    ):
        retrieval.zscore_fusion = fuse
        print(f"\n=== {label}")
        configs = [hybrid.with_changes(min_spread={})]  # the fusion decides the spread here
        for w in weights:
            configs.append(
                configs[0].with_changes(name=f"bm25 w={w}", weights={"bm25": w, "dense": 1.0})
            )
        table(sets, configs)
    retrieval.zscore_fusion = original


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="synthetic,locomo-turns,locomo-facts")
    parser.add_argument("--diagnose", action="store_true")
    parser.add_argument("--stemmers", action="store_true")
    parser.add_argument("--variants", action="store_true")
    args = parser.parse_args(argv)
    sets = load_sets(args.sets.split(","))
    if args.diagnose:
        diagnose(sets["synthetic"])
        return 0
    configs = list(PRESETS.values())
    if args.variants:
        variants(sets)
        return 0
    if args.stemmers:
        snowball = tokenize_module.stem
        for label, stem in (("light (before)", light_stem), ("snowball (PyStemmer)", snowball)):
            tokenize_module.stem = stem
            print(f"\n=== stemmer: {label}")
            table(sets, configs[:1], ("bm25", "hybrid"))
        tokenize_module.stem = snowball
        return 0
    table(sets, configs, ("bm25", "dense", "hybrid"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
