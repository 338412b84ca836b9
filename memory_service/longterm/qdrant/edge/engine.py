"""Qdrant Edge (``qdrant-edge-py``): Qdrant's engine in-process, one shard in one folder.

Why Edge for the embedded engine: a user-filtered hybrid query at 100k points takes about a
millisecond here, seconds in qdrant-client's local mode. One process owns a folder: Edge
locks it (even a second open in the same process fails), so one instance per folder is shared
through ``acquire``/``close`` reference counting, and ``acquire`` first takes the folder's own
OS lock (``edge.folder_lock``), because a second process's failed Edge open damages the
owner's files. Another process gets a ``BackendUnavailableError`` that names the folder and
its owner before anything of the folder is touched. Errors of a call name only the collection
(they reach API clients); the folder and the cause go to the log. Every write is durable when
it returns: its write-ahead log is fsynced, and the segments are flushed every few seconds and
on close (``edge.commit``).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from indexing.sparse import SparseTerms
from memory_service.domain.context import validate_id
from memory_service.domain.errors import BackendUnavailableError
from memory_service.domain.facts import Fact
from memory_service.longterm.qdrant.edge.commit import EdgeCommit
from memory_service.longterm.qdrant.edge.compaction import Compaction, RewriteJournal
from memory_service.longterm.qdrant.edge.filters import edge_filter
from memory_service.longterm.qdrant.edge.folder_lock import FolderLock, FolderOwnedError
from memory_service.longterm.qdrant.edge.held_points import (
    CANDIDATE_FIELD_POINTS,
    FACT_POINTS,
    Entry,
    HeldPoints,
    OwnedFact,
    entry,
    point_key,
)
from memory_service.longterm.qdrant.edge.shard import (
    copy_of_empty,
    in_use_error,
    open_shard,
    read_ahead,
    stored_datatype,
)
from memory_service.longterm.qdrant.errors import engine_calls
from memory_service.longterm.qdrant.filters import OwnerFilter, owner_key_of
from memory_service.longterm.qdrant.layout import (
    AGENT_FIELD,
    DENSE,
    EMBEDDER_FIELD,
    SPARSE,
    TENANT_FIELD,
    TERMS_FIELD,
    USER_FIELD,
    check_dense_size,
)
from memory_service.longterm.qdrant.payload import fact_of
from memory_service.longterm.qdrant.points import (
    StoredPoint,
    as_floats,
    stored_point,
    upsert_vectors,
)
from memory_service.longterm.qdrant.query_plan import (
    CANDIDATE_FIELDS,
    LegRequest,
    QueryPlan,
    ScoredHit,
)
from memory_service.longterm.qdrant.write_counts import SharedWrites
from memory_service.observe.foreground import FOREGROUND
from memory_service.stores.fsutil import fsync_dir, read_text, write_atomically

SCROLL_PAGE = 1000
# A rewrite's page: the binding holds the GIL through each of its calls (scroll, upsert), and
# the conversion between them holds it too, so a request that arrives during a page waits for
# it: sixteen points take about two milliseconds.
COPY_PAGE = 16
# The longest a rewrite's page waits for a moment with no call under way (``FOREGROUND``):
# under calls that never pause it goes on at a page per this long at least.
STEP_ASIDE_S = 0.01
# A rewrite that steps aside (nobody waits for it, calls run beside it) takes quarter pages
# and rests three times as long as each took: a call that meets a page waits a quarter as
# long, and the copy takes a quarter of one core instead of half. Under calls that never
# pause it goes at a page per ``STEP_ASIDE_S``, 5,000 points in about 20 s, when nothing else
# wants the GIL; when the calls keep both cores busy each page also waits its turn for the
# GIL and rests three times that long: a minute or two (``benchmarks/RESULTS.md``).
STEP_ASIDE_PAGE = COPY_PAGE // 4
STEP_ASIDE_REST = 3.0
REWRITE_SUFFIX = ".rewrite"  # the new shard while a rewrite builds it
REPLACED_SUFFIX = ".replaced"  # the old shard between the two renames of a rewrite
DELETED_SUFFIX = ".deleted"  # a marker beside the folder: deleted text is still in its bytes
EMPTY_SUFFIX = (
    ".empty"  # an empty shard beside the folder, which each rewrite starts from a copy of
)
# the collection's record of its embedding model (``store_embedder``), beside the folder: a
# rewrite replaces the folder whole, and Edge keeps no metadata of its own
EMBEDDER_SUFFIX = ".embedder.json"
# A delete starts the shard's rewrite in the background when it holds at most this many points
# (a rewrite copies the collection: about a minute per 100k points on 2 loaded cores by
# ``benchmarks/latency/erase.py``, so a few seconds at 5,000, all of it beside the calls it
# does not hold up); a larger shard is rewritten by the next maintenance pass, on close, or at
# the next open after a kill (the marker says one is owed).
REWRITE_AT_ONCE_POINTS = 5000

log = logging.getLogger(__name__)
_registry: dict[Path, EdgeEngine] = {}
_NO_TERMS = SparseTerms((), ())
_registry_lock = threading.Lock()


def _sparse(terms: SparseTerms) -> qe.SparseVector:
    return qe.SparseVector(list(terms.indices), list(terms.values))


def _entry(record: Any) -> Entry:
    """A record read with ``CANDIDATE_FIELDS`` and its sparse vector, as held."""
    stored = (record.vector or {}).get(SPARSE)
    terms = stored.indices if stored is not None else ()
    return entry(str(record.id), dict(record.payload or {}), terms)


def _written(point: StoredPoint) -> Entry:
    """What a read of ``point`` with ``CANDIDATE_FIELDS`` and its sparse vector holds, from
    the point as written."""
    fields = {name: point.payload[name] for name in CANDIDATE_FIELDS if name in point.payload}
    return entry(point.id, fields, point.sparse.indices if point.sparse is not None else ())


def _vectors(point: StoredPoint) -> dict[str, Any]:
    dense, sparse = upsert_vectors(point)
    return {DENSE: dense, SPARSE: _sparse(sparse)}


def _copied(record: Any) -> qe.Point:
    """A record read with its payload and vectors as the point to write elsewhere, its values
    handed back as the binding gave them: no ``StoredPoint`` between, which cost a page of a
    rewrite a tenth of its time (a missing sparse vector written empty, as ``stored_point``
    reads it)."""
    vectors = record.vector or {}
    if SPARSE not in vectors:
        vectors = {**vectors, SPARSE: _sparse(_NO_TERMS)}
    return qe.Point(record.id, vectors, record.payload or {})


def _request(plan: QueryPlan, leg: LegRequest, where: qe.Filter) -> qe.QueryRequest:
    """One request of ``plan`` as Edge's type (``where``: its owner's filter), asking for
    ids and scores alone: the hits' fields come from what the engine holds (``HeldPoints``)."""
    query: Any = leg.dense if leg.sparse is None else _sparse(leg.sparse)
    params = None if leg.idf_corpus is None else _idf_params(leg.idf_corpus)
    return qe.QueryRequest(
        limit=plan.limit,
        query=qe.Query.Nearest(query, using=leg.leg),
        filter=where,
        with_payload=False,
        with_vector=False,
        score_threshold=leg.threshold,
        params=params,
    )


@lru_cache(maxsize=1024)
def _idf_params(corpus: OwnerFilter) -> qe.SearchParams:
    """A BM25 request's IDF over ``corpus``: the same owner's open facts recall after recall
    (no time in it), so built once (Edge copies what a request is given)."""
    return qe.SearchParams(idf=qe.IdfParams(corpus=edge_filter(corpus)))


class _SharedLock:
    """Many calls share the shard; a rewrite, which replaces it, waits for them and holds
    them off."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing)
            self._writing = True
            self._cond.wait_for(lambda: self._readers == 0)
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


def _other_model(model: str) -> qe.Filter:
    """Points whose dense vector names another model than ``model``, or none."""
    return qe.Filter(must_not=[qe.FieldCondition(EMBEDDER_FIELD, match=qe.MatchValue(model))])


def _sibling(folder: Path, suffix: str) -> Path:
    return folder.with_name(folder.name + suffix)


def _recover_rewrite(folder: Path) -> None:
    """Finish what a rewrite killed half-way left: the old shard back if the new one never
    took its place, and no copy of a replaced shard kept (it holds what was erased)."""
    replaced, building = _sibling(folder, REPLACED_SUFFIX), _sibling(folder, REWRITE_SUFFIX)
    if not folder.exists() and replaced.is_dir():
        os.rename(replaced, folder)
    for leftover in (building, replaced):
        if leftover.exists():
            shutil.rmtree(leftover)


class EdgeEngine:
    """One Edge shard (the collection) in ``folder``; get it with ``acquire``."""

    shared = False  # the folder lock keeps other processes out; this one serialises a user

    def __init__(self, folder: Path, shard: qe.EdgeShard, dimension: int, lock: FolderLock) -> None:
        self.folder = folder
        self.dimension = dimension
        self.description = f"qdrant-edge ({folder})"
        self._shard = shard
        self._lock = lock
        self._users = 0
        self._swap = _SharedLock()
        self.commit = EdgeCommit(folder)
        self.writes = 0
        self.vector_datatype = stored_datatype(folder)
        self._touched = SharedWrites()  # a rewrite keeps every live point: it counts for none
        # what recalls read of each point, held: every write here forgets what it changes
        self._fields: HeldPoints[int, Entry] = HeldPoints(CANDIDATE_FIELD_POINTS)
        self._facts: HeldPoints[str, OwnedFact] = HeldPoints(FACT_POINTS)
        self._rewriting = threading.RLock()  # one rewrite at a time
        self._journal: RewriteJournal | None = None  # the writes a rewrite's copy must replay
        # a delete's rewrite, which nobody waits for, steps aside for the calls under way
        self.compaction = Compaction(
            lambda: self.compact_deleted(step_aside=True), f"edge-compaction {folder.name}"
        )

    def shared_writes(self, scope: OwnerFilter) -> int:
        return self._touched.of(scope)

    @classmethod
    def acquire(cls, folder: Path, dimension: int) -> EdgeEngine:
        """The process's engine for ``folder``, opened on first use; ``close`` releases it.
        The first open locks the folder before Edge touches a file of it."""
        folder = Path(folder).resolve()
        with _registry_lock:
            engine = _registry.get(folder)
            if engine is None:
                engine = cls._open(folder, dimension)
                _registry[folder] = engine
            elif engine.dimension != dimension:
                check_dense_size(engine.dimension, dimension, f"the Qdrant Edge folder {folder}")
            engine._users += 1
            return engine

    @classmethod
    def _open(cls, folder: Path, dimension: int) -> EdgeEngine:
        try:
            lock = FolderLock.take(folder)
        except FolderOwnedError as exc:
            raise in_use_error(folder, exc.owner) from None
        except OSError as exc:
            message = f"cannot lock the Qdrant Edge folder {folder}: {exc}"
            raise BackendUnavailableError(message) from exc
        try:
            _recover_rewrite(folder)
            engine = cls(folder, open_shard(folder, dimension), dimension, lock)
            engine.compact_deleted(rest=False)  # one a kill left owed; no call runs yet
            return engine
        except BaseException:
            lock.release()
            raise

    def close(self) -> None:
        with _registry_lock:
            self._users -= 1
            if self._users > 0:
                return
            _registry.pop(self.folder, None)
            try:
                self.compaction.stop()
                self.compact_deleted(rest=False)  # the last user is gone: no call to spare
                self.commit.flush(self._shard)
            finally:
                try:
                    self._shard.close()
                finally:
                    self._lock.release()

    @contextmanager
    def _calls(self) -> Iterator[None]:
        with self._calls_errors(), self._swap.shared():
            yield

    def upsert(self, points: Sequence[StoredPoint]) -> None:
        if not points:
            return
        batch = [qe.Point(p.id, _vectors(p), p.payload) for p in points]
        ids = [p.id for p in points]
        written = {point_key(p.id): _written(p) for p in points}
        with self._calls(), self._forgetting(ids, written=written):
            self._journaled(ids)
            self._shard.update(qe.UpdateOperation.upsert_points(batch))
            self.commit.after_write(self._shard)
            self.writes += 1
            self._touched.add({owner_key_of(p.payload) for p in points})

    @contextmanager
    def _forgetting(
        self,
        ids: Sequence[str] | None,
        *,
        written: Mapping[int, Entry] | None = None,
        fields: bool = True,
    ) -> Iterator[None]:
        """A write's points (None: all) forgotten by what recalls hold (``HeldPoints``)
        before it and after it, so no recall keeps what the write changed, however the two
        interleave. ``written``: the candidate fields of the points a whole-point write
        stores, held once it succeeds (a recall of a fact just recorded reads nothing of it).
        ``fields`` False: the write changes none of them (their fields stay held)."""
        keys: list[int] | None = None
        epoch = None
        if fields:  # the written points' keys are those of ``ids``
            if ids is not None:
                keys = list(written) if written is not None else [point_key(i) for i in ids]
            epoch = self._fields.forget(keys)
        self._facts.forget(ids)
        succeeded = False
        try:
            yield
            succeeded = True
        finally:
            self._facts.forget(ids)
            if epoch is not None and succeeded and written is not None:
                self._fields.hold_written(written, epoch)
            elif epoch is not None:
                self._fields.forget(keys)

    def query(self, plan: QueryPlan) -> list[dict[str, list[ScoredHit]]]:
        if not plan.requests:
            return plan.hits([])
        wheres = [edge_filter(search.scope) for search in plan.searches]
        requests = [_request(plan, leg, wheres[leg.owner]) for leg in plan.requests]
        with self._calls():  # one planned batch: one pass over the segments for every owner
            results = self._shard.query_batch(qe.QueryBatchRequest(requests))
            epoch = self._fields.epoch
            # a point's id is a UUID the binding builds on each read: read once, as its key
            scored = [[(p.id.int, p.score) for p in points] for points in results]
            held, missing = self._fields.held({key for points in scored for key, _ in points})
            if missing:  # read once, with the terms whether or not this plan wants them
                asked = [uuid.UUID(int=key) for key in missing]
                records = self._shard.retrieve(asked, list(CANDIDATE_FIELDS), [SPARSE])
                read = {point_key(e[3]): e for e in map(_entry, records)}
                self._fields.fill(read, epoch)
                held.update(read)
        return plan.held_hits(scored, held)

    def scroll(
        self, scope: OwnerFilter, *, with_vectors: bool = False, with_payload: bool = True
    ) -> list[StoredPoint]:
        where = edge_filter(scope)
        out: list[StoredPoint] = []
        offset = None
        with self._calls():
            while True:
                request = qe.ScrollRequest(
                    offset=offset,
                    limit=SCROLL_PAGE,
                    filter=where,
                    with_payload=with_payload,
                    with_vector=with_vectors,
                )
                records, offset = self._shard.scroll(request)
                out += [stored_point(r, with_vectors) for r in records]
                if offset is None:
                    return out

    def facts(self, scope: OwnerFilter, ids: Sequence[str]) -> dict[str, Fact]:
        if not ids:
            return {}
        with self._calls():
            epoch = self._facts.epoch
            held, missing = self._facts.held(ids)
            if missing:
                records = self._shard.retrieve(missing, True, False)
                points = [stored_point(r, False) for r in records]
                read = {p.id: (owner_key_of(p.payload), fact_of(p.id, p.payload)) for p in points}
                self._facts.fill(read, epoch)
                held.update(read)
        owner = scope.owner_key()
        return {pid: fact for pid, (held_by, fact) in held.items() if held_by == owner}

    def set_payload(self, scope: OwnerFilter, values: Mapping[str, dict[str, Any]]) -> None:
        if not values:
            return
        # only the scope's points, never others: their ids alone (the payloads are not read)
        named = self.scroll(replace(scope, ids=tuple(values)), with_payload=False)
        present = {p.id for p in named}
        # an access note changes no candidate field: what recalls hold of them stays
        fields = any(name in CANDIDATE_FIELDS for payload in values.values() for name in payload)
        with self._calls(), self._forgetting(list(values), fields=fields):
            self._journaled(present)
            for point_id, payload in values.items():
                if point_id in present:
                    self._shard.update(qe.UpdateOperation.set_payload([point_id], payload))
            self.commit.after_write(self._shard)
            self.writes += 1
            self._touched.add({scope.owner_key()})

    def count(self, scope: OwnerFilter) -> int:
        with self._calls():
            return int(self._shard.count(qe.CountRequest(exact=True, filter=edge_filter(scope))))

    def _journaled(self, ids: Sequence[str] | set[str]) -> None:
        """Note a write's points for a rewrite copying the shard now (called under the shared
        lock, which the rewrite takes exclusively to start and end its journal)."""
        if self._journal is not None:
            self._journal.wrote(ids)

    def delete(self, scope: OwnerFilter) -> None:
        """Delete the scope's points; their text leaves the folder's bytes once the rewrite
        this starts in the background (``compaction``) has run when the shard is small
        (``REWRITE_AT_ONCE_POINTS``), else at the next ``compact_deleted``."""
        marker = _sibling(self.folder, DELETED_SUFFIX)
        where = edge_filter(scope)
        # what recalls hold of the deleted points only: a search after a delete that forgot
        # every point read all its candidates again (several times its usual time)
        named = list(scope.ids) if scope.ids is not None else None
        with self._calls(), self._forgetting(named):
            marker.touch(mode=0o600)  # before the delete: a kill after it leaves the marker
            fsync_dir(self.folder.parent)
            if self._journal is not None:
                self._journal.deleted(where)
            self._shard.update(qe.UpdateOperation.delete_points_by_filter(where))
            self.commit.after_write(self._shard)
            self.writes += 1
            self._touched.add({scope.owner_key()})
            left = int(self._shard.count(qe.CountRequest(exact=True)))
        if left <= REWRITE_AT_ONCE_POINTS:
            self.compaction.request()

    def compact_deleted(self, *, rest: bool = True, step_aside: bool = False) -> bool:
        """Rewrite the shard if a delete since the last rewrite left text in its bytes (the
        marker says so); whether it did. Maintenance calls it once a pass."""
        with self._rewriting:  # a rewrite just waited for may have paid what was owed
            if not _sibling(self.folder, DELETED_SUFFIX).exists():
                return False
            self.rewrite_without_deleted(rest=rest, step_aside=step_aside)
            return True

    def rewrite_without_deleted(
        self,
        *,
        on_copied: Callable[[int], None] | None = None,
        rest: bool = True,
        step_aside: bool = False,
    ) -> None:
        """Rebuild the shard from its live points. Edge keeps a deleted point's payload in its
        write-ahead log and in segments not yet vacuumed, so the text of a deleted fact would
        stay in the folder's bytes until then. The new shard is built beside the folder while
        calls go on (the writes made meanwhile are journaled and replayed into it), then
        swapped in by two renames while calls wait for the swap alone; ``_recover_rewrite``
        finishes a swap a kill interrupted. A delete made during the copy leaves its text in
        the new shard: the marker stays, and the next rewrite takes it out. ``on_copied``:
        told the points copied so far after each page (a caller's progress); ``rest``: the
        copy rests between pages (``_copy_into``), off when no call can run beside it;
        ``step_aside``: each page waits for a moment with no call under way, for a rewrite
        nobody waits for (an erase's own request is one such call). It
        costs a copy of the collection (about a minute per 100k points on 2 loaded cores
        without rests: ``benchmarks/latency/erase.py``)."""
        building = _sibling(self.folder, REWRITE_SUFFIX)
        with self._rewriting:
            for leftover in (building, _sibling(self.folder, REPLACED_SUFFIX)):
                if leftover.exists():
                    shutil.rmtree(leftover)
            with self._swap.exclusive():  # no write under way: every later one is journaled
                journal = self._journal = RewriteJournal()
            try:
                fresh: qe.EdgeShard | None
                with self._calls_errors():
                    empty = _sibling(self.folder, EMPTY_SUFFIX)
                    fresh = copy_of_empty(building, empty, self.dimension)
                try:
                    with self._calls():
                        self._copy_into(fresh, on_copied, rest=rest, step_aside=step_aside)
                        fresh.flush()  # the bulk of the copy on disk before calls wait
                    read_ahead(building)  # what its load reads, cached before calls wait
                    # nothing held is forgotten: the new shard holds what the old one did
                    with self._swap.exclusive(), self._calls_errors():
                        self._journal = None
                        if self._replay(journal, fresh):
                            fresh.flush()
                        fresh.close()
                        fresh = None
                        self._swap_in(building, owed=bool(journal.deletes))
                finally:
                    if fresh is not None:
                        fresh.close()
                    _recover_rewrite(self.folder)  # the replaced shard's files, and its text
            finally:
                self._journal = None
        if journal.deletes:
            self.compaction.request()

    def _copy_into(
        self,
        fresh: qe.EdgeShard,
        on_copied: Callable[[int], None] | None,
        *,
        rest: bool,
        step_aside: bool,
    ) -> None:
        """Every live point into ``fresh``, a page at a time: the copy runs beside the calls
        it must not slow, in the same process (the binding holds the GIL through each call),
        so with ``step_aside`` each page waits for a moment with no call under way (at most
        ``STEP_ASIDE_S``), is a quarter as big and rests three times as long as it took; with
        ``rest`` alone it rests as long as it took. It takes half of one core at most (a
        quarter stepping aside), and a call waits for one small page at most."""
        offset = None
        copied = 0
        page = STEP_ASIDE_PAGE if step_aside else COPY_PAGE
        rest_for = STEP_ASIDE_REST if step_aside else 1.0
        while True:
            if step_aside:
                FOREGROUND.wait_idle(STEP_ASIDE_S)
            began = time.perf_counter()
            request = qe.ScrollRequest(
                offset=offset, limit=page, with_payload=True, with_vector=True
            )
            records, offset = self._shard.scroll(request)
            if records:
                points = [_copied(r) for r in records]
                fresh.update(qe.UpdateOperation.upsert_points(points))
                copied += len(points)
                if on_copied is not None:
                    on_copied(copied)
            if offset is None:
                return
            if rest:
                time.sleep(rest_for * (time.perf_counter() - began))

    def _replay(self, journal: RewriteJournal, fresh: qe.EdgeShard) -> bool:
        """What the writes during the copy changed, into ``fresh``: the deletes first, then
        each written point as the old shard holds it now (or gone, if a delete took it);
        whether there was any."""
        for where in journal.deletes:
            fresh.update(qe.UpdateOperation.delete_points_by_filter(where))
        ids = sorted(journal.ids)
        for start in range(0, len(ids), SCROLL_PAGE):
            page = ids[start : start + SCROLL_PAGE]
            records = self._shard.retrieve(page, True, True)
            if records:
                fresh.update(qe.UpdateOperation.upsert_points([_copied(r) for r in records]))
            gone = sorted(set(page) - {str(r.id) for r in records})
            if gone:
                fresh.update(qe.UpdateOperation.delete_points(gone))
        return bool(journal.deletes or ids)

    def _swap_in(self, building: Path, *, owed: bool) -> None:
        """The shard built in ``building`` in the folder's place (calls held off by the
        caller); ``owed``: deleted text was copied into it, the marker stays."""
        replaced = _sibling(self.folder, REPLACED_SUFFIX)
        # no flush: this shard is dropped, and its WAL (fsynced at every write) has it all
        # should the swap fail and the folder be opened again
        self._shard.close()
        swapped = False
        try:
            os.rename(self.folder, replaced)
            os.rename(building, self.folder)
            if not owed:
                _sibling(self.folder, DELETED_SUFFIX).unlink(missing_ok=True)
            fsync_dir(self.folder.parent)
            swapped = True
        finally:  # a shard open again; the old one's folder is removed after calls resume
            if not swapped:
                _recover_rewrite(self.folder)
            self._shard = open_shard(self.folder, self.dimension)
            self.vector_datatype = stored_datatype(self.folder)
            self.writes += 1

    def _calls_errors(self) -> AbstractContextManager[None]:
        """``_calls``'s error mapping, without taking the shared lock. Edge's text names the
        folder's files: the log only."""
        return engine_calls(log, f"Qdrant Edge {self.folder}", self._failed)

    def _failed(self, exc: Exception) -> str:
        return (
            f"Qdrant Edge failed on the collection {self.folder.name!r}; "
            "the service log has the details"
        )

    def tenants(self) -> list[str]:
        return self._values(None, TENANT_FIELD)

    def stale_terms(self, version: int, limit: int) -> list[StoredPoint]:
        current = qe.FieldCondition(TERMS_FIELD, match=qe.MatchValue(version))
        request = qe.ScrollRequest(
            limit=limit, filter=qe.Filter(must_not=[current]), with_payload=True
        )
        with self._calls():
            records, _ = self._shard.scroll(request)
        return [stored_point(r, False) for r in records]

    def set_terms(self, points: Sequence[StoredPoint], version: int) -> None:
        if not points:
            return
        vectors = [qe.PointVectors(p.id, {SPARSE: _sparse(p.sparse or _NO_TERMS)}) for p in points]
        with self._calls(), self._forgetting([p.id for p in points]):
            ids = [p.id for p in points]
            self._journaled(ids)
            self._shard.update(qe.UpdateOperation.update_vectors(vectors))
            self._shard.update(qe.UpdateOperation.set_payload(ids, {TERMS_FIELD: version}))
            self.commit.after_write(self._shard)
            self.writes += 1
            self._touched.add({owner_key_of(p.payload) for p in points})

    def embedder_record(self) -> str | None:
        return read_text(_sibling(self.folder, EMBEDDER_SUFFIX)) or None

    def write_embedder_record(self, record: str) -> None:
        write_atomically(_sibling(self.folder, EMBEDDER_SUFFIX), record + "\n")

    def stale_dense(self, model: str, limit: int) -> list[StoredPoint]:
        request = qe.ScrollRequest(limit=limit, filter=_other_model(model), with_payload=True)
        with self._calls():
            records, _ = self._shard.scroll(request)
        return [stored_point(r, False) for r in records]

    def count_stale_dense(self, model: str) -> int:
        request = qe.CountRequest(exact=True, filter=_other_model(model))
        with self._calls():
            return int(self._shard.count(request))

    def set_dense(self, points: Sequence[StoredPoint], model: str) -> None:
        if not points:
            return
        ids = [p.id for p in points]
        vectors = [qe.PointVectors(p.id, {DENSE: as_floats(p.dense or ())}) for p in points]
        with self._calls(), self._forgetting(ids):
            self._journaled(ids)
            self._shard.update(qe.UpdateOperation.update_vectors(vectors))
            self._shard.update(qe.UpdateOperation.set_payload(ids, {EMBEDDER_FIELD: model}))
            self.commit.after_write(self._shard)
            self.writes += 1
            self._touched.add({owner_key_of(p.payload) for p in points})

    def users(self, tenant_id: str) -> list[str]:
        return self._values(tenant_id, USER_FIELD)

    def agents(self, tenant_id: str) -> list[str]:
        return self._values(tenant_id, AGENT_FIELD)

    def _values(self, tenant_id: str | None, field: str) -> list[str]:
        """The distinct values of ``field`` among the tenant's points (every point's: None)."""
        tenant = None
        if tenant_id is not None:
            match = qe.MatchValue(validate_id(tenant_id))
            tenant = qe.Filter(must=[qe.FieldCondition(TENANT_FIELD, match=match)])
        with self._calls():
            points = int(self._shard.count(qe.CountRequest(exact=True, filter=tenant)))
            if points == 0:
                return []
            request = qe.FacetRequest(field, limit=points, exact=True, filter=tenant)
            return sorted(str(hit.value) for hit in self._shard.facet(request))
