"""What making an Edge write durable costs: a flush after every write against the WAL's fsync.

Two Qdrant Edge backends in temporary folders record the same batches (one user's facts per
batch, the bundled scale bank), taking turns batch by batch (who goes first alternates), so
both see the same machine state. They differ only in ``EdgeCommit.interval_s``: 0 flushes
every segment after every write, the default fsyncs
the write-ahead log and flushes segments every ``FLUSH_INTERVAL_S``. Every text is embedded
once before timing (the service's vector cache), so what is timed is the store's own part of a
record: add the embedding (``memory-service bench --scale``) for a whole one.

What each rule costs a batch: RESULTS.md, "Record rate".

    python -m benchmarks.record.edge_commit [--users 200] --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from indexing.embeddings import CachedEmbedder  # noqa: E402
from memory_service.config import QdrantSettings, load_settings  # noqa: E402
from memory_service.domain.context import RuntimeContext  # noqa: E402
from memory_service.domain.facts import Fact  # noqa: E402
from memory_service.evaluation import metrics  # noqa: E402
from memory_service.evaluation.datasets.synthetic import scale_texts  # noqa: E402
from memory_service.longterm.qdrant.backend import open_qdrant  # noqa: E402
from memory_service.services import build_embedder  # noqa: E402

RULES = {"flush every write": 0.0, "WAL fsync, flush every 5 s": None}


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None, *, embedder=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=200, help="batches (default 200)")
    parser.add_argument("--facts-per-user", type=int, default=100)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    batches = [scale_texts(u, args.facts_per_user, seed=7)[0] for u in range(args.users)]
    texts = [t for batch in batches for t in batch]
    embedder = CachedEmbedder(
        embedder or build_embedder(load_settings()), max_entries=len(texts) + 1
    )
    print(f"embedding {len(texts)} texts once; load {_load()}", flush=True)
    for batch in batches:
        embedder.embed(batch)
    timings: dict[str, list[float]] = {rule: [] for rule in RULES}
    print(f"recording; load {_load()}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        memories = {}
        for n, (rule, interval) in enumerate(RULES.items()):
            folder = Path(tmp) / str(n)
            memories[rule] = open_qdrant(QdrantSettings(path=folder / "qdrant"), folder, embedder)
            if interval is not None:
                memories[rule].engine.commit.interval_s = interval
        for user, batch_texts in enumerate(batches):
            ctx = RuntimeContext("bench", f"user-{user}")
            batch = [Fact(t) for t in batch_texts]
            order = list(RULES) if user % 2 == 0 else list(reversed(RULES))
            for rule in order:
                began = time.perf_counter()
                memories[rule].record(ctx, batch)
                timings[rule].append(1000.0 * (time.perf_counter() - began))
        flushes = {rule: m.engine.commit.flushes for rule, m in memories.items()}
        for memory in memories.values():
            memory.close()
    last = max(1, args.users // 10)
    doc = {
        "batches": args.users,
        "facts_per_batch": args.facts_per_user,
        "load_average_end": list(os.getloadavg()),
        "record_store_ms": {
            rule: {
                "p50": metrics.percentile(v, 50),
                "p95": metrics.percentile(v, 95),
                "p50_last_tenth": metrics.percentile(v[-last:], 50),
                "segment_flushes": flushes[rule],
            }
            for rule, v in timings.items()
        },
    }
    args.json.write_text(json.dumps(doc, indent=2))
    print(f"load {_load()}; ms per batch of {args.facts_per_user}, vectors cached")
    print(f"{'rule':<28} {'p50':>7} {'p95':>7} {'p50 last 10%':>13} {'flushes':>8}")
    for rule, s in doc["record_store_ms"].items():
        print(
            f"{rule:<28} {s['p50']:7.1f} {s['p95']:7.1f} {s['p50_last_tenth']:13.1f}"
            f" {s['segment_flushes']:8d}"
        )
    return doc


if __name__ == "__main__":
    main()
