"""What erasing a user costs, and what the erase's guard costs every write.

1. ``QdrantLongTermMemory.erase_user`` on Qdrant Edge: delete the user's points, then rewrite
   the collection from the live points (Edge keeps deleted payloads in its write-ahead log
   until then). Timed per collection size, one user of 100 facts erased per run. Points are
   bulk-loaded through the engine as ``record`` builds them (random unit vectors: the rewrite
   copies bytes, it does not look at them).
2. ``PostgresAgentStateStore.save`` with the tombstone guard (a shared per-user advisory lock and a
   tombstone read, inside the save's transaction) and without it, side by side, and
   ``FilesAgentStateStore.save`` (its guard is one tombstone read under the session's lock).

An erase on Qdrant Edge takes 59.35 s at 100,000 points (the rewrite), while the guard on a
save is within noise (RESULTS.md, "Erasing a user").

    python -m benchmarks.latency.erase [--sizes 1000 10000 100000] [--runs 3]
        [--saves 300] [--dsn postgresql://postgres@127.0.0.1:5432/test]
        [--json benchmarks/results/erase_cost.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memory_service.stores.tombstones.files import FilesTombstones
from tests.support.postgres import postgres_state_store

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from indexing.sparse import SparseTerms  # noqa: E402
from indexing.tokenize import TOKENIZER_VERSION  # noqa: E402
from memory_service.domain.context import RuntimeContext  # noqa: E402
from memory_service.domain.messages import Msg  # noqa: E402
from memory_service.longterm.qdrant.backend import QdrantLongTermMemory  # noqa: E402
from memory_service.longterm.qdrant.edge.engine import EdgeEngine  # noqa: E402
from memory_service.longterm.qdrant.layout import TERMS_FIELD  # noqa: E402
from memory_service.longterm.qdrant.points import StoredPoint  # noqa: E402
from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore

DIMENSION = 384
FACTS_PER_USER = 100


class _NoEmbedder:
    """The erase embeds nothing; the backend only needs the dimension."""

    name = "none"
    dimension = DIMENSION

    def embed(self, texts):  # pragma: no cover - never called here
        raise AssertionError("erase embeds nothing")

    embed_query = embed


def _points(users: int, rng: np.random.Generator) -> list[StoredPoint]:
    vectors = rng.normal(size=(users * FACTS_PER_USER, DIMENSION)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    points = []
    for i, vector in enumerate(vectors):
        user = f"u{i // FACTS_PER_USER}"
        payload = {
            "tenant_id": "bench",
            "user_id": user,
            "text": f"{user} fact number {i} about hiking in Lisbon with a cousin",
            "kind": "fact",
            "importance": 5,
            "created_at": "2026-12-01T00:00:00+00:00",
            TERMS_FIELD: TOKENIZER_VERSION,  # current terms: opening re-indexes nothing
        }
        sparse = SparseTerms((i % 5000, 7000 + i % 11), (1.0, 0.5))
        points.append(StoredPoint(str(uuid.uuid4()), payload, vector.tolist(), sparse))
    return points


def erase_on_edge(size: int, runs: int, rng: np.random.Generator) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        engine = EdgeEngine.acquire(Path(tmp) / "memories", DIMENSION)
        points = _points(size // FACTS_PER_USER, rng)
        for start in range(0, len(points), 2000):
            engine.upsert(points[start : start + 2000])
        memory = QdrantLongTermMemory(engine, _NoEmbedder())  # type: ignore[arg-type]
        seconds = []
        try:
            for run in range(runs):
                ctx = RuntimeContext("bench", f"u{run}")
                began = time.perf_counter()
                erased = memory.erase_user(ctx)
                seconds.append(time.perf_counter() - began)
                assert erased == FACTS_PER_USER, erased
        finally:
            memory.close()
    return {"points": size, "runs": runs, "median_s": statistics.median(seconds), "all_s": seconds}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _time_saves(store, saves: int) -> dict:
    ctx = RuntimeContext("bench", "alice", "s1")
    state = store.load(ctx)
    timings = []
    for i in range(saves):
        state.append(Msg.user(f"message {i}"))
        began = time.perf_counter()
        store.save(state, ctx)
        timings.append((time.perf_counter() - began) * 1000)
    return {
        "saves": saves,
        "median_ms": statistics.median(timings),
        "p95_ms": _percentile(timings, 0.95),
    }


def save_latency(dsn: str, saves: int) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, guarded in (("postgres_guarded", True), ("postgres_unguarded", False)):
            table = f"erase_bench_{uuid.uuid4().hex[:10]}"
            tombstones = FilesTombstones(Path(tmp)) if guarded else None
            store = postgres_state_store(dsn=dsn, table=table, tombstones=tombstones)
            try:
                out[name] = _time_saves(store, saves)
            finally:
                with store._conn() as conn:
                    conn.execute(f'DROP TABLE IF EXISTS "{table}"')
                store.close()
        out["files_guarded"] = _time_saves(FilesAgentStateStore(Path(tmp) / "ws"), saves)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--saves", type=int, default=300)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(7)
    report = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "edge_erase": [erase_on_edge(size, args.runs, rng) for size in args.sizes],
        "state_save": save_latency(args.dsn, args.saves),
    }
    print("erase one user (100 facts) from Qdrant Edge, delete + rewrite:")
    for row in report["edge_erase"]:
        print(f"  {row['points']:>7} points: median {row['median_s']:.2f} s over {row['runs']}")
    print("session save latency:")
    for name, row in report["state_save"].items():
        print(f"  {name:<20} median {row['median_ms']:.2f} ms  p95 {row['p95_ms']:.2f} ms")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
