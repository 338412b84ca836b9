"""The metrics seam: what the service measures, recorded without knowing who counts it.

Lower layers (``longterm``, ``pipeline``, ``shortterm``, the embedder wrapper) call the
functions below; they reach the ``Sink`` current in this context, a no-op unless an app
installed its own (``api/metrics.py``: one Prometheus registry per app, so two apps in one
process never count each other's work). A sink must never raise into the work it measures.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar


class Sink:
    """Receives measurements; this base class drops them (metrics turned off, or no app)."""

    def retrieval_stage(self, stage: str, seconds: float) -> None:
        """A retrieval leg (``bm25``, ``dense``, or ``engine`` for one combined query),
        ``fusion`` or the whole ``retrieve``."""

    def embedding(self, seconds: float, batch: int) -> None:
        """One call of the embedding model over ``batch`` texts (cache hits excluded)."""

    def records(self, status: str, count: int) -> None:
        """Facts recorded with ``status`` (created, duplicate, superseded)."""

    def pipeline(self, job: str, outcome: str) -> None:
        """One run of ``job`` (flush, compaction, consolidation, replay, maintenance) that
        ended ``outcome`` (ok, failed, or the job's own word such as skipped)."""

    def dead_letter(self, kind: str) -> None:
        """A dead letter written (``flush``)."""

    def tokens(self, purpose: str, prompt: int, completion: int) -> None:
        """LLM tokens spent for ``purpose`` (chat, flush, compaction, consolidation...)."""

    def facts_changed(self, delta: int) -> None:
        """Stored facts added (positive) or removed (negative) by this process."""


NULL_SINK = Sink()
_sink: ContextVar[Sink] = ContextVar("memory_metrics_sink", default=NULL_SINK)


def sink() -> Sink:
    return _sink.get()


@contextlib.contextmanager
def using_sink(target: Sink) -> Iterator[Sink]:
    """Send the block's measurements (and those of threads started with its context) to
    ``target``."""
    token = _sink.set(target)
    try:
        yield target
    finally:
        _sink.reset(token)


@contextlib.contextmanager
def timed_stage(stage: str) -> Iterator[None]:
    """Time a retrieval stage into the current sink (nothing measured when it is the null
    sink, so metrics turned off cost one context-variable read)."""
    target = _sink.get()
    if target is NULL_SINK:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        target.retrieval_stage(stage, time.perf_counter() - start)


class TimedEmbedder:
    """An ``Embedder`` that reports each model call's time and batch size; wraps the model,
    beneath the vector cache, so only real model work is measured."""

    def __init__(self, inner) -> None:  # an indexing.embeddings.Embedder
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts):
        return self._timed(self.inner.embed, texts)

    def embed_query(self, texts):
        return self._timed(self.inner.embed_query, texts)

    @staticmethod
    def _timed(embed, texts):
        target = _sink.get()
        if target is NULL_SINK:
            return embed(texts)
        start = time.perf_counter()
        vectors = embed(texts)
        target.embedding(time.perf_counter() - start, len(texts))
        return vectors

    def __getattr__(self, name: str):  # batch_size, threads...: whatever the model offers
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
