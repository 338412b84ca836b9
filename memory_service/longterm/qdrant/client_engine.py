"""A Qdrant server or cluster through qdrant-client (``url=":memory:"``: its local mode).

Local mode is the tests' stand-in for a server: same API, same results, but it checks filters
point by point in Python, so it is no embedded engine for real data (see ``qdrant.edge.engine``).
Writes use ``wait=True``: acknowledged by the server before they return. Errors of a call
name the collection and what went wrong in words (they reach API clients); the server's
address and its answer, which may name its files, go to the log.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from qdrant_client import QdrantClient
from qdrant_client import models as qm

from indexing.sparse import SparseTerms
from memory_service.domain.context import validate_id
from memory_service.domain.errors import (
    BackendUnavailableError,
    ConfigurationError,
    MemoryServiceError,
)
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.facts import Fact
from memory_service.longterm.qdrant.errors import engine_calls
from memory_service.longterm.qdrant.filters import ImportanceTtl, OwnerFilter, owner_key_of
from memory_service.longterm.qdrant.layout import (
    AGENT_FIELD,
    DENSE,
    EMBEDDER_FIELD,
    EMBEDDER_RECORD,
    PAYLOAD_INDEXES,
    SPARSE,
    TENANT_FIELD,
    TERMS_FIELD,
    USER_FIELD,
    check_dense_size,
    reindex_hint,
)
from memory_service.longterm.qdrant.payload import fact_of
from memory_service.longterm.qdrant.points import (
    StoredPoint,
    as_floats,
    stored_point,
    upsert_vectors,
)
from memory_service.longterm.qdrant.query_plan import LegRequest, QueryPlan, ScoredHit

SCROLL_PAGE = 1000
LOCAL = ":memory:"
_NO_TERMS = SparseTerms((), ())

log = logging.getLogger(__name__)


def _failure(exc: Exception) -> str:
    """What went wrong, in words that hold no address or path of the server."""
    status = getattr(exc, "status_code", None)  # UnexpectedResponse
    if isinstance(status, int):
        return f"it answered HTTP {status}"
    cause = getattr(exc, "source", exc)  # ResponseHandlingException wraps the transport's
    kind = type(cause).__name__.lower()
    if isinstance(cause, TimeoutError) or "timeout" in kind or "timed out" in str(cause).lower():
        return "it did not answer in time"
    if isinstance(cause, ConnectionError) or "connect" in kind:
        return "it is unreachable"
    return "the call failed"


def _filter(scope: OwnerFilter) -> qm.Filter:
    """The one translation of a ``OwnerFilter``: tenant and user first, always."""
    must: list[Any] = [
        qm.FieldCondition(key=name, match=qm.MatchValue(value=value))
        for name, value in scope.owner_conditions()
    ]
    if scope.ids is not None:
        must.append(qm.HasIdCondition(has_id=list(scope.ids)))
    if scope.keys is not None:
        must.append(qm.FieldCondition(key="key", match=qm.MatchAny(any=list(scope.keys))))
    if scope.open_only:
        must += [
            qm.IsEmptyCondition(is_empty=qm.PayloadField(key="superseded_by")),
            qm.IsEmptyCondition(is_empty=qm.PayloadField(key="valid_to")),
        ]
    if scope.live_at is not None:
        later = qm.FieldCondition(key="expires_at", range=qm.DatetimeRange(gt=scope.live_at))
        must.append(qm.Filter(should=[_no_expiry(scope.ttl), later]))
    if scope.valid_at is not None:
        must.append(_created(lte=scope.valid_at))
        still_open = qm.Filter(must=[_empty("superseded_by"), _empty("valid_to")])
        closed_later = qm.FieldCondition(key="valid_to", range=qm.DatetimeRange(gt=scope.valid_at))
        must.append(qm.Filter(should=[still_open, closed_later]))
    if scope.facts is not None:
        must += _fact_conditions(scope.facts)
    if scope.exclude_ids is not None:
        return qm.Filter(must=must, must_not=[qm.HasIdCondition(has_id=list(scope.exclude_ids))])
    return qm.Filter(must=must)


def _other_model(model: str) -> qm.Filter:
    """Points whose dense vector names another model than ``model``, or none."""
    same = qm.FieldCondition(key=EMBEDDER_FIELD, match=qm.MatchValue(value=model))
    return qm.Filter(must_not=[same])


def _empty(name: str) -> qm.IsEmptyCondition:
    return qm.IsEmptyCondition(is_empty=qm.PayloadField(key=name))


def _importance(gte: int | None = None, lt: int | None = None) -> qm.FieldCondition:
    return qm.FieldCondition(key="importance", range=qm.Range(gte=gte, lt=lt))


def _created(
    gte: str | None = None, gt: str | None = None, lt: str | None = None, lte: str | None = None
) -> qm.FieldCondition:
    return qm.FieldCondition(
        key="created_at", range=qm.DatetimeRange(gte=gte, gt=gt, lt=lt, lte=lte)
    )


def _no_expiry(ttl: ImportanceTtl | None) -> qm.Filter:
    """No ``expires_at`` of its own and, with ``ttl``, young enough for its importance."""
    if ttl is None:
        return qm.Filter(must=[_empty("expires_at")])
    young: list[Any] = [
        _importance(gte=ttl.never_at),
        qm.Filter(must=[_importance(gte=ttl.long_at), _created(gt=ttl.long_after)]),
        qm.Filter(must=[_importance(lt=ttl.long_at), _created(gt=ttl.short_after)]),
    ]
    return qm.Filter(must=[_empty("expires_at"), qm.Filter(should=young)])


def _fact_conditions(facts: FactFilter) -> list[Any]:
    """A ``FactFilter``'s metadata conditions (``as_of`` is ``valid_at``, above)."""
    must: list[Any] = []
    if facts.kinds:
        must.append(qm.FieldCondition(key="kind", match=qm.MatchAny(any=list(facts.kinds))))
    if facts.tags_any:
        must.append(qm.FieldCondition(key="tags", match=qm.MatchAny(any=list(facts.tags_any))))
    must += [
        qm.FieldCondition(key="tags", match=qm.MatchValue(value=tag)) for tag in facts.tags_all
    ]
    if facts.min_importance is not None:
        must.append(_importance(gte=facts.min_importance))
    if facts.key is not None:
        must.append(qm.FieldCondition(key="key", match=qm.MatchValue(value=facts.key)))
    if facts.created_after is not None or facts.created_before is not None:
        after = facts.created_after.isoformat() if facts.created_after else None
        before = facts.created_before.isoformat() if facts.created_before else None
        must.append(_created(gte=after, lt=before))
    return must


def _index_schema(kind: str) -> Any:
    if kind == "tenant":
        return qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)
    if kind == "datetime":
        return qm.PayloadSchemaType.DATETIME
    if kind == "integer":
        return qm.PayloadSchemaType.INTEGER
    return qm.PayloadSchemaType.KEYWORD


def _sparse(terms: SparseTerms) -> qm.SparseVector:
    return qm.SparseVector(indices=list(terms.indices), values=list(terms.values))


def _request(plan: QueryPlan, leg: LegRequest, where: qm.Filter) -> qm.QueryRequest:
    """One request of ``plan`` as qdrant-client's type (``where``: its owner's filter)."""
    query = leg.dense if leg.sparse is None else _sparse(leg.sparse)
    params = None
    if leg.idf_corpus is not None:
        params = qm.SearchParams(idf=qm.IdfCorpusParams(corpus=_filter(leg.idf_corpus)))
    return qm.QueryRequest(
        query=query,
        using=leg.leg,
        filter=where,
        limit=plan.limit,
        with_payload=plan.with_payload,
        with_vector=plan.with_vector,
        score_threshold=leg.threshold,
        params=params,
    )


class ClientEngine:
    """One collection on a Qdrant server (or in local mode); get it with ``connect``."""

    shared = True  # replicas write one server: their same-moment writes of a key can race

    def __init__(self, client: QdrantClient, collection: str, description: str) -> None:
        self._client = client
        self.collection = collection
        self.description = description
        self.writes = 0

    @classmethod
    def connect(
        cls,
        url: str,
        collection: str,
        dimension: int,
        *,
        api_key: str | None = None,
        timeout_s: float = 10.0,
    ) -> ClientEngine:
        """Connect, then check the collection's layout or create it."""
        try:
            if url == LOCAL:
                client = QdrantClient(location=LOCAL)
            else:
                client = QdrantClient(url=url, api_key=api_key, timeout=max(1, round(timeout_s)))
        except Exception as exc:
            raise ConfigurationError(f"MEMORY_QDRANT__URL {url!r}: {exc}") from exc
        try:
            return cls.attach(
                client,
                collection,
                dimension,
                description=f"qdrant ({url}, collection {collection})",
            )
        except BackendUnavailableError as exc:  # at start: name the setting to look at
            client.close()
            raise BackendUnavailableError(
                f"MEMORY_QDRANT__URL {url!r}: cannot use the Qdrant server there "
                f"(collection {collection}): {exc.__cause__ or exc}; is it running, and "
                "reachable from here?"
            ) from exc
        except Exception:
            client.close()
            raise

    @classmethod
    def attach(
        cls, client: QdrantClient, collection: str, dimension: int, *, description: str = ""
    ) -> ClientEngine:
        """An engine over an existing client (its own auth, gRPC...): checks the collection's
        layout, or creates it."""
        engine = cls(client, collection, description or f"qdrant (collection {collection})")
        try:
            engine._prepare(dimension)
        except MemoryServiceError:
            raise
        except Exception as exc:
            raise BackendUnavailableError(f"cannot use {engine.description}: {exc}") from exc
        return engine

    def _prepare(self, dimension: int) -> None:
        where = f"the Qdrant collection {self.collection!r}"
        if not self._client.collection_exists(self.collection):
            self._create(dimension)
            return
        info = self._client.get_collection(self.collection)
        params = info.config.params
        vectors = params.vectors if isinstance(params.vectors, dict) else {}
        stored = vectors.get(DENSE)
        check_dense_size(stored.size if stored else None, dimension, where)
        sparse = (params.sparse_vectors or {}).get(SPARSE)
        if sparse is None or sparse.modifier != qm.Modifier.IDF:
            raise ConfigurationError(
                f"{where} has no sparse '{SPARSE}' vector with the IDF modifier; "
                f"{reindex_hint(where)}"
            )
        self._ensure_indexes(set(info.payload_schema or {}))

    def _create(self, dimension: int) -> None:
        self._client.create_collection(
            self.collection,
            vectors_config={DENSE: qm.VectorParams(size=dimension, distance=qm.Distance.COSINE)},
            sparse_vectors_config={SPARSE: qm.SparseVectorParams(modifier=qm.Modifier.IDF)},
        )
        self._ensure_indexes(set())

    def _ensure_indexes(self, present: set[str]) -> None:
        with warnings.catch_warnings():
            # local mode warns that payload indexes do nothing there; a server uses them
            warnings.simplefilter("ignore", UserWarning)
            for name, kind in PAYLOAD_INDEXES.items():
                if name not in present:
                    self._client.create_payload_index(
                        self.collection, name, _index_schema(kind), wait=True
                    )

    def _calls(self) -> AbstractContextManager[None]:
        return engine_calls(log, self.description, self._failed)

    def _failed(self, exc: Exception) -> str:
        return (
            f"the Qdrant server failed on the collection {self.collection!r} "
            f"({_failure(exc)}); the service log has the details"
        )

    def close(self) -> None:
        self._client.close()

    def upsert(self, points: Sequence[StoredPoint]) -> None:
        if not points:
            return
        batch = []
        for p in points:
            dense, sparse = upsert_vectors(p)
            vectors = {DENSE: dense, SPARSE: _sparse(sparse)}
            batch.append(qm.PointStruct(id=p.id, vector=vectors, payload=p.payload))
        with self._calls():
            self._client.upsert(self.collection, points=batch, wait=True)
            self.writes += 1

    def query(self, plan: QueryPlan) -> list[dict[str, list[ScoredHit]]]:
        if not plan.requests:
            return plan.hits([])
        wheres = [_filter(search.scope) for search in plan.searches]
        requests = [_request(plan, leg, wheres[leg.owner]) for leg in plan.requests]
        with self._calls():  # one batch: one round trip to the server for every owner
            results = self._client.query_batch_points(self.collection, requests=requests)
        return plan.hits([result.points for result in results])

    def scroll(
        self, scope: OwnerFilter, *, with_vectors: bool = False, with_payload: bool = True
    ) -> list[StoredPoint]:
        where = _filter(scope)
        out: list[StoredPoint] = []
        offset = None
        with self._calls():
            while True:
                records, offset = self._client.scroll(
                    self.collection,
                    scroll_filter=where,
                    limit=SCROLL_PAGE,
                    offset=offset,
                    with_payload=with_payload,
                    with_vectors=with_vectors,
                )
                out += [stored_point(r, with_vectors) for r in records]
                if offset is None:
                    return out

    def facts(self, scope: OwnerFilter, ids: Sequence[str]) -> dict[str, Fact]:
        if not ids:
            return {}
        with self._calls():
            records = self._client.retrieve(
                self.collection, ids=list(ids), with_payload=True, with_vectors=False
            )
        owner = scope.owner_key()
        points = [stored_point(r, False) for r in records]
        return {p.id: fact_of(p.id, p.payload) for p in points if owner_key_of(p.payload) == owner}

    def set_payload(self, scope: OwnerFilter, values: Mapping[str, dict[str, Any]]) -> None:
        if not values:
            return
        # only the scope's points, never others: their ids alone (the payloads are not read)
        named = self.scroll(replace(scope, ids=tuple(values)), with_payload=False)
        present = {p.id for p in named}
        operations = [
            qm.SetPayloadOperation(set_payload=qm.SetPayload(payload=payload, points=[pid]))
            for pid, payload in values.items()
            if pid in present
        ]
        if operations:
            with self._calls():
                self._client.batch_update_points(self.collection, operations, wait=True)
                self.writes += 1

    def count(self, scope: OwnerFilter) -> int:
        with self._calls():
            return self._client.count(
                self.collection, count_filter=_filter(scope), exact=True
            ).count

    def delete(self, scope: OwnerFilter) -> None:
        selector = qm.FilterSelector(filter=_filter(scope))
        with self._calls():
            self._client.delete(self.collection, points_selector=selector, wait=True)
            self.writes += 1

    def tenants(self) -> list[str]:
        return self._values(None, TENANT_FIELD)

    def stale_terms(self, version: int, limit: int) -> list[StoredPoint]:
        current = qm.FieldCondition(key=TERMS_FIELD, match=qm.MatchValue(value=version))
        with self._calls():
            records, _ = self._client.scroll(
                self.collection,
                scroll_filter=qm.Filter(must_not=[current]),
                limit=limit,
                with_payload=True,
                with_vectors=False,
            )
        return [stored_point(r, False) for r in records]

    def set_terms(self, points: Sequence[StoredPoint], version: int) -> None:
        if not points:
            return
        ids = [p.id for p in points]
        vectors = [
            qm.PointVectors(id=p.id, vector={SPARSE: _sparse(p.sparse or _NO_TERMS)})
            for p in points
        ]
        operations: list[Any] = [
            qm.UpdateVectorsOperation(update_vectors=qm.UpdateVectors(points=vectors)),
            qm.SetPayloadOperation(
                set_payload=qm.SetPayload(payload={TERMS_FIELD: version}, points=ids)
            ),
        ]
        with self._calls():  # one request: vectors and stamp land together
            self._client.batch_update_points(self.collection, operations, wait=True)
            self.writes += 1

    def embedder_record(self) -> str | None:
        with self._calls():
            info = self._client.get_collection(self.collection)
        record = (info.config.metadata or {}).get(EMBEDDER_RECORD)
        return record if isinstance(record, str) else None

    def write_embedder_record(self, record: str) -> None:
        with self._calls():  # the collection's metadata: merged, the other keys kept
            self._client.update_collection(self.collection, metadata={EMBEDDER_RECORD: record})

    def stale_dense(self, model: str, limit: int) -> list[StoredPoint]:
        with self._calls():
            records, _ = self._client.scroll(
                self.collection,
                scroll_filter=_other_model(model),
                limit=limit,
                with_payload=True,
                with_vectors=False,
            )
        return [stored_point(r, False) for r in records]

    def count_stale_dense(self, model: str) -> int:
        with self._calls():
            return self._client.count(
                self.collection, count_filter=_other_model(model), exact=True
            ).count

    def set_dense(self, points: Sequence[StoredPoint], model: str) -> None:
        if not points:
            return
        vectors = [
            qm.PointVectors(id=p.id, vector={DENSE: as_floats(p.dense or ())}) for p in points
        ]
        operations: list[Any] = [
            qm.UpdateVectorsOperation(update_vectors=qm.UpdateVectors(points=vectors)),
            qm.SetPayloadOperation(
                set_payload=qm.SetPayload(
                    payload={EMBEDDER_FIELD: model}, points=[p.id for p in points]
                )
            ),
        ]
        with self._calls():  # one request: vectors and their model's name land together
            self._client.batch_update_points(self.collection, operations, wait=True)
            self.writes += 1

    def users(self, tenant_id: str) -> list[str]:
        return self._values(tenant_id, USER_FIELD)

    def agents(self, tenant_id: str) -> list[str]:
        return self._values(tenant_id, AGENT_FIELD)

    def _values(self, tenant_id: str | None, field: str) -> list[str]:
        """The distinct values of ``field`` among the tenant's points (every point's: None)."""
        tenant = None
        if tenant_id is not None:
            match = qm.MatchValue(value=validate_id(tenant_id, "tenant_id"))
            tenant = qm.Filter(must=[qm.FieldCondition(key=TENANT_FIELD, match=match)])
        with self._calls():
            points = self._client.count(self.collection, count_filter=tenant, exact=True).count
            if points == 0:
                return []
            hits = self._client.facet(
                self.collection, key=field, facet_filter=tenant, limit=points, exact=True
            ).hits
        return sorted(str(hit.value) for hit in hits)
