"""Qdrant backend: one collection for all tenants, hybrid recall, the files backend's semantics.

The memory semantics are ``BaseLongTermMemory``'s (``base_store.py``) and ``plan_record``'s; this
module maps them onto points, for both engines (``qdrant.edge.engine`` in-process,
``qdrant.client_engine`` for a server): derived point ids (recording twice is a no-op),
superseded/closed/expired facts kept as points but filtered out of recall and listing. A record
that closes an older fact writes the new point and the closed one in one upsert, so the pair is
atomic.

Retrieval: the dense leg (cosine, ``threshold`` passed to Qdrant) and the sparse ``bm25`` leg
(weights from ``indexing.sparse``, IDF by Qdrant) run over the same tenant/user filter, each
to ``RetrievalConfig.depth(top_k)``, and are fused client-side by ``fuse_legs``, so every hit
keeps its rank in each leg; both legs of every scope a recall reads go in one batched engine
request (``qdrant.search``). The BM25 IDF is computed over the user's
own open facts (Qdrant's ``IdfParams`` corpus filter), as the files backend's per-user index
does: another tenant's words never change a user's scores. Ties within a leg are broken by
(``created_at``, id), the files backend's order.

Lexical terms: each point records the tokenizer version its sparse vector was made with
(``terms_version``); opening the collection makes again the vectors of every point an older
tokenizer made (``_reindex_stale_terms``), so a query's new terms meet old facts' new terms.
On a server several replicas may do it at once: each writes the same vectors, and only the
sparse vector and the stamp, so a fact written meanwhile keeps its payload.

Writes of one user are serialised in this process. With several processes writing to one
Qdrant server, two concurrent records with the same key for the same user can both be stored
open; reads resolve that as the files backend does (``qdrant.key_race``): the newest per key
is recalled, listed and exported as open, the older reads as superseded by it (``get`` by id
returns it so, as files do: id reads hide nothing), and the next record of that key or a
maintenance pass (``settle_stored_facts``) writes the closure down.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from indexing.embeddings import Embedder
from indexing.lexical import average_length
from indexing.sparse import AVG_DOC_LEN, AVG_SOURCE_LEN, SparseTerms, document_vector
from indexing.tokenize import TOKENIZER_VERSION
from memory_service.config.retrieval import RetrievalConfig
from memory_service.config.settings import QdrantSettings
from memory_service.domain.context import RuntimeContext, scope_context, validate_id
from memory_service.domain.errors import ConfigurationError
from memory_service.domain.facts import Fact, utcnow
from memory_service.domain.paths import WorkspacePaths
from memory_service.longterm.access import AccessMark, applied
from memory_service.longterm.base_store import BaseLongTermMemory
from memory_service.longterm.fusion import fact_terms, wants_coverage
from memory_service.longterm.qdrant.embedder_records import QdrantEmbedderRecords
from memory_service.longterm.qdrant.engine import QdrantEngine, RewritesDeleted
from memory_service.longterm.qdrant.filters import OwnerFilter
from memory_service.longterm.qdrant.key_race import KeyRaces
from memory_service.longterm.qdrant.layout import EMBEDDER_FIELD
from memory_service.longterm.qdrant.payload import fact_of, payload_of
from memory_service.longterm.qdrant.points import StoredPoint
from memory_service.longterm.qdrant.scope_mirror import ScopeMirrors
from memory_service.longterm.qdrant.search import Searcher, read_scope
from memory_service.longterm.recording import RecordPlan
from memory_service.longterm.store_embedder import require_embedder
from memory_service.longterm.store_values import (
    NO_CANDIDATES,
    Candidates,
    NearestRequest,
    ReadView,
    SearchRequest,
    StoredFacts,
    newest_holders,
    resolve_key_race,
)
from memory_service.observe.telemetry import timed_stage
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones

_LOCK_STRIPES = 64
_REINDEX_BATCH = 1000
log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Read(StoredFacts):
    points: dict[str, StoredPoint]  # stored points with their vectors, to rewrite them as is


class QdrantLongTermMemory(BaseLongTermMemory[_Read]):
    """``LongTermMemory`` over a Qdrant collection, through any ``QdrantEngine``."""

    backend_name = "Qdrant"

    def __init__(
        self,
        engine: QdrantEngine,
        embedder: Embedder,
        *,
        retrieval: RetrievalConfig | None = None,
        clock: Callable[[], datetime] = utcnow,
        hold_shared_scopes: bool = True,
        verify_embedder: bool = True,
        **options: Any,  # the base's: expiry, confidence, track_access, tombstones, ...
    ) -> None:
        """``hold_shared_scopes``: answer small agent and tenant scopes from memory where the
        engine allows (``qdrant.scope_mirror``); False asks the engine for every scope (the
        reference its answers are compared with). ``verify_embedder`` False: open a
        collection of another embedding model (``store_embedder``) for what needs no vector,
        as erasing a user; anything else refuses it before a write."""
        super().__init__(embedder, retrieval=retrieval, clock=clock, **options)
        self.engine = engine
        if verify_embedder:
            require_embedder(QdrantEmbedderRecords(engine), embedder)
        self._races = KeyRaces(engine)
        self._searcher = Searcher(engine, self._races)
        held = hold_shared_scopes and ScopeMirrors.can_hold(engine)
        self._mirrors = ScopeMirrors(engine) if held else None
        self._locks = [threading.Lock() for _ in range(_LOCK_STRIPES)]
        self.reindexed = self._reindex_stale_terms()
        self.shared_words_dropped = self._drop_shared_user_words()

    def _drop_shared_user_words(self) -> int:
        """Every agent's and tenant's point whose source quotes a user
        (``Source.quotes_a_user``) is written again without that text, its sparse vector made
        again without its words, as a record into a shared scope now does (``Fact.stamped``);
        returns how many, logged. Shared scopes are small (one scroll per agent and tenant);
        a second open finds nothing. An engine that keeps replaced payloads in its files
        (``RewritesDeleted``: Edge) is rewritten after, so the words leave its bytes too."""
        dropped = 0
        for tenant in self.engine.tenants():
            owners = [scope_context(tenant, "agent", a) for a in self.engine.agents(tenant)]
            for ctx in [*owners, scope_context(tenant, "tenant")]:
                with self._write_lock(ctx):
                    points = self.engine.scroll(OwnerFilter.of(ctx), with_vectors=True)
                    rewritten = []
                    for point in points:
                        fact = fact_of(point.id, point.payload)
                        if fact.source is None or not fact.source.quotes_a_user:
                            continue
                        kept = replace(fact, source=fact.source.for_shared_scope())
                        payload = payload_of(ctx, kept, embedder=_model_of(point))
                        sparse = self._lexical(kept)
                        rewritten.append(replace(point, payload=payload, sparse=sparse))
                    self.engine.upsert(rewritten)
                    dropped += len(rewritten)
        if dropped:
            if isinstance(self.engine, RewritesDeleted):
                self.engine.rewrite_without_deleted()
            log.info(
                "dropped the users' source text of %d shared facts in %s",
                dropped,
                self.engine.description,
            )
        return dropped

    def _reindex_stale_terms(self) -> int:
        """Make again, with this tokenizer, the sparse vector of every point an older one
        made (``terms_version`` another or absent: the terms of a query would miss them), in
        batches, and return how many there were. Nothing to do costs one empty read. Each
        batch leaves the stale set, so the loop ends. A point that comes back stale was
        written meanwhile by a process of an older version (a rolling upgrade of replicas on
        one server): it is left for the next open, and the loop stops there."""
        done: set[str] = set()
        while stale := self.engine.stale_terms(TOKENIZER_VERSION, _REINDEX_BATCH):
            fresh = [p for p in stale if p.id not in done]
            if not fresh:
                log.warning(
                    "%s: facts are being written with an older tokenizer's terms; they are "
                    "re-indexed when this collection is next opened",
                    self.engine.description,
                )
                break
            rebuilt = [replace(p, sparse=self._lexical(fact_of(p.id, p.payload))) for p in fresh]
            self.engine.set_terms(rebuilt, TOKENIZER_VERSION)
            done.update(p.id for p in fresh)
        if done:
            log.info(
                "re-indexed the lexical terms of %d facts in %s (tokenizer version %d)",
                len(done),
                self.engine.description,
                TOKENIZER_VERSION,
            )
        return len(done)

    def _lexical(self, fact: Fact) -> SparseTerms:
        """The fact's BM25 document vector (``fact_terms``: its words, its source text's, its
        day). The fixed length norm counts a typical source message when the fact has one, so
        a fact with a source is not penalised for it against one without."""
        config = self.retrieval
        base = AVG_DOC_LEN
        if config.source_terms and fact.source_text:
            base += AVG_SOURCE_LEN
        avg_len = average_length(base, with_date=config.date_terms)
        return document_vector(fact_terms(fact, config), avg_len=avg_len)

    def _write_lock(self, ctx: RuntimeContext) -> threading.Lock:
        return self._locks[hash((ctx.tenant_id, ctx.owner)) % _LOCK_STRIPES]

    # -- BaseLongTermMemory hooks ---------------------------------------------------------

    def _read_for_record(
        self, ctx: RuntimeContext, stamped: Sequence[Fact], now: datetime
    ) -> _Read:
        ids = [f.id for f in stamped]
        points = self.engine.scroll(OwnerFilter.of(ctx, ids=ids))
        existing = [fact_of(p.id, p.payload) for p in points]
        keys = {f.key for f in [*stamped, *existing] if f.key is not None}
        open_points: dict[str, StoredPoint] = {}
        if keys:  # the keys' open points, expired ones too: they race like any other
            scope = OwnerFilter.of(ctx, keys=sorted(keys), open_only=True)
            open_points = {p.id: p for p in self.engine.scroll(scope, with_vectors=True)}
        facts = [fact_of(p.id, p.payload) for p in open_points.values()]
        holders = newest_holders(facts)
        raced = {f.id: shut for f in facts if (shut := resolve_key_race(f, holders)) is not f}
        by_id = {f.id: resolve_key_race(f, holders) for f in existing}
        active_by_key = {k: f for k, f in holders.items() if f.is_active(now)}
        return _Read(by_id, active_by_key, open_points, raced=raced)

    def _write_record(
        self,
        ctx: RuntimeContext,
        plan: RecordPlan,
        stored: _Read,
        dense_of: Mapping[str, np.ndarray],
        now: datetime,
    ) -> None:
        model = self._embedder.name  # the new and amended points' vectors are made now
        points = [  # an amended fact's lexical vector takes its new source's words
            StoredPoint(f.id, payload_of(ctx, f, embedder=model), dense, self._lexical(f))
            for f in [*plan.new.values(), *plan.amended.values()]
            for dense in [dense_of[f.id].tolist()]
        ]
        points += [  # their sparse vectors made again too: every payload written says how
            self._rewritten(ctx, stored.points[f.id], f) for f in plan.closed.values()
        ]
        self.engine.upsert(points)  # new, amended and closed points in one operation

    def _candidates(self, ctx: RuntimeContext, request: SearchRequest) -> Candidates:
        return self._ask([ctx], request)[0]

    def _candidates_each(
        self, owners: Sequence[RuntimeContext], request: SearchRequest
    ) -> list[Candidates]:
        """Every owner's legs in one engine request, each with its own filter and BM25 IDF
        (``qdrant.search``): a recall over three scopes pays one request, not three."""
        return self._ask(owners, request)

    def _ask(self, owners: Sequence[RuntimeContext], request: SearchRequest) -> list[Candidates]:
        # a small shared scope is answered from memory (``qdrant.scope_mirror``), one known to
        # hold nothing not at all
        mirrors = [self._mirrors.of(o) if self._mirrors else None for o in owners]
        asked = [i for i, m in enumerate(mirrors) if i == 0 or m is None or len(m)]
        with timed_stage("engine"):  # every leg of every owner in one engine query
            found = self._searcher.candidates(
                [owners[i] for i in asked],
                request,
                expiry=self.expiry,
                coverage=wants_coverage(request.legs, self.retrieval),
                mirrors=[mirrors[i] for i in asked],
            )
        by_position = dict(zip(asked, found, strict=True))
        return [by_position.get(i, NO_CANDIDATES) for i in range(len(owners))]

    def _nearest(self, ctx: RuntimeContext, request: NearestRequest) -> list[Candidates]:
        """Every fact's dense request in one engine batch (``Searcher.nearest``)."""
        with timed_stage("engine"):
            return self._searcher.nearest(
                ctx,
                request,
                expiry=self.expiry,
                mirror=self._mirrors.of(ctx) if self._mirrors else None,
            )

    def _open_keys(self, ctx: RuntimeContext, keys: Sequence[str], now: datetime) -> set[str]:
        """The keys whose holder (the newest open fact: a lost race holds nothing) is live."""
        return self._races.held(ctx, keys, now)

    def _get(self, ctx: RuntimeContext, ids: Sequence[str]) -> Mapping[str, Fact]:
        """By id, whatever is stored; a fact that lost a key race reads as superseded."""
        stored = [
            fact_of(p.id, p.payload) for p in self.engine.scroll(OwnerFilter.of(ctx, ids=ids))
        ]
        return {f.id: f for f in self._races.resolve(ctx, stored)}

    def _list(self, ctx: RuntimeContext, *, include_inactive: bool, view: ReadView) -> list[Fact]:
        """The scope's facts, lost key races read as superseded (the base then applies
        ``view``: a listing shows the newest per key, an export the older one as closed)."""
        if include_inactive:
            scope = OwnerFilter.of(ctx, facts=view.filter)
        else:
            scope = read_scope(ctx, view, self.expiry)
        return self._races.resolve(
            ctx, [fact_of(p.id, p.payload) for p in self.engine.scroll(scope)]
        )

    def _read_for_update(self, ctx: RuntimeContext, ids: Sequence[str]) -> _Read:
        points = {
            p.id: p for p in self.engine.scroll(OwnerFilter.of(ctx, ids=ids), with_vectors=True)
        }
        return _Read({i: fact_of(i, p.payload) for i, p in points.items()}, {}, points)

    def _write_update(
        self, ctx: RuntimeContext, changes: Mapping[str, Fact], stored: _Read
    ) -> None:
        # the BM25 vector may index the date (date_terms): it follows created_at
        self.engine.upsert(
            [self._rewritten(ctx, stored.points[fid], new) for fid, new in changes.items()]
        )

    def _rewritten(self, ctx: RuntimeContext, point: StoredPoint, fact: Fact) -> StoredPoint:
        """``point`` holding ``fact``: its stored dense vector (and that vector's model), the
        payload and the lexical vector of ``fact``."""
        payload = payload_of(ctx, fact, embedder=_model_of(point))
        return replace(point, payload=payload, sparse=self._lexical(fact))

    def _write_access(self, ctx: RuntimeContext, marks: Mapping[str, AccessMark]) -> None:
        stored = self.engine.scroll(OwnerFilter.of(ctx, ids=list(marks)))  # deleted: skipped
        updates = {}
        for point in stored:
            fact = applied(fact_of(point.id, point.payload), marks[point.id])
            last = fact.last_accessed_at.isoformat() if fact.last_accessed_at else None
            updates[point.id] = {"access_count": fact.access_count, "last_accessed_at": last}
        self.engine.set_payload(OwnerFilter.of(ctx, ids=list(updates)), updates)

    def _delete(self, ctx: RuntimeContext, ids: Sequence[str]) -> int:
        return self._remove(OwnerFilter.of(ctx, ids=ids))

    def _forget(self, ctx: RuntimeContext) -> int:
        with self._write_lock(ctx):
            return self._remove(OwnerFilter.of(ctx))

    def count_user(self, ctx: RuntimeContext) -> int:
        self._check_open()
        return self.engine.count(OwnerFilter.of(ctx))

    def erase_user(self, ctx: RuntimeContext) -> int:
        """``forget``, then (an engine that keeps deleted payloads in its files) a rewrite of
        the collection without them, every time: an erase that died before it left them."""
        count = self.forget(ctx)
        if isinstance(self.engine, RewritesDeleted):
            self.engine.rewrite_without_deleted()
        return count

    def _remove(self, scope: OwnerFilter) -> int:
        count = self.engine.count(scope)
        if count:
            self.engine.delete(scope)
        return count

    def _release(self) -> None:
        self.engine.close()

    def compact_deleted(self) -> bool:
        """Leave no deleted text in the engine's files (``CompactsDeleted``): Edge rewrites
        its shard if a delete since the last rewrite left some; a server vacuums by itself."""
        self._check_open()
        return isinstance(self.engine, RewritesDeleted) and self.engine.compact_deleted()

    # -- capabilities: SettlesStoredFacts, ListsUsers, ListsAgents ----------------------------

    def settle_stored_facts(self, ctx: RuntimeContext) -> dict[str, int]:
        """Write down what reading resolves (maintenance): each open fact that lost a key
        race gets its ``superseded_by`` / ``valid_to``. Points have no repeated copies."""
        self._check_open()
        with self._write_lock(ctx):
            return {"exact_duplicates": 0, "superseded": self._races.settle(ctx)}

    def tenants(self) -> list[str]:
        """Tenants with facts in the collection (the scheduler's sweep)."""
        return self.engine.tenants()

    def users(self, tenant_id: str) -> list[str]:
        """Users of ``tenant_id`` with at least one stored fact (for export)."""
        self._check_open()
        return self.engine.users(validate_id(tenant_id, "tenant_id"))

    def agents(self, tenant_id: str) -> list[str]:
        """Agents of ``tenant_id`` with at least one shared fact (export, maintenance)."""
        self._check_open()
        return self.engine.agents(validate_id(tenant_id, "tenant_id"))


def _model_of(point: StoredPoint) -> str | None:
    """The model stored with ``point``'s dense vector (None: stored before points named it)."""
    model = point.payload.get(EMBEDDER_FIELD)
    return model if isinstance(model, str) else None


def open_qdrant(
    settings: QdrantSettings,
    workspace: Path,
    embedder: Embedder,
    *,
    retrieval: RetrievalConfig | None = None,
    tombstones: Tombstones | None = None,
    **options: Any,
) -> QdrantLongTermMemory:
    """The memory over the configured engine (``open_engine``). ``tombstones``: the erased
    users' (default: the workspace's)."""
    engine = open_engine(settings, workspace, embedder.dimension)
    try:
        return QdrantLongTermMemory(
            engine,
            embedder,
            retrieval=retrieval,
            tombstones=tombstones if tombstones is not None else FilesTombstones(workspace),
            **options,
        )
    except BaseException:  # refused (another embedding model): the folder is not kept locked
        engine.close()
        raise


def open_engine(settings: QdrantSettings, workspace: Path, dimension: int) -> QdrantEngine:
    """The configured engine: a server at ``url``, else Qdrant Edge in ``path`` (default
    ``<workspace>/qdrant``), the collection being the folder ``<path>/<collection>``."""
    if settings.url and settings.path is not None:
        raise ConfigurationError(
            "MEMORY_QDRANT__URL and MEMORY_QDRANT__PATH are both set: a server (url) or "
            "Qdrant Edge in a folder (path), not both"
        )
    if settings.url:
        from memory_service.longterm.qdrant.client_engine import ClientEngine

        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        return ClientEngine.connect(
            settings.url,
            settings.collection,
            dimension,
            api_key=api_key,
            timeout_s=settings.timeout_s,
        )
    from memory_service.longterm.qdrant.edge.engine import EdgeEngine

    root = settings.path if settings.path is not None else WorkspacePaths(workspace).qdrant_dir
    return EdgeEngine.acquire(Path(root) / settings.collection, dimension)
