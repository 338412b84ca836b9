"""BM25 term weights as sparse vectors, for a vector store that applies IDF itself (Qdrant).

BM25 splits into a part that depends only on the document and a part that depends on the
corpus::

    score(q, d) = sum_{t in q} qtf(t) * idf(t) * tf(t,d) * (k1 + 1)
                                              / (tf(t,d) + k1 * (1 - b + b * |d| / avg_len))

The document part (term-frequency saturation and length normalisation, ``|d|`` in positions:
``tokenize.document_length``) is stored as the document's sparse vector; the query vector
carries each query term's count ``qtf(t)`` (rank-bm25 also sums over repeated query terms);
``idf(t)`` is applied at query time by Qdrant's IDF modifier,
``log(1 + (N - df + 0.5) / (df + 0.5))`` — the same Lucene form ``indexing.bm25`` uses. The
dot product of the two vectors is then exactly the BM25 score.

What differs from an in-process index: ``avg_len`` is a constant fixed at indexing time rather
than the corpus mean (a stored vector cannot change when other documents arrive).
``AVG_DOC_LEN`` is set for short memories: LoCoMo's observation facts average 9.0 terms after
``tokenize``, its dialog turns 11.8.

Term ids are the first 31 bits of blake2b over the UTF-8 term: stable across processes,
platforms and Python versions (unlike ``hash()``), and non-negative 32-bit integers as Qdrant
requires. Two terms that share an id count as one term; with n distinct terms the expected
number of colliding pairs is n^2 / 2^32 (0.02 for 10k terms, 2.3 for 100k), and a collision only
matters when both terms meet in one user's facts and one query.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from indexing.tokenize import document_length

K1 = 1.2
B = 0.75
AVG_DOC_LEN = 10.0
AVG_SOURCE_LEN = 12.0  # a fact's source message (LoCoMo's turns: 11.8 terms), when indexed


@dataclass(frozen=True, slots=True)
class SparseTerms:
    """A sparse vector: sorted unique term ids and their weights."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.indices)


@lru_cache(maxsize=16384)  # a hash per token of every recorded fact: terms repeat
def term_id(term: str) -> int:
    """Stable 31-bit id of a term."""
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF


def _counts(tokens: Sequence[str]) -> Counter[int]:
    return Counter(term_id(t) for t in tokens)


def document_vector(
    tokens: Sequence[str], *, k1: float = K1, b: float = B, avg_len: float = AVG_DOC_LEN
) -> SparseTerms:
    """BM25 document weights (no IDF) of a document's tokens; empty tokens give an empty vector."""
    if avg_len <= 0:
        raise ValueError("avg_len must be positive")
    counts = _counts(tokens)
    norm = k1 * (1.0 - b + b * max(document_length(tokens), 1 if tokens else 0) / avg_len)
    ids = sorted(counts)
    return SparseTerms(tuple(ids), tuple(counts[i] * (k1 + 1.0) / (counts[i] + norm) for i in ids))


def query_vector(tokens: Sequence[str]) -> SparseTerms:
    """Query weights: each distinct term with its count in the query."""
    counts = _counts(tokens)
    ids = sorted(counts)
    return SparseTerms(tuple(ids), tuple(float(counts[i]) for i in ids))


def terms_by_id(terms: Sequence[str]) -> dict[int, tuple[str, ...]]:
    """Each query term under its id (two terms may share one: hashed ids)."""
    out: dict[int, tuple[str, ...]] = {}
    for term in dict.fromkeys(terms):
        tid = term_id(term)
        out[tid] = (*out.get(tid, ()), term)
    return out


_NONE_MATCHED: frozenset[str] = frozenset()


def matched_terms(
    document: Iterable[int] | None, term_ids: Mapping[int, tuple[str, ...]]
) -> frozenset[str] | None:
    """The query terms (``terms_by_id``) whose ids the document's sparse vector holds (its
    indices: a set, an array or any iterable of ids); None where the document's ids are
    unknown."""
    if document is None:
        return None
    if isinstance(document, (set, frozenset)):  # one pass over the query's few ids
        common = document.intersection(term_ids)
    else:  # an array: one pass over it
        common = term_ids.keys() & document
    if not common:
        return _NONE_MATCHED
    return frozenset(t for tid in common for t in term_ids[tid])
