"""How thread settings change embedding latency on this machine.

torch's intra-op pool and the BLAS pool (OpenBLAS via numpy) both default to one thread per
core; on a 2-core machine they can fight. This script measures one-query latency (p50/p95) and
batch throughput for each combination, side by side, so the default in
``indexing.embeddings.configure_threads`` is a measured choice.

The default of 2 threads comes from it: 1 thread wins only on an oversubscribed host
(RESULTS.md, "Query embedding").

    python -m benchmarks.latency.embedding_threads [--queries 200] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/threads.json"))
    args = parser.parse_args(argv)

    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    from indexing.embeddings import SentenceTransformerEmbedder

    embedder = SentenceTransformerEmbedder(num_threads=1)
    model = embedder._model
    queries = [f"what did the user say about topic number {i}?" for i in range(args.queries)]
    batch = [
        f"The user mentioned fact number {i} about their family and work" for i in range(args.batch)
    ]
    blas_default = [p.get("num_threads") for p in threadpool_info() if p["user_api"] == "blas"]
    rows = []
    cores = os.cpu_count() or 1
    for torch_threads in sorted({1, 2, cores}):
        for blas in (None, 1):
            torch.set_num_threads(torch_threads)
            limits = threadpool_limits(limits=blas, user_api="blas") if blas else None
            model.encode(queries[:10])
            latencies = []
            for query in queries:
                start = time.perf_counter()
                model.encode([query], normalize_embeddings=True)
                latencies.append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            model.encode(batch, batch_size=64, normalize_embeddings=True)
            per_s = len(batch) / (time.perf_counter() - start)
            if limits is not None:
                limits.restore_original_limits()
            rows.append(
                {
                    "torch_threads": torch_threads,
                    "blas_threads": blas or f"default ({blas_default})",
                    "query_ms_p50": round(statistics.median(latencies), 2),
                    "query_ms_p95": round(_percentile(latencies, 0.95), 2),
                    "batch_per_s": round(per_s, 1),
                }
            )
            print(rows[-1], flush=True)
    print(f"\n{'torch':>5} {'blas':>14} {'p50 ms':>8} {'p95 ms':>8} {'batch/s':>8}")
    for r in rows:
        print(
            f"{r['torch_threads']:>5} {str(r['blas_threads']):>14} {r['query_ms_p50']:>8} "
            f"{r['query_ms_p95']:>8} {r['batch_per_s']:>8}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"cores": cores, "rows": rows}, indent=2))
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
