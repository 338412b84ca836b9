"""Files backend: Markdown fact files are the source of truth; the index is derived.

Per user: ``MEMORY.md`` plus the daily ledgers ``memory/YYYY-MM-DD.md`` (see
``memory_service.domain.paths``), which are append-only: a record adds bullets to
today's ledger under
a file lock, as one atomic rewrite fsynced before returning that keeps every earlier line byte
for byte. What record and maintenance decide about facts already written (closed by a newer
one on the same key, merged into a near-duplicate, expired, their metadata updated or their
provenance attached) goes to the decisions journal beside the ledgers (``files.journal``),
never into a ledger line; only ``delete``, ``forget`` and the erase remove lines.
Reads use a per-user index (``files.index``: the journal applied, BM25 over the shared
tokenizer, a matrix of cached embeddings) kept until the files' stat signature changes, so a
fact file edited by hand is seen by the next retrieve. The memory semantics are
``BaseLongTermMemory``'s.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from indexing.embeddings import Embedder
from indexing.hashing import content_hash
from memory_service.config.retrieval import RetrievalConfig
from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.domain.facts import Fact, fact_id, utcnow
from memory_service.domain.paths import OwnerPaths, WorkspacePaths, id_folders
from memory_service.longterm.access import AccessMark
from memory_service.longterm.base_store import BaseLongTermMemory
from memory_service.longterm.files.access_store import AccessFiles, with_access
from memory_service.longterm.files.embedder_records import FilesEmbedderRecords
from memory_service.longterm.files.fact_files import (
    parse_fact_file,
    render_lines,
    rewrite_fact_file,
)
from memory_service.longterm.files.index import (
    Corpus,
    OwnerIndex,
    OwnerIndexes,
)
from memory_service.longterm.files.journal import (
    Decision,
    append_decisions,
    changed_fields,
    drop_decisions,
)
from memory_service.longterm.files.owner_files import fact_file_paths, owners_with_fact_files
from memory_service.longterm.files.vector_cache import add_vectors
from memory_service.longterm.files.vector_cache import cache_path as vector_cache_path
from memory_service.longterm.protocol import Settlement
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
)
from memory_service.observe.telemetry import timed_stage
from memory_service.stores.fsutil import (
    ensure_dir,
    file_lock,
    fsync_dir,
    read_text,
    write_atomically,
)
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones

log = logging.getLogger(__name__)

LEDGER_HEADER = "# Memory ledger {day}\n\n"


@dataclass(slots=True)
class _Read(StoredFacts):
    index: OwnerIndex  # the index the facts were read from (its paths say where each is)


class FileSystemLongTermMemory(BaseLongTermMemory[_Read]):
    """``LongTermMemory`` over a workspace of Markdown fact files."""

    backend_name = "files"
    # close drops the derived indexes only: the files are the store, and the next call reads
    # them again (tests and tools use close to see what a fresh process would)
    usable_after_close = True
    rewrites_vectors = False  # an amended fact's vector stays in the cache, by its text's hash

    def __init__(
        self,
        workspace: Path,
        embedder: Embedder,
        *,
        retrieval: RetrievalConfig | None = None,
        clock: Callable[[], datetime] = utcnow,
        expiry: ExpiryPolicy | None = None,
        tombstones: Tombstones | None = None,
        verify_embedder: bool = True,
        **options: Any,  # the base's: confidence, track_access, access_flush_s
    ) -> None:
        """``verify_embedder`` False: open a workspace of another embedding model
        (``store_embedder``) for what needs no vector, as erasing a user; anything else
        refuses it before a write."""
        if verify_embedder:
            require_embedder(FilesEmbedderRecords(Path(workspace)), embedder)
        super().__init__(
            embedder,
            retrieval=retrieval,
            clock=clock,
            expiry=expiry,
            tombstones=tombstones if tombstones is not None else FilesTombstones(workspace),
            **options,
        )
        self.workspace = Path(workspace)
        self._indexes = OwnerIndexes()
        self._access = AccessFiles()
        self.shared_words_dropped = self._drop_shared_user_words()

    def _drop_shared_user_words(self) -> int:
        """Every agent's and tenant's fact (daily fact files, archived ones too) whose source
        quotes a user (``Source.quotes_a_user``) loses that text, as a record into a shared
        scope now drops it (``Fact.stamped``); returns how many, logged. Run at every open:
        a second one finds nothing (one read of each shared fact file)."""
        tenants_dir = WorkspacePaths(self.workspace).tenants_dir
        dropped = 0
        for tenant in id_folders(tenants_dir) if tenants_dir.is_dir() else ():
            owners = [scope_context(tenant, "agent", a) for a in self.agents(tenant)]
            for ctx in [*owners, scope_context(tenant, "tenant")]:
                paths = self.paths(ctx)
                files = [p for p in fact_file_paths(paths) if p != paths.memory_md]
                if files:
                    dropped += self._drop_user_words(ctx, files)
        if dropped:
            log.info(
                "dropped the users' source text of %d shared facts in %s", dropped, self.workspace
            )
        return dropped

    def _drop_user_words(self, ctx: RuntimeContext, files: Sequence[Path]) -> int:
        dropped = 0
        with self._write_lock(ctx):
            for path in files:
                content = read_text(path)
                changes: dict[int, Fact | None] = {
                    line.line_no: replace(line.fact, source=line.fact.source.for_shared_scope())
                    for line in parse_fact_file(content, default_created_at=None)
                    if line.fact.source is not None and line.fact.source.quotes_a_user
                }
                if changes:
                    write_atomically(path, rewrite_fact_file(content, changes))
                    dropped += len(changes)
            if dropped:
                self._indexes.invalidate(ctx)
        return dropped

    # -- paths, locks, writes ---------------------------------------------------------------

    def paths(self, ctx: RuntimeContext) -> OwnerPaths:
        return OwnerPaths.of(self.workspace, ctx)

    def _write_lock(self, ctx: RuntimeContext) -> FileLock:
        paths = self.paths(ctx)
        ensure_dir(paths.root)
        return file_lock(paths.lock_file, timeout=60)

    def _index(self, ctx: RuntimeContext) -> OwnerIndex:
        """The user's index, rebuilt from the files if their signature changed."""
        return self._indexes.of(ctx, self.paths(ctx), self.expiry)

    def _remove_lines(self, ctx: RuntimeContext, path: Path, ids: set[str]) -> int:
        """Rewrite ``path`` atomically without the bullets of the facts ``ids`` (an explicit
        delete: the one write that removes ledger lines); how many went."""
        content = read_text(path)
        gone: dict[int, Fact | None] = {}
        for line in parse_fact_file(content, default_created_at=None):
            if fact_id(ctx.tenant_id, ctx.owner, content_hash(line.fact.text)) in ids:
                gone[line.line_no] = None
        if gone:
            write_atomically(path, rewrite_fact_file(content, gone))
        return len(gone)

    def _append_facts(self, paths: OwnerPaths, now: datetime, new: list[Fact]) -> Path:
        """New facts at the end of today's ledger (durable before this returns); its path.

        The ledger is rewritten whole with the new lines at its end (temp file, fsync,
        ``os.replace``), its earlier lines byte for byte: a kill or a power cut mid-write leaves
        the old file or the new one, never a torn bullet or half a batch (an append can be cut
        at a page boundary), and no reader ever parses a half-written line."""
        day = now.astimezone(UTC).date()
        today = paths.ledger(day)
        if new:
            lines = render_lines(new)
            if not today.exists():
                lines = LEDGER_HEADER.format(day=day.isoformat()) + lines
            content = read_text(today)
            if content and not content.endswith("\n"):
                content += "\n"  # a hand edit may have left the last line open
            write_atomically(today, content + lines)
        return today

    def _journal(self, paths: OwnerPaths, decisions: list[Decision]) -> int:
        """Append ``decisions`` to the owner's journal (under the write lock)."""
        return append_decisions(paths.decisions_journal, decisions)

    def _decision(self, fact: Fact, decision: str, why: str, **fields: Any) -> Decision:
        return Decision(fact.id, fact.content_hash, decision, why, self._clock(), **fields)

    def _changes(
        self, old: Mapping[str, Fact], new: Mapping[str, Fact], why: Callable[[Fact, Fact], str]
    ) -> list[Decision]:
        """A ``superseded`` or ``updated`` decision per fact of ``new`` whose metadata differs
        from ``old``'s (the fact as it reads now)."""
        out = []
        for fid, fact in new.items():
            before = old[fid]
            changed = changed_fields(before, fact)
            if not changed:
                continue
            closes = fact.superseded_by is not None and before.superseded_by is None
            kind = "superseded" if closes else "updated"
            out.append(self._decision(before, kind, why(before, fact), fields=changed))
        return out

    # -- BaseLongTermMemory hooks ---------------------------------------------------------

    def _read_for_record(
        self, ctx: RuntimeContext, stamped: Sequence[Fact], now: datetime
    ) -> _Read:
        index = self._index(ctx)
        open_by_key = {  # stored oldest first: the newest open fact per key stays
            s.fact.key: s.fact
            for s in index.stored
            if s.fact.key is not None and s.fact.is_active(now)
        }
        return _Read({i: s.fact for i, s in index.by_id.items()}, open_by_key, index)

    def _write_record(
        self,
        ctx: RuntimeContext,
        plan: RecordPlan,
        stored: _Read,
        dense_of: Mapping[str, np.ndarray],
        now: datetime,
    ) -> None:
        """The new facts appended to today's ledger first (durable), then what the plan
        decided about stored facts, journalled: a crash between the two leaves an extra open
        fact, which reading resolves (newest wins per key); it never loses an acknowledged
        fact, and no earlier ledger line is touched."""
        paths = self.paths(ctx)
        today = self._append_facts(paths, now, list(plan.new.values()))
        settled = stored.index.journal.settled
        joined = set(plan.merged_into.values())  # the stored facts near-duplicates joined
        merges = {fid: f for fid, f in plan.amended.items() if fid in joined}
        amended = {fid: f for fid, f in plan.amended.items() if fid not in joined}
        decisions = [
            self._decision(
                fact,
                "recorded",
                f"recorded again: reads as its line in {today.name}",
                in_file=today.name,
            )
            for fid, fact in plan.new.items()
            if fid in plan.revived or fid in settled
        ]
        decisions += self._changes(stored.by_id, plan.closed, _closed_by_record)
        decisions += self._changes(stored.by_id, amended, _amended_by_record)
        decisions += self._changes(stored.by_id, merges, _merged_by_record)
        self._journal(paths, decisions)
        # the vectors record computed go to the user's vector cache, read by the next search
        add_vectors(
            vector_cache_path(paths, self._embedder),
            self._embedder.dimension,
            {f.content_hash: dense_of[fid] for fid, f in plan.new.items() if fid in dense_of},
        )
        self._indexes.invalidate(ctx)

    def _candidates_each(
        self, owners: Sequence[RuntimeContext], request: SearchRequest
    ) -> list[Candidates]:
        """Each scope in turn, a wider one's hits only above ``merge_floors`` of the first."""
        first = self._candidates(owners[0], request)
        floors = merge_floors(first, request.depth)
        return [first, *(self._candidates(o, request, floors=floors) for o in owners[1:])]

    def _candidates(
        self,
        ctx: RuntimeContext,
        request: SearchRequest,
        floors: Mapping[str, float] | None = None,
    ) -> Candidates:
        """``floors``: per leg, only hits above it (``_candidates_each``)."""
        floors = floors or {}
        view, depth = request.view, request.depth
        index = self._index(ctx)
        corpus = index.corpus(view)
        if not corpus.facts:
            return NO_CANDIDATES
        allowed = corpus.mask(view)  # before any top-k: a filter never empties a leg early
        if not allowed.any():
            return NO_CANDIDATES
        ranked: dict[str, list[tuple[int, float]]] = {}
        terms = request.terms
        if "bm25" in request.legs:
            with timed_stage("bm25"):
                hits = corpus.bm25(self.retrieval).search(terms, depth, allowed)
            ranked["bm25"] = [(h.index, h.score) for h in hits]
        if "dense" in request.legs and request.vector is not None:
            with timed_stage("dense"):
                sims = self._dense_scores(ctx, corpus, allowed, request.vector)
                order = np.argsort(-sims, kind="stable")[:depth]
                order = order[allowed[order] & (sims[order] >= request.threshold)]
            ranked["dense"] = list(zip(order.tolist(), sims[order].tolist(), strict=True))
        found = list(dict.fromkeys(i for pairs in ranked.values() for i, _ in pairs))
        matched = corpus.matched(found, terms)  # a fact both legs found: looked up once
        leg_hits = {
            leg: corpus.hits(pairs, matched, floors.get(leg)) for leg, pairs in ranked.items()
        }
        stored_access = self._stored_access(ctx)
        return Candidates(
            leg_hits,
            lambda fid: with_access(index.by_id[fid].fact, stored_access),
            key_of=lambda fid: index.by_id[fid].fact.key,  # scopes compare keys: no access merge
        )

    def _nearest(self, ctx: RuntimeContext, request: NearestRequest) -> list[Candidates]:
        """Every fact's vector against the owner's embedding matrix in one product, each
        column cut as ``_candidates``' dense leg is."""
        index = self._index(ctx)
        corpus = index.corpus(request.view)
        allowed = corpus.mask(request.view) if corpus.facts else None
        if allowed is None or not allowed.any() or not request.vectors:
            return [NO_CANDIDATES] * len(request.vectors)
        with timed_stage("dense"):
            queries = np.stack(request.vectors, axis=1)
            sims = self._dense_scores(ctx, corpus, allowed, queries)  # facts x texts
        stored_access = self._stored_access(ctx)

        def fact(fid: str) -> Fact:
            return with_access(index.by_id[fid].fact, stored_access)

        out = []
        for column in sims.T:
            order = np.argsort(-column, kind="stable")[: request.depth]
            kept = [(int(i), float(column[i])) for i in order if column[i] >= request.threshold]
            hits = corpus.hits(kept, dict.fromkeys(i for i, _ in kept))
            out.append(Candidates({"dense": hits}, fact))
        return out

    def _dense_scores(
        self, ctx: RuntimeContext, corpus: Corpus, allowed: np.ndarray, queries: np.ndarray
    ) -> np.ndarray:
        """The cosine of each of the corpus's facts with ``queries`` (one vector, or one per
        column), -inf where ``allowed`` is false; the vectors come from the owner's cache,
        which is not kept when an erase began meanwhile."""
        if corpus.has_matrix:  # built by an earlier read, which checked the tombstone
            sims = corpus.matrix(self._embedder, None) @ queries
        else:
            cache_file = vector_cache_path(self.paths(ctx), self._embedder)
            sims = corpus.matrix(self._embedder, cache_file) @ queries
            if self._tombstones is not None and self._tombstones.refuses(ctx):
                cache_file.unlink(missing_ok=True)  # read before an erase: not to be kept
        mask = allowed if sims.ndim == 1 else allowed[:, None]
        return np.where(mask, sims, -np.inf)

    def _open_keys(self, ctx: RuntimeContext, keys: Sequence[str], now: datetime) -> set[str]:
        wanted = set(keys)
        stored = self._index(ctx).stored
        return {s.fact.key for s in stored if s.fact.key in wanted and s.fact.is_active(now)}

    def _get(self, ctx: RuntimeContext, ids: Sequence[str]) -> Mapping[str, Fact]:
        by_id = self._index(ctx).by_id
        access = self._stored_access(ctx)
        return {i: with_access(by_id[i].fact, access) for i in ids if i in by_id}

    def _list(self, ctx: RuntimeContext, *, include_inactive: bool, view: ReadView) -> list[Fact]:
        access = self._stored_access(ctx)  # the base applies ``view``
        return [with_access(s.fact, access) for s in self._index(ctx).stored]

    def _stored_access(self, ctx: RuntimeContext) -> dict[str, dict]:
        return self._access.read(self.paths(ctx).access_file)

    def _write_access(self, ctx: RuntimeContext, marks: Mapping[str, AccessMark]) -> None:
        self._access.add(self.paths(ctx).access_file, self._index(ctx).by_id.keys(), marks)

    def _read_for_update(self, ctx: RuntimeContext, ids: Sequence[str]) -> _Read:
        index = self._index(ctx)
        return _Read({i: index.by_id[i].fact for i in ids if i in index.by_id}, {}, index)

    def _write_update(
        self, ctx: RuntimeContext, changes: Mapping[str, Fact], stored: _Read
    ) -> None:
        """The new metadata journalled (the ledger lines stay as written)."""
        self._journal(self.paths(ctx), self._changes(stored.by_id, changes, _updated))
        self._indexes.invalidate(ctx)

    def _delete(self, ctx: RuntimeContext, ids: Sequence[str]) -> int:
        index = self._index(ctx)
        found = set(ids) & index.by_id.keys()
        for path, parsed in index.files.items():
            present = found.intersection(f.id for f in parsed.facts)
            if present:
                self._remove_lines(ctx, path, present)
        if found:  # the vector cache must not outlive the text it was computed from
            vector_cache_path(self.paths(ctx), self._embedder).unlink(missing_ok=True)
            self._access.drop(self.paths(ctx).access_file, found)
            drop_decisions(self.paths(ctx).decisions_journal, found)  # a source may be there
        self._indexes.invalidate(ctx)
        return len(found)

    def _forget(self, ctx: RuntimeContext) -> int:
        paths = self.paths(ctx)
        if not paths.root.exists():
            return 0
        with self._write_lock(ctx):
            count = len(self._index(ctx).stored)
            paths.memory_md.unlink(missing_ok=True)
            for derived in (paths.ledger_dir, vector_cache_path(paths, self._embedder).parent):
                if derived.exists():
                    shutil.rmtree(derived)
            fsync_dir(paths.root)
            self._indexes.invalidate(ctx)
        return count

    def _release(self) -> None:
        self._indexes.clear()

    # -- capabilities: SettlesStoredFacts, ArchivesFactFiles, ListsUsers, ListsAgents ------------

    def settle_stored_facts(self, ctx: RuntimeContext) -> dict[str, int]:
        """Journal what reading resolves on the fly, so the journal says what recall does:

        - ``exact_duplicates``: a fact's text repeated on several daily ledger lines (a hand
          edit, an import of a copy) gets a ``duplicate`` decision naming the line it reads
          as, once per new repeat; the lines stay;
        - ``superseded``: an open fact that a newer one with its key replaces gets its
          ``superseded`` decision (``superseded_by`` / ``valid_to``).
        Then the journal is compacted: the decisions about facts that no fact file holds any
        more, live or archived (their lines deleted by hand), go. MEMORY.md is left alone:
        consolidation rewrites it."""
        paths = self.paths(ctx)
        counts = {"exact_duplicates": 0, "superseded": 0}
        with self._write_lock(ctx):
            index = self._index(ctx)
            settled = index.journal.settled
            lines: dict[str, list[Path]] = {}
            for path, parsed in index.files.items():
                if path != paths.memory_md:
                    for fact in parsed.facts:
                        lines.setdefault(fact.id, []).append(path)
            decisions = []
            for fid, where in lines.items():
                noted = settled[fid].copies_noted if fid in settled else 0
                if len(where) <= max(noted, 1) or fid not in index.by_id:
                    continue
                item = index.by_id[fid]
                names = ", ".join(sorted({p.name for p in where}))
                why = f"the same text on {len(where)} ledger lines ({names}): read once"
                if item.path != paths.memory_md:
                    why += f", as its line in {item.path.name}"
                decisions.append(self._decision(item.fact, "duplicate", why, copies=len(where)))
                counts["exact_duplicates"] += len(where) - max(noted, 1)
            for fid in sorted(index.raced):
                fact = index.by_id[fid].fact
                why = f"newest wins on key {fact.key!r}: {fact.superseded_by} is newer"
                fields = {"superseded_by": fact.superseded_by, "valid_to": _iso(fact.valid_to)}
                decisions.append(self._decision(fact, "superseded", why, fields=fields))
                counts["superseded"] += 1
            self._journal(paths, decisions)
            gone = settled.keys() - {f.id for p in index.files.values() for f in p.facts}
            if gone:  # the index reads the archived fact files too
                drop_decisions(paths.decisions_journal, gone)
            self._indexes.invalidate(ctx)
        return counts

    def journal_decisions(self, ctx: RuntimeContext, settlements: Sequence[Settlement]) -> int:
        """Maintenance's settlements as journal decisions (``JournalsDecisions``): a fact
        ``merged`` or ``expired`` leaves every read, a ``superseded`` or ``updated`` one reads
        with its new metadata; facts deleted meanwhile are skipped. How many were written."""
        paths = self.paths(ctx)
        with self._write_lock(ctx):
            by_id = self._index(ctx).by_id
            decisions = []
            for s in settlements:
                if s.fact_id not in by_id:
                    continue
                old = by_id[s.fact_id].fact
                if s.fact is None:
                    decisions.append(self._decision(old, s.decision, s.why, into=s.into))
                elif changed := changed_fields(old, s.fact):
                    decisions.append(self._decision(old, s.decision, s.why, fields=changed))
            written = self._journal(paths, decisions)
            self._indexes.invalidate(ctx)
        return written

    def archive_fact_files(self, ctx: RuntimeContext, before: date) -> int:
        """Move daily fact files dated before ``before`` to ``memory/archive/``: they leave
        the working set (the ledger folder the memory tools read), not recall, list or get,
        which read the archive too. A day already archived (a ledger of that day written
        since, by hand or a restore) gets the newer file's lines appended, never replaced."""
        paths = self.paths(ctx)
        if not paths.ledger_dir.is_dir():
            return 0
        moved = 0
        with self._write_lock(ctx):
            for ledger in paths.ledger_candidates():
                try:
                    day = date.fromisoformat(ledger.stem)
                except ValueError:
                    continue
                if day < before:
                    ensure_dir(paths.archive_dir)
                    _archive(ledger, paths.archived_ledger(day))
                    moved += 1
            if moved:
                fsync_dir(paths.archive_dir)
                fsync_dir(paths.ledger_dir)
            self._indexes.invalidate(ctx)
        return moved

    def tenants(self) -> list[str]:
        """Tenants with a user that has memory files."""
        where = WorkspacePaths(self.workspace)
        return [t for t in id_folders(where.tenants_dir) if self.users(t)]

    def users(self, tenant_id: str) -> list[str]:
        """Users of ``tenant_id`` that have memory files (for export)."""
        folders = WorkspacePaths(self.workspace).users_dir(tenant_id)
        return owners_with_fact_files(
            folders, lambda name: self.paths(RuntimeContext(tenant_id, name))
        )

    def agents(self, tenant_id: str) -> list[str]:
        """Agents of ``tenant_id`` that have shared memory files (export, maintenance)."""
        folders = WorkspacePaths(self.workspace).agents_dir(tenant_id)
        return owners_with_fact_files(
            folders, lambda name: self.paths(scope_context(tenant_id, "agent", name))
        )


def _archive(ledger: Path, target: Path) -> None:
    """``ledger`` moved to ``target``; onto an existing one, its lines appended (durable
    first, then the ledger removed: a crash between leaves each fact in both, read once)."""
    if not target.exists():
        os.replace(ledger, target)
        return
    kept = read_text(target)
    if kept and not kept.endswith("\n"):
        kept += "\n"
    write_atomically(target, kept + read_text(ledger))
    ledger.unlink()


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _closed_by_record(old: Fact, new: Fact) -> str:
    return f"a newer fact with key {old.key!r} was recorded: {new.superseded_by}"


def _amended_by_record(old: Fact, new: Fact) -> str:
    return "recorded again with the provenance it lacked"


def _merged_by_record(old: Fact, new: Fact) -> str:
    added = [p.text for p in new.phrasings if p not in old.phrasings]
    said = "; ".join(repr(t) for t in added) or "a wording it holds"
    return f"a near-duplicate was recorded and merged into it: {said}"


def _updated(old: Fact, new: Fact) -> str:
    fields = ", ".join(changed_fields(old, new))
    return f"its metadata updated ({fields})"
