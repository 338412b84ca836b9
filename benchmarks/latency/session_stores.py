"""Session-state stores side by side: save and load latency of files, PostgreSQL and Redis.

One process, the stores taking turns operation by operation on the same 30-message session
(what a chat call loads and saves), so load on a shared machine hits them alike. Medians and
p95 in milliseconds.

    python -m benchmarks.latency.session_stores [--rounds 300]
        [--postgres postgresql://postgres@127.0.0.1:5432/test] [--redis redis://127.0.0.1:6379/0]
        [--json benchmarks/results/session_stores.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


stores_table: dict[str, str] = {}  # the throwaway PostgreSQL table of this run


def _drop_table(dsn: str, table: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


def _stores(workdir: Path, postgres: str | None, redis_url: str | None) -> dict:
    from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore

    stores: dict = {"files": FilesAgentStateStore(workdir / "ws")}
    if postgres:
        from memory_service.stores.database import Database
        from memory_service.stores.shortterm.session_state.postgres import PostgresAgentStateStore

        table = f"bench_state_{uuid.uuid4().hex[:8]}"
        stores_table["postgres"] = table
        stores["postgres"] = PostgresAgentStateStore(
            Database(postgres, pool_max=2), table=table, owns_database=True
        )
    if redis_url:
        from memory_service.stores.shortterm.session_state.redis import RedisAgentStateStore

        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        stores["redis"] = RedisAgentStateStore(redis_url, key_prefix=prefix)
    return stores


def run(rounds: int, postgres: str | None, redis_url: str | None) -> dict:
    from memory_service.domain.agent_state import AgentState
    from memory_service.domain.context import RuntimeContext
    from memory_service.domain.messages import Msg

    ctx = RuntimeContext("bench", "alice", "s1")
    with tempfile.TemporaryDirectory() as tmp:
        stores = _stores(Path(tmp), postgres, redis_url)
        states = {}
        for name, store in stores.items():
            state = AgentState(session_id="s1")
            state.append(*(Msg.user(f"message {i}: " + "words " * 30) for i in range(30)))
            store.save(state, ctx)
            states[name] = state
        times: dict = {name: {"save": [], "load": []} for name in stores}
        for _ in range(rounds):
            for name, store in stores.items():
                started = time.perf_counter()
                state = store.load(ctx)
                loaded = time.perf_counter()
                store.save(state, ctx)
                saved = time.perf_counter()
                times[name]["load"].append((loaded - started) * 1000)
                times[name]["save"].append((saved - loaded) * 1000)
        for store in stores.values():
            store.erase_user(ctx)
            store.close()
        if postgres:
            _drop_table(postgres, stores_table["postgres"])
    return {
        name: {
            op: {"p50": round(statistics.median(v), 3), "p95": round(_p95(v), 3)}
            for op, v in ops.items()
        }
        for name, ops in times.items()
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--postgres", help="a PostgreSQL DSN (left out when not given)")
    parser.add_argument("--redis", help="a Redis URL (left out when not given)")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    results = run(args.rounds, args.postgres, args.redis)
    print(f"{'store':<10} {'load p50':>9} {'load p95':>9} {'save p50':>9} {'save p95':>9}  (ms)")
    for name, ops in results.items():
        load, save = ops["load"], ops["save"]
        print(f"{name:<10} {load['p50']:>9} {load['p95']:>9} {save['p50']:>9} {save['p95']:>9}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
