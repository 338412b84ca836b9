"""What re-indexing the lexical terms costs when a Qdrant Edge collection is opened.

A collection whose points an older tokenizer indexed (no ``terms_version``, as every point
written before versions were recorded) has each point's sparse vector made again on open
(``QdrantLongTermMemory._reindex_stale_terms``). Timed per collection size: the first open
(every point re-indexed) and the next one (nothing to do: one empty read, also timed alone).
Points are bulk-loaded through the engine as ``record`` builds them, their payloads without
the version field; dense vectors are random (the re-index never reads them).

    python -m benchmarks.latency.reindex [--sizes 1000 10000 100000]
        [--json benchmarks/results/reindex.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from indexing.sparse import document_vector  # noqa: E402
from indexing.tokenize import TOKENIZER_VERSION, tokenize  # noqa: E402
from memory_service.domain.context import RuntimeContext  # noqa: E402
from memory_service.domain.facts import Fact  # noqa: E402
from memory_service.longterm.qdrant.backend import QdrantLongTermMemory  # noqa: E402
from memory_service.longterm.qdrant.edge.engine import EdgeEngine  # noqa: E402
from memory_service.longterm.qdrant.layout import TERMS_FIELD  # noqa: E402
from memory_service.longterm.qdrant.payload import payload_of  # noqa: E402
from memory_service.longterm.qdrant.points import StoredPoint  # noqa: E402

DIMENSION = 384
FACTS_PER_USER = 100
_TEXTS = (
    "{u} moved to Zürich in 2021 and works at a café near the lake",
    "{u}最喜欢的水果是芒果，周末常去北京烤鸭店",
    "{u} adopted a golden retriever named Biscuit after a hiking trip in Lisbon",
    "{u}は毎朝抹茶を飲みます",
)


class _NoEmbedder:
    """The re-index embeds nothing; the backend only needs the dimension."""

    name = "none"
    dimension = DIMENSION

    def embed(self, texts):  # pragma: no cover - never called here
        raise AssertionError("the re-index embeds nothing")

    embed_query = embed


def _points(size: int, rng: np.random.Generator) -> list[StoredPoint]:
    vectors = rng.normal(size=(size, DIMENSION)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    created = datetime(2026, 1, 1, tzinfo=UTC)
    points = []
    for i, vector in enumerate(vectors):
        user = f"u{i // FACTS_PER_USER}"
        text = f"{_TEXTS[i % len(_TEXTS)].format(u=user)} ({i})"
        fact = Fact(text, id=str(uuid.uuid4()), created_at=created + timedelta(minutes=i))
        payload = payload_of(RuntimeContext("bench", user), fact, embedder=None)
        payload.pop(TERMS_FIELD)  # as an older version wrote it
        points.append(
            StoredPoint(fact.id, payload, vector.tolist(), document_vector(tokenize(text)))
        )
    return points


def _open(folder: Path) -> tuple[QdrantLongTermMemory, float]:
    began = time.perf_counter()
    memory = QdrantLongTermMemory(EdgeEngine.acquire(folder, DIMENSION), _NoEmbedder())  # type: ignore[arg-type]
    return memory, time.perf_counter() - began


def reindex_on_edge(size: int, rng: np.random.Generator) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "memories"
        engine = EdgeEngine.acquire(folder, DIMENSION)
        points = _points(size, rng)
        for start in range(0, len(points), 2000):
            engine.upsert(points[start : start + 2000])
        engine.close()
        memory, first_s = _open(folder)
        reindexed = memory.reindexed
        memory.close()
        memory, next_s = _open(folder)
        assert memory.reindexed == 0
        checks = []
        for _ in range(20):  # what the next open adds: the look for stale points
            began = time.perf_counter()
            assert memory.engine.stale_terms(TOKENIZER_VERSION, 1000) == []
            checks.append(time.perf_counter() - began)
        memory.close()
    assert reindexed == size, reindexed
    return {
        "points": size,
        "first_open_s": first_s,
        "next_open_s": next_s,
        "check_ms": statistics.median(checks) * 1000,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(7)
    report = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "load_1m": os.getloadavg()[0],
        "edge_reindex": [reindex_on_edge(size, rng) for size in args.sizes],
    }
    print("open a Qdrant Edge collection an older tokenizer indexed:")
    for row in report["edge_reindex"]:
        rate = row["points"] / row["first_open_s"]
        print(
            f"  {row['points']:>7} points: first open {row['first_open_s']:.2f} s "
            f"({rate:,.0f} points/s), next open {row['next_open_s'] * 1000:.1f} ms, of which "
            f"the look for stale points {row['check_ms']:.2f} ms"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
