"""How each leg's scores should be normalised before they are summed: z-scores with BM25's
spread floored, against other centres, scales and min-max.

On the synthetic set BM25 returns few candidates whose scores barely differ, so their standard
deviation is tiny and a z-score blows a one-word match up past the answer. Each variant here
replaces how ``fuse_legs`` standardises a leg (``standardise_leg``) and is scored on the three
sets;
the default keeps z-scores with a floor under BM25's spread in BM25's own units (ln 2,
``BM25_MIN_SPREAD``) because it lifted synthetic hybrid R@5 from 90.6 to 94.0 with no loss on
LoCoMo (RESULTS.md, "Lexical leg: BM25's spread floor").

    python -m benchmarks.lab.score_normalisation --data ../shared/data/locomo-dev.json
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

from benchmarks.lab.common import SETS, add_arguments, sets_of, table
from memory_service.config.retrieval import PRESETS


def _std(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def zscore_floor_variant(relative: float = 0.0, legs_with_floor=("bm25",), absolute=None):
    """z-scores whose spread for a leg in ``legs_with_floor`` is at least ``relative`` times its
    mean, or ``absolute``."""

    def standardise(leg, values, _floor, _min_spread):
        mean, spread = _std(values)
        if leg in legs_with_floor:
            spread = max(spread, relative * mean if absolute is None else absolute)
        if spread <= 1e-12:
            return None
        return [v - mean for v in values], spread

    return standardise


def minmax_variant():
    """Relative score fusion: each leg mapped onto 0..1 between its floor and its best."""

    def standardise(_leg, values, floor, _min_spread):
        top = max(values)  # a candidate the leg did not return holds the floor, below it
        if top - floor <= 1e-12:
            return None
        return [v - floor for v in values], top - floor

    return standardise


def zscore_variant(centre: str, scale_by: str):
    """z-scores with another centre (``mean`` | ``floor``) and scale (``std`` | ``rms``: the root
    mean square distance from 0, the no-evidence score of both legs)."""

    def standardise(_leg, values, floor, _min_spread):
        mean, spread = _std(values)
        if scale_by == "rms":
            spread = math.sqrt(sum(v * v for v in values) / len(values))
        if spread <= 1e-12:
            return None
        middle = mean if centre == "mean" else floor
        return [v - middle for v in values], spread

    return standardise


def variants() -> list[tuple[str, object, tuple[float, ...]]]:
    """(label, a leg's normalisation or None for the service's, BM25 weights to try as
    well)."""
    floors = (0.35, 0.69, 1.0, 1.5)
    return [
        ("z mean/std, no minimum spread", None, (0.5, 0.75)),
        ("z mean/rms", zscore_variant("mean", "rms"), (0.5, 0.75)),
        ("min-max (relative score fusion)", minmax_variant(), (0.5, 0.75, 1.5)),
        *((f"z spread >= {c} x mean (bm25)", zscore_floor_variant(c), ()) for c in (0.3, 1.0)),
        *((f"z spread >= {a} (bm25)", zscore_floor_variant(absolute=a), ()) for a in floors),
    ]


def compare(sets) -> dict:
    """Each variant's table (the fusion decides the spread: the preset's ``min_spread`` off)."""
    import memory_service.longterm.fusion as fusion

    hybrid = PRESETS["hybrid"]
    original = fusion.standardise_leg
    out = {}
    try:
        for label, standardise, weights in variants():
            fusion.standardise_leg = standardise or original
            print(f"\n=== {label}")
            configs = [hybrid.with_changes(min_spread={})]
            for w in weights:
                configs.append(
                    configs[0].with_changes(name=f"bm25 w={w}", weights={"bm25": w, "dense": 1.0})
                )
            out[label] = table(sets, configs, legs="lab")
    finally:
        fusion.standardise_leg = original
    return out


def main(argv: Sequence[str] | None = None, *, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, sets=",".join(SETS))
    args = parser.parse_args(argv)
    compare(sets_of(args, embedder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
