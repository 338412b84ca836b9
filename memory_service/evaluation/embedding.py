"""The benchmark's embedder: documents cached (as in the service), queries never.

The service wraps its model in a ``CachedEmbedder``. In a benchmark that asks each question once
per mode, a cached query vector would make the second dense-using mode look faster than it is.
So texts marked as queries always go to the model; everything else goes through the cache.
``cold_embedder`` builds one from Settings; ``with_embedder`` switches the backend for
``--embedders``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

import numpy as np

from indexing.embeddings import BUNDLED_E5, BUNDLED_MODEL, CachedEmbedder, Embedder
from memory_service.config.settings import Settings


class ColdQueryEmbedder:
    """``Embedder`` over ``model``: a document cache of ``max_entries``; marked queries uncached."""

    def __init__(self, model: Embedder, *, max_entries: int = 200_000) -> None:
        self._model = model
        self._documents = CachedEmbedder(model, max_entries=max_entries)
        self._queries: set[str] = set()
        # each marked query's embedding by the model alone, ms: what a recall's time is
        # compared with (a recall cannot be faster than embedding its query)
        self.query_ms: list[float] = []

    @property
    def model(self) -> Embedder:
        """The model underneath, uncached."""
        return self._model

    @property
    def name(self) -> str:
        return self._model.name

    @property
    def dimension(self) -> int:
        return self._model.dimension

    def mark_queries(self, texts: Iterable[str]) -> None:
        self._queries.update(texts)

    @property
    def asymmetric(self) -> bool:
        return self._documents.asymmetric

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, self._model.embed, self._documents.embed)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, self._model.embed_query, self._documents.embed_query)

    def _embed(self, texts: Sequence[str], model, documents) -> np.ndarray:
        if texts and all(t in self._queries for t in texts):
            started = time.perf_counter()
            vectors = model(texts)
            self.query_ms.append((time.perf_counter() - started) * 1000.0)
            return vectors
        return documents(texts)


# ``--embedders`` names: the embedding settings each one runs with.
EMBEDDER_CHOICES: dict[str, dict[str, object]] = {
    "onnx": {"backend": "onnx", "quantize": False},
    "onnx-int8": {"backend": "onnx", "quantize": True},
    "torch": {"backend": "torch", "quantize": False},
    # the bundled models by name, on the default backend (whatever MEMORY_EMBEDDING__MODEL says)
    "minilm": {"model": BUNDLED_MODEL, "backend": "onnx", "quantize": False},
    "e5": {"model": BUNDLED_E5, "backend": "onnx", "quantize": False},
}


def with_embedder(settings: Settings, choice: str) -> Settings:
    """``settings`` with the embedding backend ``choice`` (a key of ``EMBEDDER_CHOICES``)."""
    embedding = settings.embedding.model_copy(update=EMBEDDER_CHOICES[choice])
    return settings.model_copy(update={"embedding": embedding})


# A recall run embeds each conversation once per mode and backend: it keeps them all.
RECALL_CACHE_ENTRIES = 200_000


def cold_embedder(settings: Settings, *, cache_entries: int | None = None) -> ColdQueryEmbedder:
    """The configured model, uncached underneath, with ``cache_entries`` cached document
    vectors: by default the configured cache, so ``--scale`` measures memory as it serves."""
    from memory_service.services.stores import build_embedder

    if cache_entries is None:
        cache_entries = settings.embedding.cache_entries
    uncached = settings.embedding.model_copy(update={"cache_entries": 0})
    raw = build_embedder(settings.model_copy(update={"embedding": uncached}))
    return ColdQueryEmbedder(raw, max_entries=cache_entries)
