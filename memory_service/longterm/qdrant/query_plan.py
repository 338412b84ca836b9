"""One recall's batched engine query as plain data: which leg of which owner each request
asks, with the owner's filter, its IDF corpus and the least score it takes. Each engine only
translates the plan's requests to its own SDK's types, sends them in one batch, and hands
the results back in the plan's order (``hits``), so the two engines cannot ask differently."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from indexing.sparse import SparseTerms, matched_terms
from memory_service.domain.facts import parse_time
from memory_service.longterm.fusion import LegHit
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.layout import DENSE, SPARSE
from memory_service.longterm.qdrant.points import as_floats


@dataclass(frozen=True, slots=True)
class OwnerSearch:
    """One owner's part of a batched query: the points it ranks (``scope``) and the points
    its BM25 IDF is computed over (``idf_corpus``), so each owner keeps its own IDF.
    ``floors``: per engine leg, a score its hits must reach (a wider scope's hits below a
    recall's merged cut are not read)."""

    scope: OwnerFilter
    idf_corpus: OwnerFilter
    floors: Mapping[str, float] | None = None

    def least(self, leg: str, threshold: float | None = None) -> float | None:
        """The least score ``leg`` asks of the engine: ``threshold`` raised to its floor."""
        floor = (self.floors or {}).get(leg)
        if floor is None:
            return threshold
        return floor if threshold is None else max(threshold, floor)


# What a recall reads of each candidate: its rank order and neighbours (``created_at``,
# ``session_id``), the key a wider scope's hit is compared by, and whether it holds its key
# open (the key-race check). The rest (text, source text up to 2 KB, tags) is read for the
# hits that survive fusion alone (``Candidates.load``): converting whole payloads was a
# third of an Edge recall on LoCoMo's facts with their sources (benchmarks/RESULTS.md,
# "Recall time by stage").
CANDIDATE_FIELDS: tuple[str, ...] = ("created_at", "session_id", "key", "superseded_by", "valid_to")


@dataclass(slots=True)  # ~100 are made a recall: unfrozen, a quarter of the cost to make
class ScoredHit(LegHit):
    """A ``LegHit`` as an engine answers it, handed to fusion as it is (one object a hit,
    not one per layer), and its point's ``payload``: the ``CANDIDATE_FIELDS``.
    ``matched``: the query's terms whose ids the point's BM25 document (its sparse vector's
    indices) holds, when the plan asked for them (``QueryPlan.asked_terms``); else None."""

    payload: Mapping[str, Any] = field(default_factory=dict)


def scored_hit(point: Any, asked_terms: Mapping[int, tuple[str, ...]] | None) -> ScoredHit:
    """An engine's scored point (Edge's and qdrant-client's have the same fields) as a hit;
    ``asked_terms``: the query's terms by id, when the query asked for the sparse vector,
    whose indices are the point's terms."""
    matched = None
    if asked_terms is not None:
        stored = (point.vector or {}).get(SPARSE)
        matched = matched_terms(stored.indices if stored is not None else (), asked_terms)
    payload = dict(point.payload or {})
    created = parse_time(payload.get("created_at"))
    session = payload.get("session_id")
    return ScoredHit(str(point.id), float(point.score), session, created, matched, payload)


# What a process holds of a point for its recalls (``edge.held_points``): its
# ``CANDIDATE_FIELDS``, its BM25 document's term ids, its ``created_at`` parsed and its id.
HeldFields = tuple[dict[str, Any], Iterable[int], datetime | None, str]


@dataclass(frozen=True, slots=True)
class LegRequest:
    """One request of the batch: ``leg`` of ``searches[owner]``, keeping hits of at least
    ``threshold`` (None: any). A dense request carries the query's vector (``dense``); a BM25
    one its sparse terms and the owner's ``idf_corpus``, which its IDF is computed over."""

    owner: int
    leg: str  # DENSE or SPARSE
    threshold: float | None
    dense: list[float] | None = None
    sparse: SparseTerms | None = None
    idf_corpus: OwnerFilter | None = None


@dataclass(frozen=True, slots=True)
class QueryPlan:
    """``searches`` as the batch of requests an engine sends, in order, each keeping ``limit``
    hits; ``with_vector`` is what each request asks back (the sparse vector when the hits'
    terms are wanted: ``with_terms``)."""

    searches: tuple[OwnerSearch, ...]
    requests: tuple[LegRequest, ...]
    limit: int
    asked_terms: Mapping[int, tuple[str, ...]] | None  # the query's terms by id, when wanted

    @property
    def with_terms(self) -> bool:
        return self.asked_terms is not None

    @classmethod
    def of(
        cls,
        searches: Sequence[OwnerSearch],
        *,
        dense: Sequence[float] | None,
        sparse: SparseTerms | None,
        limit: int,
        threshold: float,
        asked_terms: Mapping[int, tuple[str, ...]] | None,
    ) -> QueryPlan:
        """Each owner's dense request (``threshold`` bounds its cosine) then its BM25 one,
        each raised to the owner's floor for that leg."""
        query = None if dense is None else as_floats(dense)  # once, for every owner
        requests: list[LegRequest] = []
        for i, search in enumerate(searches):
            if query is not None:
                requests.append(LegRequest(i, DENSE, search.least(DENSE, threshold), dense=query))
            if sparse is not None:
                least = search.least(SPARSE)
                requests.append(
                    LegRequest(i, SPARSE, least, sparse=sparse, idf_corpus=search.idf_corpus)
                )
        return cls(tuple(searches), tuple(requests), limit, asked_terms)

    @classmethod
    def nearest(
        cls,
        search: OwnerSearch,
        vectors: Sequence[Sequence[float]],
        *,
        limit: int,
        threshold: float,
    ) -> QueryPlan:
        """One owner's dense request per vector (its cosine at least ``threshold``), in one
        batch: the nearest stored facts of each fact a record brings."""
        requests = tuple(
            LegRequest(i, DENSE, threshold, dense=as_floats(v)) for i, v in enumerate(vectors)
        )
        return cls((search,) * len(requests), requests, limit, asked_terms=None)

    @property
    def with_payload(self) -> list[str]:
        """The payload fields each hit carries back: ``CANDIDATE_FIELDS`` (a server's engine
        asks for them; Edge asks for ids and scores and reads them from what it holds:
        ``edge.held_points``)."""
        return list(CANDIDATE_FIELDS)

    @property
    def with_vector(self) -> list[str] | bool:
        return [SPARSE] if self.with_terms else False

    def hits(self, results: Sequence[Sequence[Any]]) -> list[dict[str, list[ScoredHit]]]:
        """Ranked hits per leg for each search, in order, from each request's scored points
        (the engine's own type: Edge's and qdrant-client's have the same fields)."""
        return self._per_request(
            [scored_hit(p, self.asked_terms) for p in points] for points in results
        )

    def held_hits(
        self,
        results: Sequence[Sequence[tuple[Hashable, float]]],
        fields: Mapping[Hashable, HeldFields],
    ) -> list[dict[str, list[ScoredHit]]]:
        """``hits`` from each request's ``(key, score)`` pairs and each point's fields as
        ``fields`` holds them under its key (a point missing there was deleted meanwhile:
        left out); a hit's payload is the held dict itself: read it, never change it. A
        point's term ids are held as an array (a quarter of a set's memory); a hit's
        matched terms are found once per plan (a point both legs found is looked up once)."""
        matched: dict[Hashable, frozenset[str] | None] = {}
        asked = self.asked_terms

        def hit(key: Hashable, score: float, held: HeldFields) -> ScoredHit:
            if key not in matched:
                matched[key] = None if asked is None else matched_terms(held[1], asked)
            payload = held[0]
            return ScoredHit(
                held[3], score, payload.get("session_id"), held[2], matched[key], payload
            )

        return self._per_request(
            [
                hit(key, score, held)
                for key, score in points
                if (held := fields.get(key)) is not None
            ]
            for points in results
        )

    def _per_request(self, hits: Iterable[list[ScoredHit]]) -> list[dict[str, list[ScoredHit]]]:
        out: list[dict[str, list[ScoredHit]]] = [{} for _ in self.searches]
        for request, request_hits in zip(self.requests, hits, strict=True):
            out[request.owner][request.leg] = request_hits
        return out
