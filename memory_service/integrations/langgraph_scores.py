"""Scores from the embedding a LangGraph ``index`` config names.

A LangGraph user who builds a store with ``index={"embed": ..., "distance_type": ...}``
thresholds and compares ``SearchItem.score`` in that model's terms, as PostgresStore and
InMemoryStore compute it: cosine similarity, inner product, or the negated L2 distance of the
query's vector and the item's best indexed text's. The store still recalls with its own model
and fusion (one model ranks a store's facts); this gives each hit the caller's score. Texts'
vectors are kept in a bounded cache, so a text is embedded once while it stays in use, and a
search asks the caller's model one call at most (the query and the texts not cached).
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Literal

from langgraph.store.base.embed import ensure_embeddings

DistanceType = Literal["cosine", "inner_product", "l2"]
DISTANCES: tuple[str, ...] = ("cosine", "inner_product", "l2")
CACHED_TEXTS = 4096  # vectors of the texts embedded last


class CallerScores:
    """The caller's embedding and distance: ``best`` scores a query against texts."""

    def __init__(self, embed: Any, distance_type: str = "cosine") -> None:
        if distance_type not in DISTANCES:
            raise ValueError(
                f"distance_type must be one of {', '.join(DISTANCES)}: got {distance_type!r}"
            )
        self.embeddings = ensure_embeddings(embed)
        self.distance_type = distance_type
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def best(self, query: str, groups: Sequence[Sequence[str]]) -> list[float]:
        """For each group of texts (one item's), its best score against ``query``."""
        texts = [t for group in groups for t in group]
        vectors = self._vectors([query, *texts])
        query_vector, by_text = vectors[0], dict(zip(texts, vectors[1:], strict=True))
        return [
            max((self._score(query_vector, by_text[t]) for t in group), default=0.0)
            for group in groups
        ]

    def _vectors(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            known = {t: self._cache[t] for t in texts if t in self._cache}
            for text in known:
                self._cache.move_to_end(text)
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            found = [[float(x) for x in v] for v in self._embed(missing)]
            known.update(zip(missing, found, strict=True))
            with self._lock:
                self._cache.update(zip(missing, found, strict=True))
                while len(self._cache) > CACHED_TEXTS:
                    self._cache.popitem(last=False)
        return [known[t] for t in texts]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        """The caller's vectors; an async-only embedding function runs on a loop of its own
        (the store's batches run in a worker thread, which has none)."""
        embeddings = self.embeddings
        only_async = getattr(embeddings, "func", None) is None
        if only_async and getattr(embeddings, "afunc", None) is not None:
            return asyncio.run(embeddings.aembed_documents(texts))
        return embeddings.embed_documents(texts)

    def _score(self, a: Sequence[float], b: Sequence[float]) -> float:
        if len(a) != len(b):
            raise ValueError(f"the embedding gave vectors of {len(a)} and {len(b)} dimensions")
        if self.distance_type == "l2":
            return -math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
        dot = sum(x * y for x, y in zip(a, b, strict=True))
        if self.distance_type == "inner_product":
            return dot
        norms = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
        return dot / norms if norms else 0.0
