"""Qdrant backend: one collection for all tenants, hybrid recall, the files backend's semantics.

All memory semantics live here, once, for both engines (``qdrant_edge_engine`` in-process,
``qdrant_client_engine`` for a server): derived point ids (recording twice is a no-op),
supersession by ``key`` (newest ``created_at`` wins; a closed or expired incoming fact supersedes
nothing), superseded/closed/expired facts kept but not recalled or listed. A record that closes
an older fact writes the new point and the closed one in one upsert, so the pair is atomic.

Retrieval: the dense leg (cosine, ``threshold`` passed to Qdrant) and the sparse ``bm25`` leg
(weights from ``indexing.sparse``, IDF by Qdrant) run as one batched request over the same
tenant/user filter, each to ``RetrievalConfig.depth(top_k)``, and are fused client-side by
``fuse_legs``, so every hit keeps its rank in each leg. The BM25 IDF is computed over the user's
own open facts (Qdrant's ``IdfParams`` corpus filter), as the files backend's per-user index
does: another tenant's words never change a user's scores. Ties within a leg are broken by
(``created_at``, id), the files backend's order.

Writes of one user are serialised in this process. With several processes writing to one
Qdrant server, two concurrent records with the same key for the same user can both stay open.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from indexing.embeddings import Embedder
from indexing.lexical import average_length, lexical_terms
from indexing.sparse import AVG_DOC_LEN, SparseTerms, document_vector, query_vector
from indexing.tokenize import tokenize
from memory_service.config import QdrantSettings
from memory_service.config.retrieval import Mode
from memory_service.context import RuntimeContext, validate_id
from memory_service.errors import BackendUnavailableError, ConfigurationError
from memory_service.facts import (
    Fact,
    Page,
    Recall,
    RecordResult,
    paginate,
    parse_time,
    sort_key,
    utcnow,
)
from memory_service.longterm.qdrant_engine import (
    DENSE,
    SPARSE,
    QdrantEngine,
    ScoredHit,
    StoredPoint,
    UserFilter,
    fact_of,
    payload_of,
)
from memory_service.longterm.recording import plan_record
from memory_service.longterm.retrieval import (
    PRESETS,
    LegHit,
    RetrievalConfig,
    fuse_legs,
    legs_for_mode,
    validate_query,
)

_LOCK_STRIPES = 64


def _canonical_ids(ids: Sequence[str]) -> list[str]:
    """The ids that can name a point (canonical UUID strings), in order, once each."""
    out = []
    for value in dict.fromkeys(ids):
        try:
            if isinstance(value, str) and str(uuid.UUID(value)) == value:
                out.append(value)
        except ValueError:
            continue
    return out


class QdrantLongTermMemory:
    """``LongTermMemory`` over a Qdrant collection, through any ``QdrantEngine``."""

    def __init__(
        self,
        engine: QdrantEngine,
        embedder: Embedder,
        *,
        retrieval: RetrievalConfig | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.engine = engine
        self._embedder = embedder
        self.retrieval = retrieval or PRESETS["hybrid"]
        self._clock = clock
        self._locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self._closed = False

    def _lexical(self, fact: Fact) -> SparseTerms:
        """The fact's BM25 document vector: its terms, and its day when ``date_terms``."""
        with_date = self.retrieval.date_terms
        terms = lexical_terms(fact.text, fact.created_at, with_date=with_date)
        return document_vector(terms, avg_len=average_length(AVG_DOC_LEN, with_date=with_date))

    def _write_lock(self, ctx: RuntimeContext) -> threading.Lock:
        return self._locks[hash((ctx.tenant_id, ctx.user_id)) % _LOCK_STRIPES]

    def _engine(self) -> QdrantEngine:
        if self._closed:
            raise BackendUnavailableError("this Qdrant long-term memory is closed")
        return self.engine

    # -- LongTermMemory -------------------------------------------------------------------

    def record(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> list[RecordResult]:
        now = self._clock()
        # all validated before anything is written; times made aware (naive = UTC)
        stamped = [_utc_times(f.stamped(ctx, now)) for f in facts]
        if not stamped:
            return []
        vectors = self._embedder.embed([f.text for f in stamped])  # fails before writing
        dense_of = {f.id: vectors[i] for i, f in enumerate(stamped)}
        engine = self._engine()
        with self._write_lock(ctx):
            ids = [f.id for f in stamped]
            existing = {
                p.id: fact_of(p.id, p.payload) for p in engine.scroll(UserFilter.of(ctx, ids=ids))
            }
            keys = [f.key for f in stamped if f.key is not None]
            older_points: dict[str, StoredPoint] = {}
            active_by_key: dict[str, Fact] = {}
            if keys:
                scope = UserFilter.of(ctx, keys=keys, open_only=True, live_at=now)
                for point in engine.scroll(scope, with_vectors=True):
                    older_points[point.id] = point
                for fact in sorted(
                    (fact_of(p.id, p.payload) for p in older_points.values()), key=sort_key
                ):
                    active_by_key[fact.key] = fact  # oldest first: the newest stays
            plan = plan_record(stamped, existing, active_by_key, now)
            new, closed, results = plan.new, plan.closed, plan.results
            points = [
                StoredPoint(
                    f.id,
                    payload_of(ctx, f),
                    dense_of[f.id].tolist(),
                    self._lexical(f),
                )
                for f in new.values()
            ]
            points += [
                replace(older_points[f.id], payload=payload_of(ctx, f)) for f in closed.values()
            ]
            engine.upsert(points)  # new and closed points in one operation
        return results

    def retrieve(
        self,
        ctx: RuntimeContext,
        query: str,
        top_k: int = 5,
        threshold: float = 0.0,
        *,
        mode: Mode = "hybrid",
    ) -> list[Recall]:
        validate_query(query, top_k, threshold)
        legs = legs_for_mode(mode)
        engine = self._engine()
        now = self._clock()
        sparse = query_vector(tokenize(query)) if "bm25" in legs else None
        dense = self._embedder.embed([query])[0].tolist() if "dense" in legs else None
        results = engine.query(
            UserFilter.of(ctx, open_only=True, live_at=now),
            dense=dense,
            sparse=sparse if sparse else None,  # no terms: no lexical hit
            limit=self.retrieval.depth(top_k),
            threshold=float(threshold),
            idf_corpus=UserFilter.of(ctx, open_only=True),
        )
        payloads: dict[str, dict] = {}
        leg_hits: dict[str, list[LegHit]] = {}
        for leg, engine_leg, keep in (
            ("bm25", SPARSE, lambda score: score > 0.0),  # >= 1 shared term
            ("dense", DENSE, lambda score: score >= threshold),
        ):
            if leg not in legs:
                continue
            hits = [h for h in results.get(engine_leg, []) if keep(h.score)]
            for hit in hits:
                payloads.setdefault(hit.id, hit.payload)
            leg_hits[leg] = [
                LegHit(
                    h.id,
                    h.score,
                    h.payload.get("session_id"),
                    parse_time(h.payload.get("created_at")),
                )
                for h in _ordered(hits)
            ]
        fused = fuse_legs(mode, leg_hits, self.retrieval, top_k)
        return [Recall(fact_of(h.id, payloads[h.id]), h.score, h.ranks, h.scores) for h in fused]

    def get(self, ctx: RuntimeContext, ids: Sequence[str]) -> list[Fact]:
        wanted = _canonical_ids(ids)
        if not wanted:
            return []
        found = {p.id: p for p in self._engine().scroll(UserFilter.of(ctx, ids=wanted))}
        return [fact_of(i, found[i].payload) for i in wanted if i in found]

    def list(
        self,
        ctx: RuntimeContext,
        *,
        limit: int = 100,
        cursor: str | None = None,
        include_inactive: bool = False,
    ) -> Page[Fact]:
        paginate([], limit, None)  # refuse a bad limit before reading
        if include_inactive:
            scope = UserFilter.of(ctx)
        else:
            scope = UserFilter.of(ctx, open_only=True, live_at=self._clock())
        facts = [fact_of(p.id, p.payload) for p in self._engine().scroll(scope)]
        return paginate(facts, limit, cursor)

    def update(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> int:
        """Rewrite the metadata of existing facts, matched by id (text, hash and vectors stay).

        The files backend's maintenance hook; unknown ids are ignored. Returns how many facts
        were rewritten."""
        wanted = {f.id: f.validate() for f in facts if f.id}
        ids = _canonical_ids(list(wanted))
        if not ids:
            return 0
        engine = self._engine()
        with self._write_lock(ctx):
            stored = engine.scroll(UserFilter.of(ctx, ids=ids), with_vectors=True)
            points = []
            for point in stored:
                old = fact_of(point.id, point.payload)
                new = replace(wanted[point.id], text=old.text, content_hash=old.content_hash)
                new = replace(new, created_at=parse_time(new.created_at))
                # the BM25 vector may index the date (date_terms): it follows created_at
                points.append(
                    replace(point, payload=payload_of(ctx, new), sparse=self._lexical(new))
                )
            engine.upsert(points)
        return len(points)

    def delete(self, ctx: RuntimeContext, ids: Sequence[str]) -> int:
        wanted = _canonical_ids(ids)
        if not wanted:
            return 0
        return self._delete(ctx, UserFilter.of(ctx, ids=wanted))

    def forget(self, ctx: RuntimeContext) -> int:
        return self._delete(ctx, UserFilter.of(ctx))

    def _delete(self, ctx: RuntimeContext, scope: UserFilter) -> int:
        engine = self._engine()
        with self._write_lock(ctx):
            count = engine.count(scope)
            if count:
                engine.delete(scope)
        return count

    def users(self, tenant_id: str) -> list[str]:
        """Users of ``tenant_id`` with at least one stored fact (for export)."""
        return self._engine().users(validate_id(tenant_id, "tenant_id"))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.engine.close()


def _utc_times(fact: Fact) -> Fact:
    return replace(
        fact,
        created_at=parse_time(fact.created_at),
        expires_at=parse_time(fact.expires_at),
        valid_to=parse_time(fact.valid_to),
    )


def _ordered(hits: list[ScoredHit]) -> list[ScoredHit]:
    """Best first; equal scores (to 6 decimals) in (created_at, id) order, as in files.

    ``created_at`` is stored as UTC ISO-8601, so its string order is its time order."""
    return sorted(hits, key=lambda h: (-round(h.score, 6), h.payload.get("created_at") or "", h.id))


def open_qdrant(
    settings: QdrantSettings,
    workspace: Path,
    embedder: Embedder,
    *,
    retrieval: RetrievalConfig | None = None,
) -> QdrantLongTermMemory:
    """The configured engine: a server at ``url``, else Qdrant Edge in ``path`` (default
    ``<workspace>/qdrant``), the collection being the folder ``<path>/<collection>``."""
    if settings.url and settings.path is not None:
        raise ConfigurationError(
            "MEMORY_QDRANT__URL and MEMORY_QDRANT__PATH are both set: a server (url) or "
            "Qdrant Edge in a folder (path), not both"
        )
    engine: QdrantEngine
    if settings.url:
        from memory_service.longterm.qdrant_client_engine import ClientEngine

        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        engine = ClientEngine.connect(
            settings.url,
            settings.collection,
            embedder.dimension,
            api_key=api_key,
            timeout_s=settings.timeout_s,
        )
    else:
        from memory_service.longterm.qdrant_edge_engine import EdgeEngine

        root = settings.path if settings.path is not None else Path(workspace) / "qdrant"
        engine = EdgeEngine.acquire(Path(root) / settings.collection, embedder.dimension)
    return QdrantLongTermMemory(engine, embedder, retrieval=retrieval)
