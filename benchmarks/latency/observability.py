"""The fixed cost observability adds to one search request, piece by piece, without HTTP.

What the API does per request beyond the work: a trace (``traceparent`` parsed or made), the
metrics (the request's counter and histogram, the retrieval stages, one embedding call) and one
JSON access line written to a file; against the same request with metrics and the access log
off (the trace stays: it is made either way). Medians of 5 runs of ``--n`` requests each. The
load average is taken before and after: on a shared machine it says how far to trust a figure.

The fixed cost is +124 us a request, about 3 % of an HTTP hybrid search at 100k
(RESULTS.md, "Observability").

    python -m benchmarks.latency.observability [--n 20000]
        [--json benchmarks/results/observability_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from memory_service.api.metrics import AppMetrics
from memory_service.observe.logs import JsonFormatter, TraceFilter
from memory_service.observe.telemetry import timed_stage, using_sink
from memory_service.observe.tracing import trace_from_header, using_trace

ROUTE = "/v1/memories/search"
STAGES = ("bm25", "dense", "fusion", "retrieve")


@contextmanager
def _access_log(path: Path) -> Iterator[logging.Logger]:
    """The service's access logger writing JSON lines to ``path`` for the run, then put back
    as it was: the logger is process-wide, and a handler left on a deleted file would fail
    every later access line in the same process."""
    log = logging.getLogger("memory_service.access")
    saved = (log.handlers[:], log.propagate, log.level)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.addFilter(TraceFilter())
    handler.setFormatter(JsonFormatter())
    log.handlers, log.propagate = [handler], False
    log.setLevel(logging.INFO)
    try:
        yield log
    finally:
        handler.close()
        log.handlers, log.propagate = saved[0], saved[1]
        log.setLevel(saved[2])


def _request(metrics: AppMetrics | None, log: logging.Logger | None) -> Callable[[], None]:
    def one() -> None:
        trace = trace_from_header(None)
        trace.traceparent().encode()
        with using_trace(trace):
            if metrics is None:
                for stage in STAGES:
                    with timed_stage(stage):
                        pass
                return
            with using_sink(metrics):
                for stage in STAGES:
                    with timed_stage(stage):
                        pass
                metrics.embedding(0.004, 1)
                metrics.request("POST", ROUTE, 200, 0.01)
        if log is not None:
            extra = {"method": "POST", "route": ROUTE, "status": 200, "duration_ms": 10.0}
            log.info("%s %s %d %.1f ms", "POST", ROUTE, 200, 10.0, extra=extra)

    return one


def per_request_us(fn: Callable[[], None], n: int) -> float:
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            fn()
        runs.append((time.perf_counter() - started) / n * 1e6)
    return statistics.median(runs)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000, help="requests per run (5 runs)")
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    args = parser.parse_args(argv)
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp, _access_log(Path(tmp) / "access.jsonl") as log:
        figures = {
            "off_us": per_request_us(_request(None, None), args.n),
            "on_us": per_request_us(_request(AppMetrics("files"), log), args.n),
            "metrics_only_us": per_request_us(_request(AppMetrics("files"), None), args.n),
        }
    figures["added_us"] = figures["on_us"] - figures["off_us"]
    figures["load_average"] = [list(load_start), list(os.getloadavg())]
    for name, value in figures.items():
        print(f"{name}: {value if isinstance(value, list) else round(value, 1)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
