"""What merging near-duplicates at record costs: each backend with merges on and off, taking
turns, against the model's own embedding time on the same batches.

With merges on, record asks the dense leg once per new fact for the owner's nearest facts
(``longterm.near_duplicates``). So the cost grows with what the owner already holds: each user
here records ``--batches`` batches of 100 scale facts with their source, one after another
(the last batch searches ``100 * (batches - 1)`` stored facts). Four memories (files and Qdrant
Edge, merges on and off, each with its own embedder, so every record embeds) and a fifth
embedder alone take turns batch by batch, the order rotating. Overhead is a record's time
beyond that embedding, per batch, as a share of the embedding.

    python -m benchmarks.record.near_duplicates [--users 6 --batches 5] \\
        --json benchmarks/results/record-near-duplicates.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from memory_service.config import QdrantSettings, load_settings  # noqa: E402
from memory_service.domain.context import RuntimeContext  # noqa: E402
from memory_service.evaluation import metrics  # noqa: E402
from memory_service.evaluation.datasets.synthetic import scale_texts  # noqa: E402
from memory_service.evaluation.scale import scale_facts  # noqa: E402
from memory_service.longterm.files.backend import FileSystemLongTermMemory  # noqa: E402
from memory_service.longterm.near_duplicates import OFF, NearDuplicatePolicy  # noqa: E402
from memory_service.longterm.qdrant.backend import open_qdrant  # noqa: E402
from memory_service.observe.progress import Progress  # noqa: E402
from memory_service.services import build_embedder  # noqa: E402

BATCH = 100


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _variants(root: Path) -> dict[str, Callable]:
    """Each variant as a function recording one batch (its own memory and embedder)."""
    settings = load_settings()
    out: dict[str, Callable] = {}
    for merges, policy in (("on", NearDuplicatePolicy()), ("off", OFF)):
        files = FileSystemLongTermMemory(
            root / f"files-{merges}", build_embedder(settings), near_duplicates=policy
        )
        edge = open_qdrant(
            QdrantSettings(path=root / f"edge-{merges}"),
            root,
            build_embedder(settings),
            near_duplicates=policy,
        )
        out[f"files, merges {merges}"] = files
        out[f"qdrant-edge, merges {merges}"] = edge
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=6, help="users (default 6)")
    parser.add_argument("--batches", type=int, default=5, help="batches per user (default 5)")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    plan = []
    for user in range(args.users):
        texts = scale_texts(user, BATCH * args.batches, seed=7)[0]
        for b in range(args.batches):
            plan.append((user, scale_facts(texts[b * BATCH : (b + 1) * BATCH], True)))
    started = _load()
    embedder = build_embedder(load_settings())
    with tempfile.TemporaryDirectory() as tmp:
        memories = _variants(Path(tmp))
        names = ["embedding alone", *memories]
        seconds: dict[str, list[float]] = {name: [] for name in names}
        merged: dict[str, int] = dict.fromkeys(memories, 0)
        with Progress(len(plan), "record: merges on and off, files and Edge, taking turns") as bar:
            for turn, (user, batch) in enumerate(plan):
                ctx = RuntimeContext("bench", f"user-{user}")
                order = names[turn % len(names) :] + names[: turn % len(names)]
                for name in order:
                    began = time.perf_counter()
                    if name == "embedding alone":
                        embedder.embed([f.text for f in batch])
                        seconds[name].append(time.perf_counter() - began)
                        continue
                    results = memories[name].record(ctx, batch)
                    seconds[name].append(time.perf_counter() - began)
                    merged[name] += sum(r.status == "merged" for r in results)
                bar.update()
        for memory in memories.values():
            memory.close()
    embed = seconds["embedding alone"]
    doc = {
        "users": args.users,
        "batches_per_user": args.batches,
        "facts_per_batch": BATCH,
        "load_average": {"start": started, "end": _load()},
        "record": {
            name: {
                "p50_ms": metrics.percentile([1000 * s for s in v], 50),
                "p95_ms": metrics.percentile([1000 * s for s in v], 95),
                "overhead_p50": None
                if name == "embedding alone"
                else metrics.percentile([(s - e) / e for s, e in zip(v, embed, strict=True)], 50),
                "merged": merged.get(name),
            }
            for name, v in seconds.items()
        },
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=2))
    print(f"load {started} -> {doc['load_average']['end']}; batches of {BATCH}, taking turns")
    print(f"{'variant':<26} {'p50 ms':>8} {'p95 ms':>8} {'overhead p50':>13} {'merged':>7}")
    for name, r in doc["record"].items():
        over = "" if r["overhead_p50"] is None else f"{r['overhead_p50']:+.1%}"
        count = "" if r["merged"] is None else str(r["merged"])
        print(f"{name:<26} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {over:>13} {count:>7}")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
