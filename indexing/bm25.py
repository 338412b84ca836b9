"""In-process BM25 over one user's facts (rank-bm25).

rank-bm25's Okapi IDF, ``log((N - df + 0.5) / (df + 0.5))``, goes to zero or below for any term
in half the documents, which on a user with two or three facts makes every score 0. We use the
Lucene/Qdrant form ``log(1 + (N - df + 0.5) / (df + 0.5))`` instead: always positive, and the
same IDF that Qdrant's ``Modifier.IDF`` applies to the sparse leg, so both backends rank alike.
A document's length is ``tokenize.document_length`` (positions: a stacked term adds none), as
in ``indexing.sparse``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np
from rank_bm25 import BM25Okapi

from indexing.tokenize import document_length


class _LuceneIdfBM25(BM25Okapi):
    def _calc_idf(self, nd: dict[str, int]) -> None:  # noqa: D401 - rank-bm25 hook
        self.idf = {
            word: math.log(1.0 + (self.corpus_size - freq + 0.5) / (freq + 0.5))
            for word, freq in nd.items()
        }

    def get_scores(self, query: list[str]) -> np.ndarray:
        """rank-bm25's scores, bit for bit, adding each query term to the documents that hold
        it alone (it adds exactly 0 to the others)."""
        score = np.zeros(self.corpus_size)
        for q in query:
            found = self._added(q)
            if found is not None:
                docs, added = found
                score[docs] += added
        return score

    def _added(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The documents holding ``term`` and what it adds to each one's score (None: no
        document holds it). Found by a pass over every document the first time a term is
        asked for, then kept (at most ``HELD_POSTINGS`` terms an index): a user's questions
        repeat their words (names, places), and the pass, not the arithmetic, was a files
        recall's BM25 time (``benchmarks/RESULTS.md``, "Recall time by stage"). Only asked
        terms are held, so an index costs no more memory until it is asked."""
        held: dict[str, tuple[np.ndarray, np.ndarray]] = self.__dict__.setdefault("_held", {})
        found = held.get(term)
        if found is not None:
            return found
        idf = self.idf.get(term)
        if not idf:
            return None
        norm = getattr(self, "_norm", None)
        if norm is None:
            doc_len = np.array(self.doc_len)
            norm = self._norm = self.k1 * (1 - self.b + self.b * doc_len / self.avgdl)
        pairs = [(i, f) for i, doc in enumerate(self.doc_freqs) if (f := doc.get(term))]
        docs = np.fromiter((i for i, _ in pairs), np.intp, len(pairs))
        q_freq = np.fromiter((f for _, f in pairs), np.float64, len(pairs))
        found = docs, idf * (q_freq * (self.k1 + 1) / (q_freq + norm[docs]))
        if len(held) < HELD_POSTINGS:
            held[term] = found
        return found


# The query terms an index keeps the postings of (a term: its documents and what it adds to
# each, 16 bytes a document holding it).
HELD_POSTINGS = 1024
# The most distinct query terms ``matched_each`` tells apart with one integer mask a document.
_MASK_BITS = 62


@dataclass(slots=True)  # built for every hit of a recall: not frozen, cheaper to make
class BM25Hit:
    index: int
    score: float


class BM25Index:
    """BM25 over a fixed list of token lists; rebuild it when the list changes.

    Memory is rank-bm25's own (one term-frequency dict per document) and nothing more: the
    documents matching a query are exactly those with a positive score, because the Lucene IDF
    above is positive for every term, so no postings lists are kept beside it. Terms are
    interned: the same word in ten thousand documents is one string, not ten thousand."""

    def __init__(
        self,
        documents: Sequence[Sequence[str]],
        *,
        k1: float = 1.2,
        b: float = 0.75,
        lengths: Sequence[int] | None = None,
    ):
        """``lengths``: each document's length for the norm, where its terms are not
        ``tokenize``'s (the lab's other tokenizations); default ``document_length``."""
        self._size = len(documents)
        # rank-bm25 divides by the average length: an all-empty corpus needs a placeholder.
        corpus = [[sys.intern(t) for t in doc] if doc else [""] for doc in documents]
        self._bm25 = _LuceneIdfBM25(corpus, k1=k1, b=b) if corpus else None
        if self._bm25 is not None:  # lengths in positions, as the sparse vectors count them
            if lengths is None:
                lengths = [document_length(doc) for doc in corpus]
            self._bm25.doc_len = [max(n, 1) for n in lengths]
            self._bm25.avgdl = sum(self._bm25.doc_len) / len(self._bm25.doc_len)

    def __len__(self) -> int:
        return self._size

    def scores(self, query_terms: Sequence[str]) -> np.ndarray:
        """BM25 of every document in order (0 where no term is shared): for callers that
        combine whole score rows, such as the recall lab's feedback and session variants."""
        if self._bm25 is None or not query_terms:
            return np.zeros(self._size)
        return np.asarray(self._bm25.get_scores(list(query_terms)), dtype=np.float64)

    def matched(self, index: int, query_terms: Collection[str]) -> frozenset[str]:
        """The ``query_terms`` document ``index`` holds, read from its term-frequency dict
        (the document as indexed, so nothing is tokenized again per query)."""
        if self._bm25 is None:
            return frozenset()
        return frozenset(filter(self._bm25.doc_freqs[index].__contains__, query_terms))

    def matched_each(
        self, indices: Sequence[int], query_terms: Sequence[str]
    ) -> list[frozenset[str]]:
        """``matched`` of each document of ``indices``: from each query term's postings, a
        few array operations a term rather than a lookup a term and document (a recall asks
        it of ~80 candidates). Documents holding the same terms share one frozenset."""
        unique = list(dict.fromkeys(query_terms))
        if self._bm25 is None or not unique or len(unique) > _MASK_BITS or not indices:
            return [self.matched(i, unique) for i in indices]
        where = np.asarray(indices, dtype=np.intp)
        masks = np.zeros(len(where), dtype=np.int64)
        for bit, term in enumerate(unique):
            found = self._bm25._added(term)
            if found is None:  # no document holds it
                continue
            docs = found[0]  # ascending
            at = np.minimum(np.searchsorted(docs, where), len(docs) - 1)
            masks |= (docs[at] == where).astype(np.int64) << bit
        shared: dict[int, frozenset[str]] = {}
        out = []
        for mask in masks.tolist():
            if (held := shared.get(mask)) is None:
                held = shared[mask] = frozenset(t for b, t in enumerate(unique) if mask >> b & 1)
            out.append(held)
        return out

    def search(
        self, query_terms: Sequence[str], limit: int, allowed: np.ndarray | None = None
    ) -> list[BM25Hit]:
        """Documents sharing at least one term with the query, best first (ties by position);
        with ``allowed`` (a boolean per document), only those it allows, chosen before the cut
        to ``limit``."""
        if self._bm25 is None or not query_terms or limit <= 0:
            return []
        scores = self.scores(query_terms)
        hit = scores > 0.0
        if allowed is not None:
            hit &= allowed
        matching = np.flatnonzero(hit)
        if matching.size == 0:
            return []
        # stable sort on -score keeps the lower position first among equal scores
        ranked = matching[np.argsort(-scores[matching], kind="stable")][:limit]
        return list(map(BM25Hit, ranked.tolist(), scores[ranked].tolist()))
