"""The files backend's per-user index, derived from the fact files and never stored.

Reading a user parses ``MEMORY.md`` and the daily fact files (archived ones too) into facts
(derived hash and id), resolves duplicates and newest-wins per key the way record would have,
and keeps the result with a BM25 index and a matrix of cached embeddings, until the files'
stat signature changes: a fact file edited by hand, or by another process, is seen by the next
read. A file whose stamp did not change is not parsed again.

The daily fact files are the record; MEMORY.md is consolidation's digest of them (and whatever
a person writes into it). A consolidated bullet names the facts it stands for (``of``): when
one of them is in no fact file any more, live or archived (its line was edited or deleted by
hand), the bullet is stale and is left out, until the next consolidation rewrites MEMORY.md
from the facts as they now are.

The ledgers are append-only: what maintenance and record decided about their facts (closed
by a newer one, merged into a near-duplicate, expired, their metadata changed) is in the
decisions journal (``files.journal``), applied here once for every reader: a fact that was
merged or expired is left out as if deleted (a MEMORY.md bullet that stands for it is stale),
and the others read with the metadata their decisions set.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from indexing.bm25 import BM25Index
from indexing.embeddings import Embedder
from indexing.hashing import content_hash
from memory_service.config.retrieval import RetrievalConfig
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.domain.facts import Fact, fact_id
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.fact_files import OF_HASH_CHARS, parse_fact_file
from memory_service.longterm.files.journal import EMPTY_JOURNAL, Journal, read_journal, settle
from memory_service.longterm.files.owner_files import (
    Signature,
    fact_files_signature,
)
from memory_service.longterm.files.vector_cache import embed_with_cache
from memory_service.longterm.fusion import LegHit, fact_terms
from memory_service.longterm.store_values import (
    EPOCH,
    ReadView,
    newest_holders,
    resolve_key_race,
)
from memory_service.stores.fsutil import read_text

Stamp = tuple[int, int, int]  # mtime_ns, size, inode


@dataclass(slots=True)
class StoredFact:
    fact: Fact  # id/hash derived; superseded_by reflects newest-wins by key
    path: Path


@dataclass(slots=True)
class ParsedFile:
    stamp: Stamp
    facts: list[Fact]
    of: list[tuple[str, ...]] = field(default_factory=list)  # per fact: the hashes it stands for


@dataclass(slots=True)
class Corpus:
    """A BM25 index and an embedding matrix over some of the stored facts (``positions``
    into ``OwnerIndex.stored``), built on first use. ``deadlines``: each fact's expiry time as
    a POSIX timestamp (inf: never), so expiry is a vectorised mask before any top-k."""

    facts: list[Fact]
    deadlines: np.ndarray
    _bm25: BM25Index | None = None
    _matrix: np.ndarray | None = None

    def bm25(self, config: RetrievalConfig) -> BM25Index:
        """The lexical index (``fact_terms``: text, source, date); a backend has one
        retrieval config, so the index built first is the one it needs."""
        if self._bm25 is None:
            self._bm25 = BM25Index([fact_terms(f, config) for f in self.facts])
        return self._bm25

    @property
    def has_matrix(self) -> bool:
        """Whether the embedding matrix is built (``matrix`` then reads no cache file)."""
        return self._matrix is not None

    def matrix(self, embedder: Embedder, cache_file: Path | None) -> np.ndarray:
        """The facts' vectors, one per row: read from (and refreshed in) ``cache_file`` the
        first time; ``cache_file`` may be None once ``has_matrix``."""
        if self._matrix is None:
            if cache_file is None:
                raise ValueError("the matrix is not built: its cache file is needed")
            self._matrix = embed_with_cache(
                cache_file,
                embedder,
                [f.content_hash for f in self.facts],
                [f.searchable_text for f in self.facts],
            )
        return self._matrix

    def matched(
        self, indices: Sequence[int], query_terms: Sequence[str]
    ) -> dict[int, frozenset[str] | None]:
        """Per fact of ``indices``, the query terms its lexical document holds (query
        coverage reads them, so no candidate is tokenized again per query); None for each
        while the lexical index is not built."""
        if self._bm25 is None:
            return dict.fromkeys(indices)
        return dict(zip(indices, self._bm25.matched_each(indices, query_terms), strict=True))

    def hits(
        self,
        ranked: list[tuple[int, float]],
        matched: Mapping[int, frozenset[str] | None],
        floor: float | None = None,
    ) -> list[LegHit]:
        """Facts ``(i, score)`` as a leg's candidates (with ``floor``: those scoring above
        it), each with the query terms it holds (``matched``, by position)."""
        facts, out = self.facts, []
        for i, score in ranked:
            if floor is not None and score <= floor:
                continue
            fact = facts[i]
            out.append(LegHit(fact.id, score, fact.session_id, fact.created_at, matched[i]))
        return out

    def mask(self, view: ReadView) -> np.ndarray:
        """Which of the corpus's facts ``view`` admits: expiry vectorised, the filter and
        ``as_of`` fact by fact (only when asked for)."""
        allowed = self.deadlines > view.now.timestamp()
        if not view.filter.is_empty:
            allowed &= np.fromiter((view.admits(f) for f in self.facts), bool, len(self.facts))
        return allowed


@dataclass(slots=True)
class OwnerIndex:
    signature: Signature
    files: dict[Path, ParsedFile]
    stored: list[StoredFact]  # oldest first
    by_id: dict[str, StoredFact]
    recallable: list[int] = field(default_factory=list)  # positions not superseded
    expiry: ExpiryPolicy = field(default_factory=ExpiryPolicy)
    journal: Journal = EMPTY_JOURNAL  # the decisions applied to ``stored``
    raced: set[str] = field(default_factory=set)  # open as written, closed by newest-wins
    _current: Corpus | None = None
    _history: Corpus | None = None

    def _corpus(self, positions: list[int]) -> Corpus:
        facts = [self.stored[i].fact for i in positions]
        deadlines = np.array(
            [d.timestamp() if (d := self.expiry.expires_at(f)) else np.inf for f in facts],
            dtype=float,
        )
        return Corpus(facts, deadlines)

    def corpus(self, view: ReadView) -> Corpus:
        """The open facts for a read about now; every stored fact for one about the past
        (``as_of``): its BM25 statistics are then over all of the user's facts, as Qdrant's
        are."""
        if view.history:
            if self._history is None:
                self._history = self._corpus(list(range(len(self.stored))))
            return self._history
        if self._current is None:
            self._current = self._corpus(self.recallable)
        return self._current


def parse_file(ctx: RuntimeContext, path: Path, paths: OwnerPaths) -> ParsedFile:
    """The file's facts with derived hash and id (as written: no newest-wins yet), stamped
    with nothing yet (the caller knows the stamp it read)."""
    if path == paths.memory_md:
        default = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    else:
        try:
            default = datetime.fromisoformat(path.stem).replace(tzinfo=UTC)
        except ValueError:
            default = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    parsed = ParsedFile((0, 0, 0), [])
    for line in parse_fact_file(read_text(path), default_created_at=default):
        text_hash = content_hash(line.fact.text)
        fid = fact_id(ctx.tenant_id, ctx.owner, text_hash)
        agent = ctx.agent_id if ctx.scope == "agent" else None  # the folder says whose it is
        parsed.facts.append(
            replace(line.fact, content_hash=text_hash, id=fid, scope=ctx.scope, agent_id=agent)
        )
        parsed.of.append(line.of)
    return parsed


def stale_bullets(
    memory_md: ParsedFile, daily: list[ParsedFile], hidden: frozenset[str] = frozenset()
) -> set[int]:
    """Positions of MEMORY.md's bullets that stand for a fact no daily fact file (live or
    archived) holds any more, or one the journal settled out of every read (``hidden``:
    merged, expired)."""
    held = {f.content_hash[:OF_HASH_CHARS] for p in daily for f in p.facts if f.content_hash}
    held -= hidden
    return {i for i, of in enumerate(memory_md.of) if of and set(of) - held}


def build_index(
    ctx: RuntimeContext,
    paths: OwnerPaths,
    signature: Signature,
    previous: Mapping[Path, ParsedFile] | None,
    expiry: ExpiryPolicy | None = None,
    previous_journal: Journal | None = None,
) -> OwnerIndex:
    """The index of the files in ``signature``, reusing ``previous``'s unchanged files (and
    ``previous_journal`` while the journal is unchanged)."""
    parsed: dict[Path, ParsedFile] = {}
    journal_name, journal_stamp = str(paths.decisions_journal), None
    for name, mtime_ns, size, inode in signature:
        path, stamp = Path(name), (mtime_ns, size, inode)
        if name == journal_name:
            journal_stamp = stamp
            continue
        old = previous.get(path) if previous else None
        if old is not None and old.stamp == stamp:
            parsed[path] = old
        else:
            try:
                parsed[path] = replace(parse_file(ctx, path, paths), stamp=stamp)
            except FileNotFoundError:
                continue
    try:
        journal = read_journal(paths.decisions_journal, journal_stamp, previous_journal)
    except FileNotFoundError:  # removed since the signature was read
        journal = EMPTY_JOURNAL
    settled = journal.settled
    stale: set[int] = set()
    if (memory_md := parsed.get(paths.memory_md)) is not None:
        daily = [p for path, p in parsed.items() if path != paths.memory_md]
        stale = stale_bullets(memory_md, daily, journal.hidden_hashes)
    by_id: dict[str, StoredFact] = {}
    pinned: set[str] = set()  # recorded again: the copy in the ledger the journal names
    for path, parsed_file in parsed.items():
        for position, fact in enumerate(parsed_file.facts):
            if path == paths.memory_md and position in stale:
                continue
            state = settled.get(fact.id)
            if state is not None and state.hidden is not None:
                continue  # merged or expired: as if deleted
            if state is not None and state.newest_in == path.name and path != paths.memory_md:
                by_id[fact.id] = StoredFact(fact, path)
                pinned.add(fact.id)
                continue
            existing = by_id.get(fact.id)
            if existing is None or (
                fact.id not in pinned and not existing.fact.is_active() and fact.is_active()
            ):
                by_id[fact.id] = StoredFact(fact, path)
    for fid, item in by_id.items():
        item.fact = settle(item.fact, settled.get(fid))
    stored = sorted(by_id.values(), key=lambda s: (s.fact.created_at or EPOCH, s.fact.id))
    raced = apply_newest_wins(stored)
    by_id_map = {s.fact.id: s for s in stored}
    index = OwnerIndex(
        signature,
        parsed,
        stored,
        by_id_map,
        expiry=expiry or ExpiryPolicy(),
        journal=journal,
        raced=raced,
    )
    index.recallable = [
        i for i, s in enumerate(stored) if s.fact.superseded_by is None and s.fact.valid_to is None
    ]
    return index


def apply_newest_wins(stored: list[StoredFact]) -> set[str]:
    """Among unsuperseded facts sharing a key, the newest stays; older ones read as superseded.
    Returns the ids this closed.

    Record journals the older fact's closure, but a crash between the append and that
    decision, or a hand edit, can leave two open facts with one key: reading resolves it the
    same way (the rule every backend shares, ``store_values.resolve_key_race``)."""
    holders = newest_holders(item.fact for item in stored)
    closed: set[str] = set()
    for item in stored:
        resolved = resolve_key_race(item.fact, holders)
        if resolved is not item.fact:
            closed.add(item.fact.id)
        item.fact = resolved
    return closed


class OwnerIndexes:
    """The process's indexes, one per (tenant, owner), each kept while its files are unchanged."""

    def __init__(self) -> None:
        self._indexes: dict[tuple[str, str], OwnerIndex] = {}
        # the parsed files of an invalidated index: the rebuild reparses only the files whose
        # stamp changed (a record rewrites today's fact file, not the user's other ones)
        self._parsed: dict[tuple[str, str], tuple[dict[Path, ParsedFile], Journal]] = {}
        self._lock = threading.RLock()

    def of(self, ctx: RuntimeContext, paths: OwnerPaths, expiry: ExpiryPolicy) -> OwnerIndex:
        """The user's index, rebuilt from the files if their signature (or the expiry rule
        its deadlines were computed by) changed."""
        key = (ctx.tenant_id, ctx.owner)
        with self._lock:
            signature = fact_files_signature(paths)
            cached = self._indexes.get(key)
            if cached is not None and cached.signature == signature and cached.expiry == expiry:
                return cached
            if cached is not None:
                previous, journal = cached.files, cached.journal
            else:
                previous, journal = self._parsed.pop(key, (None, None))
            index = build_index(ctx, paths, signature, previous, expiry, journal)
            self._indexes[key] = index
            return index

    def invalidate(self, ctx: RuntimeContext) -> None:
        """Drop the user's index (its corpora, matrix and resolved facts); its parsed files
        stay for the rebuild, each reused only while its stamp is unchanged."""
        key = (ctx.tenant_id, ctx.owner)
        with self._lock:
            dropped = self._indexes.pop(key, None)
            if dropped is not None:
                self._parsed[key] = (dropped.files, dropped.journal)

    def clear(self) -> None:
        with self._lock:
            self._indexes.clear()
            self._parsed.clear()
