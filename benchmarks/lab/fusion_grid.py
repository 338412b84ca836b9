"""Which fusion settings generalise across conversations, and by how much they beat one leg.

A grid over the z-score fusion's dense weight, neighbour weight and window, and date terms, on
LoCoMo turns and facts together; then leave one conversation out: the setting best on four
conversations, tested on the fifth, against the better single leg there. A setting chosen on
all five could be tuned to them; the held-out row is the honest figure, and the margin over the
better leg on every held-out conversation is why ``hybrid`` fuses z-scores with dates and
neighbours: every fold picks them, and pooled held-out recall (turns 65.7 / 75.1 / 82.6) equals
the in-sample figure (RESULTS.md, "Fusion and neighbours").

    python -m benchmarks.lab.fusion_grid --data ../shared/data/locomo-dev.json
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from itertools import product
from types import MappingProxyType

import numpy as np

from benchmarks.lab.common import (
    KS,
    Conv,
    add_arguments,
    all_legs,
    evaluate,
    load,
    ranker,
    vector_store,
)
from memory_service.config.retrieval import PRESETS, RetrievalConfig


def grid_configs():
    """The configurations the grid searches: dense weight, neighbour weight and window, dates."""
    for dense_w, alpha, window, dates in product(
        (0.7, 0.85, 1.0, 1.2), (0.0, 0.25, 0.5, 0.75), (1, 2, 3), (False, True)
    ):
        if alpha == 0.0 and window != 1:
            continue  # the window means nothing without smoothing
        yield RetrievalConfig(
            name=f"z wd={dense_w} a={alpha} w={window} dates={int(dates)}",
            fusion="zscore",
            weights=MappingProxyType({"bm25": 1.0, "dense": dense_w}),
            neighbour_weight=alpha,
            neighbour_window=window,
            date_terms=dates,
        )


def objective(recall: dict[int, float]) -> float:
    """What the grid maximises: mean recall over k = 5, 10, 25."""
    return float(np.mean([recall[k] for k in KS]))


def per_conv_table(units: dict[str, list[Conv]], configs) -> dict[str, dict[str, dict]]:
    """recall@k per conversation, per unit, per configuration (name)."""
    legs = {
        (unit, dates): all_legs(convs, date_terms=dates)
        for unit, convs in units.items()
        for dates in (False, True)
    }
    out: dict[str, dict[str, dict]] = {}
    for config in configs:
        out[config.name] = {}
        for unit, convs in units.items():
            rank = ranker(config, legs[(unit, config.date_terms)])
            out[config.name][unit] = evaluate(convs, rank).per_conv
    return out


def pooled(per_conv: dict[str, dict[int, float]], weights: dict[str, int], ids) -> dict[int, float]:
    """Question-weighted mean recall over the conversations ``ids``."""
    total = sum(weights[i] for i in ids)
    return {k: sum(per_conv[i][k] * weights[i] for i in ids) / total for k in KS}


def loco(units: dict[str, list[Conv]], per_conv) -> list[tuple[str, str, dict[str, dict]]]:
    """For each conversation: the configuration best on the others (both units together), and
    its recall on the held-out one."""
    sizes = {unit: {c.id: len(c.gold) for c in convs} for unit, convs in units.items()}
    ids = [c.id for c in next(iter(units.values()))]
    out = []
    for held in ids:
        train = [i for i in ids if i != held]

        def score(name: str, train=train) -> float:
            return float(
                np.mean([objective(pooled(per_conv[name][u], sizes[u], train)) for u in units])
            )

        best = max(per_conv, key=score)
        tested = {u: pooled(per_conv[best][u], sizes[u], [held]) for u in units}
        out.append((held, best, tested))
    return out


def report(units: dict[str, list[Conv]]) -> dict[str, dict[int, float]]:
    """Print the grid's top rows and the leave-one-out table; return held-out recall per unit."""
    configs = list(grid_configs())
    per_conv = per_conv_table(units, configs)
    sizes = {unit: {c.id: len(c.gold) for c in convs} for unit, convs in units.items()}
    ids = list(sizes["turns"])
    ranked = sorted(
        per_conv,
        key=lambda n: -np.mean([objective(pooled(per_conv[n][u], sizes[u], ids)) for u in units]),
    )
    print("top configurations on all conversations (turns | facts: R@5/10/25):")
    for name in ranked[:10]:
        cells = [pooled(per_conv[name][u], sizes[u], ids) for u in units]
        print(f"  {name:34s}", " | ".join(" / ".join(f"{c[k]:.3f}" for k in KS) for c in cells))
    hybrid = PRESETS["hybrid"]
    best_leg = {}  # per unit and conversation: the better single leg at each k (dates on)
    for unit, convs in units.items():
        legs = all_legs(convs, date_terms=True)
        per_leg = [
            evaluate(convs, ranker(hybrid, legs, mode=leg)).per_conv for leg in ("bm25", "dense")
        ]
        best_leg[unit] = {c.id: {k: max(p[c.id][k] for p in per_leg) for k in KS} for c in convs}
    print("leave one conversation out (chosen on the others, tested on this one), and the")
    print("margin over the better single leg on it (turns | facts, k = 5 / 10 / 25):")
    held_out = {u: {k: 0.0 for k in KS} for u in units}
    margins = {u: {k: [] for k in KS} for u in units}
    for held, best, tested in loco(units, per_conv):
        cells = []
        for u in units:
            margin = {k: tested[u][k] - best_leg[u][held][k] for k in KS}
            for k in KS:
                held_out[u][k] += tested[u][k] * sizes[u][held] / sum(sizes[u].values())
                margins[u][k].append(margin[k])
            cells.append(
                " / ".join(f"{tested[u][k]:.3f}" for k in KS)
                + " (+"
                + " +".join(f"{margin[k]:.3f}" for k in KS)
                + ")"
            )
        print(f"  {held}: {best:34s} " + " | ".join(cells))
    for u in units:
        pooled_row = " / ".join(f"{held_out[u][k]:.3f}" for k in KS)
        spread = " / ".join(f"{min(margins[u][k]):+.3f}..{max(margins[u][k]):+.3f}" for k in KS)
        print(f"  {u}: held-out recall {pooled_row}; margin over best leg {spread}")
    return held_out


def main(argv: Sequence[str] | None = None, *, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, vectors="bundled")
    args = parser.parse_args(argv)
    store = vector_store(args, embedder)
    report({unit: load(unit, args.data, store) for unit in ("turns", "facts")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
