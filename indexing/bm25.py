"""In-process BM25 over one user's facts (rank-bm25).

rank-bm25's Okapi IDF, ``log((N - df + 0.5) / (df + 0.5))``, goes to zero or below for any term
in half the documents, which on a user with two or three facts makes every score 0. We use the
Lucene/Qdrant form ``log(1 + (N - df + 0.5) / (df + 0.5))`` instead: always positive, and the
same IDF that Qdrant's ``Modifier.IDF`` applies to the sparse leg, so both backends rank alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rank_bm25 import BM25Okapi


class _LuceneIdfBM25(BM25Okapi):
    def _calc_idf(self, nd: dict[str, int]) -> None:  # noqa: D401 - rank-bm25 hook
        self.idf = {
            word: math.log(1.0 + (self.corpus_size - freq + 0.5) / (freq + 0.5))
            for word, freq in nd.items()
        }


@dataclass(frozen=True, slots=True)
class BM25Hit:
    index: int
    score: float


class BM25Index:
    """BM25 over a fixed list of token lists; rebuild it when the list changes."""

    def __init__(self, documents: Sequence[Sequence[str]], *, k1: float = 1.2, b: float = 0.75):
        self._size = len(documents)
        self._postings: dict[str, set[int]] = {}
        for i, doc in enumerate(documents):
            for term in doc:
                self._postings.setdefault(term, set()).add(i)
        # rank-bm25 divides by the average length: an all-empty corpus needs a placeholder.
        corpus = [list(doc) if doc else [""] for doc in documents]
        self._bm25 = _LuceneIdfBM25(corpus, k1=k1, b=b) if corpus else None

    def __len__(self) -> int:
        return self._size

    def scores(self, query_terms: Sequence[str]) -> np.ndarray:
        """BM25 of every document in order (0 where no term is shared): for callers that
        combine whole score rows, such as the recall lab's feedback and session variants."""
        if self._bm25 is None or not query_terms:
            return np.zeros(self._size)
        return np.asarray(self._bm25.get_scores(list(query_terms)), dtype=np.float64)

    def search(
        self, query_terms: Sequence[str], limit: int, allowed: np.ndarray | None = None
    ) -> list[BM25Hit]:
        """Documents sharing at least one term with the query, best first; with ``allowed``
        (a boolean per document), only those it allows, chosen before the cut to ``limit``."""
        if self._bm25 is None or not query_terms:
            return []
        matching: set[int] = set()
        for term in set(query_terms):
            matching |= self._postings.get(term, set())
        if allowed is not None:
            matching = {i for i in matching if allowed[i]}
        if not matching:
            return []
        scores = np.asarray(self._bm25.get_scores(list(query_terms)))
        ranked = sorted(matching, key=lambda i: (-scores[i], i))[:limit]
        return [BM25Hit(index=i, score=float(scores[i])) for i in ranked]
