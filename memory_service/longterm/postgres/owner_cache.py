"""An owner's facts kept in the process for recall, checked against the owner's version.

The statement that scores an owner's facts inside PostgreSQL (``search.recall``) costs a few
milliseconds however few facts the owner has: another process reads the rows, every
vector and term array, while the model that embedded the query has just pushed them out of
the caches. A process that recalls one owner again and again keeps that owner's rows here
instead, as the files backend keeps its index: ids, vectors, term ids and counts, each
fact's JSON (parsed when first read). Before each recall one indexed read asks for the kept
owners' versions (``longterm_versions``, moved by a trigger on every change to the owner's
rows, whoever makes it: ``schema.py``); the rows of an owner not kept, or whose version
moved, are read in one statement that returns them with the version they are at. A write
that one process acknowledged is therefore seen by the next recall of any process, and the
scores are the statement's: BM25 over the rows' stored term ids with the owner's statistics
(N, mean length and document frequencies over the open rows, or every row for a read about
the past), Lucene's IDF, k1 1.2, b 0.75; cosine for the dense leg; ties by time, then id, as
the statement breaks them.

Bounded by facts (``max_facts``, least recently recalled owner out first); an owner larger
than the bound is recalled by the statement. A delete or erase in this process drops its
owner at once; another process's copy goes at its next recall of that owner (the version
moved) or when evicted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import psycopg

from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.domain.facts import Fact
from memory_service.longterm.fusion import LegHit
from memory_service.longterm.postgres.search import K1, B, FactCache, Found, QueryTerms
from memory_service.longterm.store_values import ReadView

Owner = tuple[str, str]  # (tenant, owner)

_VERSIONS = (
    "SELECT v.owner, v.version FROM longterm_versions v "
    "WHERE v.tenant_id = $1 AND v.owner = ANY($2::text[])"
)


def rows_query(ext: str) -> str:
    """The rows of some owners of one tenant (``$1``; ``$2`` the owners), each owner's oldest
    first (ties by id: the statement's order) with its version, all read in one snapshot (an
    owner with no row: one row of NULLs)."""
    quoted = ext.replace('"', '""')
    return f"""
        SELECT o.owner, COALESCE(v.version, 0), f.id::text, f.created_at, f.is_open,
            f.doc_len, array_send(f.terms), array_send(f.tfs),
            "{quoted}".vector_send(f.embedding), f.fact::text, f.access_count,
            f.last_accessed_at, f.key, f.fact->>'session_id', f.fact->>'text', f.expires_at,
            f.importance
        FROM unnest($2::text[]) AS o(owner)
            LEFT JOIN longterm_versions v ON v.tenant_id = $1 AND v.owner = o.owner
            LEFT JOIN longterm_facts f ON f.tenant_id = $1 AND f.owner = o.owner
        ORDER BY o.owner, f.created_at, f.id
    """


_INT8 = np.dtype([("size", ">i4"), ("value", ">i8")])
_INT4 = np.dtype([("size", ">i4"), ("value", ">i4")])


def _array(raw: bytes, cell: np.dtype) -> np.ndarray:
    """The values of a one-dimensional array without NULLs in PostgreSQL's binary form
    (``array_send``): a header of 12 bytes, then the dimension's size and lower bound, then
    each element's length and value."""
    if int.from_bytes(raw[:4], "big") == 0:  # no dimension: empty
        return np.zeros(0, dtype=np.int64)
    return np.frombuffer(raw, dtype=cell, offset=20)["value"].astype(np.int64)


def _vector(raw: bytes) -> np.ndarray:
    """pgvector's binary form (``vector_send``): the dimension and a reserved word, two
    bytes each, then big-endian float32s."""
    return np.frombuffer(raw, dtype=">f4", offset=4)


@dataclass(slots=True)
class _Corpus:
    """Some of an owner's rows (``positions``, oldest first) with their BM25 postings:
    each distinct term id, and the rows (into ``positions``) holding it with its count."""

    positions: np.ndarray
    doc_len: np.ndarray
    terms: np.ndarray  # distinct term ids, sorted
    starts: np.ndarray  # terms[k]'s postings: rows[starts[k]:starts[k + 1]]
    rows: np.ndarray
    tfs: np.ndarray

    @classmethod
    def of(cls, owner: OwnerRows, positions: np.ndarray) -> _Corpus:
        held = [owner.terms[i] for i in positions]
        if not sum(map(len, held)):
            empty = np.zeros(0, dtype=np.int64)
            no_terms = np.zeros(1, np.int64)
            return cls(positions, owner.doc_len[positions], empty, no_terms, empty, empty)
        flat = np.concatenate(held)
        tfs = np.concatenate([owner.tfs[i] for i in positions])
        rows = np.repeat(np.arange(len(positions)), [len(t) for t in held])
        order = np.argsort(flat, kind="stable")
        terms, starts = np.unique(flat[order], return_index=True)
        return cls(
            positions,
            owner.doc_len[positions],
            terms,
            np.append(starts, len(flat)),
            rows[order],
            tfs[order].astype(np.float64),
        )

    def counts(self, ids: Sequence[int]) -> np.ndarray:
        """How often each row holds each query term: rows x terms (0: not at all)."""
        out = np.zeros((len(self.positions), len(ids)), dtype=np.float64)
        if not len(self.terms):
            return out
        wanted = np.asarray(ids, dtype=np.int64)
        at = np.searchsorted(self.terms, wanted)
        for j, (k, term) in enumerate(zip(at.tolist(), ids, strict=True)):
            if k < len(self.terms) and int(self.terms[k]) == term:
                start, end = self.starts[k], self.starts[k + 1]
                out[self.rows[start:end], j] = self.tfs[start:end]
        return out

    def bm25(self, counts: np.ndarray, qtf: Sequence[int]) -> np.ndarray:
        """Each row's BM25 over the corpus's own statistics (the statement's formula)."""
        n = float(len(self.positions))
        avgdl = float(self.doc_len.mean()) if len(self.doc_len) else 1.0
        df = (counts > 0).sum(axis=0).astype(np.float64)
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5))
        norm = (K1 * ((1 - B) + B * self.doc_len / avgdl))[:, None]
        weights = np.asarray(qtf, dtype=np.float64) * idf
        with np.errstate(invalid="ignore", divide="ignore"):
            parts = np.where(counts > 0, weights * counts * (K1 + 1) / (counts + norm), 0.0)
        return parts.sum(axis=1)


@dataclass(slots=True)
class OwnerRows:
    """One owner's rows at ``version``, oldest first: what recall reads of each. A row's
    fact is parsed from its JSON only when read (``fact``: a hit fusion reads whole, or every
    row for a read with a metadata filter), through the process's ``FactCache``."""

    version: int
    ids: list[str]
    rows: list[tuple[str, int, Any]]  # the fact's JSON and access columns (``FactCache``)
    sessions: list[str | None]
    texts: list[str]
    created: list[datetime | None]
    keys: list[str | None]
    is_open: np.ndarray
    doc_len: np.ndarray
    terms: list[np.ndarray]
    tfs: list[np.ndarray]
    matrix: np.ndarray  # unit rows (a zero vector stays zero)
    deadlines: np.ndarray  # expiry as a POSIX time, inf: never
    parsed: FactCache = field(default_factory=FactCache)
    _current: _Corpus | None = None
    _history: _Corpus | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def fact(self, i: int) -> Fact:
        return self.parsed.fact(self.ids[i], self.rows[i])

    def corpus(self, history: bool) -> _Corpus:
        """The open rows for a read about now, every row for one about the past."""
        if history:
            if self._history is None:
                self._history = _Corpus.of(self, np.arange(len(self.ids)))
            return self._history
        if self._current is None:
            self._current = _Corpus.of(self, np.flatnonzero(self.is_open))
        return self._current


def load(
    conn: psycopg.Connection,
    query: str,
    tenant: str,
    owners: Sequence[str],
    parsed: FactCache,
    expiry: ExpiryPolicy,
) -> dict[str, OwnerRows]:
    """The owners' rows as they are, each with its version, in one statement (``rows_query``;
    no fact parsed: expiry from the rows' columns)."""
    with psycopg.RawCursor(conn) as cur:
        prepare = conn.prepare_threshold is not None
        # binary: the vectors and term arrays arrive as their bytes, not hex text
        found = cur.execute(query, [tenant, list(owners)], prepare=prepare, binary=True)
        found = found.fetchall()
    each: dict[str, list[Any]] = {}
    versions: dict[str, int] = {}
    for row in found:
        versions[row[0]] = int(row[1])
        each.setdefault(row[0], [])
        if row[2] is not None:
            each[row[0]].append(row[2:])
    return {
        owner: _owner_rows(versions.get(owner, 0), each.get(owner, []), parsed, expiry)
        for owner in owners
    }


def _owner_rows(
    version: int, rows: list[Any], parsed: FactCache, expiry: ExpiryPolicy
) -> OwnerRows:
    terms = [_array(r[4], _INT8) for r in rows]
    vectors = np.stack([_vector(r[6]) for r in rows]).astype(np.float32) if rows else None
    if vectors is not None:
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    deadlines = [expiry.deadline(r[13], r[14], r[1]) for r in rows]
    return OwnerRows(
        version=version,
        ids=[r[0] for r in rows],
        rows=[(r[7], r[8], r[9]) for r in rows],
        sessions=[r[11] for r in rows],
        texts=[r[12] for r in rows],
        created=[r[1] for r in rows],
        keys=[r[10] for r in rows],
        is_open=np.array([bool(r[2]) for r in rows], dtype=bool),
        doc_len=np.array([r[3] for r in rows], dtype=np.float64),
        terms=terms,
        tfs=[_array(r[5], _INT4) for r in rows],
        matrix=vectors if vectors is not None else np.zeros((0, 0), dtype=np.float32),
        deadlines=np.array([d.timestamp() if d else np.inf for d in deadlines], dtype=float),
        parsed=parsed,
    )


def versions(conn: psycopg.Connection, tenant: str, owners: Sequence[str]) -> dict[str, int]:
    """The owners' versions now (0: an owner with no row ever written)."""
    with psycopg.RawCursor(conn) as cur:
        cur.execute(_VERSIONS, [tenant, list(owners)], prepare=conn.prepare_threshold is not None)
        return {str(o): int(v) for o, v in cur.fetchall()}


def search(
    rows: OwnerRows,
    view: ReadView,
    terms: QueryTerms,
    vector: np.ndarray | None,
    depth: int,
    threshold: float,
    *,
    bm25: bool,
) -> Found:
    """One owner's legs over its rows in memory: what ``search.recall`` answers for one
    ask, the facts already parsed."""
    found = Found([{}], rows.parsed)
    legs = found.legs[0]
    if bm25:
        legs["bm25"] = []
    if vector is not None:
        legs["dense"] = []
    if depth <= 0 or not len(rows):
        return found
    corpus = rows.corpus(view.history)
    positions = corpus.positions
    if not len(positions):
        return found
    allowed = rows.deadlines[positions] > view.now.timestamp()
    if not view.filter.is_empty:
        admits = view.admits
        allowed &= np.fromiter((admits(rows.fact(i)) for i in positions), bool, len(positions))
    counts = corpus.counts(terms.ids) if terms.ids else None
    ranked: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if bm25 and counts is not None:
        scores = corpus.bm25(counts, terms.counts)
        held = allowed & (counts > 0).any(axis=1)
        ranked["bm25"] = _top(np.flatnonzero(held), np.round(scores, 6), scores, depth)
    if vector is not None:
        query = np.asarray(vector, dtype=np.float32)
        size = float(np.linalg.norm(query))
        sims = rows.matrix[positions] @ (query / size if size > 0 else query)
        sims = sims.astype(np.float64)
        kept = np.flatnonzero(allowed & (sims >= threshold))
        ranked["dense"] = _top(kept, sims, sims, depth)
    matched = _Matched(terms, counts)
    ids, sessions, created = rows.ids, rows.sessions, rows.created
    for leg, (chosen, scores) in ranked.items():
        ats = positions[chosen].tolist()
        legs[leg] = [
            LegHit(ids[at], score, sessions[at], created[at], held)
            for at, score, held in zip(ats, scores.tolist(), matched.of(chosen), strict=True)
        ]
        for at in ats:
            fid = ids[at]
            found.rows[fid], found.keys[fid], found.texts[fid] = (
                rows.rows[at],
                rows.keys[at],
                rows.texts[at],
            )
    return found


class _Matched:
    """The query terms each row of a corpus holds, as ``QueryTerms.matched`` gives them:
    each row's pattern of held terms one integer, each distinct pattern looked up once."""

    def __init__(self, terms: QueryTerms, counts: np.ndarray | None) -> None:
        self.terms, self.counts = terms, counts
        self._sets: dict[int, frozenset[str]] = {}

    def of(self, rows: np.ndarray) -> list[frozenset[str]]:
        if self.counts is None:
            return [self.terms.matched(())] * len(rows)
        held = self.counts[rows] > 0
        ids = self.terms.ids
        if len(ids) > 62:  # no pattern fits one integer: row by row
            return [self.terms.matched([t for t, h in zip(ids, r, strict=True) if h]) for r in held]
        codes = held.astype(np.int64) @ (np.int64(1) << np.arange(len(ids), dtype=np.int64))
        out = []
        for code in codes.tolist():
            found = self._sets.get(code)
            if found is None:
                found = self._sets[code] = self.terms.matched(
                    [t for j, t in enumerate(ids) if code >> j & 1]
                )
            out.append(found)
        return out


def _top(
    candidates: np.ndarray, order_by: np.ndarray, scores: np.ndarray, depth: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``depth`` best of ``candidates`` (rows of the corpus) by ``order_by`` descending,
    ties by position (time, then id), and their ``scores``."""
    if not len(candidates):
        return candidates, scores[candidates]
    keys = order_by[candidates]
    if len(candidates) > depth:  # the cut's value, and every row tied with it
        cut = np.partition(keys, len(keys) - depth)[len(keys) - depth]
        candidates, keys = candidates[keys >= cut], keys[keys >= cut]
    chosen = candidates[np.lexsort((candidates, -keys))][:depth]
    return chosen, scores[chosen]


class OwnerCache:
    """The owners' rows this process keeps, least recently recalled out first, at most
    ``max_facts`` facts in all (0: none kept)."""

    def __init__(self, max_facts: int) -> None:
        self.max_facts = max_facts
        self._owners: OrderedDict[Owner, OwnerRows] = OrderedDict()
        self._facts = 0
        self._too_big: set[Owner] = set()  # more facts than the bound: the statement's
        self._lock = threading.Lock()

    def get(self, owner: Owner, version: int) -> OwnerRows | None:
        """The owner's rows if kept at ``version``."""
        with self._lock:
            rows = self._owners.get(owner)
            if rows is None or rows.version != version:
                return None
            self._owners.move_to_end(owner)
            return rows

    def peek(self, owner: Owner) -> OwnerRows | None:
        """The owner's rows if kept, at whatever version (recency unchanged)."""
        with self._lock:
            return self._owners.get(owner)

    def put(self, owner: Owner, rows: OwnerRows) -> None:
        with self._lock:
            self._drop(owner)
            if len(rows) > self.max_facts:
                self._too_big.add(owner)
                return
            self._owners[owner] = rows
            self._facts += len(rows)
            while self._facts > self.max_facts:
                _, evicted = self._owners.popitem(last=False)
                self._facts -= len(evicted)

    def kept_whole(self, owner: Owner) -> bool:
        """Whether the owner's rows fit: False once it was read with more than ``max_facts``
        (until it is dropped: a delete may bring it under)."""
        return self.max_facts > 0 and owner not in self._too_big

    def drop(self, owner: Owner) -> None:
        with self._lock:
            self._drop(owner)
            self._too_big.discard(owner)

    def clear(self) -> None:
        with self._lock:
            self._owners.clear()
            self._too_big.clear()
            self._facts = 0

    def _drop(self, owner: Owner) -> None:
        old = self._owners.pop(owner, None)
        if old is not None:
            self._facts -= len(old)

    @property
    def facts(self) -> int:
        return self._facts
