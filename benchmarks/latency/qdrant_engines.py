"""Retrieve latency of the Qdrant backend: Qdrant Edge vs qdrant-client's local mode.

What is timed: ``QdrantLongTermMemory.retrieve(ctx, query, top_k=10, mode="hybrid")`` for a
random user among many: both legs over the user's filter in one batched request (dense with
the threshold, sparse BM25 with the user's own IDF corpus), payloads, client-side RRF. The query
embedding is not in that figure (it is the same for every engine): it is measured separately with
the real MiniLM model and printed below the table.

Data: 2,000 distinct fact sentences from templates over real English words, embedded with the
real bundled MiniLM model. Each stored fact is one of those sentences (sampled without
replacement per user, so a user never has duplicates) and its vector is the sentence's real
embedding plus Gaussian noise (sigma 0.025 per dimension, cosine to the original ~0.9),
renormalised: realistic neighbourhoods without embedding 100k texts. Query texts come from the
same templates and are embedded for real. Points are bulk-loaded through the engine exactly as
``record`` builds them (payload, dense, ``indexing.sparse`` weights), 2,000 per upsert.

qdrant-client's local mode checks filters point by point in Python: at 100k facts a query takes
seconds, so it runs fewer queries there (``--local-queries-large``), and the table says how many.

It tells which engine to serve Qdrant with; no run of it is recorded yet (RESULTS.md, "Qdrant
engines").

    python -m benchmarks.latency.qdrant_engines [--sizes 10000 100000] [--facts-per-user 100]
        [--queries 300] [--local-queries 100] [--local-queries-large 15]
        [--json benchmarks/results/qdrant_latency.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _options(text: str) -> list[str]:
    """Comma-separated choices (some are several words)."""
    return [part.strip() for part in text.split(",")]


PEOPLE = _options("Alice, Bob, Carol, Dan, Erin, Frank, Grace, Heidi, Ivan, Judy, Oscar, Peggy")
RELATIONS = _options("sister, brother, mother, father, cousin, friend, neighbour, colleague, boss")
ACTIVITIES = _options(
    "hiking, swimming, cycling, painting, cooking, gardening, climbing, knitting, running, "
    "sailing, skiing, dancing, fishing, reading, chess, baking, photography, yoga, surfing"
)
PLACES = _options(
    "Paris, Berlin, Tokyo, Madrid, Denver, Boston, Lisbon, Oslo, Cairo, Lima, Prague, Dublin, "
    "Seoul, Rome, Vienna, Austin, Toronto, Sydney, Nairobi, Mumbai, the mountains, the beach"
)
FOODS = _options(
    "sushi, pizza, risotto, tacos, ramen, curry, pancakes, salad, dumplings, lasagna, falafel, "
    "paella, oatmeal, burritos, noodles, peanuts, shellfish, strawberries, chocolate, cheese"
)
OBJECTS = _options(
    "violin, piano, guitar, bicycle, kayak, camera, telescope, laptop, tent, drone, scooter, "
    "typewriter, record player, sewing machine, espresso machine"
)
TIMES = _options("on weekends, every morning, in the evening, every summer, on Sundays")
TEMPLATES = (
    "{p} likes {a} {t}",
    "{p}'s {r} lives in {pl}",
    "{p} is allergic to {f}",
    "{p} bought a new {o} last month",
    "{p} wants to visit {pl} next year",
    "{p}'s favourite food is {f}",
    "{p} goes {a} with their {r} {t}",
    "{p} learned to play the {o}",
    "{p} moved to {pl} for work",
    "{p}'s {r} cooks {f} {t}",
    "{p} stopped {a} after an injury",
    "{p} keeps a {o} in the garage",
)
QUERY_TEMPLATES = (
    "what does {p} like doing {t}?",
    "where does {p}'s {r} live?",
    "is {p} allergic to anything like {f}?",
    "which {o} did {p} buy?",
    "{a} in {pl}",
    "favourite food {f}",
)


def _fill(template: str, rng: random.Random) -> str:
    return template.format(
        p=rng.choice(PEOPLE),
        r=rng.choice(RELATIONS),
        a=rng.choice(ACTIVITIES),
        pl=rng.choice(PLACES),
        f=rng.choice(FOODS),
        o=rng.choice(OBJECTS),
        t=rng.choice(TIMES),
    )


def _distinct(templates: Sequence[str], count: int, rng: random.Random) -> list[str]:
    seen: dict[str, None] = {}
    while len(seen) < count:
        seen[_fill(rng.choice(templates), rng)] = None
    return list(seen)


class LookupEmbedder:
    """Vectors computed beforehand, looked up by text (the Embedder protocol)."""

    def __init__(self, vectors: dict[str, np.ndarray], dimension: int) -> None:
        self._vectors = vectors
        self._dimension = dimension

    @property
    def name(self) -> str:
        return "precomputed"

    @property
    def dimension(self) -> int:
        return self._dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32)

    def embed_query(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)  # vectors of a symmetric model


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _dataset(size: int, per_user: int, bases: list[str], base_vectors: np.ndarray, seed: int):
    """(user id, text, vector) for ``size`` facts, ``per_user`` per user."""
    rng = random.Random(seed)
    noise = np.random.default_rng(seed)
    rows = []
    for u in range(max(1, size // per_user)):
        for b in rng.sample(range(len(bases)), per_user):
            vector = base_vectors[b] + noise.normal(0.0, 0.025, base_vectors.shape[1])
            rows.append((f"user-{u:05d}", bases[b], vector / np.linalg.norm(vector)))
    return rows[:size]


def _load(memory, rows, batch: int = 2000) -> float:
    """Bulk upsert, built as ``record`` builds points; returns points per second."""
    from indexing.sparse import document_vector
    from indexing.tokenize import tokenize
    from memory_service.domain.context import RuntimeContext
    from memory_service.domain.facts import Fact
    from memory_service.longterm.qdrant.payload import payload_of
    from memory_service.longterm.qdrant.points import StoredPoint

    start = time.perf_counter()
    points = []
    for user, text, vector in rows:
        ctx = RuntimeContext("bench", user)
        fact = Fact(text).stamped(ctx)
        points.append(
            StoredPoint(
                fact.id,
                payload_of(ctx, fact, embedder=None),
                vector.tolist(),
                document_vector(tokenize(text)),
            )
        )
        if len(points) == batch:
            memory.engine.upsert(points)
            points = []
    memory.engine.upsert(points)
    return len(rows) / (time.perf_counter() - start)


def _time_queries(memory, users: list[str], queries: list[str], count: int, seed: int):
    from memory_service.domain.context import RuntimeContext

    rng = random.Random(seed)
    picks = [
        (RuntimeContext("bench", rng.choice(users)), rng.choice(queries)) for _ in range(count)
    ]
    for ctx, query in picks[: min(5, count)]:  # warm-up
        memory.retrieve(ctx, query, top_k=10, mode="hybrid")
    latencies, hits = [], []
    for ctx, query in picks:
        start = time.perf_counter()
        recalls = memory.retrieve(ctx, query, top_k=10, mode="hybrid")
        latencies.append((time.perf_counter() - start) * 1000)
        hits.append(len(recalls))
    return latencies, statistics.mean(hits)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--facts-per-user", type=int, default=100)
    parser.add_argument("--queries", type=int, default=300, help="timed queries on Edge")
    parser.add_argument("--local-queries", type=int, default=100, help="local mode, <= 10k")
    parser.add_argument("--local-queries-large", type=int, default=15, help="local mode, > 10k")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/qdrant_latency.json"))
    args = parser.parse_args(argv)

    from indexing.embeddings import SentenceTransformerEmbedder
    from memory_service.config import QdrantSettings
    from memory_service.longterm.qdrant.backend import QdrantLongTermMemory, open_qdrant

    rng = random.Random(1)
    bases = _distinct(TEMPLATES, 2000, rng)
    queries = _distinct(QUERY_TEMPLATES, 300, rng)
    model = SentenceTransformerEmbedder(num_threads=max(1, min(2, os.cpu_count() or 1)))
    start = time.perf_counter()
    base_vectors = model.embed(bases)
    query_vectors = model.embed(queries)
    print(f"embedded {len(bases) + len(queries)} texts in {time.perf_counter() - start:.1f} s")
    embed_ms = []
    for query in queries[:50]:
        start = time.perf_counter()
        model.embed([query])
        embed_ms.append((time.perf_counter() - start) * 1000)

    rows_out = []
    for size in args.sizes:
        rows = _dataset(size, args.facts_per_user, bases, base_vectors, seed=size)
        users = sorted({user for user, _, _ in rows})
        lookup = {**dict(zip(queries, query_vectors, strict=True))}
        lookup.update({text: base_vectors[i] for i, text in enumerate(bases)})
        embedder = LookupEmbedder(lookup, model.dimension)
        engines = [("edge", args.queries)]
        if not args.skip_local:
            local_n = args.local_queries if size <= 10_000 else args.local_queries_large
            engines.append(("local", local_n))
        for engine, count in engines:
            folder = Path(tempfile.mkdtemp(prefix="qdrant-bench-"))
            settings = (
                QdrantSettings(path=folder) if engine == "edge" else QdrantSettings(url=":memory:")
            )
            memory: QdrantLongTermMemory = open_qdrant(settings, folder, embedder)
            try:
                rate = _load(memory, rows)
                latencies, mean_hits = _time_queries(memory, users, queries, count, seed=size)
            finally:
                memory.close()
                shutil.rmtree(folder, ignore_errors=True)
            row = {
                "engine": "qdrant-edge" if engine == "edge" else "qdrant-client local (:memory:)",
                "facts": len(rows),
                "users": len(users),
                "load_points_per_s": round(rate),
                "queries": count,
                "p50_ms": round(_percentile(latencies, 0.50), 2),
                "p95_ms": round(_percentile(latencies, 0.95), 2),
                "mean_hits": round(mean_hits, 1),
            }
            rows_out.append(row)
            print(json.dumps(row), flush=True)

    header = f"{'engine':<32} {'facts':>7} {'users':>6} {'load pts/s':>10} {'n':>5} "
    header += f"{'p50 ms':>9} {'p95 ms':>9} {'hits':>5}"
    print("\nretrieve(top_k=10, mode=hybrid), user-filtered; query embedding not included")
    print(header)
    print("-" * len(header))
    for r in rows_out:
        print(
            f"{r['engine']:<32} {r['facts']:>7} {r['users']:>6} {r['load_points_per_s']:>10} "
            f"{r['queries']:>5} {r['p50_ms']:>9.2f} {r['p95_ms']:>9.2f} {r['mean_hits']:>5}"
        )
    embed = {
        "p50_ms": round(_percentile(embed_ms, 0.5), 2),
        "p95_ms": round(_percentile(embed_ms, 0.95), 2),
    }
    print(
        f"\nquery embedding, MiniLM on CPU (add to every row): p50 {embed['p50_ms']} ms, "
        f"p95 {embed['p95_ms']} ms"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "facts_per_user": args.facts_per_user,
        "rows": rows_out,
        "query_embedding": embed,
    }
    args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
