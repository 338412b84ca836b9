"""Record throughput of the files backend against Qdrant Edge, at the same moment.

On a host whose speed drifts, two scale runs minutes apart compare the host more than the
backends. Here one backend of each kind (temporary workspaces, the configured settings) records
the same batches of 100 scale facts with their source, one user per batch, taking turns batch
by batch (who goes first alternates). Each has its own embedder, so every record embeds: the
figures are whole records, as ``memory-service bench --scale`` times them.

Edge records at 0.90-0.91x files' rate measured this way (RESULTS.md, "Record rate").

    python -m benchmarks.record.backends [--users 150] \
        --json benchmarks/results/record-backends.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import psycopg
from psycopg import sql

from indexing.embeddings import Embedder

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memory_service.config import QdrantSettings, load_settings  # noqa: E402
from memory_service.config.settings import PostgresSettings  # noqa: E402
from memory_service.domain.context import RuntimeContext  # noqa: E402
from memory_service.evaluation import metrics  # noqa: E402
from memory_service.evaluation.datasets.synthetic import scale_texts  # noqa: E402
from memory_service.evaluation.scale import scale_facts  # noqa: E402
from memory_service.longterm.files.backend import FileSystemLongTermMemory  # noqa: E402
from memory_service.longterm.postgres.backend import open_postgres  # noqa: E402
from memory_service.longterm.protocol import LongTermMemory  # noqa: E402
from memory_service.longterm.qdrant.backend import open_qdrant  # noqa: E402
from memory_service.observe.progress import Progress  # noqa: E402
from memory_service.services import build_embedder  # noqa: E402


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def open_backends(
    root: Path,
    names: Sequence[str] = ("files", "qdrant-edge"),
    postgres_dsn: str | None = None,
    embedder: Embedder | None = None,
) -> dict[str, LongTermMemory]:
    """The backends ``names`` (files, qdrant-edge, postgres) under ``root`` (PostgreSQL: in
    a schema of its own at ``postgres_dsn``, ``close_backends`` drops it), the configured
    settings, each with its own embedder (so each embeds what it records), or all with
    ``embedder``."""
    settings = load_settings()

    def model() -> Embedder:
        return embedder if embedder is not None else build_embedder(settings)

    edge = root / "edge"
    out: dict[str, LongTermMemory] = {}
    for name in names:
        if name == "files":
            out[name] = FileSystemLongTermMemory(root / "files", model())
        elif name == "qdrant-edge":
            qdrant = QdrantSettings(path=edge / "qdrant")
            out[name] = open_qdrant(qdrant, edge, model())
        elif name == "postgres":
            if not postgres_dsn:
                raise ValueError("the postgres backend needs a DSN")
            schema = f"bench_{uuid.uuid4().hex[:16]}"
            pg = PostgresSettings(dsn=postgres_dsn, schema_name=schema)
            out[name] = open_postgres(pg, model())
        else:
            raise ValueError(f"unknown backend {name!r}")
    return out


def close_backends(memories: dict[str, LongTermMemory], postgres_dsn: str | None) -> None:
    """Every backend closed; a postgres one's schema (``open_backends``'s) dropped."""
    for memory in memories.values():
        memory.close()
    database = getattr(memories.get("postgres"), "database", None)
    if postgres_dsn and database is not None and database.schema:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
            conn.execute(drop.format(sql.Identifier(database.schema)))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=150, help="batches (default 150)")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    batches = [scale_facts(scale_texts(u, 100, seed=7)[0], True) for u in range(args.users)]
    started = _load()
    with tempfile.TemporaryDirectory() as tmp:
        memories = open_backends(Path(tmp))
        try:
            record = record_taking_turns(memories, batches)
        finally:
            for memory in memories.values():
                memory.close()
    doc = {
        "batches": len(batches),
        "facts_per_batch": 100,
        "load_average": {"start": started, "end": _load()},
        "record": record,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=2))
    print(f"load {started} -> {doc['load_average']['end']}; whole records, batches of 100")
    print_record(record)
    print(f"wrote {args.json}")


def user_context(user: int) -> RuntimeContext:
    return RuntimeContext("bench", f"user-{user}")


def record_taking_turns(
    memories: dict[str, LongTermMemory], batches: Sequence[Sequence]
) -> dict[str, dict[str, float]]:
    """Batch ``i`` into user ``i`` of every backend, taking turns batch by batch (who goes
    first alternates): per backend, facts per second and the batch's p50 / p95 (ms)."""
    seconds: dict[str, list[float]] = {name: [] for name in memories}
    with Progress(len(batches), f"record: {', '.join(memories)} taking turns") as bar:
        for user, batch in enumerate(batches):
            ctx = user_context(user)
            order = list(memories) if user % 2 == 0 else list(reversed(memories))
            for name in order:
                began = time.perf_counter()
                memories[name].record(ctx, list(batch))
                seconds[name].append(time.perf_counter() - began)
            bar.update()
    return {
        name: {
            "facts_per_s": sum(len(b) for b in batches) / sum(v),
            "p50_ms": metrics.percentile([1000 * s for s in v], 50),
            "p95_ms": metrics.percentile([1000 * s for s in v], 95),
        }
        for name, v in seconds.items()
    }


def print_record(record: dict[str, dict[str, float]]) -> None:
    print(f"{'backend':<12} {'facts/s':>8} {'p50 ms':>8} {'p95 ms':>8}")
    for name, r in record.items():
        print(f"{name:<12} {r['facts_per_s']:8.0f} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f}")
    for name in ("qdrant-edge", "postgres"):
        if {"files", name} <= record.keys():
            ratio = record[name]["facts_per_s"] / record["files"]["facts_per_s"]
            print(f"{name} / files record rate: {ratio:.2f}x")


if __name__ == "__main__":
    main()
