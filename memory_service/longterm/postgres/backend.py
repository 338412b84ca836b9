"""PostgreSQL backend: facts, their dense vectors (pgvector) and BM25 postings in one database.

Every write of one owner (a user, an agent's or the tenant's shared memory) is one transaction
that first takes a transaction-scoped advisory lock of that owner (``_write_lock``): a
record's read, its near-duplicate check and its write see one state, in whichever process
they run, and a connection lost halfway leaves nothing of it (the transaction rolls back).
A partial unique index on the open facts' keys makes two open facts on one key impossible
even for a writer that skipped the lock; every write that leaves a keyed fact open closes
the others on its key as reading would resolve them (``store_values.newest_holders``), so
stored state and read state are one. Reads take a pooled connection and no lock.

Recall reads the owners' rows kept in the process (``owner_cache``) after one round trip that
checks their versions, and reads them again where a version moved; where none are kept (a
read inside a write, an owner over the bound) it is ``search``'s statement: BM25 with the
files backend's per-owner statistics, and pgvector's cosine, each filtered inside the query,
every scope's legs in one statement on a connection outside any transaction
(``Database.read``: one round trip). Both score alike; fusion is the base's. A deleted fact
leaves its text in the table's free space until the table is rewritten: each maintenance pass
that follows a delete does it (``compact_deleted``: ``VACUUM FULL`` of the two tables).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
import psycopg

from indexing.embeddings import Embedder
from indexing.tokenize import TOKENIZER_VERSION
from memory_service.config.retrieval import RetrievalConfig
from memory_service.config.settings import PostgresSettings
from memory_service.domain.context import RuntimeContext, scope_context, validate_id
from memory_service.domain.errors import ConfigurationError
from memory_service.domain.facts import Fact, utcnow
from memory_service.longterm.access import AccessMark, applied
from memory_service.longterm.base_store import BaseLongTermMemory
from memory_service.longterm.fusion import LegHit
from memory_service.longterm.postgres.conditions import Where, live, owner_where, view_where
from memory_service.longterm.postgres.embedder_records import PostgresEmbedderRecords
from memory_service.longterm.postgres.owner_cache import (
    OwnerCache,
    OwnerRows,
    load,
    rows_query,
    versions,
)
from memory_service.longterm.postgres.owner_cache import search as search_kept
from memory_service.longterm.postgres.rows import (
    FACT_COLUMNS,
    Document,
    document_of,
    fact_of,
    fact_row,
    with_binary_terms,
)
from memory_service.longterm.postgres.schema import ensure_tables, lock_versions
from memory_service.longterm.postgres.search import (
    Ask,
    FactCache,
    Found,
    QueryTerms,
    floored,
    nearest,
    recall,
)
from memory_service.longterm.recording import RecordPlan
from memory_service.longterm.store_embedder import require_embedder
from memory_service.longterm.store_values import (
    NO_CANDIDATES,
    Candidates,
    NearestRequest,
    ReadView,
    SearchRequest,
    StoredFacts,
    merge_floors,
    newest_holders,
    resolve_key_race,
)
from memory_service.observe.telemetry import timed_stage
from memory_service.stores.binary_arrays import Int4s, Int8s, Uuids, Vectors, vector_type_oid
from memory_service.stores.database import DSN_SETTING, Database
from memory_service.stores.tombstones.postgres import PostgresTombstones

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_REINDEX_BATCH = 1000
_ROW_COLUMNS = (
    "id",
    "tenant_id",
    "owner",
    "scope",
    "user_id",
    "agent_id",
    "key",
    "is_open",
    "created_at",
    "expires_at",
    "importance",
    "fact",
    "access_count",
    "last_accessed_at",
    "doc_len",
    "terms",
    "tfs",
)
# the columns that differ from row to row of one write (the owner's are one value a write)
_OWN_COLUMNS = (
    ("id", "uuid"),
    ("key", "text"),
    ("is_open", "boolean"),
    ("created_at", "timestamptz"),
    ("expires_at", "timestamptz"),
    ("importance", "int"),
    ("fact", "text"),
    ("access_count", "int"),
    ("last_accessed_at", "timestamptz"),
    ("doc_len", "int"),
    ("terms_from", "int"),
    ("terms_count", "int"),
)


def _upsert(vector: str) -> str:
    """One statement for a write's new facts (inserted, or replacing a row of the same id):
    each column that varies by row one array, the rows made by ``unnest`` in the arrays'
    order (closed facts first: the open keys' index checks each row as it goes), and the
    rows' ragged term ids and counts each one flat array, every row its slice. One
    statement, not a statement a row: PostgreSQL starts its executor once."""
    # binary: in text form psycopg escapes every quote of every fact's JSON with a regex
    arrays = ", ".join(f"%({c})b::{t}[]" for c, t in _OWN_COLUMNS)
    names = ", ".join(c for c, _ in _OWN_COLUMNS)
    ragged = "[r.terms_from + 1 : r.terms_from + r.terms_count]"
    updated = (*_ROW_COLUMNS[1:], "embedding", "embedder", "terms_version")
    return (
        f"INSERT INTO longterm_facts ({', '.join(_ROW_COLUMNS)}, embedding, embedder, "
        "terms_version) SELECT r.id, %(tenant_id)s, %(owner)s, %(scope)s, %(user_id)s, "
        "%(agent_id)s, r.key, r.is_open, r.created_at, r.expires_at, r.importance, "
        "r.fact::jsonb, r.access_count, r.last_accessed_at, r.doc_len, "
        f"(%(terms)s::bigint[]){ragged}, (%(tfs)s::int[]){ragged}, r.embedding, "
        "%(embedder)s, %(terms_version)s "
        f"FROM unnest({arrays}, %(embedding)s::{vector}[]) AS r({names}, embedding) "
        "ON CONFLICT (id) DO UPDATE SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in updated)
    )


_REWRITE = (
    "UPDATE longterm_facts SET "
    + ", ".join(f"{c} = %({c})s" for c in _ROW_COLUMNS[6:])
    + ", terms_version = %(terms_version)s"
    + " WHERE id = %(id)s AND tenant_id = %(tenant_id)s AND owner = %(owner)s"
)


@dataclass(slots=True)
class _Read(StoredFacts):
    """What a write read (the base's ``by_id`` and ``open_by_key``)."""


class PostgresLongTermMemory(BaseLongTermMemory[_Read]):
    """``LongTermMemory`` over the ``longterm_*`` tables of one PostgreSQL ``Database``."""

    backend_name = "PostgreSQL"
    rewrites_vectors = False  # an amended fact keeps its stored vector: its text is the same

    def __init__(
        self,
        database: Database,
        embedder: Embedder,
        *,
        retrieval: RetrievalConfig | None = None,
        clock: Callable[[], datetime] = utcnow,
        verify_embedder: bool = True,
        owns_database: bool = False,
        kept_facts: int,
        **options: Any,  # the base's: expiry, confidence, track_access, tombstones, ...
    ) -> None:
        """``owns_database``: ``close`` closes ``database`` too. ``kept_facts``: how many
        facts of the owners it recalls the process keeps in memory (``owner_cache``; 0:
        every recall is the statement's). ``tombstones`` (among the
        base's options): default, those of ``database``. ``verify_embedder`` False:
        open a store of another embedding model (``store_embedder``) for what needs no
        vector, as erasing a user."""
        if options.get("tombstones") is None:  # the erased users' in this same database
            options["tombstones"] = PostgresTombstones(database)
        super().__init__(embedder, retrieval=retrieval, clock=clock, **options)
        self.database = database
        self._owns_database = owns_database
        self.ext = ensure_tables(database)
        self._vector = '"' + self.ext.replace('"', '""') + '".vector'
        with database.connection() as conn:
            self._vector_oid = vector_type_oid(conn, self._vector)
        self._upsert = _upsert(self._vector)
        self._held = threading.local()  # this thread's open write transactions, by owner
        self._parsed = FactCache()
        self._kept = OwnerCache(kept_facts)
        self._rows_query = rows_query(self.ext)
        if verify_embedder:
            require_embedder(PostgresEmbedderRecords(database, self.ext), embedder)
        self.reindexed = self._reindex_stale_terms()
        self.shared_words_dropped = self._drop_shared_user_words()

    # -- connections and the owner's lock ----------------------------------------------------

    def _stack(self) -> dict[tuple[str, str], psycopg.Connection]:
        held = getattr(self._held, "conns", None)
        if held is None:
            held = self._held.conns = {}
        return held

    @contextmanager
    def _write_lock(self, ctx: RuntimeContext) -> Iterator[psycopg.Connection]:
        """One transaction holding the owner's advisory lock until it commits or rolls back;
        nested for the same owner, the transaction already open."""
        held = self._stack()
        owner = (ctx.tenant_id, ctx.owner)
        if owner in held:
            yield held[owner]
            return
        with self.database.connection() as conn:
            self.database.lock_key(conn, f"longterm\x1f{ctx.tenant_id}\x1f{ctx.owner}")
            held[owner] = conn
            try:
                yield conn
            finally:
                del held[owner]

    @contextmanager
    def _conn(self, ctx: RuntimeContext | None = None) -> Iterator[psycopg.Connection]:
        """The owner's open write transaction (or any this thread holds), else a pooled
        connection for one read."""
        held = self._stack()
        if ctx is not None and (ctx.tenant_id, ctx.owner) in held:
            yield held[(ctx.tenant_id, ctx.owner)]
        elif held:
            yield next(reversed(held.values()))
        else:
            with self.database.connection() as conn:
                yield conn

    # -- writing rows -------------------------------------------------------------------------

    def _document(self, fact: Fact) -> Document:
        return document_of(fact, self.retrieval)

    def _row(self, ctx: RuntimeContext, fact: Fact, document: Document) -> dict[str, Any]:
        row = fact_row(ctx, fact, document, fact.expires_at)
        row["terms_version"] = TOKENIZER_VERSION
        return row

    def _put(
        self,
        conn: psycopg.Connection,
        ctx: RuntimeContext,
        facts: Sequence[Fact],
        dense_of: Mapping[str, np.ndarray],
    ) -> None:
        """Write ``facts`` whole: with a vector in ``dense_of``, inserted or replaced; without,
        their stored row rewritten (its vector kept). Their terms are made again. Closed
        facts go first, so the open keys' index never sees two at once."""
        if not facts:
            return
        ordered = sorted(facts, key=lambda f: f.superseded_by is None and f.valid_to is None)
        upserts, rewrites = [], []
        for fact in ordered:
            row = self._row(ctx, fact, self._document(fact))
            if fact.id in dense_of:
                upserts.append(row)
            else:
                rewrites.append(with_binary_terms(row))
        with conn.cursor() as cur:
            if rewrites:
                cur.executemany(_REWRITE, rewrites)
            if upserts:
                vectors = Vectors([dense_of[row["id"]] for row in upserts], self._vector_oid)
                cur.execute(self._upsert, _upsert_params(upserts, vectors, self._embedder.name))

    def _with_keys_held(
        self, conn: psycopg.Connection, ctx: RuntimeContext, writing: Mapping[str, Fact]
    ) -> dict[str, Fact]:
        """``writing`` and the stored open facts it displaces, as reading resolves them: of
        the open facts on each key ``writing`` leaves open (stored ones too, expired or
        not), the newest holds it and the others are closed by it."""
        keys = sorted(
            {
                f.key
                for f in writing.values()
                if f.key is not None and f.superseded_by is None and f.valid_to is None
            }
        )
        if not keys:
            return dict(writing)
        rows = conn.execute(
            f"SELECT {FACT_COLUMNS} FROM longterm_facts WHERE tenant_id = %s AND owner = %s "
            "AND is_open AND key = ANY(%s) AND NOT (id = ANY(%s::uuid[]))",
            (ctx.tenant_id, ctx.owner, keys, list(writing)),
        ).fetchall()
        stored = [fact_of(r) for r in rows]
        holders = newest_holders([*stored, *writing.values()])
        out = {fid: resolve_key_race(f, holders) for fid, f in writing.items()}
        for fact in stored:
            resolved = resolve_key_race(fact, holders)
            if resolved is not fact:
                out[fact.id] = resolved
        return out

    # -- BaseLongTermMemory hooks ---------------------------------------------------------

    def _select(self, conn: psycopg.Connection, where: Where, tail: str = "") -> list[Fact]:
        rows = conn.execute(
            f"SELECT {FACT_COLUMNS} FROM longterm_facts f WHERE {where.text} {tail}", where.params
        ).fetchall()
        return [fact_of(r) for r in rows]

    def _read_for_record(
        self, ctx: RuntimeContext, stamped: Sequence[Fact], now: datetime
    ) -> _Read:
        with self._conn(ctx) as conn:
            ids = [f.id for f in stamped]
            existing = self._select(conn, owner_where(ctx).add("f.id = ANY(%s::uuid[])", ids))
            keys = sorted({f.key for f in [*stamped, *existing] if f.key is not None})
            open_by_key: dict[str, Fact] = {}
            if keys:
                where = owner_where(ctx).add("f.is_open AND f.key = ANY(%s)", keys)
                open_by_key = {
                    f.key: f for f in self._select(conn, where) if f.key and f.is_active(now)
                }
        return _Read({f.id: f for f in existing}, open_by_key)

    def _write_record(
        self,
        ctx: RuntimeContext,
        plan: RecordPlan,
        stored: _Read,
        dense_of: Mapping[str, np.ndarray],
        now: datetime,
    ) -> None:
        with self._conn(ctx) as conn:
            writing = {**plan.closed, **plan.amended, **plan.new}
            facts = self._with_keys_held(conn, ctx, writing)
            vectors = {fid: dense_of[fid] for fid in plan.new if fid in dense_of}
            self._put(conn, ctx, list(facts.values()), vectors)

    def _candidates(self, ctx: RuntimeContext, request: SearchRequest) -> Candidates:
        return self._candidates_each([ctx], request)[0]

    def _candidates_each(
        self, owners: Sequence[RuntimeContext], request: SearchRequest
    ) -> list[Candidates]:
        """Every owner's legs, each owner with its own statistics; a wider owner's hits only
        above ``merge_floors`` of the first, as the files backend keeps them (fewer keys for
        the base to compare)."""
        each = self._legs_each(owners, request)
        first = _candidates_of(*each[0])
        floors = merge_floors(first, request.depth)
        return [first, *(_candidates_of(floored(legs, floors), f) for legs, f in each[1:])]

    def _legs_each(
        self, owners: Sequence[RuntimeContext], request: SearchRequest
    ) -> list[tuple[dict[str, list[LegHit]], Found]]:
        """Each owner's legs and what they were found in: the owners' kept rows where
        ``_kept_rows`` has them, else one statement for all of them."""
        view, depth = request.view, request.depth
        terms = QueryTerms.of(request.terms)
        vector = request.vector if "dense" in request.legs else None
        bm25 = "bm25" in request.legs
        kept = self._kept_rows(owners)
        if kept is not None:
            each = [
                search_kept(rows, view, terms, vector, depth, request.threshold, bm25=bm25)
                for rows in kept
            ]
            return [(found.legs[0], found) for found in each]
        asks = [Ask((o.tenant_id, o.owner), view_where(o, view), view.history) for o in owners]

        def work(conn: psycopg.Connection, cache: FactCache | None) -> Found:
            return recall(
                conn,
                self.ext,
                asks,
                terms,
                vector,
                depth,
                request.threshold,
                bm25=bm25,
                cache=cache,
            )

        with timed_stage("engine"):
            found = self._read(owners[0], work)
        return [(legs, found) for legs in found.legs]

    def _kept_rows(self, owners: Sequence[RuntimeContext]) -> list[OwnerRows] | None:
        """Each owner's rows as they are now, from memory where the owner's version did not
        move (one round trip for the kept owners' versions, one more for the rows of every
        owner not kept or whose version moved); None where the statement answers instead:
        inside a write (which reads its own rows), an owner too large to keep, owners of
        several tenants."""
        keys = [(o.tenant_id, o.owner) for o in owners]
        if self._stack() or not all(self._kept.kept_whole(k) for k in keys):
            return None
        tenant = keys[0][0]
        if any(k[0] != tenant for k in keys):
            return None

        def work(conn: psycopg.Connection) -> list[OwnerRows]:
            kept: dict[tuple[str, str], OwnerRows | None] = {}
            held = [k for k in keys if self._kept.peek(k) is not None]
            if held:  # those kept: one round trip for their versions
                now = versions(conn, tenant, [k[1] for k in held])
                kept = {k: self._kept.get(k, now.get(k[1], 0)) for k in held}
            wanted = [k for k in keys if kept.get(k) is None]
            if wanted:  # the rest, and those whose version moved: one more for their rows
                names = list(dict.fromkeys(k[1] for k in wanted))
                read = load(conn, self._rows_query, tenant, names, self._parsed, self.expiry)
                for name, rows in read.items():
                    self._kept.put((tenant, name), rows)
                    kept[(tenant, name)] = rows
            return [kept[k] for k in keys]  # type: ignore[misc]

        with timed_stage("engine"):
            return self.database.read(work)

    def _nearest(self, ctx: RuntimeContext, request: NearestRequest) -> list[Candidates]:
        """Each fact's dense leg over the owner's facts (with the vector it is stored with),
        in the write's transaction, every fact in one statement."""
        view = request.view
        ask = Ask((ctx.tenant_id, ctx.owner), view_where(ctx, view), view.history)
        with self._conn(ctx) as conn, timed_stage("dense"):
            found = nearest(
                conn,
                self.ext,
                self._vector_oid,
                ask,
                request.vectors,
                request.depth,
                request.threshold,
            )
        return [Candidates(f.legs[0], f.fact) for f in found]

    def _read(
        self, ctx: RuntimeContext, work: Callable[[psycopg.Connection, FactCache | None], _T]
    ) -> _T:
        """``work`` in the owner's open write transaction (or any this thread holds), else
        on a pooled connection in one round trip (``Database.read``) with the process's
        parsed facts (``FactCache``: committed rows only)."""
        held = self._stack()
        if held:
            conn = held.get((ctx.tenant_id, ctx.owner)) or next(reversed(held.values()))
            return work(conn, None)
        return self.database.read(lambda conn: work(conn, self._parsed))

    def _open_keys(self, ctx: RuntimeContext, keys: Sequence[str], now: datetime) -> set[str]:
        where = owner_where(ctx).add("f.is_open AND f.key = ANY(%s)", list(keys))
        live(where, self.expiry, now)
        with self._conn(ctx) as conn:
            rows = conn.execute(
                f"SELECT DISTINCT f.key FROM longterm_facts f WHERE {where.text}", where.params
            ).fetchall()
        return {r[0] for r in rows}

    def _get(self, ctx: RuntimeContext, ids: Sequence[str]) -> Mapping[str, Fact]:
        with self._conn(ctx) as conn:
            found = self._select(conn, owner_where(ctx).add("f.id = ANY(%s::uuid[])", list(ids)))
        return {f.id: f for f in found}

    def _list(self, ctx: RuntimeContext, *, include_inactive: bool, view: ReadView) -> list[Fact]:
        """The owner's facts oldest first: all of them, or those ``view`` admits."""
        where = owner_where(ctx) if include_inactive else view_where(ctx, view)
        with self._conn(ctx) as conn:
            return self._select(conn, where, "ORDER BY f.created_at, f.id")

    def _read_for_update(self, ctx: RuntimeContext, ids: Sequence[str]) -> _Read:
        return _Read(dict(self._get(ctx, ids)), {})

    def _write_update(
        self, ctx: RuntimeContext, changes: Mapping[str, Fact], stored: _Read
    ) -> None:
        with self._conn(ctx) as conn:
            self._put(conn, ctx, list(self._with_keys_held(conn, ctx, changes).values()), {})

    def _delete(self, ctx: RuntimeContext, ids: Sequence[str]) -> int:
        with self._conn(ctx) as conn:
            gone = conn.execute(
                "DELETE FROM longterm_facts WHERE tenant_id = %s AND owner = %s "
                "AND id = ANY(%s::uuid[])",
                (ctx.tenant_id, ctx.owner, Uuids(ids)),
            ).rowcount
            if gone:
                conn.execute("INSERT INTO longterm_deletes DEFAULT VALUES")
        self._kept.drop((ctx.tenant_id, ctx.owner))  # no deleted text kept in memory either
        return max(gone, 0)

    def _forget(self, ctx: RuntimeContext) -> int:
        with self._write_lock(ctx) as conn:
            gone = conn.execute(
                "DELETE FROM longterm_facts WHERE tenant_id = %s AND owner = %s",
                (ctx.tenant_id, ctx.owner),
            ).rowcount
            # the owner's version row too (it names the owner): a version is never drawn
            # twice, so whatever another process kept of the owner is read again
            conn.execute(
                "DELETE FROM longterm_versions WHERE tenant_id = %s AND owner = %s",
                (ctx.tenant_id, ctx.owner),
            )
            if gone:
                conn.execute("INSERT INTO longterm_deletes DEFAULT VALUES")
        self._kept.drop((ctx.tenant_id, ctx.owner))
        return max(gone, 0)

    def _write_access(self, ctx: RuntimeContext, marks: Mapping[str, AccessMark]) -> None:
        with self._conn(ctx) as conn:
            stored = self._get(ctx, list(marks))  # deleted meanwhile: skipped
            rows = []
            for fid, fact in stored.items():
                after = applied(fact, marks[fid])
                rows.append((after.access_count, after.last_accessed_at, fid))
            if rows:
                with conn.cursor() as cur:
                    cur.executemany(
                        "UPDATE longterm_facts SET access_count = %s, last_accessed_at = %s "
                        "WHERE id = %s",
                        rows,
                    )

    def count_user(self, ctx: RuntimeContext) -> int:
        self._check_open()
        with self._conn(ctx) as conn:
            row = conn.execute(
                "SELECT count(*) FROM longterm_facts WHERE tenant_id = %s AND owner = %s",
                (ctx.tenant_id, ctx.owner),
            ).fetchone()
        return int(row[0]) if row else 0

    def _release(self) -> None:
        self._kept.clear()
        if self._owns_database:
            self.database.close()

    # -- at open --------------------------------------------------------------------------

    def _reindex_stale_terms(self) -> int:
        """Make again, with this tokenizer, the terms an older one made, in batches; how
        many facts. A fact found stale twice is being written by an older process, and one
        whose owner another process is writing now (``lock_versions``): left for the next
        open."""
        done: set[str] = set()
        skipped: set[str] = set()
        while True:
            with self.database.connection() as conn:
                rows = conn.execute(
                    f"SELECT {FACT_COLUMNS}, tenant_id, owner, scope, agent_id, user_id "
                    "FROM longterm_facts WHERE terms_version <> %s ORDER BY id LIMIT %s "
                    "FOR UPDATE SKIP LOCKED",
                    (TOKENIZER_VERSION, _REINDEX_BATCH),
                ).fetchall()
                fresh = [r for r in rows if str(r[0]) not in done | skipped]
                if not fresh:
                    break
                free = lock_versions(conn, {(r[4], r[5]) for r in fresh})
                for row in fresh:
                    if (row[4], row[5]) not in free:  # its owner is being written: next open
                        skipped.add(str(row[0]))
                        continue
                    ctx = _owner_of(row[4], row[6], row[7], row[8])
                    fact = fact_of(row)
                    columns = with_binary_terms(self._row(ctx, fact, self._document(fact)))
                    conn.execute(
                        "UPDATE longterm_facts SET doc_len = %(doc_len)s, terms = %(terms)s, "
                        "tfs = %(tfs)s, terms_version = %(terms_version)s WHERE id = %(id)s",
                        columns,
                    )
                    done.add(fact.id)
        if done:
            log.info(
                "re-indexed the lexical terms of %d facts in PostgreSQL (tokenizer version %d)",
                len(done),
                TOKENIZER_VERSION,
            )
        return len(done)

    def _drop_shared_user_words(self) -> int:
        """Every agent's and tenant's fact whose source quotes a user
        (``Source.quotes_a_user``) loses that text, as a record into a shared scope drops
        it (``Fact.stamped``); how many, logged."""
        with self.database.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT tenant_id, owner, scope, agent_id FROM longterm_facts "
                "WHERE scope <> 'user' AND (fact->'source'->>'text' IS NOT NULL "
                "OR jsonb_path_exists(fact, '$.phrasings[*].source.text'))"
            ).fetchall()
        dropped = 0
        for tenant, _owner, scope, agent in rows:
            ctx = scope_context(tenant, scope, agent)
            with self._write_lock(ctx) as conn:
                facts = self._select(conn, owner_where(ctx))
                changed = [
                    replace(f, source=f.source.for_shared_scope())
                    for f in facts
                    if f.source is not None and f.source.quotes_a_user
                ]
                self._put(conn, ctx, changed, {})
                dropped += len(changed)
        if dropped:
            log.info("dropped the users' source text of %d shared facts in PostgreSQL", dropped)
        return dropped

    # -- capabilities: SettlesStoredFacts, CompactsDeleted, ListsUsers, ListsAgents ----------

    def settle_stored_facts(self, ctx: RuntimeContext) -> dict[str, int]:
        """Nothing to settle: no copy repeats a fact (one row an id) and no two open facts
        share a key (the open keys' unique index)."""
        self._check_open()
        return {"exact_duplicates": 0, "superseded": 0}

    def compact_deleted(self) -> bool:
        """Rewrite the tables when a delete happened since the last rewrite, so no deleted
        text stays in their files (a plain ``VACUUM`` frees a deleted row's space but leaves
        its bytes there until overwritten); whether it had to. ``VACUUM FULL`` locks the
        tables while it runs: reads and writes wait."""
        self._check_open()
        with self.database.connection() as conn:
            row = conn.execute("SELECT count(*), max(at) FROM longterm_deletes").fetchone()
        if not row or not row[0]:
            return False
        with self.database.connection() as conn:
            conn.autocommit = True
            try:
                conn.execute("VACUUM FULL longterm_facts")
                conn.execute("DELETE FROM longterm_deletes WHERE at <= %s", (row[1],))
            finally:
                conn.autocommit = False
        return True

    def tenants(self) -> list[str]:
        self._check_open()
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT DISTINCT tenant_id FROM longterm_facts WHERE scope = 'user' ORDER BY 1"
            ).fetchall()
        return [r[0] for r in rows]

    def users(self, tenant_id: str) -> list[str]:
        self._check_open()
        tenant = validate_id(tenant_id, "tenant_id")
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT DISTINCT user_id FROM longterm_facts WHERE tenant_id = %s "
                "AND scope = 'user' ORDER BY 1",
                (tenant,),
            ).fetchall()
        return [r[0] for r in rows]

    def agents(self, tenant_id: str) -> list[str]:
        self._check_open()
        tenant = validate_id(tenant_id, "tenant_id")
        with self._conn() as conn:
            rows = conn.execute(
                "SELECT DISTINCT agent_id FROM longterm_facts WHERE tenant_id = %s "
                "AND scope = 'agent' ORDER BY 1",
                (tenant,),
            ).fetchall()
        return [r[0] for r in rows]


def _upsert_params(rows: Sequence[dict[str, Any]], vectors: Vectors, embedder: str) -> dict:
    """``_upsert``'s parameters for ``rows`` (``fact_row``'s, of one owner)."""
    first = rows[0]
    params: dict[str, Any] = {
        name: first[name] for name in ("tenant_id", "owner", "scope", "user_id", "agent_id")
    }
    params |= {"embedding": vectors, "embedder": embedder}
    params["terms_version"] = first["terms_version"]
    for name in ("key", "is_open", "created_at", "expires_at", "fact", "last_accessed_at"):
        params[name] = [row[name] for row in rows]
    for name in ("importance", "access_count", "doc_len"):
        params[name] = Int4s([row[name] for row in rows])
    params["id"] = Uuids([row["id"] for row in rows])
    counts = [len(row["terms"]) for row in rows]
    params["terms_count"] = Int4s(counts)
    params["terms_from"] = Int4s(np.cumsum([0, *counts[:-1]]))
    params["terms"] = Int8s([term for row in rows for term in row["terms"]])
    params["tfs"] = Int4s([tf for row in rows for tf in row["tfs"]])
    return params


def _candidates_of(legs: Mapping[str, list[LegHit]], found: Found) -> Candidates:
    if not legs:
        return NO_CANDIDATES
    if not any(legs.values()):
        return Candidates(legs, found.fact)
    return Candidates(legs, found.fact, key_of=found.key, text_of=found.text)


def _owner_of(tenant: str, scope: str, agent: str | None, user: str | None) -> RuntimeContext:
    if scope == "user":
        return RuntimeContext(tenant, str(user))
    return scope_context(tenant, scope, agent)


def open_postgres(
    settings: PostgresSettings,
    embedder: Embedder,
    *,
    database: Database | None = None,
    **options: Any,
) -> PostgresLongTermMemory:
    """The memory in the PostgreSQL of ``MEMORY_POSTGRES__DSN`` (its schema), over
    ``database`` when the process has one open there already (the replica state's), else a
    pool of its own. Unreachable, or without pgvector: a ``ConfigurationError`` of one line."""
    owns = database is None
    if database is None:
        database = _own_database(settings)
    try:
        return PostgresLongTermMemory(
            database,
            embedder,
            owns_database=owns,
            kept_facts=settings.recall_kept_facts,
            **options,
        )
    except BaseException:
        if owns:
            database.close()
        raise


def _own_database(settings: PostgresSettings) -> Database:
    if not settings.dsn:
        raise ConfigurationError(
            f"{DSN_SETTING}: MEMORY_LONGTERM__BACKEND=postgres needs the database to use"
        )
    return Database(
        settings.dsn,
        pool_min=settings.pool_min,
        pool_max=settings.pool_max,
        connect_timeout_s=settings.connect_timeout_s,
        schema=settings.schema_name,
        name="memory-longterm",
    )


@contextmanager
def open_postgres_records(settings: PostgresSettings) -> Iterator[PostgresEmbedderRecords]:
    """The store's embedding-model record and vectors (``reembed``), on a pool of its own,
    closed on the way out."""
    database = _own_database(settings)
    try:
        yield PostgresEmbedderRecords(database, ensure_tables(database))
    finally:
        database.close()
