"""The benchmark's embedder: documents cached (as in the service), queries never.

The service wraps its model in a ``CachedEmbedder``. In a benchmark that asks each question once
per mode, a cached query vector would make the second dense-using mode look faster than it is.
So texts marked as queries always go to the model; everything else goes through the cache.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from indexing.embeddings import CachedEmbedder, Embedder


class ColdQueryEmbedder:
    """``Embedder`` over ``model``: a document cache of ``max_entries``; marked queries uncached."""

    def __init__(self, model: Embedder, *, max_entries: int = 200_000) -> None:
        self._model = model
        self._documents = CachedEmbedder(model, max_entries=max_entries)
        self._queries: set[str] = set()

    @property
    def name(self) -> str:
        return self._model.name

    @property
    def dimension(self) -> int:
        return self._model.dimension

    def mark_queries(self, texts: Iterable[str]) -> None:
        self._queries.update(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if texts and all(t in self._queries for t in texts):
            return self._model.embed(texts)
        return self._documents.embed(texts)
