"""The fusion step every backend shares.

A backend only produces ranked candidates per leg (``LegHit`` lists, each hit with the
session and time its memory was recorded in); how legs are chosen, how deep each goes, how they
are fused and smoothed, and what the lexical leg indexes is described by a ``RetrievalConfig``
(``memory_service.config.retrieval``) and applied here (``fuse_legs``) or in ``indexing``
(``lexical_terms``). So a preset tuned on a benchmark means the same thing in every backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from types import MappingProxyType

from indexing.fusion import centre, query_coverage
from indexing.lexical import lexical_terms
from indexing.neighbours import lifted_by_neighbours
from memory_service.config.retrieval import RetrievalConfig, legs_for_mode
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import Fact
from memory_service.domain.limits import MAX_QUERY_BYTES, MAX_THRESHOLD, MAX_TOP_K, MIN_THRESHOLD
from memory_service.domain.queries import check_query

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
class ByScript:
    """How z-score fusion reads the dense leg for one question (``config.retrieval.
    EmbedderTuning``): ``script_of`` a candidate's id, ``centre`` the cosines per script of
    the memory first (``by_script``), ``weight`` the leg's weight times this (the model's
    for the question's script). With ``lexical_within`` (the question's script), the lexical
    leg is standardised over the memories written in that script alone and adds nothing to
    the others: a memory in another script cannot share the question's words, so BM25's
    silence about it is no evidence against it."""

    script_of: Callable[[str], str]
    centre: bool = False
    weight: float = 1.0
    lexical_within: str | None = None


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
    scripts: ByScript | None = None,
) -> list[FusedHit]:
    """Top ``top_k`` after fusing ``leg_hits`` (each leg asked for ``config.depth(top_k)``).

    A single-leg mode keeps the leg's own ranking and score (BM25 score or cosine); hybrid
    reports the fused score (RRF, or summed z-scores, BM25 scaled by query coverage when
    ``query_terms`` are given and every lexical hit says what it ``matched``), after
    session-neighbour smoothing when the config asks for it, plus the recency bonus when
    ``recency_half_life_days`` is set (ages counted at ``now``, the moment asked about), plus
    ``confidence_weight`` times each candidate's ``confidence_of`` when both are given.
    With ``scripts``, z-score fusion reads the dense leg per script of the memory
    (``ByScript``).
    Ranks and the reported per-leg scores are the legs' own. Ranks are 1-based.

    Candidates are numbered once and every stage rescores one flat list of them, each
    followed by one stable sort: ~80 candidates a recall, where an object per candidate
    and stage cost more than the arithmetic (``benchmarks/RESULTS.md``, "Recall time by
    stage"). Scores are those of ``indexing.fusion`` and ``indexing.neighbours`` to the
    bit."""
    legs = legs_for_mode(mode)
    if len(legs) == 1:
        leg = legs[0]
        return [
            FusedHit(h.id, h.score, {leg: rank}, {leg: h.score})
            for rank, h in enumerate(leg_hits.get(leg, [])[:top_k], start=1)
        ]
    table = _Candidates(legs, leg_hits)
    if config.fusion == "rrf":
        total = table.reciprocal_ranks(config)
    else:
        total = table.zscores(config, config.depth(top_k), query_terms, scripts)
    order = _best_first(range(len(total)), total)
    if config.neighbour_weight > 0:
        total = table.smoothed(total, config.neighbour_weight, config.neighbour_window)
        order = _best_first(order, total)
    if config.recency_half_life_days is not None and config.recency_weight > 0:
        total = table.recent_first(total, config, now or datetime.now(UTC))
        order = _best_first(order, total)
    if config.confidence_weight > 0 and confidence_of is not None:
        weight, ids = config.confidence_weight, table.ids
        total = [t + weight * confidence_of(ids[i]) for i, t in enumerate(total)]
        order = _best_first(order, total)
    return table.hits(order[:top_k], total)


def by_script(values: list[float], scripts: list[str]) -> list[float]:
    """``values`` less the mean of the values of their script: what a memory scores for
    being written in the question's language is taken out, what it scores for meaning stays
    (one script: every value moves alike, which standardising ignores)."""
    groups: dict[str, list[float]] = {}
    for value, script in zip(values, scripts, strict=True):
        groups.setdefault(script, []).append(value)
    if len(groups) < 2:
        return values  # one script: nothing to take out (and every score stays to the bit)
    means = {script: sum(v) / len(v) for script, v in groups.items()}
    return [value - means[script] for value, script in zip(values, scripts, strict=True)]


def _best_first(order: Iterable[int], total: list[float]) -> list[int]:
    """``order`` by ``total`` descending; equal scores keep their place (a stable sort)."""
    return sorted(order, key=total.__getitem__, reverse=True)


def standardise_leg(
    leg: str, values: list[float], floor: float, min_spread: float
) -> tuple[list[float], float] | None:
    """What one leg adds in z-score fusion, before its weight: each candidate's distance from
    the mean and the spread it is divided by (``values``: the leg's score per candidate,
    ``floor`` where it returned none). A lab may replace it to try other normalisations
    (``benchmarks.lab.score_normalisation``)."""
    return centre(values, min_spread)


class _Candidates:
    """Every leg's hits numbered by first appearance (legs in order): each candidate's first
    hit (its id, session and time), its rank in each leg and each leg's first score for it."""

    def __init__(self, legs: tuple[str, ...], leg_hits: Mapping[str, list[LegHit]]) -> None:
        self.legs, self.leg_hits = legs, leg_hits
        number: dict[str, int] = {}
        first: list[LegHit] = []
        self.ranks: dict[str, dict[int, int]] = {}
        self.scores: dict[str, dict[int, float]] = {}
        for leg in legs:
            ranks, scores = self.ranks[leg], self.scores[leg] = {}, {}
            for rank, h in enumerate(leg_hits.get(leg, []), start=1):
                i = number.get(h.id)
                if i is None:
                    i = number[h.id] = len(first)
                    first.append(h)
                if i not in ranks:  # a leg that repeats an id counts it once, at its best
                    ranks[i], scores[i] = rank, h.score
        self.number, self.first = number, first
        self.ids = [h.id for h in first]

    def reciprocal_ranks(self, config: RetrievalConfig) -> list[float]:
        """RRF (``indexing.fusion.reciprocal_rank_fusion``): each leg adds weight / (k + rank)."""
        total = [0.0] * len(self.first)
        for leg in self.legs:
            weight = float(config.weights.get(leg, 1.0))
            for i, rank in self.ranks[leg].items():
                total[i] += weight / (config.rrf_k + rank)
        return total

    def zscores(
        self,
        config: RetrievalConfig,
        depth: int,
        query_terms: Collection[str] | None,
        scripts: ByScript | None = None,
    ) -> list[float]:
        """Summed weighted z-scores (``indexing.fusion.zscore_fusion``), BM25 scaled first by
        query coverage to the power ``lexical_coverage`` (all or nothing: one leg is never
        half scaled). A leg's floor is ``NO_MATCH_SCORE`` when its list is complete
        (shorter than ``depth``), else its lowest score."""
        n = len(self.first)
        lowest: dict[str, float] = {}
        scaled = self._covered(config, query_terms)
        if scaled is not None:
            self.scores = {**self.scores, "bm25": scaled[0]}
            lowest["bm25"] = scaled[1]
        total = [0.0] * n
        for leg in self.legs:
            hits = self.leg_hits.get(leg, [])
            weight = float(config.weights.get(leg, 1.0))
            if leg == "dense" and scripts is not None:
                weight *= scripts.weight
            if not hits or weight == 0.0:
                continue
            if len(hits) < depth and leg in NO_MATCH_SCORE:
                floor = float(NO_MATCH_SCORE[leg])
            else:
                floor = float(lowest[leg] if leg in lowest else min(h.score for h in hits))
            scores = self.scores[leg]
            values = [float(scores[i]) if i in scores else floor for i in range(n)]
            if leg == "dense" and scripts is not None and scripts.centre:
                values = by_script(values, [scripts.script_of(fid) for fid in self.ids])
            within: list[int] | range = range(n)
            if leg == "bm25" and scripts is not None and scripts.lexical_within is not None:
                own = scripts.lexical_within
                within = [i for i, fid in enumerate(self.ids) if scripts.script_of(fid) == own]
                if not within:
                    continue
                values = [values[i] for i in within]
            centred = standardise_leg(leg, values, floor, float(config.min_spread.get(leg, 0.0)))
            if centred is None:
                continue
            apart, spread = centred
            for i, d in zip(within, apart, strict=True):
                total[i] += weight * d / spread
        return total

    def _covered(
        self, config: RetrievalConfig, query_terms: Collection[str] | None
    ) -> tuple[dict[int, float], float] | None:
        """BM25's first score per candidate times its query coverage (``query_coverage``)
        to the power ``lexical_coverage``, and the lowest of every such score; None when
        off, without query terms, or when a lexical hit cannot say what it matched."""
        power = config.lexical_coverage
        lexical = self.leg_hits.get("bm25", [])
        if power == 0 or not query_terms or not lexical:
            return None
        if any(h.matched is None for h in lexical):
            return None
        known: dict[str, frozenset[str]] = {}  # terms of every candidate that says them
        for leg in self.legs:
            for h in self.leg_hits.get(leg, []):
                if h.matched is not None:
                    known[h.id] = h.matched
        coverage = query_coverage(query_terms, known, len(self.first))
        first: dict[int, float] = {}
        lowest = math.inf
        for h in lexical:
            score = h.score * coverage[h.id] ** power
            lowest = min(lowest, score)
            first.setdefault(self.number[h.id], score)
        return first, lowest

    def smoothed(self, total: list[float], weight: float, window: int) -> list[float]:
        """``total`` shifted so the lowest is 0, each candidate plus ``weight`` x its best
        session neighbour (``indexing.neighbours.smooth_by_session``: the ``window``
        candidates on either side in its session, ordered by time, then id)."""
        low = min(total)
        lifted = [t - low for t in total]
        if weight == 0.0 or window < 1:
            return lifted
        sessions: dict[str, list[tuple[datetime, str, int]]] = {}
        for i, h in enumerate(self.first):
            if h.session_id is not None:
                placed = (h.created_at or _EPOCH, h.id, i)
                sessions.setdefault(h.session_id, []).append(placed)
        out = lifted.copy()
        for members in sessions.values():
            if len(members) < 2:
                continue
            members.sort()
            values = [lifted[i] for _, _, i in members]
            for (_, _, i), value in zip(
                members, lifted_by_neighbours(values, weight, window), strict=True
            ):
                out[i] = value
        return out

    def recent_first(
        self, total: list[float], config: RetrievalConfig, now: datetime
    ) -> list[float]:
        """``recency_weight * 0.5 ** (age / half-life)`` added to each score: a memory
        recorded at ``now`` gains the whole weight, one a half-life old half of it."""
        half_life = float(config.recency_half_life_days or 0.0)
        out = []
        for score, h in zip(total, self.first, strict=True):
            bonus = 0.0
            if h.created_at is not None:
                age_days = max(0.0, (now - h.created_at).total_seconds() / 86_400.0)
                bonus = config.recency_weight * 0.5 ** (age_days / half_life)
            out.append(score + bonus)
        return out

    def hits(self, chosen: list[int], total: list[float]) -> list[FusedHit]:
        """The ``chosen`` candidates as hits: the fused score, each leg's rank, and each
        leg's score as the leg reported it (its last for an id it repeats)."""
        legs, ids = self.legs, self.ids
        wanted = {ids[i] for i in chosen}
        reported: dict[str, dict[str, float]] = {leg: {} for leg in legs}
        for leg in legs:
            for h in self.leg_hits.get(leg, []):
                if h.id in wanted:
                    reported[leg][h.id] = h.score
        return [
            FusedHit(
                ids[i],
                total[i],
                {leg: self.ranks[leg].get(i) for leg in legs},
                {leg: reported[leg].get(ids[i]) for leg in legs},
            )
            for i in chosen
        ]


def validate_query(
    query: str, top_k: int, threshold: float, max_query_bytes: int = MAX_QUERY_BYTES
) -> None:
    """Shared argument checks, so every backend refuses the same bad input the same way (the
    query's are ``queries.check_query``, the use cases' own, for a caller of the library)."""
    check_query(query, max_query_bytes)
    if not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise InvalidInputError(f"top_k must be an integer 1-{MAX_TOP_K}", code="invalid_top_k")
    if not MIN_THRESHOLD <= float(threshold) <= MAX_THRESHOLD:  # NaN is not either
        raise InvalidInputError(
            f"threshold must be a number between {MIN_THRESHOLD:g} and {MAX_THRESHOLD:g}, "
            f"not {threshold!r}",
            code="invalid_threshold",
        )
