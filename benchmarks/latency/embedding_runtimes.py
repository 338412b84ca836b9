"""Query-embedding latency: torch vs ONNX fp32 vs ONNX int8, at 1, 2 and 4 intra-op threads.

Each configuration runs in a fresh process (thread pools and imports never mix), one after
another, embedding the same ~300 distinct questions one at a time (the service's query path,
no cache) and one batch of facts (the record path). The load average is taken before and after
each configuration: on a shared machine it says how far to trust a figure. A small run: it does
not fill any backend.

Why ONNX fp32 at 2 threads is the default (the same rankings, a fraction of torch's time):
RESULTS.md, "Query embedding".

    python -m benchmarks.latency.embedding_runtimes [--queries 300] [--threads 1,2,4]
        [--json benchmarks/results/onnx_latency.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

MODULE = "benchmarks.latency.embedding_runtimes"
ROOT = Path(__file__).resolve().parents[2]  # where ``python -m`` finds ``benchmarks``

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

VARIANTS = ("torch", "onnx", "onnx-int8")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _texts(queries: int, facts: int) -> tuple[list[str], list[str]]:
    """Distinct questions and facts from the scale bench's synthetic bank (fixed seed)."""
    from memory_service.evaluation.datasets.synthetic import scale_texts

    asked: list[str] = []
    documents: list[str] = []
    user = 0
    while len(asked) < queries or len(documents) < facts:
        texts, questions = scale_texts(user, 40, seed=7)
        asked += [q for q in questions if q not in asked]
        documents += texts
        user += 1
    return asked[:queries], documents[:facts]


def _build(variant: str, threads: int):
    if variant == "torch":
        from indexing.embeddings import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(num_threads=threads)
    from indexing.onnx_embeddings import OnnxEmbedder

    return OnnxEmbedder(threads=threads, quantize=variant == "onnx-int8")


def measure_one(variant: str, threads: int, queries: int, facts: int) -> dict:
    """One configuration, in this process: load, warm up, time queries and one batch."""
    import resource

    asked, documents = _texts(queries, facts)
    load_before = os.getloadavg()
    started = time.perf_counter()
    embedder = _build(variant, threads)
    load_s = time.perf_counter() - started
    for text in asked[:10]:  # warm-up: first calls allocate
        embedder.embed([text + " warm"])
    latencies = []
    for text in asked:
        began = time.perf_counter()
        embedder.embed([text])
        latencies.append(1000.0 * (time.perf_counter() - began))
    began = time.perf_counter()
    embedder.embed(documents)
    batch_s = time.perf_counter() - began
    return {
        "variant": variant,
        "threads": threads,
        "queries": len(latencies),
        "p50_ms": _percentile(latencies, 0.50),
        "p95_ms": _percentile(latencies, 0.95),
        "mean_ms": sum(latencies) / len(latencies),
        "batch_per_s": len(documents) / batch_s,
        "load_s": load_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "torch_imported": "torch" in sys.modules,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }


def _child(variant: str, threads: int, queries: int, facts: int) -> dict:
    argv = [sys.executable, "-m", __spec__.name if __spec__ else MODULE, "--one"]
    argv.append(f"{variant}:{threads}")
    argv += ["--queries", str(queries), "--facts", str(facts)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{variant} at {threads} threads failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _table(rows: list[dict]) -> str:
    head = (
        "| variant | threads | query p50 ms | p95 ms | batch /s | load s | peak RSS MB | load avg |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        load = f"{r['load_average_before'][0]:.2f} -> {r['load_average_after'][0]:.2f}"
        lines.append(
            f"| {r['variant']} | {r['threads']} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} "
            f"| {r['batch_per_s']:.0f} | {r['load_s']:.1f} | {r['peak_rss_mb']:.0f} | {load} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--facts", type=int, default=256, help="texts in the batch measurement")
    parser.add_argument("--threads", default="1,2,4")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/onnx_latency.json"))
    parser.add_argument("--one", help=argparse.SUPPRESS)  # VARIANT:THREADS, in a child process
    args = parser.parse_args(argv)
    if args.one:
        variant, threads = args.one.split(":")
        print(json.dumps(measure_one(variant, int(threads), args.queries, args.facts)))
        return
    threads = [int(t) for t in args.threads.split(",")]
    variants = [v for v in args.variants.split(",") if v]
    for name in ("onnx", "onnx-int8"):  # export/quantise once, outside the timed children
        if name in variants:
            _build(name, 1)
    rows = []
    for variant in variants:
        for count in threads:
            rows.append(_child(variant, count, args.queries, args.facts))
            print(_table(rows[-1:]).splitlines()[-1], flush=True)
    print(f"\ncpus: {os.cpu_count()}; uptime: {subprocess.getoutput('uptime').strip()}\n")
    print(_table(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
