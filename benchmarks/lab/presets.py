"""How each retrieval preset scores, leg by leg, on each set, and how far a perfect ranking is.

The first table to read when a preset or a leg changes: every preset (``--all``; otherwise
``hybrid``, the default) in each mode (bm25, dense, hybrid) on the chosen sets. With the
default ``--legs service --vectors service`` a row is what ``memory-service bench`` reports
(hybrid on LoCoMo dev turns 67.1 / 76.1 / 83.0; RESULTS.md, "LoCoMo dev, turns and facts");
``--legs lab`` indexes only the text and its day. ``--ceiling`` prints the recall of a perfect
ranking instead, the room any ranking has left: facts 78.3 / 78.5 / 78.5, which is why facts
R@10 >= 70 is out of reach (same section).

    python -m benchmarks.lab.presets --data ../shared/data/locomo-dev.json --sets locomo-turns
    python -m benchmarks.lab.presets --data ... --sets locomo-facts --all
    python -m benchmarks.lab.presets --data ... --sets locomo-facts --ceiling
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from benchmarks.lab.common import KS, add_arguments, ceiling, sets_of, table
from memory_service.config.retrieval import PRESETS


def main(argv: Sequence[str] | None = None, *, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser, sets="locomo-turns")
    parser.add_argument("--all", action="store_true", help="every preset, not only hybrid")
    parser.add_argument("--legs", default="service", choices=("service", "lab"))
    parser.add_argument("--ceiling", action="store_true", help="recall of a perfect ranking")
    args = parser.parse_args(argv)
    sets = sets_of(args, embedder)
    if args.ceiling:
        for name, convs in sets.items():
            best = ceiling(convs)
            cells = " / ".join(f"{best[k]:.3f}" for k in KS)
            print(f"{name}: perfect ranking R@5 / R@10 / R@25: {cells}")
        return 0
    configs = list(PRESETS.values()) if args.all else [PRESETS["hybrid"]]
    table(sets, configs, ("bm25", "dense", "hybrid"), legs=args.legs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
