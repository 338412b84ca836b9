"""Search latency by way in: the HTTP API through ``MemoryClient``, MCP over streamable HTTP
(``/mcp`` on the same ``serve``), and MCP over stdio (``memory-service mcp``), side by side.

One workspace, filled once through the client (the scale bench's synthetic facts, fixed seed);
then the same questions are asked one at a time through each way, in turn, after a warm-up.
What differs is the transport and the MCP framing; the recall underneath is the same. The
load average is taken before and after: on a shared machine it says how far to trust a figure.

What each way costs against the API: RESULTS.md, "Ways in: HTTP and MCP".

    python -m benchmarks.latency.ways_in [--facts 500] [--queries 100]
        [--json benchmarks/results/mcp_latency.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio

from tests.support.server import clean_env, free_port, wait_healthy

os.environ.setdefault("HF_HUB_OFFLINE", "1")

USER = "bench-user"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _summary(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {"p50_ms": round(_percentile(ms, 0.5), 2), "p95_ms": round(_percentile(ms, 0.95), 2)}


def _texts(facts: int, queries: int) -> tuple[list[str], list[str]]:
    from memory_service.evaluation.datasets.synthetic import scale_texts

    documents: list[str] = []
    asked: list[str] = []
    user = 0
    while len(documents) < facts or len(asked) < queries:
        texts, questions = scale_texts(user, 40, seed=7)
        documents += texts
        asked += questions
        user += 1
    return documents[:facts], asked[:queries]


def _start_serve(workspace: Path) -> tuple[subprocess.Popen, str]:
    """``memory-service serve`` on a free loopback port, answering /healthz."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=clean_env(workspace),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
    except RuntimeError:
        proc.terminate()
        raise
    return proc, url


async def _timed(ask: Callable[[str], Awaitable[Any]], questions: list[str], warmup: int):
    for question in questions[:warmup]:
        await ask(question)
    seconds = []
    for question in questions:
        start = time.perf_counter()
        await ask(question)
        seconds.append(time.perf_counter() - start)
    return seconds


async def _mcp_session(open_streams, questions: list[str], warmup: int) -> list[float]:
    from mcp import ClientSession

    async with open_streams as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()

        async def ask(question: str) -> None:
            result = await session.call_tool("memory_search", {"query": question})
            assert not result.is_error, result

        return await _timed(ask, questions, warmup)


def run(facts: int, queries: int, warmup: int) -> dict[str, Any]:
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    from memory_service.client import MemoryClient
    from memory_service.stores.api_keys.files import FilesKeyStore

    documents, questions = _texts(facts, queries)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        key = FilesKeyStore(workspace / "api-keys.json").add("bench", "user")
        proc, url = _start_serve(workspace)
        try:
            with MemoryClient(url, key, timeout=120) as client:
                for start in range(0, len(documents), 100):
                    client.record(USER, documents[start : start + 100])

                async def http_ask(question: str) -> None:
                    client.search(USER, question)

                results = {"http_client": anyio.run(_timed, http_ask, questions, warmup)}

            async def over_http() -> list[float]:
                headers = {"Authorization": f"Bearer {key}", "X-Memory-User": USER}
                async with create_mcp_http_client(headers=headers) as http:
                    streams = streamable_http_client(f"{url}/mcp", http_client=http)
                    return await _mcp_session(streams, questions, warmup)

            results["mcp_http"] = anyio.run(over_http)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "memory_service.cli", "mcp", "--user", USER],
            env=clean_env(workspace, MEMORY_API_KEY=key),
        )

        async def over_stdio() -> list[float]:
            return await _mcp_session(stdio_client(params), questions, warmup)

        results["mcp_stdio"] = anyio.run(over_stdio)
    return {
        "facts": facts,
        "queries": queries,
        "warmup": warmup,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "search": {way: _summary(seconds) for way, seconds in results.items()},
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=500)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    report = run(args.facts, args.queries, args.warmup)
    text = json.dumps(report, indent=2)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
