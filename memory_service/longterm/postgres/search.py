"""The PostgreSQL backend's two legs, each one query over one owner's facts.

BM25 is computed in the query from the postings (``longterm_terms``) with the owner's own
statistics, as the files backend's in-process index has them: N and the mean length over the
owner's open facts (every stored fact for a read about the past), each query term's document
frequency over the same facts, Lucene's IDF ``ln(1 + (N - df + 0.5) / (df + 0.5))``, k1 1.2,
b 0.75, a query term counted as often as the query repeats it. The dense leg is pgvector's
cosine distance over the owner's rows: an exact scan of the few facts one owner holds, found
through the owner index (``benchmarks/RESULTS.md`` compares it with HNSW and iterative
scans). Both legs apply the read's conditions (``conditions.view_where``) before their
``LIMIT``, break ties as the files backend does (score to 6 decimals, then ``created_at``,
id), and return each hit's fact whole, with the query terms its document holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg

from memory_service.domain.facts import Fact
from memory_service.longterm.fusion import LegHit
from memory_service.longterm.postgres.conditions import Where
from memory_service.longterm.postgres.rows import FACT_COLUMNS, fact_of, term_key, vector_text

K1 = 1.2
B = 0.75


@dataclass(frozen=True, slots=True)
class QueryTerms:
    """A query's terms as the postings hold them: each distinct id, how often the query
    says it, and the terms it stands for."""

    ids: list[int]
    counts: list[int]
    by_id: dict[int, tuple[str, ...]]

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
        return frozenset(t for i in ids or () for t in self.by_id.get(int(i), ()))


def _hits(rows: Sequence[Sequence], terms: QueryTerms, facts: dict[str, Fact]) -> list[LegHit]:
    out = []
    for row in rows:
        fact = fact_of(row)
        facts[fact.id] = fact
        out.append(
            LegHit(fact.id, float(row[4]), fact.session_id, fact.created_at, terms.matched(row[5]))
        )
    return out


def bm25_leg(
    conn: psycopg.Connection,
    scope: Where,
    corpus: Where,
    terms: QueryTerms,
    depth: int,
    facts: dict[str, Fact],
) -> list[LegHit]:
    """The facts ``scope`` admits that share a term with the query, best first, at most
    ``depth``; ``corpus``: the facts the statistics are over (conditions on alias ``c``)."""
    if not terms.ids or depth <= 0:
        return []
    query = f"""
        WITH q AS (SELECT * FROM unnest(%s::bigint[], %s::int[]) AS q(term, qtf)),
        corpus AS (
            SELECT count(*)::float8 AS n, COALESCE(avg(c.doc_len), 1)::float8 AS avgdl
            FROM longterm_facts c WHERE {corpus.text}
        ),
        df AS (
            SELECT t.term, count(*)::float8 AS df
            FROM longterm_terms t JOIN q USING (term) JOIN longterm_facts c ON c.id = t.fact_id
            WHERE {corpus.text} GROUP BY t.term
        )
        SELECT * FROM (
            SELECT {", ".join("f." + c.strip() for c in FACT_COLUMNS.split(","))},
                sum(q.qtf * ln(1 + (corpus.n - df.df + 0.5) / (df.df + 0.5))
                    * t.tf * {K1 + 1}
                    / (t.tf + {K1} * (1 - {B} + {B} * f.doc_len / corpus.avgdl))) AS score,
                array_agg(t.term) AS matched, f.created_at AS created
            FROM longterm_terms t
                JOIN q USING (term) JOIN df USING (term)
                JOIN longterm_facts f ON f.id = t.fact_id
                CROSS JOIN corpus
            WHERE {scope.text}
            GROUP BY f.id
        ) s
        ORDER BY round(s.score::numeric, 6) DESC, s.created, s.id
        LIMIT %s
    """
    params = [terms.ids, terms.counts, *corpus.params, *corpus.params, *scope.params, depth]
    rows = conn.execute(query, params).fetchall()
    return _hits(rows, terms, facts)


def dense_leg(
    conn: psycopg.Connection,
    ext: str,
    scope: Where,
    vector: np.ndarray,
    terms: QueryTerms,
    depth: int,
    threshold: float,
    facts: dict[str, Fact],
) -> list[LegHit]:
    """The facts ``scope`` admits whose cosine with ``vector`` is at least ``threshold``,
    nearest first, at most ``depth``."""
    if depth <= 0:
        return []
    quoted = '"' + ext.replace('"', '""') + '"'
    distance = f"f.embedding OPERATOR({quoted}.<=>) %s::{quoted}.vector"
    query = f"""
        SELECT {", ".join("f." + c.strip() for c in FACT_COLUMNS.split(","))},
            1 - ({distance}) AS score,
            ARRAY(SELECT t.term FROM longterm_terms t
                  WHERE t.fact_id = f.id AND t.term = ANY(%s)) AS matched
        FROM longterm_facts f
        WHERE {scope.text} AND 1 - ({distance}) >= %s
        ORDER BY {distance}, f.created_at, f.id
        LIMIT %s
    """
    text = vector_text(vector)
    params = [text, terms.ids, *scope.params, text, threshold, text, depth]
    rows = conn.execute(query, params).fetchall()
    return _hits(rows, terms, facts)
