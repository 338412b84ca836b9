"""The service under concurrent load: 1, 4, 16 and 64 clients, each an ``AsyncMemoryClient``
with its own kept-alive connection, asking as fast as they are answered for a fixed time
against a real ``memory-service serve`` (files and Qdrant Edge): search only, and mixed (80 %
search, 20 % record of one new fact). Per level: answers per second, p50/p95/p99 of the
answered calls, and the errors by kind (503 ``overloaded`` from the bound on requests at
once, any other 5xx, a transport error or a timeout).

Two servers run side by side on copies of one workspace, one with the bound
(``MEMORY_API__MAX_CONCURRENT_REQUESTS``, ``--limit``) and one without (0), and each level
is run on both in turn (which goes first alternates), so load from elsewhere skews both
alike. The clients run in this process, one event loop: on a small machine they take CPU
from the server too, as clients on the same host would. Clients do not retry
(``max_retries=0``): every refusal is counted, and the refused client waits the
``Retry-After`` second before its next call.

    python -m benchmarks.latency.load [--backends files,qdrant] [--levels 1,4,16,64]
        [--seconds 10] [--limit 32] [--json benchmarks/results/load.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.latency.served import fill, load_average, serve_copy, summary, texts, user_id

MIXES = {"search": 0.0, "mixed": 0.2}  # the share of calls that record


async def _client_loop(
    client: Any,
    users: int,
    asked: list[tuple[int, str]],
    record_share: float,
    deadline: float,
    rng: random.Random,
    done: list[float],
    errors: Counter[str],
) -> None:
    from memory_service.client import ApiConnectionError, ApiError

    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        try:
            if rng.random() < record_share:
                user = rng.randrange(users)
                note = f"User {user} noted item {rng.randrange(10**9)} on the shelf"
                await client.record(user_id(user), [note])
            else:
                user, question = rng.choice(asked)
                await client.search(user_id(user), question)
        except ApiError as exc:
            errors[f"{exc.status} {exc.code}"] += 1
            if exc.status == 503:
                await asyncio.sleep(1.0)  # as a client honouring Retry-After: 1 does
            continue
        except ApiConnectionError as exc:
            errors[f"transport: {str(exc).split(':')[2].strip()}"] += 1
            continue
        done.append(1000.0 * (time.perf_counter() - t0))


async def _level(
    url: str,
    key: str,
    clients: int,
    seconds: float,
    users: int,
    asked: list[tuple[int, str]],
    record_share: float,
    seed: int,
) -> dict[str, Any]:
    from memory_service.client import AsyncMemoryClient

    pool = [AsyncMemoryClient(url, key, max_retries=0, timeout=60) for _ in range(clients)]
    done: list[float] = []
    errors: Counter[str] = Counter()
    try:
        for client in pool:  # each opens its connection before the clock starts
            await client.health()
        started = time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(
            *(
                _client_loop(
                    client,
                    users,
                    asked,
                    record_share,
                    deadline,
                    random.Random(f"{seed}:{i}"),
                    done,
                    errors,
                )
                for i, client in enumerate(pool)
            )
        )
        elapsed = time.perf_counter() - started
    finally:
        for client in pool:
            await client.close()
    return {
        "clients": clients,
        "answered": len(done),
        "per_s": round(len(done) / elapsed, 1),
        **summary(done),
        "errors": dict(errors),
    }


def run(
    backends: Sequence[str],
    levels: Sequence[int],
    seconds: float,
    limit: int,
    users: int,
    facts: int,
) -> dict[str, Any]:
    from memory_service.client import MemoryClient

    corpus = texts(users, facts)
    asked = [(u, q) for u, (_, questions) in corpus.items() for q in questions]
    rows = []
    for backend in backends:
        with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
            workspace = Path(tmp) / "ws"
            fill(workspace, backend, corpus)
            servers = {
                bound: stack.enter_context(
                    serve_copy(
                        workspace,
                        Path(tmp) / f"served-{bound}",
                        backend,
                        MEMORY_API__MAX_CONCURRENT_REQUESTS=str(bound),
                    )
                )
                for bound in (limit, 0)
            }
            for served in servers.values():  # each user's index built, each query embedded
                with MemoryClient(served.base_url, served.key, timeout=120) as warm:
                    for user, question in asked:
                        warm.search(user_id(user), question)
            turn = 0
            for mix, share in MIXES.items():
                for clients in levels:
                    order = list(servers.items())
                    turn += 1
                    if turn % 2:  # which server goes first alternates
                        order.reverse()
                    for bound, served in order:
                        row = asyncio.run(
                            _level(
                                served.base_url,
                                served.key,
                                clients,
                                seconds,
                                users,
                                asked,
                                share,
                                seed=clients,
                            )
                        )
                        row.update(backend=backend, mix=mix, limit=bound)
                        rows.append(row)
                        print(_line(row), flush=True)
    return {"seconds_per_level": seconds, "users": users, "facts_per_user": facts, "rows": rows}


HEADER = (
    "| backend | mix | limit | clients | answered/s | p50 ms | p95 ms | p99 ms | errors |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---|"
)


def _line(row: dict[str, Any]) -> str:
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(row["errors"].items())) or "0"
    return (
        f"| {row['backend']} | {row['mix']} | {row['limit'] or 'none'} | {row['clients']} "
        f"| {row['per_s']} | {row.get('p50_ms', '-')} | {row.get('p95_ms', '-')} "
        f"| {row.get('p99_ms', '-')} | {errors} |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="files,qdrant")
    parser.add_argument("--levels", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=10.0, help="per level")
    parser.add_argument("--limit", type=int, default=32, help="the bound on requests at once")
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--facts", type=int, default=200, help="per user")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    load_before = load_average()
    print(HEADER, flush=True)
    report = run(
        args.backends.split(","),
        [int(n) for n in args.levels.split(",")],
        args.seconds,
        args.limit,
        args.users,
        args.facts,
    )
    report.update(load_before=load_before, load_after=load_average())
    print(f"load average before {load_before}, after {report['load_after']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
