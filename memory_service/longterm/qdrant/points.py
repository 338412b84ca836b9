"""A point as the backend writes and reads it, in neutral types, and the vector conversions
both engines share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from indexing.sparse import SparseTerms
from memory_service.longterm.qdrant.layout import DENSE, SPARSE


@dataclass(frozen=True, slots=True)
class StoredPoint:
    """A point as written or read: id, payload and (when asked for) both vectors."""

    id: str
    payload: dict[str, Any]
    dense: Sequence[float] | None = None
    sparse: SparseTerms | None = None


def upsert_vectors(point: StoredPoint) -> tuple[list[float], SparseTerms]:
    """Both vectors of a point to upsert (the dense one as a plain list): no point is written
    without both."""
    if point.dense is None or point.sparse is None:
        raise ValueError("every upserted point needs both vectors")
    return as_floats(point.dense), point.sparse


def stored_point(record: Any, with_vectors: bool) -> StoredPoint:
    """An engine's record (Edge's and qdrant-client's have the same fields) as a point;
    ``with_vectors``: the record carries both vectors (a missing sparse one reads empty)."""
    dense = sparse = None
    if with_vectors:
        vectors = record.vector or {}
        dense = list(vectors[DENSE])
        stored = vectors.get(SPARSE)
        indices = tuple(stored.indices) if stored is not None else ()
        sparse = SparseTerms(indices, tuple(stored.values) if stored is not None else ())
    return StoredPoint(str(record.id), dict(record.payload or {}), dense, sparse)


def as_floats(vector: Sequence[float]) -> list[float]:
    """A plain list of floats, as both clients want (a list passes through, an array
    converts in one call)."""
    if isinstance(vector, list):
        return vector
    tolist = getattr(vector, "tolist", None)
    if tolist is not None:
        return list(tolist())
    return [float(x) for x in vector]
