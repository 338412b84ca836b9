"""What LangGraph's ``search`` through the store adapter costs against the project's own
recall on the same facts, in-process.

One user's ``--facts`` items (the bundled scale bank, fixed seed) are put through
``MemoryServiceStore`` (namespace ``("memories", user)``, value ``{"content": text}``), on the
files backend or Qdrant Edge (``--backend``), with the service's cached embedder (each query
is embedded once, before timing). Each question is then asked, taking turns, as
``store.search(namespace, query=q, limit=10)`` and as ``memory.retrieve(ctx, q, 10)`` over
the very facts the store wrote; medians and p95 go to ``--json``. The adapter must cost at
most 1.1x the retrieve (RESULTS.md, "LangGraph store").

    python -m benchmarks.latency.langgraph_store [--backend qdrant-edge] --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from langgraph.store.base import PutOp

from memory_service.config import QdrantSettings, load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.evaluation import metrics
from memory_service.evaluation.datasets.synthetic import scale_texts
from memory_service.integrations.langgraph import MemoryServiceStore
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.qdrant.backend import open_qdrant
from memory_service.services import build_embedder

USER = "user-1"
NAMESPACE = ("memories", USER)


def main(argv: Sequence[str] | None = None, *, embedder=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=500, help="the user's items (default 500)")
    parser.add_argument("--rounds", type=int, default=5, help="passes over the questions")
    parser.add_argument("--backend", choices=("files", "qdrant-edge"), default="files")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    embedder = embedder or build_embedder(load_settings())
    with tempfile.TemporaryDirectory() as tmp:
        if args.backend == "files":
            memory = FileSystemLongTermMemory(Path(tmp), embedder)
        else:
            memory = open_qdrant(QdrantSettings(path=Path(tmp) / "qdrant"), Path(tmp), embedder)
        store = MemoryServiceStore.in_process(memory, "bench")
        ctx = RuntimeContext("bench", USER)
        texts, questions = scale_texts(1, args.facts, seed=7)
        for start in range(0, len(texts), 100):
            chunk = texts[start : start + 100]
            ops = [PutOp(NAMESPACE, f"m{start + i}", {"content": t}) for i, t in enumerate(chunk)]
            store.batch(ops)
        embedder.embed(questions)  # cached: the timings below are the search alone
        variants = {
            "retrieve": lambda q: memory.retrieve(ctx, q, 10),
            "langgraph search": lambda q: store.search(NAMESPACE, query=q, limit=10),
        }
        for ask in variants.values():
            ask(questions[0])  # indexes built
        timings: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):
            for question in questions:
                for name, ask in variants.items():
                    began = time.perf_counter()
                    ask(question)
                    timings[name].append(1000.0 * (time.perf_counter() - began))
        memory.close()
    stats = {
        name: {"p50": metrics.percentile(v, 50), "p95": metrics.percentile(v, 95)}
        for name, v in timings.items()
    }
    doc = {
        "backend": args.backend,
        "facts": args.facts,
        "queries_per_variant": len(timings["retrieve"]),
        "load_average": list(os.getloadavg()),
        "search_ms": stats,
        "p50_ratio": stats["langgraph search"]["p50"] / stats["retrieve"]["p50"],
    }
    args.json.write_text(json.dumps(doc, indent=2))
    for name, row in stats.items():
        print(f"{name:<17} p50 {row['p50']:.3f} ms  p95 {row['p95']:.3f} ms")
    print(f"p50 ratio {doc['p50_ratio']:.3f}  load {doc['load_average']}")
    return doc


if __name__ == "__main__":
    main()
