"""Small shared scopes (an agent's, the tenant's memory) held in this process where it is the
collection's one writer (an Edge folder), so a recall scores them with NumPy instead of asking
the engine twice more per scope.

Why: a filtered Edge request has a fixed cost however few hits it returns (most of it the
BM25 leg's IDF over the owner's corpus), so each shared scope a recall read added a visible
share of a whole recall (``benchmarks/RESULTS.md``, "Shared scopes"). Shared
memory is small and rarely written; a user's own scope is neither, and stays with the engine.

A mirror is one owner's points as one scroll read them, vectors included, and answers a
search as the engine would:

- what a read admits is ``ReadView.admits`` (the rule Qdrant's payload filter writes out);
- the dense score is the dot product of the stored, normalised vector with the query as
  Qdrant normalises it (``qdrant_unit``), rounded to the stored datatype first as Edge does
  (float16 in a new shard);
- BM25 is ``sum qtf * idf * weight`` over the stored document weights, with the IDF
  modifier's ``log(1 + (N - df + 0.5) / (df + 0.5))`` over the owner's open facts (all of them
  for a read about the past), as ``qdrant.search`` asks Edge for it;
- a leg keeps ``limit`` hits at or above its least score, ties at the cut in the backend's
  order (score to 6 decimals, then created_at and id).

It is trusted while the engine's count of writes to that owner (``CountsSharedWrites``) is
the one it was read at: a user's writes never touch it. An owner of more than ``MIRROR_LIMIT``
points is asked of the engine; past ``MIRROR_BUDGET`` points in all, the least recently used
mirrors are dropped (a mirror holds its owner's vectors beside its facts).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from indexing.sparse import SparseTerms, matched_terms
from memory_service.config.retrieval import Leg
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.longterm.fusion import LegHit
from memory_service.longterm.qdrant.engine import CountsSharedWrites, QdrantEngine
from memory_service.longterm.qdrant.filters import OwnerFilter, OwnerKey
from memory_service.longterm.qdrant.payload import fact_of
from memory_service.longterm.qdrant.points import StoredPoint
from memory_service.longterm.store_values import Candidates, ReadView, stored_open

MIRROR_LIMIT = 1_000  # points of one owner held in memory at most
MIRROR_BUDGET = 20_000  # points held in all mirrors of one engine


def qdrant_unit(vector: np.ndarray) -> np.ndarray:
    """``vector`` as Qdrant's cosine preprocessing leaves it (``cosine_preprocess``): as it is
    when its float32 squared length is within 1e-6 of 1 (or zero), else divided by its length.
    An embedder's unit vector is left alone: dividing it by NumPy's norm (0.99999994, say)
    moves a component across a float16 rounding step now and then, 5e-6 off Edge's score."""
    length = float(np.dot(vector, vector))
    if length < float(np.finfo(np.float32).eps) or abs(length - 1.0) <= 1e-6:
        return vector
    return vector / np.float32(math.sqrt(length))


class ScopeMirror:
    """One owner's points in memory: its facts, dense matrix and BM25 postings."""

    def __init__(self, points: Sequence[StoredPoint], datatype: str = "float32") -> None:
        """``datatype``: the engine's stored dense datatype, to which a query is rounded."""
        self._query_type = np.float16 if datatype == "float16" else np.float32
        self.ids = [p.id for p in points]
        self.facts = [fact_of(p.id, p.payload) for p in points]
        self._by_id = {f.id: f for f in self.facts}
        size = len(points)
        self.open = np.fromiter((stored_open(f) for f in self.facts), bool, size)
        vectors = [p.dense for p in points]
        self.dense = np.array(vectors, dtype=np.float32) if size else np.zeros((0, 0), np.float32)
        self.terms = [frozenset(p.sparse.indices) if p.sparse else frozenset() for p in points]
        postings: dict[int, tuple[list[int], list[float]]] = {}
        for position, point in enumerate(points):
            if point.sparse is None:
                continue
            for term, weight in zip(point.sparse.indices, point.sparse.values, strict=True):
                docs, weights = postings.setdefault(term, ([], []))
                docs.append(position)
                weights.append(weight)
        self._postings = {
            term: (np.array(docs, dtype=np.intp), np.array(weights, dtype=np.float64))
            for term, (docs, weights) in postings.items()
        }
        # each point's place in the backend's tie order: created_at (UTC ISO-8601), then id
        created = [p.payload.get("created_at") or "" for p in points]
        order = sorted(range(size), key=lambda i: (created[i], self.ids[i]))
        self._tie_rank = np.empty(size, dtype=np.intp)
        self._tie_rank[order] = np.arange(size)
        self._deadlines: dict[ExpiryPolicy, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def candidates(
        self,
        legs: tuple[Leg, ...],
        view: ReadView,
        expiry: ExpiryPolicy,
        floors: Mapping[str, float] | None,
        *,
        dense: Sequence[float] | None,
        sparse: SparseTerms | None,
        limit: int,
        threshold: float,
        term_ids: Mapping[int, tuple[str, ...]] | None,
    ) -> Candidates:
        """This owner's ``Candidates``, as ``qdrant.search`` builds them from the engine's
        answer: per leg of ``legs`` the best ``limit`` admitted hits (the dense one at or
        above ``threshold``), above the leg's ``floors`` score, in the backend's order, with
        the query terms (``term_ids``) each one holds."""
        out: dict[str, list[LegHit]] = {leg: [] for leg in legs}
        if self.ids:
            admitted = self._admitted(view, expiry)
            floors = floors or {}
            if "dense" in legs and dense is not None:
                scores = self._cosines(dense)
                allowed = admitted & (scores >= threshold)
                out["dense"] = self._top(scores, allowed, floors.get("dense"), limit, term_ids)
            if "bm25" in legs and sparse is not None:
                corpus = self.open if not view.history else np.ones(len(self.ids), bool)
                scores, matched = self._bm25(sparse, corpus)
                allowed = admitted & matched
                out["bm25"] = self._top(scores, allowed, floors.get("bm25"), limit, term_ids)
        by_id = self._by_id
        return Candidates(out, by_id.__getitem__, key_of=lambda fid: by_id[fid].key)

    def _cosines(self, dense: Sequence[float]) -> np.ndarray:
        unit = qdrant_unit(np.asarray(dense, dtype=np.float32)).astype(self._query_type)
        return self.dense @ unit.astype(np.float32)

    def _admitted(self, view: ReadView, expiry: ExpiryPolicy) -> np.ndarray:
        """``view.admits`` of each fact: expiry and openness vectorised, a filter or a read
        about the past fact by fact (as the files backend's ``Corpus.mask``)."""
        if not view.filter.is_empty:
            return np.fromiter((view.admits(f) for f in self.facts), bool, len(self.facts))
        deadlines = self._deadlines.get(expiry)
        if deadlines is None:
            deadlines = np.array(
                [d.timestamp() if (d := expiry.expires_at(f)) else math.inf for f in self.facts],
                dtype=float,
            )
            self._deadlines[expiry] = deadlines
        return self.open & (deadlines > view.now.timestamp())

    def _bm25(self, sparse: SparseTerms, corpus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each point's BM25 score with the IDF over ``corpus``, and which points hold a term."""
        scores = np.zeros(len(self.ids))
        matched = np.zeros(len(self.ids), bool)
        size = int(np.count_nonzero(corpus))
        for term, count in zip(sparse.indices, sparse.values, strict=True):
            posting = self._postings.get(term)
            if posting is None:
                continue
            docs, weights = posting
            df = int(np.count_nonzero(corpus[docs]))
            idf = math.log(1.0 + (size - df + 0.5) / (df + 0.5))
            scores[docs] += count * idf * weights
            matched[docs] = True
        return scores, matched

    def _top(
        self,
        scores: np.ndarray,
        allowed: np.ndarray,
        floor: float | None,
        limit: int,
        term_ids: Mapping[int, tuple[str, ...]] | None,
    ) -> list[LegHit]:
        """The best ``limit`` of ``allowed`` scoring above ``floor``, in the backend's order
        (score to 6 decimals, then created_at and id)."""
        if floor is not None:
            allowed = allowed & (scores > floor)
        found = np.flatnonzero(allowed)
        order = np.lexsort((self._tie_rank[found], -np.round(scores[found], 6)))
        found = found[order[:limit]]
        facts, terms = self.facts, self.terms
        return [
            LegHit(
                facts[i].id,
                score,
                facts[i].session_id,
                facts[i].created_at,
                None if term_ids is None else matched_terms(terms[i], term_ids),
            )
            for i, score in zip(found.tolist(), scores[found].tolist(), strict=True)
        ]


@dataclass(slots=True)
class _Entry:
    writes: int
    mirror: ScopeMirror | None  # None: the owner holds more than the limit


class ScopeMirrors:
    """The engine's shared owners small enough to hold, each as of its last write."""

    def __init__(
        self,
        engine: QdrantEngine,
        *,
        limit: int = MIRROR_LIMIT,
        budget: int = MIRROR_BUDGET,
    ) -> None:
        if not self.can_hold(engine):
            raise ValueError("only the collection's one writer can hold its scopes in memory")
        self.engine = engine
        self.limit = limit
        self.budget = budget
        self._entries: OrderedDict[OwnerKey, _Entry] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    @staticmethod
    def can_hold(engine: QdrantEngine) -> bool:
        """Whether ``engine``'s owners can be held: this process is the collection's one
        writer, and the engine counts each shared owner's writes."""
        return not engine.shared and isinstance(engine, CountsSharedWrites)

    def of(self, owner: RuntimeContext) -> ScopeMirror | None:
        """``owner``'s mirror, read again if a write touched it; None for a user's scope
        (asked of the engine) or an owner over the limit."""
        if owner.scope == "user":
            return None
        scope = OwnerFilter.of(owner)
        key = scope.owner_key()
        writes = self.engine.shared_writes(scope)  # read first: a write meanwhile makes
        with self._lock:  # what is read below stale, and it is read again next time
            entry = self._entries.get(key)
            if entry is not None and entry.writes == writes:
                self._entries.move_to_end(key)
                return entry.mirror
        mirror = None
        if self.engine.count(scope) <= self.limit:
            points = self.engine.scroll(scope, with_vectors=True)
            mirror = ScopeMirror(points, self.engine.vector_datatype)
        with self._lock:
            self._put(key, _Entry(writes, mirror))
        return mirror

    def _put(self, key: OwnerKey, entry: _Entry) -> None:
        old = self._entries.pop(key, None)
        if old is not None and old.mirror is not None:
            self._held -= len(old.mirror)
        self._entries[key] = entry
        self._held += len(entry.mirror) if entry.mirror is not None else 0
        while self._held > self.budget and len(self._entries) > 1:
            _, dropped = self._entries.popitem(last=False)
            self._held -= len(dropped.mirror) if dropped.mirror is not None else 0
