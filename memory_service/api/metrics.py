"""Prometheus metrics of one app: the metric objects on their own registry, fed by the seam.

``AppMetrics`` is the ``observe.telemetry.Sink`` the API installs for each request (and serve
for its maintenance thread), so ``longterm`` and ``pipeline`` record without importing this
module. One registry per app: two apps in a process (tests) never count each other's work.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from memory_service.observe.telemetry import Sink

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Seconds: a search is milliseconds on a warm index, a chat call seconds.
_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class AppMetrics(Sink):
    """The service's metrics (names in README: Observability)."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.http_requests = Counter(
            "memory_http_requests",
            "HTTP requests answered, by route template and status",
            ["method", "route", "status"],
            registry=r,
        )
        self.http_latency = Histogram(
            "memory_http_request_duration_seconds",
            "HTTP request latency, by route template and status",
            ["method", "route", "status"],
            buckets=_LATENCY,
            registry=r,
        )
        self.retrieval = Histogram(
            "memory_retrieval_seconds",
            "Long-term retrieval latency by stage: each leg (bm25, dense; engine for a "
            "combined Qdrant query), fusion, and the whole retrieve",
            ["stage"],
            buckets=_LATENCY,
            registry=r,
        )
        self.embedding_seconds = Histogram(
            "memory_embedding_seconds",
            "Embedding model time per call (vector-cache hits excluded)",
            buckets=_LATENCY,
            registry=r,
        )
        self.embedding_batch = Histogram(
            "memory_embedding_batch_size",
            "Texts per embedding model call",
            buckets=_BATCH,
            registry=r,
        )
        self.records_total = Counter(
            "memory_records", "Facts recorded, by outcome", ["status"], registry=r
        )
        self.pipeline_runs = Counter(
            "memory_pipeline_runs",
            "Flush, compaction, consolidation, replay and maintenance runs, by outcome",
            ["job", "outcome"],
            registry=r,
        )
        self.dead_letters = Counter(
            "memory_dead_letters", "Dead letters written", ["kind"], registry=r
        )
        self.llm_tokens = Counter(
            "memory_llm_tokens",
            "LLM tokens spent, by purpose and kind (prompt, completion)",
            ["purpose", "kind"],
            registry=r,
        )
        self.facts = Gauge(
            "memory_facts",
            "Facts this process added to the backend minus those it deleted since it started "
            "(a cheap gauge: no scan of the store)",
            ["backend"],
            registry=r,
        )
        self.facts.labels(backend)  # present from the first scrape
        # labelled children by label values: ``labels()`` validates and locks on every call,
        # a dict read does not (the request path pays for this on every request)
        self._children: dict[tuple, Any] = {}

    def _child(self, metric: Any, *values: str) -> Any:
        key = (id(metric), *values)
        child = self._children.get(key)
        if child is None:
            child = self._children.setdefault(key, metric.labels(*values))
        return child

    # -- Sink -------------------------------------------------------------------------------

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        labels = (method, route, str(status))
        self._child(self.http_requests, *labels).inc()
        self._child(self.http_latency, *labels).observe(seconds)

    def retrieval_stage(self, stage: str, seconds: float) -> None:
        self._child(self.retrieval, stage).observe(seconds)

    def embedding(self, seconds: float, batch: int) -> None:
        self.embedding_seconds.observe(seconds)
        self.embedding_batch.observe(batch)

    def records(self, status: str, count: int) -> None:
        self._child(self.records_total, status).inc(count)

    def pipeline(self, job: str, outcome: str) -> None:
        self._child(self.pipeline_runs, job, outcome).inc()

    def dead_letter(self, kind: str) -> None:
        self._child(self.dead_letters, kind).inc()

    def tokens(self, purpose: str, prompt: int, completion: int) -> None:
        if prompt:
            self._child(self.llm_tokens, purpose, "prompt").inc(prompt)
        if completion:
            self._child(self.llm_tokens, purpose, "completion").inc(completion)

    def facts_changed(self, delta: int) -> None:
        self._child(self.facts, self.backend).inc(delta)

    def exposition(self) -> bytes:
        """The text format a Prometheus scrape reads."""
        return generate_latest(self.registry)
