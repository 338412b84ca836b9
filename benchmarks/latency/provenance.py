"""Query latency with and without provenance, A/B in one process.

The same 50 users x 100 scale facts are recorded twice, once with a source message per fact
(``bench.scale.scale_facts``) and once without, in one backend; every query is asked of both
in alternating order, in ``bm25`` and ``hybrid`` mode. Query vectors are cached after a warm-up
pass: the query embedding is the same work with or without a source, so what is timed is what
a source can change (longer lexical documents, bigger sparse vectors). Machine load moves both
sides alike. Usage::

Indexing the source text must not slow a query by more than 1.2x: hybrid p50 is 1.00x on
files and 1.15x on Qdrant Edge (RESULTS.md, "Provenance, filters and access tracking").

    python -m benchmarks.latency.provenance files|qdrant
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from indexing.embeddings import CachedEmbedder, SentenceTransformerEmbedder
from memory_service.config import QdrantSettings
from memory_service.domain.context import RuntimeContext
from memory_service.evaluation.datasets.synthetic import scale_texts
from memory_service.evaluation.scale import scale_facts
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.qdrant.backend import open_qdrant

USERS, PER_USER, QUERIES, MODES = 50, 100, 300, ("bm25", "hybrid")


def main(backend: str) -> dict:
    embedder = CachedEmbedder(SentenceTransformerEmbedder(num_threads=1))
    root = Path(tempfile.mkdtemp(prefix="provenance-latency-"))
    memories, asked = {}, []
    for with_source in (True, False):
        where = root / ("source" if with_source else "no-source")
        if backend == "files":
            memory = FileSystemLongTermMemory(where, embedder)
        else:
            memory = open_qdrant(QdrantSettings(), where, embedder)
        for user in range(USERS):
            texts, questions = scale_texts(user, PER_USER)
            memory.record(RuntimeContext("t", f"u{user}"), scale_facts(texts, with_source))
            if with_source:
                asked += [(user, q) for q in questions]
        memories[with_source] = memory
    rng = random.Random(7)
    pairs = [rng.choice(asked) for _ in range(QUERIES)]
    for user, query in pairs:  # warm-up: each user's index, each query's vector
        for memory in memories.values():
            memory.retrieve(RuntimeContext("t", f"u{user}"), query, 10)
    timings: dict[tuple[bool, str], list[float]] = {(s, m): [] for s in memories for m in MODES}
    for i, (user, query) in enumerate(pairs):
        order = list(memories.items())
        for with_source, memory in order if i % 2 else order[::-1]:
            for mode in MODES:
                began = time.perf_counter()
                memory.retrieve(RuntimeContext("t", f"u{user}"), query, 10, mode=mode)
                timings[(with_source, mode)].append(1000 * (time.perf_counter() - began))
    for memory in memories.values():
        memory.close()
    out: dict = {"backend": backend, "load_average_end": os.getloadavg()}
    for (with_source, mode), values in timings.items():
        name = f"{'source' if with_source else 'no-source'} {mode}"
        out[name] = {
            "p50_ms": statistics.median(values),
            "p95_ms": sorted(values)[int(0.95 * len(values))],
        }
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "files"), indent=1))
