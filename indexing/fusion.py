"""Rank fusion that remembers where each candidate came from.

Reciprocal Rank Fusion (Cormack et al., 2009): ``score(d) = sum_leg w_leg / (k + rank_leg(d))``
with 1-based ranks. Every fused candidate keeps its rank in each leg, so a caller can explain
why a memory was recalled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class FusedCandidate:
    id: str
    score: float
    ranks: dict[str, int | None] = field(default_factory=dict)


def reciprocal_rank_fusion(
    legs: Mapping[str, Sequence[str]],
    *,
    k: float = 60.0,
    weights: Mapping[str, float] | None = None,
) -> list[FusedCandidate]:
    """Fuse ranked id lists (best first); ties keep the order of first appearance."""
    if k <= 0:
        raise ValueError("RRF k must be positive")
    fused: dict[str, FusedCandidate] = {}
    for leg, ids in legs.items():
        weight = 1.0 if weights is None else float(weights.get(leg, 1.0))
        for rank, item in enumerate(ids, start=1):
            candidate = fused.get(item)
            if candidate is None:
                candidate = fused[item] = FusedCandidate(item, 0.0, {name: None for name in legs})
            if candidate.ranks[leg] is not None:
                continue  # a leg that repeats an id counts it once, at its best rank
            candidate.ranks[leg] = rank
            candidate.score += weight / (k + rank)
    order = {item: i for i, item in enumerate(fused)}
    return sorted(fused.values(), key=lambda c: (-c.score, order[c.id]))
