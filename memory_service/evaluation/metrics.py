"""Ranking metrics over evidence ids.

A ranked list is a sequence of ref sets: the evidence ids each retrieved memory carries (a
memory may carry several, e.g. two turns with one text, or an observation written from two
turns; it may carry none). Gold is a set of ids. Every function takes one question; averaging
is the caller's job.

- recall@k: share of gold ids carried by the top k (LoCoMo's evidence recall).
- recall_all@k / recall_any@k: 1 when all / any gold ids are in the top k (LongMemEval).
- reciprocal rank: 1 / rank of the first memory carrying a gold id, over the whole list.
- nDCG@k: binary gain for a memory that brings a gold id not seen higher up; the ideal list
  brings one new gold id per rank. With one id per memory this is the usual binary nDCG.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

import numpy as np

Ranked = Sequence[Collection[str]]


def _found(ranked: Ranked, k: int) -> set[str]:
    found: set[str] = set()
    for refs in ranked[:k]:
        found.update(refs)
    return found


def recall_at_k(ranked: Ranked, gold: Collection[str], k: int) -> float:
    if not gold:
        raise ValueError("a question without gold evidence has no recall")
    return len(_found(ranked, k) & set(gold)) / len(set(gold))


def recall_all_at_k(ranked: Ranked, gold: Collection[str], k: int) -> float:
    return float(set(gold) <= _found(ranked, k))


def recall_any_at_k(ranked: Ranked, gold: Collection[str], k: int) -> float:
    return float(bool(_found(ranked, k) & set(gold)))


def first_hit_rank(ranked: Ranked, gold: Collection[str]) -> int | None:
    """1-based rank of the first memory that carries a gold id, or None."""
    wanted = set(gold)
    for rank, refs in enumerate(ranked, start=1):
        if wanted.intersection(refs):
            return rank
    return None


def reciprocal_rank(ranked: Ranked, gold: Collection[str]) -> float:
    rank = first_hit_rank(ranked, gold)
    return 0.0 if rank is None else 1.0 / rank


def ndcg_at_k(ranked: Ranked, gold: Collection[str], k: int) -> float:
    wanted = set(gold)
    if not wanted:
        raise ValueError("a question without gold evidence has no nDCG")
    seen: set[str] = set()
    dcg = 0.0
    for position, refs in enumerate(ranked[:k]):
        new = wanted.intersection(refs) - seen
        if new:
            seen |= new
            dcg += 1.0 / math.log2(position + 2)
    ideal = sum(1.0 / math.log2(position + 2) for position in range(min(len(wanted), k)))
    return dcg / ideal


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default); None for no values."""
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q))


def mean(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None
