"""Record throughput, this tree's ONNX embedder against another checkout's, in one process.

On a shared machine, runs minutes apart measure the neighbours more than the code. Here two
backends of this tree (same settings, each in its own temporary workspace) record the same
batches of 100 scale facts, one user per batch, taking turns batch by batch (who goes first
alternates); they differ only in the embedder: this tree's ``OnnxEmbedder`` and the one in
``--baseline``'s ``indexing/onnx_embeddings.py`` (for instance the main checkout). Every record
embeds (no vector is cached across the two). The load average is printed before and after.

Cutting runs by token length recorded 14-22 % more facts a second measured this way
(RESULTS.md, "Record rate").

    python -m benchmarks.record.embedders --baseline ../main \
        [--users 40] [--threads 1] [--backend qdrant]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _baseline_embedder(checkout: Path, threads: int | None):
    """``OnnxEmbedder`` from ``checkout``'s module (it imports this tree's ``indexing`` rest)."""
    module_file = checkout / "indexing" / "onnx_embeddings.py"
    spec = importlib.util.spec_from_file_location("baseline_onnx_embeddings", module_file)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no ONNX embedder at {module_file}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OnnxEmbedder(threads=threads)


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--users", type=int, default=40, help="batches of 100 facts per side")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads")
    parser.add_argument("--backend", choices=("files", "qdrant"), default=None)
    args = parser.parse_args(argv)
    if args.backend:
        os.environ["MEMORY_LONGTERM__BACKEND"] = args.backend

    from indexing.onnx_embeddings import OnnxEmbedder
    from memory_service.config import Settings
    from memory_service.evaluation.backends import settings_for
    from memory_service.evaluation.datasets.synthetic import scale_texts
    from memory_service.evaluation.embedding import ColdQueryEmbedder
    from memory_service.evaluation.scale import _user, scale_facts
    from memory_service.services import build_services

    settings = Settings()
    models = {
        "baseline": _baseline_embedder(args.baseline.resolve(), args.threads),
        "this tree": OnnxEmbedder(threads=args.threads),
    }
    times: dict[str, list[float]] = {name: [] for name in models}
    print(f"load before: {_load()}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="record-throughput-") as tmp:
        services = {
            name: build_services(
                settings_for(settings, Path(tmp) / str(i)), embedder=ColdQueryEmbedder(model)
            )
            for i, (name, model) in enumerate(models.items())
        }
        warm_up = scale_facts(scale_texts(999_999, 100, seed=7)[0], True)
        for built in services.values():  # first record: the folder, the shard, the pools
            built.longterm.record(_user(999_999), warm_up)
        for user in range(args.users):
            facts = scale_facts(scale_texts(user, 100, seed=7)[0], True)
            order = list(services) if user % 2 == 0 else list(reversed(services))
            for name in order:
                began = time.perf_counter()
                services[name].longterm.record(_user(user), facts)
                times[name].append(time.perf_counter() - began)
        for built in services.values():
            built.longterm.close()
    print(f"load after: {_load()}", file=sys.stderr)
    for name, spent in times.items():
        ordered = sorted(spent)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        print(
            f"{settings.longterm.backend} {name}: {100 * len(spent) / sum(spent):.0f} facts/s; "
            f"per record of 100: median {1000 * statistics.median(spent):.0f} ms, "
            f"p95 {1000 * p95:.0f} ms (n={len(spent)}, threads={args.threads or 'default'})"
        )


if __name__ == "__main__":
    main()
