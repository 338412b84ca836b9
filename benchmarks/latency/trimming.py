"""One compaction's latency: importance-scored trimming vs the sliding window, side by side.

Sessions of 30 and 100 messages are compacted down to ``keep_last=10``; each repetition uses
fresh texts, so the importance policy embeds every message (``uncached``), then the same texts
again through the service's vector cache (``cached``: what a session pays on the next
compaction, when only the new messages are embedded). Medians and p95 in milliseconds, with
the load average before and after (on a shared machine it says how far to trust a figure).

It tells what importance-scored trimming costs a compaction over the sliding window; no run
of it is recorded yet (RESULTS.md, "Compaction").

    python -m benchmarks.latency.trimming [--reps 20] [--threads 1]
        [--json benchmarks/results/trimming_latency.json]
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


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def _session(size: int, rep: int):
    from memory_service.domain.agent_state import AgentState
    from memory_service.domain.messages import Msg

    state = AgentState()
    state.append(
        *(
            Msg.user(f"question {i} (run {rep}) about topic {i % 7}: what do you think?")
            if i % 2 == 0
            else Msg.assistant(f"answer {i} (run {rep}) on topic {i % 7}, explained at length")
            for i in range(size)
        )
    )
    return state


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/trimming.json"))
    args = parser.parse_args(argv)

    from indexing.embeddings import BUNDLED_MODEL, CachedEmbedder
    from indexing.onnx_embeddings import OnnxEmbedder
    from memory_service.config import CompactionSettings
    from memory_service.shortterm.compaction import SlidingWindow
    from memory_service.shortterm.trimming import ImportanceTrimmer

    embedder = CachedEmbedder(OnnxEmbedder(BUNDLED_MODEL, threads=args.threads))
    embedder.embed(["warm up"])
    load_before = os.getloadavg()[0]
    results: dict[str, dict[str, float]] = {}
    for size in (30, 100):
        config = CompactionSettings(
            policy="importance", trigger_messages=size, keep_last=10, window_rounds=5
        )
        policies = {
            "importance": ImportanceTrimmer(embedder, config, context_window=128_000),
            "sliding_window": SlidingWindow(config, context_window=128_000),
        }
        for name, policy in policies.items():
            timings: dict[str, list[float]] = {"uncached": [], "cached": []}
            for rep in range(args.reps):
                for kind in ("uncached", "cached") if name == "importance" else ("uncached",):
                    state = _session(size, rep)
                    start = time.perf_counter()
                    policy.compact(state)
                    timings[kind].append((time.perf_counter() - start) * 1000)
            for kind, values in timings.items():
                if values:
                    results[f"{name}/{size}/{kind}"] = {
                        "median_ms": round(statistics.median(values), 3),
                        "p95_ms": round(_p95(values), 3),
                    }
    report = {
        "reps": args.reps,
        "threads": args.threads,
        "load_before": load_before,
        "load_after": os.getloadavg()[0],
        "results": results,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
