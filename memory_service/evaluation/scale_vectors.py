"""The scale run's document vectors, embedded once before the timed record and handed to each
backend with the batch it records (``--backends``).

Why: several backends recording the same texts would each embed them, and on a small host the
model is most of a record's time, the same work for every backend. So the bench embeds each
distinct text once, by the model alone (its rate reported on its own), and each backend's
record gets those vectors through ``BankEmbedder``: the record's timing is the backend's own
work (near-duplicate lookup, dedup, writing, indexing). With ``--distinct-users N``, user ``u``
records the texts of user ``u mod N``, so a million facts need N users' vectors, not a million.
Queries are never served from here: every question is embedded by the model when asked.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from memory_service.evaluation.datasets.synthetic import scale_texts
from memory_service.observe.progress import Progress


def texts_user(user: int, distinct_users: int) -> int:
    """Whose texts ``user`` records: its own, or with reuse those of ``user mod N``."""
    return user % distinct_users


def user_texts(
    user: int, count: int, distinct_users: int, seed: int
) -> tuple[list[str], list[str]]:
    """``user``'s fact texts and questions (another user's, under reuse)."""
    return scale_texts(texts_user(user, distinct_users), count, seed=seed)


def embed_distinct(
    model, texts: Sequence[str], batch_size: int, show: bool
) -> tuple[dict[str, np.ndarray], float]:
    """Each distinct text's vector by ``model`` (uncached), and the seconds the model took."""
    distinct = list(dict.fromkeys(texts))
    vectors: dict[str, np.ndarray] = {}
    spent = 0.0
    with Progress(len(distinct), "scale: embed distinct texts", enabled=show) as bar:
        for start in range(0, len(distinct), batch_size):
            batch = distinct[start : start + batch_size]
            began = time.perf_counter()
            out = np.asarray(model.embed(batch), dtype=np.float32)
            spent += time.perf_counter() - began
            vectors.update(zip(batch, out, strict=True))
            bar.update(len(batch))
    return vectors, spent


class BankEmbedder:
    """The service's embedder, except that the texts of the batch being recorded (``load``)
    get the vectors the bench embedded for them; any other text goes to ``model`` (and is
    counted in ``misses``). Queries always go to the model."""

    def __init__(self, model) -> None:
        self._model = model
        self._loaded: dict[str, np.ndarray] = {}
        self.misses = 0

    @property
    def name(self) -> str:
        return self._model.name

    @property
    def dimension(self) -> int:
        return self._model.dimension

    @property
    def asymmetric(self) -> bool:
        return bool(getattr(self._model, "asymmetric", False))

    @property
    def query_ms(self) -> list[float]:
        """Each marked query's embedding by the model alone, ms (``ColdQueryEmbedder``)."""
        return list(getattr(self._model, "query_ms", []))

    def mark_queries(self, texts) -> None:
        self._model.mark_queries(texts)

    def load(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """The vectors of the next record's texts (the previous batch's are dropped)."""
        self._loaded = dict(zip(texts, vectors, strict=True))

    def clear(self) -> None:
        self._loaded = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if texts and all(t in self._loaded for t in texts):
            return np.stack([self._loaded[t] for t in texts])
        self.misses += sum(t not in self._loaded for t in texts)
        return self._model.embed(texts)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        if not self.asymmetric and texts and all(t in self._loaded for t in texts):
            return np.stack([self._loaded[t] for t in texts])  # a record's own facts
        return self._model.embed_query(texts)
