"""A fact as a row of ``longterm_facts`` and its BM25 postings, and back.

The row keeps the fact whole as JSON (``Fact.to_dict``, access metadata aside: those are
columns that a recall's batch rewrites) and, as columns, what reads filter and rank by. The
lexical document is ``fusion.fact_terms`` (the terms every backend indexes), stored as one
posting per distinct term: its id (``term_key``), its count, the document's length. Term ids
are 63 bits of blake2b: two terms meet on one id about once in 10^10 pairs of a vocabulary of
a million, so the scores are the files backend's (which compares the terms themselves), and a
posting holds no word of the fact.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import numpy as np

from indexing.tokenize import document_length
from memory_service.config.retrieval import RetrievalConfig
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, parse_time
from memory_service.longterm.fusion import fact_terms
from memory_service.stores.binary_arrays import Int4s, Int8s

# the columns a read selects, in this order (``fact_of``)
FACT_COLUMNS = "id, fact, access_count, last_accessed_at"


@lru_cache(maxsize=65536)
def term_key(term: str) -> int:
    """A term's stable 63-bit id (a ``bigint`` that is never negative)."""
    digest = hashlib.blake2b(term.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF_FFFF_FFFF


@dataclass(frozen=True, slots=True)
class Document:
    """A fact's lexical document: each distinct term id with its count, and its length in
    positions (``tokenize.document_length``, at least 1, as the files backend's index)."""

    terms: dict[int, int]
    length: int


def document_of(fact: Fact, config: RetrievalConfig) -> Document:
    tokens = fact_terms(fact, config)
    counts = Counter(map(term_key, tokens))
    return Document(dict(counts), max(document_length(tokens), 1))


def vector_text(vector: np.ndarray) -> str:
    """A dense vector in pgvector's text form (each float32 exactly: its float64 value's
    shortest repr reads back as the same float32): a recall's query vector, which a search
    may send again (writes send theirs in binary: ``binary_arrays.Vectors``)."""
    return _vector_text(np.asarray(vector, dtype=np.float32).tobytes())


@lru_cache(maxsize=512)
def _vector_text(raw: bytes) -> str:
    return "[" + ",".join(map(repr, np.frombuffer(raw, dtype=np.float32).tolist())) + "]"


def fact_json(fact: Fact) -> str:
    """What the ``fact`` column keeps: the fact without its id and access metadata."""
    data = fact.to_dict()
    for name in ("id", "access_count", "last_accessed_at", "needs_verification"):
        data.pop(name, None)
    return json.dumps(data, ensure_ascii=False)


def fact_of(row: Sequence[Any]) -> Fact:
    """A fact from ``FACT_COLUMNS``."""
    return stored_fact(str(row[0]), dict(row[1]), row[2], row[3])


def stored_fact(fact_id: str, data: dict[str, Any], count: int | None, last: Any) -> Fact:
    """The fact of the ``fact`` column's JSON (``data``, taken) and the access columns, made
    in one step (``dataclasses.replace`` after would check every field again)."""
    data["id"], data["access_count"], data["last_accessed_at"] = fact_id, count, last
    return Fact.from_dict(data)


def fact_row(
    ctx: RuntimeContext, fact: Fact, document: Document, expires_at: datetime | None
) -> dict[str, Any]:
    """The columns of ``fact`` of owner ``ctx`` (no vector; its term ids and counts as
    lists: ``with_binary_terms``)."""
    return {
        "id": fact.id,
        "tenant_id": ctx.tenant_id,
        "owner": ctx.owner,
        "scope": ctx.scope,
        "user_id": ctx.user_id if ctx.scope == "user" else None,
        "agent_id": ctx.agent_id if ctx.scope == "agent" else None,
        "key": fact.key,
        "is_open": fact.superseded_by is None and fact.valid_to is None,
        "created_at": parse_time(fact.created_at),
        "expires_at": expires_at,
        "importance": int(fact.importance),
        "fact": fact_json(fact),
        "access_count": int(fact.access_count),
        "last_accessed_at": parse_time(fact.last_accessed_at),
        "doc_len": document.length,
        "terms": list(document.terms),
        "tfs": list(document.terms.values()),
    }


def with_binary_terms(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (``fact_row``'s) with its term ids and counts wrapped for a statement of its
    own (a write of many rows sends them all in one flat array instead)."""
    return row | {"terms": Int8s(row["terms"]), "tfs": Int4s(row["tfs"])}
