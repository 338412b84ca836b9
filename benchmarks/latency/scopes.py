"""What reading shared scopes adds to one recall, without the query embedding's noise.

One user with ``--facts`` facts, an agent and the tenant with ``--shared`` facts each (the
bundled scale bank; 0: empty shared scopes), the files backend or Qdrant Edge
(``--backend``), the service's cached embedder (so each query is embedded
once, before timing: what is left is the search itself). Each query is asked with the user's
scope alone, +tenant and +agent+tenant, interleaved; medians and p95 go to ``--json``. Add the
embedding of a new query (RESULTS.md, "Query embedding") to see the share of a whole call.

Shared scopes must add at most 10 % to a recall; what they add: RESULTS.md, "Shared scopes".

    python -m benchmarks.latency.scopes [--backend qdrant-edge] [--shared 0] --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from memory_service.config import QdrantSettings, load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.evaluation import metrics
from memory_service.evaluation.datasets.synthetic import scale_texts
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.qdrant.backend import open_qdrant
from memory_service.services import build_embedder

VARIANTS = {
    "user": ["user"],
    "user+tenant": ["user", "tenant"],
    "user+agent+tenant": ["user", "agent", "tenant"],
}


def main(argv: Sequence[str] | None = None, *, embedder=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--facts", type=int, default=100, help="the user's facts (default 100)")
    parser.add_argument("--shared", type=int, default=100, help="facts per shared scope")
    parser.add_argument("--rounds", type=int, default=20, help="passes over the questions")
    parser.add_argument("--backend", choices=("files", "qdrant-edge"), default="files")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    embedder = embedder or build_embedder(load_settings())
    with tempfile.TemporaryDirectory() as tmp:
        if args.backend == "files":
            memory = FileSystemLongTermMemory(Path(tmp), embedder)
        else:
            memory = open_qdrant(QdrantSettings(path=Path(tmp) / "qdrant"), Path(tmp), embedder)
        ctx = RuntimeContext("bench", "user-1", agent_id="agent-1")
        texts, questions = scale_texts(1, args.facts, seed=7)
        memory.record(ctx, [Fact(t) for t in texts])
        for index, scope in ((2, "agent"), (3, "tenant")):
            shared, _ = scale_texts(index, args.shared, seed=7) if args.shared else ([], [])
            memory.record(ctx, [Fact(t, scope=scope) for t in shared])
        embedder.embed(questions)  # cached: the timings below are the search alone
        for scopes in VARIANTS.values():
            memory.retrieve(ctx, questions[0], 10, scopes=scopes)  # indexes built
        timings: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for _ in range(args.rounds):
            for question in questions:
                for name, scopes in VARIANTS.items():
                    began = time.perf_counter()
                    memory.retrieve(ctx, question, 10, scopes=scopes)
                    timings[name].append(1000.0 * (time.perf_counter() - began))
        memory.close()
    doc = {
        "backend": args.backend,
        "facts": args.facts,
        "shared_facts_per_scope": args.shared,
        "queries_per_variant": len(timings["user"]),
        "load_average": list(os.getloadavg()),
        "search_ms": {
            name: {"p50": metrics.percentile(v, 50), "p95": metrics.percentile(v, 95)}
            for name, v in timings.items()
        },
    }
    args.json.write_text(json.dumps(doc, indent=2))
    for name, stats in doc["search_ms"].items():
        print(f"{name:<18} p50 {stats['p50']:.3f} ms  p95 {stats['p95']:.3f} ms")
    return doc


if __name__ == "__main__":
    main()
