"""What the default's fusion costs at query time: ``retrieve`` latency of ``hybrid`` against
``rrf-plain`` (no dates, no neighbours) on one LoCoMo conversation.

Both presets hold the same facts and use the same query embedder, asked alternately question
by question (order swapped every question) so machine noise hits both alike. Milliseconds,
query embedding included, as ``memory-service bench`` reports; the ratio is the figure the
default is judged by (1.14x on turns, within the 1.2x allowed; RESULTS.md, "LoCoMo dev, turns
and facts").

    python -m benchmarks.lab.fusion_latency --data ../shared/data/locomo-dev.json --backend files
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.lab.common import add_arguments, read_locomo
from memory_service.evaluation.datasets.locomo import load_locomo

NAMES = ("rrf-plain", "hybrid")


def latency(
    data: Path | None,
    backend: str = "files",
    conversation: int = 0,
    rounds: int = 1,
    *,
    embedder=None,
) -> dict[str, dict[str, float]]:
    """p50 and p95 of ``retrieve(top_k=25)`` per preset, in milliseconds."""
    from indexing.embeddings import CachedEmbedder, SentenceTransformerEmbedder
    from memory_service.config import QdrantSettings
    from memory_service.config.retrieval import PRESETS
    from memory_service.domain.context import RuntimeContext
    from memory_service.evaluation.dataset import safe_user_id
    from memory_service.longterm.files.backend import FileSystemLongTermMemory
    from memory_service.longterm.qdrant.backend import open_qdrant

    dataset = load_locomo(read_locomo(data), unit="turns")
    conv = dataset.conversations[conversation]
    ctx = RuntimeContext("lab", safe_user_id(conv.id))
    model = embedder or SentenceTransformerEmbedder(num_threads=2)
    documents = CachedEmbedder(model)
    times: dict[str, list[float]] = {n: [] for n in NAMES}
    with tempfile.TemporaryDirectory() as tmp:
        memories = {}
        for name in NAMES:
            root = Path(tmp) / name
            if backend == "files":
                memory = FileSystemLongTermMemory(root, documents, retrieval=PRESETS[name])
            else:
                settings = QdrantSettings(path=root / "qdrant")
                memory = open_qdrant(settings, root, documents, retrieval=PRESETS[name])
            memory.record(ctx, [item.to_fact() for item in conv.items])
            memory.retrieve(ctx, "warm up", 1)  # builds the index
            memories[name] = memory
        queries = [q.text for q in conv.questions]
        for _ in range(rounds):
            for i, query in enumerate(queries):
                for name in NAMES if i % 2 == 0 else NAMES[::-1]:
                    memory = memories[name]
                    memory._embedder = model  # queries never come from a cache
                    started = time.perf_counter()
                    memory.retrieve(ctx, query, 25)
                    times[name].append(1000.0 * (time.perf_counter() - started))
                    memory._embedder = documents
        for memory in memories.values():
            memory.close()
    return {
        n: {"p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95))}
        for n, v in times.items()
    }


def main(argv: Sequence[str] | None = None, *, embedder=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--backend", default="files", choices=("files", "qdrant"))
    parser.add_argument("--conversation", type=int, default=0, help="index in the file")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args(argv)
    result = latency(args.data, args.backend, args.conversation, args.rounds, embedder=embedder)
    for name, cell in result.items():
        print(f"{args.backend} {name:10s} p50 {cell['p50']:.1f} ms  p95 {cell['p95']:.1f} ms")
    print(f"hybrid / rrf-plain p50: {result['hybrid']['p50'] / result['rrf-plain']['p50']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
