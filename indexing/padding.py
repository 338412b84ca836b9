"""Which texts share one model run, so that padding does not multiply the work.

A batch runs padded to its longest text, and on a CPU the encoder's cost is its matrix
products, linear in the padded tokens (``benchmarks/RESULTS.md``, "Record rate":
~0.12 ms a token on 2 cores, 81 % of a run in MatMul). One batch of 100 facts of 6-27 tokens
ran 30 % padding.
Sorted longest first and cut where it pays, the runs carry almost only real tokens; every run
also has a fixed cost (kernel launches, thread hand-offs, small products running below peak),
which keeps the cuts few. Where the cuts fall changes only float rounding, never a text's
tokens: a vector is the same to ~1e-7 however its text is batched.
"""

from __future__ import annotations

from collections.abc import Sequence

# The fixed cost of one run, in padded tokens: ~2 ms of a run of 8 tokens and more again
# for products too small to reach peak, against ~0.12 ms per token (measured, 2 cores).
RUN_OVERHEAD_TOKENS = 32


def padding_plan(
    lengths: Sequence[int], max_batch: int, overhead: int = RUN_OVERHEAD_TOKENS
) -> list[tuple[int, int]]:
    """Runs ``[start, stop)`` over ``lengths`` sorted longest first, each of at most
    ``max_batch`` texts, minimising the padded tokens plus ``overhead`` per run (a run costs
    its length times its size: its first text is its longest). Exact, by dynamic programming
    over the cut points: O(len(lengths) * max_batch)."""
    if max_batch < 1:
        raise ValueError("max_batch must be at least 1")
    count = len(lengths)
    if any(lengths[i] < lengths[i + 1] for i in range(count - 1)):
        raise ValueError("lengths must be sorted longest first")
    best = [0] + [0] * count  # best[i]: the cheapest cost of the first i texts
    cut = [0] * (count + 1)
    for stop in range(1, count + 1):
        cheapest, where = -1, 0
        for start in range(max(0, stop - max_batch), stop):
            cost = best[start] + overhead + (stop - start) * lengths[start]
            if cheapest < 0 or cost < cheapest:
                cheapest, where = cost, start
        best[stop], cut[stop] = cheapest, where
    runs = []
    stop = count
    while stop > 0:
        runs.append((cut[stop], stop))
        stop = cut[stop]
    return runs[::-1]
