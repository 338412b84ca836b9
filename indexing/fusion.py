"""Rank and score fusion that remember where each candidate came from.

- Reciprocal Rank Fusion (Cormack et al., 2009): ``score(d) = sum_leg w_leg / (k + rank_leg(d))``
  with 1-based ranks. It throws the scores away: a leg that is sure (one BM25 hit far above the
  rest) counts as much as one that is guessing.
- Z-score fusion (distribution-based score fusion): each leg's scores are standardised over the
  union of all legs' candidates, then summed with weights. A candidate a leg did not return gets
  that leg's ``floor`` (the score below which it stopped). On LoCoMo it beats RRF at every k
  (``benchmarks/RESULTS.md``, "Fusion and neighbours").
  Standardising is scale-free: a leg whose scores barely differ (every memory matched only by a
  word they all contain, such as the user's name) would be stretched to the same spread as a
  leg that tells memories apart, and its noise would reorder the other's ranking. So a leg may
  have a ``min_spread``, in its own units: differences below it are not treated as evidence.
- Query coverage (``query_coverage``): the share of the query's IDF mass a memory contains,
  IDF counted over the fused candidates. BM25 sums what matched and ignores what did not, so a
  memory sharing one incidental word with a question ("Where did Bruno spend the last trekking
  holiday?" -> "Bruno's friend moved to Quito last year") scores like a real match whenever no
  memory matches more; z-scores then stretch that lone hit far above the rest. Scaling each
  BM25 score by a power of its coverage (Lucene's classic ``coord``, weighted by IDF) keeps a
  match of most of the question strong and a match of a small part of it weak, and a question
  whose words no memory contains (a paraphrase) leaves the lexical leg little to say.

Every fused candidate keeps its rank in each leg, so a caller can explain why a memory was
recalled.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain


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


def zscore_fusion(
    legs: Mapping[str, Sequence[tuple[str, float]]],
    *,
    weights: Mapping[str, float] | None = None,
    floors: Mapping[str, float] | None = None,
    min_spreads: Mapping[str, float] | None = None,
) -> list[FusedCandidate]:
    """Fuse ranked ``(id, score)`` lists (best first) by summed, weighted z-scores.

    Each leg is standardised over the union of candidates, a candidate it did not return taking
    ``floors[leg]`` (default: the leg's lowest returned score), dividing by its standard
    deviation or by ``min_spreads[leg]`` when that is larger. A leg whose values are all equal
    (no hits, or one hit and a floor equal to it) adds nothing. Ties keep first appearance.

    Each leg's scores are standardised in flat lists in the candidates' first-appearance
    order and the candidates sorted once, stably: a recall fuses ~80 of them, where a
    dictionary per candidate and a sort key per comparison cost more than the arithmetic
    (``benchmarks/RESULTS.md``, "Recall time by stage")."""
    names = list(legs)
    fused: dict[str, FusedCandidate] = {}  # by first appearance
    for leg, hits in legs.items():
        for rank, (item, _) in enumerate(hits, start=1):
            candidate = fused.get(item)
            if candidate is None:
                candidate = fused[item] = FusedCandidate(item, 0.0, dict.fromkeys(names))
            if candidate.ranks[leg] is None:  # a leg that repeats an id counts it once
                candidate.ranks[leg] = rank
    total = [0.0] * len(fused)
    for leg, hits in legs.items():
        weight = 1.0 if weights is None else float(weights.get(leg, 1.0))
        if not hits or weight == 0.0:
            continue
        best: dict[str, float] = {}
        for item, score in reversed(hits):  # the first of a repeated id is the one kept
            best[item] = float(score)
        floor = float(floors[leg]) if floors and leg in floors else min(best.values())
        values = [best.get(item, floor) for item in fused]
        centred = centre(values, float(min_spreads.get(leg, 0.0)) if min_spreads else 0.0)
        if centred is None:
            continue
        apart, spread = centred
        total = [t + weight * d / spread for t, d in zip(total, apart, strict=True)]
    for candidate, score in zip(fused.values(), total, strict=True):
        candidate.score = score
    return by_score(list(fused.values()))


def centre(values: list[float], min_spread: float = 0.0) -> tuple[list[float], float] | None:
    """What z-score fusion adds of one leg: ``values``' distances from their mean and the
    spread they are divided by (their standard deviation, or ``min_spread`` when larger);
    None when the values are all equal (nothing to tell apart, whatever the minimum)."""
    mean = sum(values) / len(values)
    apart = [v - mean for v in values]
    spread = math.sqrt(sum([d**2 for d in apart]) / len(values))
    if spread <= 1e-12:
        return None
    return apart, max(spread, min_spread)


def by_score(fused: list[FusedCandidate]) -> list[FusedCandidate]:
    """``fused`` best first; equal scores keep their order in ``fused`` (a stable sort)."""
    return sorted(fused, key=_score, reverse=True)


def _score(candidate: FusedCandidate) -> float:
    return candidate.score


def query_coverage(
    query_terms: Collection[str], matched: Mapping[str, Collection[str]], candidates: int
) -> dict[str, float]:
    """Per memory of ``matched`` (id -> the query terms it contains), the share of the query's
    IDF mass it contains, 0..1.

    IDF is the Lucene form over ``candidates`` memories (every candidate fusion sees, at least
    those in ``matched``), a term's document frequency the number of ``matched`` memories
    holding it: computed from the candidates alone, so every backend gets the same value. A
    query term no memory contains keeps the largest IDF: it is part of the question that no
    lexical match explains. A query without terms covers everything (1.0)."""
    terms = set(query_terms)
    if not terms:
        return dict.fromkeys(matched, 1.0)
    size = max(int(candidates), len(matched))
    # candidates mostly share a few term sets (a name, a name and a place): each distinct
    # frozenset is intersected and summed once
    shared: dict[frozenset[str], set[str]] = {}
    found: dict[str, set[str]] = {}
    for item, held in matched.items():
        if type(held) is not frozenset:
            found[item] = terms.intersection(held)
        elif (common := shared.get(held)) is not None:
            found[item] = common
        else:
            found[item] = shared[held] = terms.intersection(held)
    df = Counter(chain.from_iterable(found.values()))
    idf = {t: math.log(1.0 + (size - df[t] + 0.5) / (df[t] + 0.5)) for t in terms}
    mass = sum(idf.values())
    weight_of = idf.__getitem__
    covered: dict[int, float] = {}  # by the found set's identity: shared sets summed once
    out = {}
    for item, common in found.items():
        if (share := covered.get(id(common))) is None:
            share = covered[id(common)] = sum(map(weight_of, common)) / mass
        out[item] = share
    return out
