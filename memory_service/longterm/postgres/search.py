"""The PostgreSQL backend's recall: every scope's legs in one statement, one round trip.

BM25 is computed in the query from each fact's terms (term ids and counts, two arrays in its
row) with the owner's own statistics, as the files backend's in-process index has them: N and
the mean length over the owner's open facts (every stored fact for a read about the past),
each query term's document frequency over the same facts, Lucene's IDF
``ln(1 + (N - df + 0.5) / (df + 0.5))``, k1 1.2, b 0.75, a query term counted as often as the
query repeats it. The scan of the owner's rows reads, for each distinct query term, how often
the row holds it (``array_position`` in the row's term ids, then its count; NULL where it is
absent): the statistics are one aggregate over those columns and a row's score one
expression of them, with no row per (fact, term) to make, join or group. The dense leg is
pgvector's cosine
distance over the same rows: an exact scan of the few facts one owner holds
(``benchmarks/RESULTS.md`` compares it with HNSW and iterative scans); the query vector is one
parameter, sent once.

Both legs of a scope read one scan of the owner's rows (``_owner_rows``, through the owner
index), each row marked ``admitted`` by the read's conditions (``conditions.view_where``), so
a filter narrows the hits, never BM25's statistics, and carrying its cosine distance: one pass
over the rows instead of one per leg. Every CTE is materialised, so the plan does not hang on
planner statistics (a table just filled has none, and over an estimate of one row a nested
loop would compute the document frequencies again for every candidate). Every (scope, leg) is
one parenthesised branch of a ``UNION ALL`` with its ``LIMIT``, ties broken as the files
backend does (score to 6 decimals, then ``created_at``, id); the statement is prepared on each
connection and run on its generic plan (``Database``: planning it for each call's values cost
about a third of running it over one owner's facts), and its text is
sent raw, ``$n`` placeholders and all, so a value used in several places is sent once. A
hit's row carries what fusion reads without the fact (score, session, time, the query terms
its document holds, key, text) and the fact's JSON once per fact, parsed only when read
(``FactCache``: a row read again as it was gives the fact parsed before).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psycopg

from memory_service.domain.facts import Fact
from memory_service.longterm.fusion import LegHit
from memory_service.longterm.postgres.conditions import Where
from memory_service.longterm.postgres.rows import stored_fact, term_key, vector_text
from memory_service.stores.binary_arrays import Vectors

K1 = 1.2
B = 0.75


@dataclass(frozen=True, slots=True)
class QueryTerms:
    """A query's terms as the postings hold them: each distinct id, how often the query
    says it, and the terms it stands for."""

    ids: list[int]
    counts: list[int]
    by_id: dict[int, tuple[str, ...]]
    # the terms of each set of ids a hit holds: ~100 hits a recall, a few distinct sets
    _matched: dict[tuple[int, ...], frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, terms: Sequence[str]) -> QueryTerms:
        counts: dict[int, int] = {}
        by_id: dict[int, tuple[str, ...]] = {}
        for term in terms:
            key = term_key(term)
            counts[key] = counts.get(key, 0) + 1
            if term not in by_id.get(key, ()):
                by_id[key] = (*by_id.get(key, ()), term)
        return cls(list(counts), list(counts.values()), by_id)

    def matched(self, ids: Sequence[int] | None) -> frozenset[str]:
        key = tuple(ids or ())
        found = self._matched.get(key)
        if found is None:
            found = self._matched[key] = frozenset(
                t for i in key for t in self.by_id.get(int(i), ())
            )
        return found


@dataclass(frozen=True, slots=True)
class Ask:
    """One scope's legs: ``scope`` the facts a hit may be (alias ``f``), ``owner`` its
    (tenant, owner) for the postings and statistics; ``history``: statistics over every
    stored fact (a read about the past), else over the open ones."""

    owner: tuple[str, str]
    scope: Where
    history: bool


class FactCache:
    """The facts a process parsed from rows, by id, each with the row it came from (the
    JSON and the access columns): a row read again as it was gives the same ``Fact``
    without parsing it again (fusion reads every candidate's fact), and any change to the
    row is a miss. Bounded, least recently used out first."""

    def __init__(self, size: int = 20_000) -> None:
        self.size = size
        self._entries: OrderedDict[str, tuple[tuple[str, int, Any], Fact]] = OrderedDict()
        self._lock = threading.Lock()

    def fact(self, fact_id: str, row: tuple[str, int, Any]) -> Fact:
        with self._lock:
            entry = self._entries.get(fact_id)
            if entry is not None and entry[0] == row:
                self._entries.move_to_end(fact_id)
                return entry[1]
        fact = parse_fact(fact_id, row)
        with self._lock:
            self._entries[fact_id] = (row, fact)
            self._entries.move_to_end(fact_id)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return fact


def parse_fact(fact_id: str, row: tuple[str, int, Any]) -> Fact:
    """The fact of a row's JSON text and access columns."""
    text, count, last = row
    return stored_fact(fact_id, json.loads(text), count, last)


@dataclass(slots=True)
class Found:
    """What one statement found: per scope, per leg, the hits in order; the facts parsed
    on first use (through ``cache`` where the rows are committed ones)."""

    legs: list[dict[str, list[LegHit]]]
    cache: FactCache | None = None
    keys: dict[str, str | None] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    rows: dict[str, tuple[str, int, Any]] = field(default_factory=dict)
    _facts: dict[str, Fact] = field(default_factory=dict)

    def fact(self, fact_id: str) -> Fact:
        """The fact of a hit (``KeyError``: none of this statement's)."""
        fact = self._facts.get(fact_id)
        if fact is None:
            row = self.rows[fact_id]
            fact = self.cache.fact(fact_id, row) if self.cache else parse_fact(fact_id, row)
            self._facts[fact_id] = fact
        return fact

    def key(self, fact_id: str) -> str | None:
        return self.keys[fact_id]

    def text(self, fact_id: str) -> str:
        """A hit's text, read without parsing its fact: fusion reads every candidate's."""
        return self.texts[fact_id]


class _Params:
    """Positional parameters written ``$n`` (a raw query: psycopg does not parse the text,
    and a value used in several places is sent once)."""

    def __init__(self, *first: Any) -> None:
        self.values: list[Any] = list(first)

    def add(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"

    def where(self, where: Where) -> str:
        """``where``'s text with its ``%s`` placeholders numbered."""
        parts = where.text.split("%s")
        out = [parts[0]]
        for value, part in zip(where.params, parts[1:], strict=True):
            out.append(self.add(value) + part)
        return "".join(out)


# $1: the query's term ids, $2: how often the query says each, $3: the query vector
_TERMS, _COUNTS, _VECTOR = "$1::bigint[]", "$2::int[]", "$3"


def _term(j: int) -> str:
    """The query's ``j``-th distinct term id (1-based)."""
    return f"({_TERMS})[{j}]"


def _owner_rows(i: int, ask: Ask, ext: str, params: _Params, dense: bool, terms: int) -> str:
    """The CTE ``o{i}``: one scan of the owner's facts that both legs read (the open ones, or
    every stored one for a read about the past: BM25's statistics count them all), each
    marked ``admitted`` by the read's conditions, with its cosine distance when ``dense``,
    and ``t1`` .. ``t{terms}``: how often it holds each query term (NULL: not at all)."""
    tenant, owner = params.add(ask.owner[0]), params.add(ask.owner[1])
    is_open = "" if ask.history else " AND f.is_open"
    distance = f', f.embedding OPERATOR("{ext}".<=>) v.v AS dist' if dense else ""
    vector = " CROSS JOIN v" if dense else ""
    counts = "".join(
        f", f.tfs[array_position(f.terms, {_term(j)})] AS t{j}" for j in range(1, terms + 1)
    )
    return f"""o{i} AS MATERIALIZED (
        SELECT f.id, f.created_at, f.doc_len,
            ({params.where(ask.scope)}) AS admitted{distance}{counts}
        FROM longterm_facts f{vector}
        WHERE f.tenant_id = {tenant} AND f.owner = {owner}{is_open}
    )"""


def _matched(terms: int) -> str:
    """The query term ids a row of ``o`` holds."""
    js = range(1, terms + 1)
    held = ", ".join(f"CASE WHEN o.t{j} IS NOT NULL THEN {_term(j)} END" for j in js)
    return f"array_remove(ARRAY[{held}]::bigint[], NULL)"


def _bm25_branch(i: int, params: _Params, depth: int, terms: int) -> str:
    """Lucene's BM25 of every admitted row holding a query term, with the owner's statistics
    (``n``: its facts, ``avgdl``: their mean length, ``df{j}``: how many hold term ``j``)
    gathered in one pass over ``o{i}``."""
    js = range(1, terms + 1)
    df = "".join(f", count(o.t{j})::float8 AS df{j}" for j in js)
    idf = ", ".join(f"ln(1 + (n - df{j} + 0.5) / (df{j} + 0.5)) AS idf{j}" for j in js)
    # float8 constants: a bare 0.75 is numeric, and numeric arithmetic on every row costs
    norm = f"({K1}::float8 * ({1 - B}::float8 + {B}::float8 * o.doc_len / s.avgdl))"
    score = " + ".join(
        f"COALESCE(({_COUNTS})[{j}] * s.idf{j} * o.t{j} * {K1 + 1}::float8 / (o.t{j} + {norm}), 0)"
        for j in js
    )
    held = ", ".join(f"o.t{j}" for j in js)
    return f"""(
        WITH s AS MATERIALIZED (
            SELECT n, avgdl, {idf}
            FROM (
                SELECT count(*)::float8 AS n, COALESCE(avg(o.doc_len), 1)::float8 AS avgdl{df}
                FROM o{i} o
            ) c
        )
        SELECT *, row_number() OVER (
            ORDER BY round(b.score::numeric, 6) DESC, b.created_at, b.id) AS rank
        FROM (
            SELECT {i} AS ask, 'bm25' AS leg, o.id, o.created_at, {score} AS score,
                {_matched(terms)} AS matched
            FROM o{i} o CROSS JOIN s
            WHERE o.admitted AND num_nonnulls({held}) > 0
        ) b
        ORDER BY rank
        LIMIT {params.add(depth)}
    )"""


def _dense_branch(i: int, params: _Params, depth: int, threshold: float, terms: int) -> str:
    matched = _matched(terms) if terms else "'{}'::bigint[]"
    return f"""(
        SELECT {i} AS ask, 'dense' AS leg, o.id, o.created_at, 1 - o.dist AS score,
            {matched} AS matched,
            row_number() OVER (ORDER BY o.dist, o.created_at, o.id) AS rank
        FROM o{i} o
        WHERE o.admitted AND 1 - o.dist >= {params.add(threshold)}
        ORDER BY rank
        LIMIT {params.add(depth)}
    )"""


def recall(
    conn: psycopg.Connection,
    ext: str,
    asks: Sequence[Ask],
    terms: QueryTerms,
    vector: np.ndarray | None,
    depth: int,
    threshold: float,
    *,
    bm25: bool,
    cache: FactCache | None = None,
) -> Found:
    """Per ask, the BM25 leg (when ``bm25``, and the query has a term) and the dense leg
    (with a ``vector``), at most ``depth`` hits each, in one statement. ``cache``: where
    the facts read are committed rows (not a write transaction's own)."""
    found = Found([{} for _ in asks], cache)
    quoted = ext.replace('"', '""')
    branches: list[str] = []
    vector_param = vector_text(vector) if vector is not None else None
    params = _Params(terms.ids, terms.counts, vector_param)
    owners: list[str] = []
    for i, ask in enumerate(asks):
        lexical = bm25 and bool(terms.ids) and depth > 0
        dense = vector is not None and depth > 0
        if bm25:
            found.legs[i]["bm25"] = []
        if vector is not None:
            found.legs[i]["dense"] = []
        if lexical or dense:
            owners.append(_owner_rows(i, ask, quoted, params, dense, len(terms.ids)))
        if lexical:
            branches.append(_bm25_branch(i, params, depth, len(terms.ids)))
        if dense:
            branches.append(_dense_branch(i, params, depth, threshold, len(terms.ids)))
    if not branches:
        return found
    # ``q`` is read by no branch: it gives $1 and $2 their types in every statement
    query = f"""
        WITH q AS MATERIALIZED (SELECT * FROM unnest({_TERMS}, {_COUNTS}) AS q(term, qtf)),
        v AS MATERIALIZED (SELECT {_VECTOR}::"{quoted}".vector AS v),
        {", ".join(owners)},
        h AS ({" UNION ALL ".join(branches)})
        SELECT h.ask, h.leg, h.id::text, h.created_at, f.session_id, f.key, h.score, h.matched,
            f.fact, f.text, f.access_count, f.last_accessed_at
        FROM (SELECT h.*, row_number() OVER (PARTITION BY h.id) AS copy FROM h) h
            CROSS JOIN LATERAL (
                SELECT f.fact->>'session_id' AS session_id, f.key,
                    CASE WHEN h.copy = 1 THEN f.fact::text END AS fact,
                    CASE WHEN h.copy = 1 THEN f.fact->>'text' END AS text,
                    f.access_count, f.last_accessed_at
                FROM longterm_facts f WHERE f.id = h.id LIMIT 1
            ) f
        ORDER BY h.ask, h.leg, h.rank
    """
    with psycopg.RawCursor(conn) as cur:
        prepare = conn.prepare_threshold is not None  # None: a pooler that cannot
        rows = cur.execute(query, params.values, prepare=prepare).fetchall()
    for ask, leg, fid, created, session, key, score, matched, fact, text, count, last in rows:
        if fact is not None:
            found.rows[fid] = (fact, count, last)
            found.keys[fid], found.texts[fid] = key, text
        found.legs[ask][leg].append(
            LegHit(fid, float(score), session, created, terms.matched(matched))
        )
    return found


def nearest(
    conn: psycopg.Connection,
    ext: str,
    vector_oid: int,
    ask: Ask,
    vectors: Sequence[np.ndarray],
    depth: int,
    threshold: float,
) -> list[Found]:
    """Per vector, the dense leg over ``ask``'s facts (cosine at least ``threshold``, nearest
    first, at most ``depth``), every vector in one statement of one shape however many (the
    vectors sent as one binary ``vector[]``, ``vector_oid`` its element type). The owner's
    facts are read once and every (vector, fact) pair's distance computed once, not a scan
    of the owner per vector (every stored row fetched again for each fact a record brings)."""
    if not vectors or depth <= 0:
        return [Found([{"dense": []}]) for _ in vectors]
    quoted = ext.replace('"', '""')
    params = _Params(Vectors(np.stack(vectors), vector_oid))
    query = f"""
        WITH x AS MATERIALIZED (
            SELECT x.i, x.v FROM unnest($1::"{quoted}".vector[]) WITH ORDINALITY AS x(v, i)
        ),
        o AS MATERIALIZED (
            SELECT f.id, f.created_at, f.embedding FROM longterm_facts f
            WHERE {params.where(ask.scope)}
        ),
        h AS (
            SELECT x.i, o.id, o.created_at, o.embedding OPERATOR("{quoted}".<=>) x.v AS dist
            FROM x CROSS JOIN o
        ),
        r AS (
            SELECT h.i, h.id, h.created_at, 1 - h.dist AS score, row_number() OVER (
                PARTITION BY h.i ORDER BY h.dist, h.created_at, h.id) AS rank
            FROM h WHERE 1 - h.dist >= {params.add(threshold)}
        )
        SELECT r.i, r.id, r.created_at, r.score, f.fact->>'session_id', f.key, f.fact::text,
            f.access_count, f.last_accessed_at
        FROM r JOIN longterm_facts f ON f.id = r.id
        WHERE r.rank <= {params.add(depth)}
        ORDER BY r.i, r.score DESC, r.created_at, r.id
    """
    out = [Found([{"dense": []}]) for _ in vectors]
    with psycopg.RawCursor(conn) as cur:
        prepare = conn.prepare_threshold is not None
        rows = cur.execute(query, params.values, prepare=prepare).fetchall()
    for i, fid, created, score, session, key, text, count, last in rows:
        found, fid = out[i - 1], str(fid)
        found.rows[fid], found.keys[fid] = (text, count, last), key
        found.legs[0]["dense"].append(LegHit(fid, float(score), session, created))
    return out


def floored(legs: Mapping[str, list[LegHit]], floors: Mapping[str, float]) -> dict:
    """``legs`` without the hits at or below their leg's floor (``store_values.merge_floors``)."""
    return {
        leg: [h for h in hits if leg not in floors or h.score > floors[leg]]
        for leg, hits in legs.items()
    }
