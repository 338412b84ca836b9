"""What the Qdrant backend needs from a Qdrant client, in neutral types.

``QdrantLongTermMemory`` maps the memory semantics onto points; an engine adapter (Qdrant
Edge in-process, or qdrant-client for a server) only moves points. Every read, query and
delete of an engine takes an ``OwnerFilter`` (``filters``); the collection's layout is in
``layout``, a fact's payload in ``payload``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from indexing.sparse import SparseTerms
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.layout import SPARSE


@dataclass(frozen=True, slots=True)
class StoredPoint:
    """A point as written or read: id, payload and (when asked for) both vectors."""

    id: str
    payload: dict[str, Any]
    dense: Sequence[float] | None = None
    sparse: SparseTerms | None = None


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


@dataclass(frozen=True, slots=True)
class ScoredHit:
    """``terms``: the term ids of the point's BM25 document (its sparse vector's indices),
    when the query asked for them (``with_terms``), else None."""

    id: str
    score: float
    payload: dict[str, Any]
    terms: frozenset[int] | None = None


def scored_hit(point: Any, with_terms: bool) -> ScoredHit:
    """An engine's scored point (Edge's and qdrant-client's have the same fields) as a hit;
    ``with_terms``: the query asked for the sparse vector, whose indices are the terms."""
    terms = None
    if with_terms:
        stored = (point.vector or {}).get(SPARSE)
        terms = frozenset(stored.indices) if stored is not None else frozenset()
    return ScoredHit(str(point.id), float(point.score), dict(point.payload or {}), terms)


class QdrantEngine(Protocol):
    """Point storage and search over one collection. Writes are durable when they return.
    ``shared``: other processes may write the collection too (a server), so two of them can
    race on one key; False when this process alone writes it (an Edge folder it locks).
    ``writes`` counts this object's writes once each has landed: where ``shared`` is False,
    what was read between two equal counts is still what the collection holds."""

    description: str
    shared: bool
    writes: int  # writes this engine object made, counted after each lands (cache validity)

    def upsert(self, points: Sequence[StoredPoint]) -> None: ...

    def query(
        self,
        searches: Sequence[OwnerSearch],
        *,
        dense: Sequence[float] | None,
        sparse: SparseTerms | None,
        limit: int,
        threshold: float,
        with_terms: bool = False,
    ) -> list[dict[str, list[ScoredHit]]]:
        """Ranked hits per leg (``dense``, ``bm25``) for each of ``searches``, in order, each
        as if asked alone, all in one engine request (a recall over several scopes pays one
        round trip, not one per scope). ``threshold`` bounds the dense cosine.
        ``with_terms``: each hit carries its BM25 document's term ids (query coverage)."""
        ...

    def scroll(self, scope: OwnerFilter, *, with_vectors: bool = False) -> list[StoredPoint]: ...

    def set_payload(self, scope: OwnerFilter, values: Mapping[str, dict[str, Any]]) -> None:
        """Merge ``values[id]`` into the payload of each point of ``scope`` named there, in
        one batch where the engine allows (vectors untouched)."""
        ...

    def count(self, scope: OwnerFilter) -> int: ...

    def delete(self, scope: OwnerFilter) -> None: ...

    def users(self, tenant_id: str) -> list[str]: ...

    def agents(self, tenant_id: str) -> list[str]: ...

    def close(self) -> None: ...


@runtime_checkable
class CountsSharedWrites(Protocol):
    """An engine that counts, per shared owner (an agent's or the tenant's memory), the writes
    that touched it, each counted once it has landed: where the engine is the collection's
    one writer (``shared`` False), what was read of that owner between two equal counts is
    still what it holds, whatever other owners' writes landed meanwhile. ``vector_datatype``:
    how its dense vectors are stored (``float16`` or ``float32``); its cosine rounds the query
    to the same type, so a score computed outside the engine must too."""

    vector_datatype: str

    def shared_writes(self, scope: OwnerFilter) -> int: ...


@runtime_checkable
class RewritesDeleted(Protocol):
    """An engine whose files keep what was deleted (a write-ahead log, segments not yet
    vacuumed) and that can rewrite them from the live points alone: erasing a user calls it,
    so the user's text is not left in the engine's bytes."""

    def rewrite_without_deleted(self) -> None: ...


def as_floats(vector: Sequence[float]) -> list[float]:
    """A plain list of floats, as both clients want (a list passes through, an array
    converts in one call)."""
    if isinstance(vector, list):
        return vector
    tolist = getattr(vector, "tolist", None)
    if tolist is not None:
        return list(tolist())
    return [float(x) for x in vector]
