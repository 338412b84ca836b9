"""Retrieval strategy as data, and the fusion step every backend shares.

A backend only produces ranked candidates per leg (``LegHit`` lists); how legs are chosen,
how deep each goes, and how they are fused is described by a ``RetrievalConfig`` and applied by
``fuse_legs``. So a preset tuned on a benchmark means the same thing in every backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from indexing.fusion import reciprocal_rank_fusion
from memory_service.errors import InvalidInputError

LEGS: tuple[str, ...] = ("bm25", "dense")


@dataclass(frozen=True, slots=True)
class LegHit:
    """One candidate of one retriever: the fact id and the retriever's own score."""

    id: str
    score: float


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    """How hybrid recall is done.

    - ``weights``: per-leg RRF weight (a leg at 0 still reports ranks but adds nothing).
    - ``rrf_k``: the RRF constant; larger flattens the rank curve.
    - ``candidate_multiplier`` / ``min_candidates``: how deep each leg goes before fusion.
    """

    name: str = "hybrid"
    weights: Mapping[str, float] = field(
        default_factory=lambda: MappingProxyType({"bm25": 1.0, "dense": 1.0})
    )
    rrf_k: float = 60.0
    candidate_multiplier: int = 4
    min_candidates: int = 50

    def depth(self, top_k: int) -> int:
        return max(self.min_candidates, top_k * self.candidate_multiplier)


PRESETS: Mapping[str, RetrievalConfig] = MappingProxyType(
    {
        "hybrid": RetrievalConfig(),
        "rrf-plain": RetrievalConfig(name="rrf-plain"),
    }
)


def preset(name: str) -> RetrievalConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise InvalidInputError(
            f"unknown retrieval preset {name!r}; known: {', '.join(PRESETS)}",
            code="invalid_preset",
        ) from None


def legs_for_mode(mode: str) -> tuple[str, ...]:
    if mode == "hybrid":
        return LEGS
    if mode in LEGS:
        return (mode,)
    raise InvalidInputError(
        f"mode must be one of hybrid, bm25, dense, not {mode!r}", code="invalid_mode"
    )


@dataclass(frozen=True, slots=True)
class FusedHit:
    id: str
    score: float
    ranks: dict[str, int | None]
    scores: dict[str, float | None]


def fuse_legs(
    mode: str,
    leg_hits: Mapping[str, list[LegHit]],
    config: RetrievalConfig,
    top_k: int,
) -> list[FusedHit]:
    """Top ``top_k`` after fusing ``leg_hits``. A single-leg mode keeps the leg's own score
    (BM25 score or cosine); hybrid reports the weighted RRF score. Ranks are 1-based."""
    legs = legs_for_mode(mode)
    score_of = {leg: {h.id: h.score for h in leg_hits.get(leg, [])} for leg in legs}
    if len(legs) == 1:
        leg = legs[0]
        return [
            FusedHit(h.id, h.score, {leg: rank}, {leg: h.score})
            for rank, h in enumerate(leg_hits.get(leg, [])[:top_k], start=1)
        ]
    fused = reciprocal_rank_fusion(
        {leg: [h.id for h in leg_hits.get(leg, [])] for leg in legs},
        k=config.rrf_k,
        weights=config.weights,
    )
    return [
        FusedHit(c.id, c.score, dict(c.ranks), {leg: score_of[leg].get(c.id) for leg in legs})
        for c in fused[:top_k]
    ]


def validate_query(query: str, top_k: int, threshold: float, max_query_bytes: int = 4096) -> None:
    """Shared argument checks, so every backend refuses the same bad input the same way."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query must not be empty", code="invalid_query")
    if len(query.encode("utf-8")) > max_query_bytes:
        raise InvalidInputError(f"query is over {max_query_bytes} bytes", code="query_too_large")
    if not isinstance(top_k, int) or not 1 <= top_k <= 100:
        raise InvalidInputError("top_k must be an integer 1-100", code="invalid_top_k")
    if not -1.0 <= float(threshold) <= 1.0:
        raise InvalidInputError("threshold must be between -1 and 1", code="invalid_threshold")
