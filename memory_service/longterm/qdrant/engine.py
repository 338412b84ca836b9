"""What the Qdrant backend needs from a Qdrant client, in neutral types.

``QdrantLongTermMemory`` maps the memory semantics onto points; an engine adapter (Qdrant
Edge in-process, or qdrant-client for a server) only moves points (and reads a fact by id
from its point's payload, ``payload.fact_of``). Every read, query and
delete of an engine takes an ``OwnerFilter`` (``filters``); the collection's layout is in
``layout``, a fact's payload in ``payload``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from memory_service.domain.facts import Fact
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.points import StoredPoint
from memory_service.longterm.qdrant.query_plan import QueryPlan, ScoredHit


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

    def query(self, plan: QueryPlan) -> list[dict[str, list[ScoredHit]]]:
        """Ranked hits per leg (``dense``, ``bm25``) for each of ``plan.searches``, in order,
        each as if asked alone, all in one engine request (a recall over several scopes pays
        one round trip, not one per scope): the plan's requests in the engine's own types."""
        ...

    def scroll(
        self, scope: OwnerFilter, *, with_vectors: bool = False, with_payload: bool = True
    ) -> list[StoredPoint]:
        """``scope``'s points; without ``with_payload`` their ids alone (an empty payload),
        for a write that only asks which of its points are the scope's."""
        ...

    def facts(self, scope: OwnerFilter, ids: Sequence[str]) -> dict[str, Fact]:
        """The facts of the points of ``ids`` that ``scope``'s owner holds, by id, read whole
        in one request by id (a recall's surviving hits: no filter to evaluate, unlike
        ``scroll``); an id no longer stored is left out."""
        ...

    def set_payload(self, scope: OwnerFilter, values: Mapping[str, dict[str, Any]]) -> None:
        """Merge ``values[id]`` into the payload of each point of ``scope`` named there, in
        one batch where the engine allows (vectors untouched)."""
        ...

    def count(self, scope: OwnerFilter) -> int: ...

    def delete(self, scope: OwnerFilter) -> None: ...

    def tenants(self) -> list[str]: ...

    def stale_terms(self, version: int, limit: int) -> list[StoredPoint]:
        """Up to ``limit`` points of any owner whose ``terms_version`` is not ``version`` (or
        that have none), payloads only: the points whose sparse vectors an older tokenizer
        made. Unscoped, as ``tenants`` is: the open's re-indexing reads the whole collection."""
        ...

    def set_terms(self, points: Sequence[StoredPoint], version: int) -> None:
        """Give each of ``points`` its ``sparse`` vector and ``terms_version`` ``version``,
        leaving its dense vector and the rest of its payload as stored (so a write another
        process makes meanwhile keeps its fields)."""
        ...

    def embedder_record(self) -> str | None:
        """The collection's record of its embedding model (``store_embedder``), as written
        by ``write_embedder_record``; None: none written."""
        ...

    def write_embedder_record(self, record: str) -> None: ...

    def stale_dense(self, model: str, limit: int) -> list[StoredPoint]:
        """Up to ``limit`` points of any owner whose dense vector names another model than
        ``model`` (``layout.EMBEDDER_FIELD``), or none, payloads only: a re-embed's batch."""
        ...

    def count_stale_dense(self, model: str) -> int: ...

    def set_dense(self, points: Sequence[StoredPoint], model: str) -> None:
        """Give each of ``points`` its ``dense`` vector and ``model`` as that vector's model,
        in one write, leaving its sparse vector and the rest of its payload as stored."""
        ...

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
    so the user's text is not left in the engine's bytes; ``compact_deleted`` rewrites only
    when a delete since the last rewrite left some (maintenance calls it each pass)."""

    def rewrite_without_deleted(self) -> None: ...

    def compact_deleted(self) -> bool: ...
