"""``--scale N``: N facts over many users in one backend, then retrieve latency in-process and
over HTTP, record throughput and peak memory.

Facts come from the synthetic bank with dates to keep them distinct; queries are questions
about each user's slot facts, sampled with a fixed seed. The first query per user is timed on
its own (it builds that user's index); the latency figures after it are steady state.
"""

from __future__ import annotations

import random
import resource
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from memory_service.bench import metrics
from memory_service.bench.backends import settings_for
from memory_service.bench.dataset import BenchInputError
from memory_service.bench.datasets.synthetic import scale_texts
from memory_service.bench.embedding import ColdQueryEmbedder
from memory_service.bench.http_server import LoopbackServer, write_key_file
from memory_service.bench.progress import Progress
from memory_service.bench.runner import TENANT, WARM_UP_QUERY
from memory_service.config import Settings
from memory_service.context import RuntimeContext
from memory_service.errors import MemoryServiceError
from memory_service.facts import Fact


def peak_rss_mb() -> float:
    """Peak resident memory of this process (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _user(index: int) -> RuntimeContext:
    return RuntimeContext(TENANT, f"scale-user-{index:06d}")


def _counts(facts: int, users: int) -> list[int]:
    base, extra = divmod(facts, users)
    return [base + (1 if i < extra else 0) for i in range(users)]


def _latency(values: Sequence[float], seconds: float) -> tuple[dict, float | None]:
    summary = {
        "p50": metrics.percentile(values, 50),
        "p95": metrics.percentile(values, 95),
        "mean": metrics.mean(values),
    }
    return summary, (len(values) / seconds if seconds > 0 else None)


def _record(services, counts: list[int], batch_size: int, seed: int, show: bool):
    questions: dict[int, list[str]] = {}
    record_s = 0.0
    with Progress(sum(counts), "scale: record", enabled=show) as bar:
        for user, count in enumerate(counts):
            texts, asked = scale_texts(user, count, seed=seed)
            questions[user] = asked
            ctx = _user(user)
            for start in range(0, len(texts), batch_size):
                batch = [Fact(t) for t in texts[start : start + batch_size]]
                began = time.perf_counter()
                services.longterm.record(ctx, batch)
                record_s += time.perf_counter() - began
                bar.update(len(batch))
    return questions, record_s


def _in_process(services, pairs, mode: str, top_k: int) -> tuple[dict, float | None]:
    values = []
    began = time.perf_counter()
    for user, query in pairs:
        t0 = time.perf_counter()
        services.longterm.retrieve(_user(user), query, top_k, mode=mode)
        values.append(1000.0 * (time.perf_counter() - t0))
    return _latency(values, time.perf_counter() - began)


def _over_http(client, pairs, mode: str, top_k: int) -> tuple[dict, float | None]:
    values = []
    began = time.perf_counter()
    for user, query in pairs:
        body = {"user_id": _user(user).user_id, "query": query, "top_k": top_k, "mode": mode}
        t0 = time.perf_counter()
        response = client.post("/v1/memories/search", json=body)
        values.append(1000.0 * (time.perf_counter() - t0))
        if response.status_code != 200:
            raise MemoryServiceError(f"HTTP search failed: {response.status_code} {response.text}")
    return _latency(values, time.perf_counter() - began)


def run_scale(
    settings: Settings,
    embedder: ColdQueryEmbedder,
    *,
    facts: int,
    users: int,
    modes: Sequence[str],
    queries: int = 300,
    top_k: int = 10,
    batch_size: int = 100,
    http: bool = True,
    workdir: Path | None = None,
    seed: int = 7,
    show_progress: bool = True,
) -> dict:
    """Fill one backend with ``facts`` facts over ``users`` users and measure it."""
    if facts < 1 or not 1 <= users <= facts:
        raise BenchInputError("--scale N needs N >= 1 and 1 <= --users <= N")
    from memory_service.services import build_services

    started = time.perf_counter()
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memory-scale-", dir=workdir) as tmp:
        services = build_services(settings_for(settings, Path(tmp)), embedder=embedder)
        try:
            counts = _counts(facts, users)
            questions, record_s = _record(services, counts, batch_size, seed, show_progress)
            rss_after_ingest = peak_rss_mb()
            rng = random.Random(seed)
            pairs = [
                (user, rng.choice(questions[user]))
                for user in rng.choices(range(users), k=queries)
                if questions[user]
            ]
            embedder.mark_queries(query for _, query in pairs)
            first = []
            with Progress(users, "scale: first query per user", enabled=show_progress) as bar:
                for user in range(users):
                    t0 = time.perf_counter()
                    for mode in modes:
                        services.longterm.retrieve(_user(user), WARM_UP_QUERY, 1, mode=mode)
                    first.append(1000.0 * (time.perf_counter() - t0))
                    bar.update()
            results = []
            for mode in modes:
                latency, qps = _in_process(services, pairs, mode, top_k)
                results.append({"mode": mode, "latency_ms": latency, "qps": qps})
            if http:
                _measure_http(services, Path(tmp), pairs, modes, top_k, results)
        finally:
            services.close()
    return {
        "dataset": "scale",
        "facts": facts,
        "users": users,
        "facts_per_user": facts / users,
        "batch_size": batch_size,
        "queries": len(pairs),
        "top_k": top_k,
        "record_s": record_s,
        "ingest_per_s": facts / record_s if record_s > 0 else None,
        "first_query_ms": {
            "p50": metrics.percentile(first, 50),
            "p95": metrics.percentile(first, 95),
            "total_s": sum(first) / 1000.0,
        },
        "results": results,
        "rss_after_ingest_mb": rss_after_ingest,
        "peak_rss_mb": peak_rss_mb(),
        "wall_s": time.perf_counter() - started,
    }


def _measure_http(services, tmp: Path, pairs, modes, top_k: int, results: list[dict]) -> None:
    import httpx

    from memory_service.api import create_app
    from memory_service.api.keys import ApiKeyRing

    key_file = tmp / "bench-api-keys.json"
    key = write_key_file(key_file, TENANT)
    app = create_app(services, ApiKeyRing.from_file(key_file))
    headers = {"Authorization": f"Bearer {key}"}
    with (
        LoopbackServer(app) as base_url,
        httpx.Client(base_url=base_url, headers=headers, timeout=60) as client,
    ):
        client.get("/healthz").raise_for_status()
        for result in results:
            latency, qps = _over_http(client, pairs, result["mode"], top_k)
            result["http_latency_ms"] = latency
            result["http_qps"] = qps
