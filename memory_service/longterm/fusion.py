"""The fusion step every backend shares.

A backend only produces ranked candidates per leg (``LegHit`` lists, each hit with the
session and time its memory was recorded in); how legs are chosen, how deep each goes, how they
are fused and smoothed, and what the lexical leg indexes is described by a ``RetrievalConfig``
(``memory_service.config.retrieval``) and applied here (``fuse_legs``) or in ``indexing``
(``lexical_terms``). So a preset tuned on a benchmark means the same thing in every backend.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from types import MappingProxyType

from indexing.fusion import (
    FusedCandidate,
    by_score,
    query_coverage,
    reciprocal_rank_fusion,
    zscore_fusion,
)
from indexing.lexical import lexical_terms
from indexing.neighbours import smooth_by_session
from memory_service.characters import check_text
from memory_service.config.retrieval import RetrievalConfig, legs_for_mode
from memory_service.errors import InvalidInputError
from memory_service.facts import Fact
from memory_service.limits import MAX_QUERY_BYTES, MAX_THRESHOLD, MAX_TOP_K, MIN_THRESHOLD

# What a leg's score is for a memory it did not match at all, when its list is complete
# (shorter than the depth asked for): BM25 gives 0 to a memory sharing no term.
NO_MATCH_SCORE: Mapping[str, float] = MappingProxyType({"bm25": 0.0})
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)  # ~200 are made a recall: unfrozen, a quarter of the cost to make
class LegHit:
    """One candidate of one retriever: the fact id and the retriever's own score, plus where
    the fact was recorded (its session and time), which session-neighbour smoothing uses.
    A lexical hit also says which of the query's terms its memory contains (``matched``), for
    query coverage (``RetrievalConfig.lexical_coverage``); None where the backend cannot tell."""

    id: str
    score: float
    session_id: str | None = None
    created_at: datetime | None = None
    matched: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class FusedHit:
    id: str
    score: float
    ranks: dict[str, int | None]
    scores: dict[str, float | None]


def fact_terms(fact: Fact, config: RetrievalConfig) -> list[str]:
    """What the lexical leg indexes for ``fact``, in every backend: its words, its source
    text's words (``source_terms``: a fact is phrased by the model, its source in the user's
    own words, which the question often repeats) and its day (``date_terms``). Its text
    includes the phrasings merged into it (``Fact.indexed_text``)."""
    source = fact.source_text if config.source_terms else ""
    return _terms(fact.indexed_text, source, fact.created_at, config.date_terms)


def _terms(text: str, source: str, created_at: datetime | None, with_date: bool) -> list[str]:
    if source:
        text = f"{text}\n{source}"
    return lexical_terms(text, created_at, with_date=with_date)


@lru_cache(maxsize=8192)
def _held_terms(
    text: str, source: str, created_at: datetime | None, with_date: bool
) -> frozenset[str]:
    return frozenset(_terms(text, source, created_at, with_date))


def wants_coverage(legs: Collection[str], config: RetrievalConfig) -> bool:
    """Whether fusing ``legs`` under ``config`` uses query coverage (``with_matched`` is then
    worth its cost)."""
    return len(legs) > 1 and config.fusion == "zscore" and config.lexical_coverage > 0


def matched_terms(
    fact: Fact, config: RetrievalConfig, query_terms: Collection[str]
) -> frozenset[str]:
    """The ``query_terms`` that ``fact``'s lexical document (``fact_terms``) holds. Documents
    are tokenized once per content and kept in a bounded in-process cache (the same memories
    come back query after query; tokenizing every candidate each time would cost more than
    the fusion)."""
    source = fact.source_text if config.source_terms else ""
    held = _held_terms(fact.indexed_text, source, fact.created_at, config.date_terms)
    return held.intersection(query_terms)


def with_matched(
    leg_hits: Mapping[str, list[LegHit]],
    fact: Callable[[str], Fact],
    config: RetrievalConfig,
    query_terms: Collection[str],
) -> dict[str, list[LegHit]]:
    """``leg_hits`` with every hit's ``matched`` terms filled in from its fact (``fact(id)``)
    where the backend left them out: one way for every backend, since Qdrant returns scores
    only."""
    found: dict[str, frozenset[str]] = {}

    def filled(hit: LegHit) -> LegHit:
        if hit.matched is not None:
            return hit
        if hit.id not in found:
            found[hit.id] = matched_terms(fact(hit.id), config, query_terms)
        return LegHit(hit.id, hit.score, hit.session_id, hit.created_at, found[hit.id])

    return {leg: [filled(h) for h in hits] for leg, hits in leg_hits.items()}


def fuse_legs(
    mode: str,
    leg_hits: Mapping[str, list[LegHit]],
    config: RetrievalConfig,
    top_k: int,
    *,
    now: datetime | None = None,
    query_terms: Collection[str] | None = None,
    confidence_of: Callable[[str], float] | None = None,
) -> list[FusedHit]:
    """Top ``top_k`` after fusing ``leg_hits`` (each leg asked for ``config.depth(top_k)``).

    A single-leg mode keeps the leg's own ranking and score (BM25 score or cosine); hybrid
    reports the fused score (RRF, or summed z-scores, BM25 scaled by query coverage when
    ``query_terms`` are given and every lexical hit says what it ``matched``), after
    session-neighbour smoothing when the config asks for it, plus the recency bonus when
    ``recency_half_life_days`` is set (ages counted at ``now``, the moment asked about), plus
    ``confidence_weight`` times each candidate's ``confidence_of`` when both are given.
    Ranks and the reported per-leg scores are the legs' own. Ranks are 1-based."""
    legs = legs_for_mode(mode)
    score_of = {leg: {h.id: h.score for h in leg_hits.get(leg, [])} for leg in legs}
    if len(legs) == 1:
        leg = legs[0]
        return [
            FusedHit(h.id, h.score, {leg: rank}, {leg: h.score})
            for rank, h in enumerate(leg_hits.get(leg, [])[:top_k], start=1)
        ]
    fused = _fuse(legs, _covered(legs, leg_hits, config, query_terms), config, config.depth(top_k))
    if config.neighbour_weight > 0:
        fused = _smooth(fused, leg_hits, config)
    if config.recency_half_life_days is not None and config.recency_weight > 0:
        fused = _prefer_recent(fused, leg_hits, config, now or datetime.now(UTC))
    if config.confidence_weight > 0 and confidence_of is not None:
        fused = _prefer_sure(fused, config.confidence_weight, confidence_of)
    return [
        FusedHit(c.id, c.score, dict(c.ranks), {leg: score_of[leg].get(c.id) for leg in legs})
        for c in fused[:top_k]
    ]


def _covered(
    legs: tuple[str, ...],
    leg_hits: Mapping[str, list[LegHit]],
    config: RetrievalConfig,
    query_terms: Collection[str] | None,
) -> Mapping[str, list[LegHit]]:
    """``leg_hits`` with each BM25 score times its memory's query coverage to the power
    ``lexical_coverage`` (z-score fusion only; the leg's order is kept, so its ranks stay the
    leg's own). Unchanged when off, without query terms, or when a hit cannot say what it
    matched (all or nothing: one leg is never half scaled)."""
    power = config.lexical_coverage
    lexical = leg_hits.get("bm25", [])
    if config.fusion != "zscore" or power == 0 or not query_terms or not lexical:
        return leg_hits
    if any(h.matched is None for h in lexical):
        return leg_hits
    candidates = len({h.id for leg in legs for h in leg_hits.get(leg, [])})
    known = {  # document frequencies over every candidate whose terms are known
        h.id: h.matched for leg in legs for h in leg_hits.get(leg, []) if h.matched is not None
    }
    coverage = query_coverage(query_terms, known, candidates)
    scaled = [
        LegHit(h.id, h.score * coverage[h.id] ** power, h.session_id, h.created_at, h.matched)
        for h in lexical
    ]
    return {**leg_hits, "bm25": scaled}


def _fuse(
    legs: tuple[str, ...],
    leg_hits: Mapping[str, list[LegHit]],
    config: RetrievalConfig,
    depth: int,
) -> list[FusedCandidate]:
    if config.fusion == "rrf":
        return reciprocal_rank_fusion(
            {leg: [h.id for h in leg_hits.get(leg, [])] for leg in legs},
            k=config.rrf_k,
            weights=config.weights,
        )
    floors: dict[str, float] = {}
    for leg in legs:
        hits = leg_hits.get(leg, [])
        if hits:
            # A full list stopped at its lowest score; a shorter one is all the leg matched.
            complete = len(hits) < depth and leg in NO_MATCH_SCORE
            floors[leg] = NO_MATCH_SCORE[leg] if complete else min(h.score for h in hits)
    return zscore_fusion(
        {leg: [(h.id, h.score) for h in leg_hits.get(leg, [])] for leg in legs},
        weights=config.weights,
        floors=floors,
        min_spreads=config.min_spread,
    )


def _smooth(
    fused: list[FusedCandidate], leg_hits: Mapping[str, list[LegHit]], config: RetrievalConfig
) -> list[FusedCandidate]:
    placements: dict[str, tuple[str | None, tuple[datetime, str]]] = {}
    for hits in leg_hits.values():
        for h in hits:
            if h.session_id is not None and h.id not in placements:
                placements[h.id] = (h.session_id, (h.created_at or _EPOCH, h.id))
    smoothed = smooth_by_session(
        {c.id: c.score for c in fused},
        placements,
        weight=config.neighbour_weight,
        window=config.neighbour_window,
    )
    for c in fused:  # fusion's own candidates: rescored in place
        c.score = smoothed[c.id]
    return by_score(fused)


def _prefer_recent(
    fused: list[FusedCandidate],
    leg_hits: Mapping[str, list[LegHit]],
    config: RetrievalConfig,
    now: datetime,
) -> list[FusedCandidate]:
    """``recency_weight * 0.5 ** (age / half-life)`` added to each fused score: a memory
    recorded at ``now`` gains the whole weight, one a half-life old half of it."""
    half_life = float(config.recency_half_life_days or 0.0)
    created: dict[str, datetime | None] = {}
    for hits in leg_hits.values():
        for h in hits:
            created.setdefault(h.id, h.created_at)
    out = []
    for c in fused:
        when = created.get(c.id)
        bonus = 0.0
        if when is not None:
            age_days = max(0.0, (now - when).total_seconds() / 86_400.0)
            bonus = config.recency_weight * 0.5 ** (age_days / half_life)
        out.append(FusedCandidate(c.id, c.score + bonus, c.ranks))
    return by_score(out)


def _prefer_sure(
    fused: list[FusedCandidate], weight: float, confidence_of: Callable[[str], float]
) -> list[FusedCandidate]:
    """``weight * confidence`` added to each fused score: a sure, recently confirmed memory
    gains the whole weight, one whose confidence decayed to half of it half."""
    return by_score(
        [FusedCandidate(c.id, c.score + weight * confidence_of(c.id), c.ranks) for c in fused]
    )


def validate_query(
    query: str, top_k: int, threshold: float, max_query_bytes: int = MAX_QUERY_BYTES
) -> None:
    """Shared argument checks, so every backend refuses the same bad input the same way."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query must not be empty", code="invalid_query")
    check_text(query, "query", "invalid_query")
    if len(query.encode("utf-8")) > max_query_bytes:
        raise InvalidInputError(f"query is over {max_query_bytes} bytes", code="query_too_large")
    if not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInputError(f"top_k must be an integer 1-{MAX_TOP_K}", code="invalid_top_k")
    if not MIN_THRESHOLD <= float(threshold) <= MAX_THRESHOLD:  # NaN is not either
        raise InvalidInputError(
            f"threshold must be a number between {MIN_THRESHOLD:g} and {MAX_THRESHOLD:g}, "
            f"not {threshold!r}",
            code="invalid_threshold",
        )
