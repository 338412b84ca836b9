"""Files backend: Markdown ledgers are the source of truth; the index is derived.

Per user: ``MEMORY.md`` plus ``memory/YYYY-MM-DD.md`` (see ``memory_service.paths``). Writes
add bullets to today's ledger under a file lock, as one atomic rewrite fsynced before returning;
changes to existing lines (supersession marks, deletes) rewrite their file atomically too.
Reads build a per-user index (BM25 over the shared tokenizer, a matrix of cached embeddings)
and keep it until the files' stat signature changes, so a ledger edited by hand is seen by the
next retrieve.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from pathlib import Path

import numpy as np
from filelock import FileLock

from indexing.bm25 import BM25Index
from indexing.embeddings import Embedder
from indexing.hashing import content_hash
from indexing.lexical import lexical_terms
from indexing.tokenize import tokenize
from memory_service.config.retrieval import Mode
from memory_service.context import RuntimeContext
from memory_service.facts import Fact, Page, Recall, RecordResult, fact_id, paginate, utcnow
from memory_service.fsutil import fsync_dir, read_text, write_atomically
from memory_service.longterm.ledger import parse_ledger, render_lines, rewrite_ledger
from memory_service.longterm.recording import plan_record
from memory_service.longterm.retrieval import (
    PRESETS,
    LegHit,
    RetrievalConfig,
    fuse_legs,
    legs_for_mode,
    validate_query,
)
from memory_service.longterm.vector_cache import cache_path as vector_cache_path
from memory_service.longterm.vector_cache import embed_with_cache
from memory_service.paths import UserPaths

LEDGER_HEADER = "# Memory ledger {day}\n\n"

Stamp = tuple[int, int, int]  # mtime_ns, size, inode
Signature = tuple[tuple[str, int, int, int], ...]


@dataclass(slots=True)
class _Stored:
    fact: Fact  # id/hash derived; superseded_by reflects newest-wins by key
    path: Path


@dataclass(slots=True)
class _ParsedFile:
    stamp: Stamp
    facts: list[Fact]


@dataclass(slots=True)
class _UserIndex:
    signature: Signature
    files: dict[Path, _ParsedFile]
    stored: list[_Stored]
    by_id: dict[str, _Stored]
    recallable: list[int] = field(default_factory=list)  # positions not superseded
    _bm25: BM25Index | None = None
    _matrix: np.ndarray | None = None

    def bm25(self, with_date: bool) -> BM25Index:
        if self._bm25 is None:
            facts = [self.stored[i].fact for i in self.recallable]
            self._bm25 = BM25Index(
                [lexical_terms(f.text, f.created_at, with_date=with_date) for f in facts]
            )
        return self._bm25

    def matrix(self, embedder: Embedder, cache_file: Path) -> np.ndarray:
        if self._matrix is None:
            facts = [self.stored[i].fact for i in self.recallable]
            self._matrix = embed_with_cache(
                cache_file, embedder, [f.content_hash for f in facts], [f.text for f in facts]
            )
        return self._matrix


class FileSystemLongTermMemory:
    """``LongTermMemory`` over a workspace of Markdown ledgers."""

    def __init__(
        self,
        workspace: Path,
        embedder: Embedder,
        *,
        retrieval: RetrievalConfig | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.workspace = Path(workspace)
        self._embedder = embedder
        self.retrieval = retrieval or PRESETS["hybrid"]
        self._clock = clock
        self._indexes: dict[tuple[str, str], _UserIndex] = {}
        self._lock = threading.RLock()

    # -- paths, locks, index ------------------------------------------------------------

    def paths(self, ctx: RuntimeContext) -> UserPaths:
        return UserPaths.of(self.workspace, ctx)

    def _write_lock(self, ctx: RuntimeContext) -> FileLock:
        paths = self.paths(ctx)
        paths.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(paths.lock_file), timeout=60)

    def _ledger_files(self, paths: UserPaths) -> list[Path]:
        """MEMORY.md and the daily ledgers: regular files only. A symlink is never followed,
        so a link planted in ``memory/`` cannot pull another user's file into recall."""
        candidates = [paths.memory_md]
        if paths.ledger_dir.is_dir() and not paths.ledger_dir.is_symlink():
            candidates += sorted(paths.ledger_dir.glob("*.md"))
        return [p for p in candidates if p.is_file() and not p.is_symlink()]

    @staticmethod
    def _stamp(path: Path) -> Stamp:
        """What says a file changed. Every write here is an atomic replace, i.e. a new inode:
        another process's rewrite is seen even when it keeps the size within one mtime tick."""
        st = path.stat()
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _signature(self, files: list[Path]) -> Signature:
        out = []
        for path in files:
            try:
                out.append((str(path), *self._stamp(path)))
            except FileNotFoundError:
                continue
        return tuple(out)

    def _index(self, ctx: RuntimeContext) -> _UserIndex:
        """The user's index, rebuilt from the files if their signature changed."""
        paths = self.paths(ctx)
        key = (ctx.tenant_id, ctx.user_id)
        with self._lock:
            files = self._ledger_files(paths)
            signature = self._signature(files)
            cached = self._indexes.get(key)
            if cached is not None and cached.signature == signature:
                return cached
            index = self._build(ctx, paths, files, signature, cached)
            self._indexes[key] = index
            return index

    def _parse_file(self, ctx: RuntimeContext, path: Path, paths: UserPaths) -> list[Fact]:
        """The file's facts with derived hash and id (as written: no newest-wins yet)."""
        if path == paths.memory_md:
            default = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        else:
            try:
                default = datetime.fromisoformat(path.stem).replace(tzinfo=UTC)
            except ValueError:
                default = datetime.fromtimestamp(path.stat().st_mtime, UTC)
        out = []
        for line in parse_ledger(read_text(path), default_created_at=default):
            text_hash = content_hash(line.fact.text)
            fid = fact_id(ctx.tenant_id, ctx.user_id, text_hash)
            out.append(replace(line.fact, content_hash=text_hash, id=fid))
        return out

    def _build(
        self,
        ctx: RuntimeContext,
        paths: UserPaths,
        files: list[Path],
        signature: Signature,
        previous: _UserIndex | None,
    ) -> _UserIndex:
        parsed: dict[Path, _ParsedFile] = {}
        for name, *stat in signature:
            path, stamp = Path(name), (stat[0], stat[1], stat[2])
            old = previous.files.get(path) if previous else None
            if old is not None and old.stamp == stamp:
                parsed[path] = old
            else:
                try:
                    parsed[path] = _ParsedFile(stamp, self._parse_file(ctx, path, paths))
                except FileNotFoundError:
                    continue
        by_id: dict[str, _Stored] = {}
        for path, parsed_file in parsed.items():
            for fact in parsed_file.facts:
                existing = by_id.get(fact.id)
                if existing is None or (not existing.fact.is_active() and fact.is_active()):
                    by_id[fact.id] = _Stored(fact, path)
        stored = sorted(by_id.values(), key=lambda s: (s.fact.created_at or _EPOCH, s.fact.id))
        _apply_newest_wins(stored)
        index = _UserIndex(signature, parsed, stored, {s.fact.id: s for s in stored})
        index.recallable = [
            i
            for i, s in enumerate(stored)
            if s.fact.superseded_by is None and s.fact.valid_to is None
        ]
        return index

    def _invalidate(self, ctx: RuntimeContext) -> None:
        with self._lock:
            self._indexes.pop((ctx.tenant_id, ctx.user_id), None)

    def _rewrite(
        self,
        ctx: RuntimeContext,
        path: Path,
        changes: dict[str, Fact | None],
        *,
        append: str = "",
    ) -> int:
        """Rewrite ``path`` atomically with the facts in ``changes`` replaced or removed, and
        ``append`` added at the end (one atomic replace: all of it or none of it)."""
        content = read_text(path)
        replacements: dict[int, Fact | None] = {}
        for line in parse_ledger(content, default_created_at=None) if changes else ():
            fid = fact_id(ctx.tenant_id, ctx.user_id, content_hash(line.fact.text))
            if fid in changes:
                replacements[line.line_no] = changes[fid]
        if replacements or append:
            updated = rewrite_ledger(content, replacements)
            if append and updated and not updated.endswith("\n"):
                updated += "\n"
            write_atomically(path, updated + append)
        return len(replacements)

    def _write(
        self,
        ctx: RuntimeContext,
        paths: UserPaths,
        now: datetime,
        new: list[Fact],
        changes: dict[Path, dict[str, Fact | None]],
    ) -> None:
        """New facts first (durable), then changes to older lines.

        Today's ledger is rewritten whole with the new lines at its end (temp file, fsync,
        ``os.replace``), together with its own changes: a kill or a power cut mid-write leaves
        the old file or the new one, never a torn bullet or half a batch (an append can be cut
        at a page boundary), and no reader ever parses a half-written line. A crash before the
        older ledgers' changes leaves an extra open fact, which reading resolves (duplicate ids
        prefer the active copy, newest wins per key); it never loses an acknowledged fact."""
        day = now.astimezone(UTC).date()
        today = paths.ledger(day)
        lines = render_lines(new)
        if new and not today.exists():
            lines = LEDGER_HEADER.format(day=day.isoformat()) + lines
        if today in changes or new:
            self._rewrite(ctx, today, changes.pop(today, {}), append=lines)
        for path, path_changes in changes.items():
            self._rewrite(ctx, path, path_changes)

    # -- LongTermMemory -------------------------------------------------------------------

    def record(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> list[RecordResult]:
        now = self._clock()
        stamped = [f.stamped(ctx, now) for f in facts]  # all validated before anything is written
        if not stamped:
            return []
        self._embedder.embed([f.text for f in stamped])  # warm the cache; fails before writing
        paths = self.paths(ctx)
        with self._write_lock(ctx):
            index = self._index(ctx)
            open_by_key = {  # stored oldest first: the newest open fact per key stays
                s.fact.key: s.fact
                for s in index.stored
                if s.fact.key is not None and s.fact.is_active(now)
            }
            plan = plan_record(
                stamped, {i: s.fact for i, s in index.by_id.items()}, open_by_key, now
            )
            changes: dict[Path, dict[str, Fact | None]] = {}
            for fid in plan.revived:  # its old line goes; the new one is appended
                changes.setdefault(index.by_id[fid].path, {})[fid] = None
            for fid, fact in plan.closed.items():
                changes.setdefault(index.by_id[fid].path, {})[fid] = fact
            self._write(ctx, paths, now, list(plan.new.values()), changes)
            self._invalidate(ctx)
        return plan.results

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
        index = self._index(ctx)
        if not index.recallable:
            return []
        now = self._clock()
        depth = self.retrieval.depth(top_k)
        leg_hits: dict[str, list[LegHit]] = {}

        def live(position: int) -> Fact | None:
            fact = index.stored[index.recallable[position]].fact
            return fact if fact.is_active(now) else None

        if "bm25" in legs:
            hits = index.bm25(self.retrieval.date_terms).search(tokenize(query), depth)
            leg_hits["bm25"] = [
                LegHit(f.id, h.score, f.session_id, f.created_at)
                for h in hits
                if (f := live(h.index)) is not None
            ]
        if "dense" in legs:
            query_vector = self._embedder.embed([query])[0]
            cache_file = vector_cache_path(self.paths(ctx).root, self._embedder)
            sims = index.matrix(self._embedder, cache_file) @ query_vector
            order = np.argsort(-sims, kind="stable")[:depth]
            leg_hits["dense"] = [
                LegHit(f.id, float(sims[i]), f.session_id, f.created_at)
                for i in order
                if sims[i] >= threshold and (f := live(int(i))) is not None
            ]
        fused = fuse_legs(mode, leg_hits, self.retrieval, top_k)
        return [Recall(index.by_id[h.id].fact, h.score, h.ranks, h.scores) for h in fused]

    def get(self, ctx: RuntimeContext, ids: Sequence[str]) -> list[Fact]:
        index = self._index(ctx)
        return [index.by_id[i].fact for i in dict.fromkeys(ids) if i in index.by_id]

    def list(
        self,
        ctx: RuntimeContext,
        *,
        limit: int = 100,
        cursor: str | None = None,
        include_inactive: bool = False,
    ) -> Page[Fact]:
        now = self._clock()
        facts = [
            s.fact for s in self._index(ctx).stored if include_inactive or s.fact.is_active(now)
        ]
        return paginate(facts, limit, cursor)

    def delete(self, ctx: RuntimeContext, ids: Sequence[str]) -> int:
        wanted = set(ids)
        if not wanted:
            return 0
        with self._write_lock(ctx):
            index = self._index(ctx)
            found = wanted & index.by_id.keys()
            for path, parsed in index.files.items():
                present = found.intersection(f.id for f in parsed.facts)
                if present:
                    self._rewrite(ctx, path, dict.fromkeys(present))
            if found:  # the vector cache must not outlive the text it was computed from
                vector_cache_path(self.paths(ctx).root, self._embedder).unlink(missing_ok=True)
            self._invalidate(ctx)
        return len(found)

    def update(self, ctx: RuntimeContext, facts: Sequence[Fact]) -> int:
        """Rewrite the metadata of existing facts (matched by id; text unchanged).

        Maintenance uses it to close superseded facts and merge near-duplicates; unknown ids are
        ignored. Returns how many facts were rewritten."""
        wanted = {f.id: f for f in facts}
        if not wanted:
            return 0
        with self._write_lock(ctx):
            index = self._index(ctx)
            found = wanted.keys() & index.by_id.keys()
            for path, parsed in index.files.items():
                present = found.intersection(f.id for f in parsed.facts)
                if present:
                    self._rewrite(ctx, path, {fid: wanted[fid] for fid in present})
            self._invalidate(ctx)
        return len(found)

    def settle_ledgers(self, ctx: RuntimeContext) -> dict[str, int]:
        """Write down what reading resolves on the fly, so the files say what recall does:

        - ``exact_duplicates``: repeated bullets of one fact across daily ledgers (a hand edit
          or an interrupted rewrite) are removed, keeping the newest copy;
        - ``superseded``: an open fact that a newer one with its key replaces gets its
          ``superseded_by`` / ``valid_to`` marks.
        MEMORY.md is left alone: consolidation rewrites it."""
        paths = self.paths(ctx)
        counts = {"exact_duplicates": 0, "superseded": 0}
        with self._write_lock(ctx):
            index = self._index(ctx)
            ledgers = sorted(p for p in index.files if p != paths.memory_md)
            seen: set[str] = set()
            for path in reversed(ledgers):  # newest ledger first
                content = read_text(path)
                changes: dict[int, Fact | None] = {}
                for line in parse_ledger(content, default_created_at=None):
                    fid = fact_id(ctx.tenant_id, ctx.user_id, content_hash(line.fact.text))
                    effective = index.by_id[fid].fact if fid in index.by_id else None
                    if fid in seen:
                        changes[line.line_no] = None
                        counts["exact_duplicates"] += 1
                    elif (
                        effective is not None
                        and line.fact.superseded_by is None
                        and line.fact.valid_to is None
                        and effective.superseded_by is not None
                    ):
                        changes[line.line_no] = replace(
                            line.fact,
                            superseded_by=effective.superseded_by,
                            valid_to=effective.valid_to,
                        )
                        counts["superseded"] += 1
                    seen.add(fid)
                if changes:
                    write_atomically(path, rewrite_ledger(content, changes))
            self._invalidate(ctx)
        return counts

    def archive_ledgers(self, ctx: RuntimeContext, before: date) -> int:
        """Move daily ledgers dated before ``before`` to ``memory/archive/`` (not recalled)."""
        paths = self.paths(ctx)
        if not paths.ledger_dir.is_dir():
            return 0
        moved = 0
        with self._write_lock(ctx):
            for ledger in sorted(paths.ledger_dir.glob("*.md")):
                try:
                    day = date.fromisoformat(ledger.stem)
                except ValueError:
                    continue
                if day < before:
                    paths.archive_dir.mkdir(parents=True, exist_ok=True)
                    os.replace(ledger, paths.archive_dir / ledger.name)
                    moved += 1
            if moved:
                fsync_dir(paths.archive_dir)
                fsync_dir(paths.ledger_dir)
            self._invalidate(ctx)
        return moved

    def forget(self, ctx: RuntimeContext) -> int:
        paths = self.paths(ctx)
        if not paths.root.exists():
            return 0
        with self._write_lock(ctx):
            count = len(self._index(ctx).stored)
            paths.memory_md.unlink(missing_ok=True)
            for derived in (paths.ledger_dir, vector_cache_path(paths.root, self._embedder).parent):
                if derived.exists():
                    shutil.rmtree(derived)
            fsync_dir(paths.root)
            self._invalidate(ctx)
        return count

    def users(self, tenant_id: str) -> list[str]:
        """Users of ``tenant_id`` that have memory files (for export)."""
        users_dir = UserPaths(self.workspace, tenant_id, "_").tenant_root / "users"
        if not users_dir.is_dir():
            return []
        found = []
        for folder in sorted(p for p in users_dir.iterdir() if p.is_dir()):
            try:
                paths = self.paths(RuntimeContext(tenant_id, folder.name))
            except ValueError:  # not a user folder (InvalidIdError)
                continue
            if self._ledger_files(paths):
                found.append(folder.name)
        return found

    def close(self) -> None:
        with self._lock:
            self._indexes.clear()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _apply_newest_wins(stored: list[_Stored]) -> None:
    """Among unsuperseded facts sharing a key, the newest stays; older ones read as superseded.

    Record marks the older line explicitly, but a crash between the append and that rewrite, or a
    hand edit, can leave two open facts with one key: reading resolves it the same way."""
    newest: dict[str, _Stored] = {}
    for item in stored:  # sorted oldest first
        fact = item.fact
        if fact.key is not None and fact.superseded_by is None and fact.valid_to is None:
            newest[fact.key] = item
    for item in stored:
        fact = item.fact
        if fact.key is None or fact.superseded_by is not None or fact.valid_to is not None:
            continue
        winner = newest[fact.key]
        if winner is not item:
            item.fact = replace(fact, superseded_by=winner.fact.id, valid_to=winner.fact.created_at)
