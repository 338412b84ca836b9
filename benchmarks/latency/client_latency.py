"""Search latency as a client sees it: ``MemoryClient`` and ``AsyncMemoryClient`` over
kept-alive connections to a real ``memory-service serve``, beside the same recall in-process,
in one run, per backend (files, Qdrant Edge); and ``/healthz`` through both clients.

The server serves a copy of the workspace the in-process services open (``served``): the same
facts and ids. Each question is asked once everywhere before the timed rounds, so every path
finds its query vector cached and the figures differ by what lies between the caller and the
recall: HTTP, the route (key, validation, JSON both ways) and the client. In each round the
paths take turns in a rotating order, so load from elsewhere skews them alike. The gap is the
client's median minus the in-process median. ``bare_http`` is the floor of this machine: a
trivial ASGI app under uvicorn in a process of its own, asked through a kept-alive httpx
client (what any HTTP service pays here, the process switch on a loaded host among it).
On a shared machine wall time stretches with the load; the CPU time the server process spends
per request (``/proc/<pid>/stat``, over a block of the same request) does not, so it is
measured too: the service's own cost of a request, against the bare app's, and this
process's (the client's) CPU per call beside it.

    python -m benchmarks.latency.client_latency [--backends files,qdrant] [--users 4]
        [--facts 500] [--rounds 300] [--json benchmarks/results/client_latency.json]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.latency.served import (
    TENANT,
    cpu_seconds,
    fill,
    load_average,
    serve_copy,
    settings_for,
    summary,
    texts,
    user_id,
)
from memory_service.evaluation.report import write_json
from tests.support.server import free_port, wait_healthy

PATHS = (
    "in_process",
    "sync_client",
    "async_client",
    "healthz_sync",
    "healthz_async",
    "bare_http",
)
BARE_APP = """
import sys, uvicorn
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"status":"ok"}'})
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _cpu_per_call(pid: int, call: Callable[[], object], count: int) -> float:
    """Milliseconds of ``pid``'s CPU per ``call`` over ``count`` calls in a row."""
    before = cpu_seconds(pid)
    for _ in range(count):
        call()
    return round(1000.0 * (cpu_seconds(pid) - before) / count, 3)


@contextmanager
def _bare_server() -> Iterator[tuple[str, int]]:
    """The trivial app above on a free loopback port, in a process of its own."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", BARE_APP, str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _backend(
    backend: str, users: int, facts: int, rounds: int, top_k: int, cpu_calls: int
) -> dict[str, Any]:
    import httpx

    from memory_service.client import AsyncMemoryClient, MemoryClient
    from memory_service.domain.context import RuntimeContext
    from memory_service.services import build_services

    corpus = texts(users, facts)
    asked = [(u, q) for u, (_, questions) in corpus.items() for q in questions]
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        fill(workspace, backend, corpus)
        with (
            serve_copy(workspace, Path(tmp) / "served", backend) as served,
            _bare_server() as (bare_url, bare_pid),
            httpx.Client(base_url=bare_url) as bare,
        ):
            services = build_services(settings_for(workspace, backend))
            runner = asyncio.Runner()
            sync = MemoryClient(served.base_url, served.key, max_retries=0)
            try:
                aclient = runner.run(_async_client(AsyncMemoryClient, served))

                def in_process(u: int, q: str) -> float:
                    t0 = time.perf_counter()
                    services.longterm.retrieve(RuntimeContext(TENANT, user_id(u)), q, top_k)
                    return time.perf_counter() - t0

                def sync_client(u: int, q: str) -> float:
                    t0 = time.perf_counter()
                    sync.search(user_id(u), q, top_k=top_k)
                    return time.perf_counter() - t0

                def async_client(u: int, q: str) -> float:
                    return runner.run(_timed(aclient.search(user_id(u), q, top_k=top_k)))

                def healthz_sync(u: int, q: str) -> float:
                    t0 = time.perf_counter()
                    sync.health()
                    return time.perf_counter() - t0

                def healthz_async(u: int, q: str) -> float:
                    return runner.run(_timed(aclient.health()))

                def bare_http(u: int, q: str) -> float:
                    t0 = time.perf_counter()
                    bare.get("/healthz").raise_for_status()
                    return time.perf_counter() - t0

                ways: dict[str, Callable[[int, str], float]] = {
                    "in_process": in_process,
                    "sync_client": sync_client,
                    "async_client": async_client,
                    "healthz_sync": healthz_sync,
                    "healthz_async": healthz_async,
                    "bare_http": bare_http,
                }
                for u, q in asked:  # every query vector cached in both processes
                    in_process(u, q)
                    sync_client(u, q)
                times: dict[str, list[float]] = {name: [] for name in ways}
                names = list(ways)
                for turn in range(rounds):
                    u, q = asked[turn % len(asked)]
                    shift = turn % len(names)
                    for name in names[shift:] + names[:shift]:
                        times[name].append(1000.0 * ways[name](u, q))
                cpu = {}
                pid = served.server.proc.pid
                u, q = asked[0]
                blocks = [
                    ("search", pid, lambda: sync.search(user_id(u), q, top_k=top_k)),
                    ("healthz", pid, sync.health),
                    ("bare_http", bare_pid, lambda: bare.get("/healthz")),
                ]
                for name, owner, call in blocks:
                    mine = time.process_time()
                    cpu[name] = _cpu_per_call(owner, call, cpu_calls)
                    mine = time.process_time() - mine
                    cpu[f"{name}_client"] = round(1000.0 * mine / cpu_calls, 3)
                runner.run(aclient.close())
            finally:
                sync.close()
                runner.close()
                services.close()
    figures = {name: summary(ms) for name, ms in times.items()}
    base = figures["in_process"]["p50_ms"]
    for name in ("sync_client", "async_client"):
        figures[name]["added_p50_ms"] = round(figures[name]["p50_ms"] - base, 2)
    return {
        "backend": backend,
        "users": users,
        "facts_per_user": facts,
        "search": figures,
        "cpu_ms_per_request": cpu,
    }


async def _async_client(cls: Any, served: Any) -> Any:
    return cls(served.base_url, served.key, max_retries=0)


async def _timed(call: Any) -> float:
    t0 = time.perf_counter()
    await call
    return time.perf_counter() - t0


def _table(runs: list[dict[str, Any]]) -> str:
    lines = [
        "| backend | path | p50 ms | p95 ms | p99 ms | added p50 ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for run in runs:
        for name in PATHS:
            f = run["search"][name]
            added = f.get("added_p50_ms", "")
            lines.append(
                f"| {run['backend']} | {name} | {f['p50_ms']} | {f['p95_ms']} | {f['p99_ms']} "
                f"| {added} |"
            )
    lines += ["", "| backend | CPU ms per request | search | healthz | bare app |"]
    lines.append("|---|---|---:|---:|---:|")
    for run in runs:
        c = run["cpu_ms_per_request"]
        for side, suffix in (("server", ""), ("client", "_client")):
            lines.append(
                f"| {run['backend']} | {side} | {c['search' + suffix]} | {c['healthz' + suffix]} "
                f"| {c['bare_http' + suffix]} |"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="files,qdrant")
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--facts", type=int, default=500, help="per user")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--cpu-calls", type=int, default=300, help="per CPU-time block")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    load_before = load_average()
    runs = [
        _backend(b, args.users, args.facts, args.rounds, args.top_k, args.cpu_calls)
        for b in args.backends.split(",")
    ]
    report = {"load_before": load_before, "load_after": load_average(), "runs": runs}
    print(_table(runs))
    print(f"load average before {load_before}, after {report['load_after']}")
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
