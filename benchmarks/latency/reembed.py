"""What moving a long-term store to another embedding model costs (``memory-service reembed``),
and what the model check adds to every open.

Per backend (files, Qdrant Edge) and store size: facts recorded by the bundled MiniLM (fp32,
100 per user), then ``store_embedder.reembed`` to the same model served int8 (another name,
other vectors), timed whole, beside the time the int8 model alone takes to embed the same
texts in the same batches (the floor: what the store adds is the rest). Then the check every
open runs (``require_embedder``: the record read and compared), timed alone, median of 200.

    python -m benchmarks.latency.reembed [--sizes 1000 5000] [--threads 1]
        [--json benchmarks/results/reembed.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from indexing.onnx_embeddings import OnnxEmbedder  # noqa: E402
from memory_service.config import QdrantSettings  # noqa: E402
from memory_service.domain.context import RuntimeContext  # noqa: E402
from memory_service.domain.facts import Fact  # noqa: E402
from memory_service.evaluation.report import write_json  # noqa: E402
from memory_service.longterm.files.backend import FileSystemLongTermMemory  # noqa: E402
from memory_service.longterm.files.embedder_records import FilesEmbedderRecords  # noqa: E402
from memory_service.longterm.protocol import LongTermMemory  # noqa: E402
from memory_service.longterm.qdrant.backend import open_engine, open_qdrant  # noqa: E402
from memory_service.longterm.qdrant.embedder_records import QdrantEmbedderRecords  # noqa: E402
from memory_service.longterm.store_embedder import (  # noqa: E402
    REEMBED_BATCH,
    EmbedderRecords,
    reembed,
    require_embedder,
)

FACTS_PER_USER = 100
_TEXTS = (
    "{u} moved to Zürich in {n} and works at a café near the lake",
    "{u} adopted a golden retriever named Biscuit after hike number {n} in Lisbon",
    "{u} is allergic to peanuts and keeps an epinephrine pen in bag {n}",
    "{u}最喜欢的水果是芒果，第{n}个周末常去北京烤鸭店",
)


def _texts(size: int) -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    for i in range(size):
        user = f"u{i // FACTS_PER_USER}"
        users.setdefault(user, []).append(_TEXTS[i % len(_TEXTS)].format(u=user, n=i))
    return users


def _memory(backend: str, root: Path, embedder: OnnxEmbedder) -> LongTermMemory:
    if backend == "files":
        return FileSystemLongTermMemory(root, embedder)
    return open_qdrant(QdrantSettings(path=root / "qdrant"), root, embedder)


def _records(backend: str, root: Path) -> AbstractContextManager[EmbedderRecords]:
    if backend == "files":
        return nullcontext(FilesEmbedderRecords(root))
    engine = open_engine(QdrantSettings(path=root / "qdrant"), root, 384)

    class _Closing:
        def __enter__(self) -> EmbedderRecords:
            return QdrantEmbedderRecords(engine)

        def __exit__(self, *exc: object) -> None:
            engine.close()

    return _Closing()


def run(backend: str, size: int, old: OnnxEmbedder, new: OnnxEmbedder) -> dict:
    users = _texts(size)
    texts = [t for user in users.values() for t in user]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        memory = _memory(backend, root, old)
        for user, facts in users.items():
            memory.record(RuntimeContext("bench", user), [Fact(t) for t in facts])
        memory.close()
        with _records(backend, root) as records:
            began = time.perf_counter()
            outcome = reembed(records, new)
            reembed_s = time.perf_counter() - began
            checks = []
            for _ in range(200):
                began = time.perf_counter()
                require_embedder(records, new)
                checks.append(time.perf_counter() - began)
    assert (outcome.done, outcome.left) == (size, 0), outcome
    began = time.perf_counter()
    for start in range(0, len(texts), REEMBED_BATCH):
        new.embed(texts[start : start + REEMBED_BATCH])
    embed_s = time.perf_counter() - began
    return {
        "backend": backend,
        "facts": size,
        "reembed_s": reembed_s,
        "embed_only_s": embed_s,
        "check_us_median": statistics.median(checks) * 1e6,
        "check_us_p95": statistics.quantiles(checks, n=100)[94] * 1e6,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    old = OnnxEmbedder(threads=args.threads)
    new = OnnxEmbedder(threads=args.threads, quantize=True)
    rows = []
    for size in args.sizes:  # the backends take turns at each size
        for backend in ("files", "qdrant-edge"):
            rows.append(run(backend, size, old, new))
    report = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "load_1m": os.getloadavg()[0],
        "threads": args.threads,
        "rows": rows,
    }
    print(f"re-embed {old.name} -> {new.name} ({args.threads} thread(s)):")
    for row in rows:
        print(
            f"  {row['backend']:<11} {row['facts']:>6} facts: {row['reembed_s']:.2f} s "
            f"({row['facts'] / row['reembed_s']:,.0f} facts/s; embedding alone "
            f"{row['embed_only_s']:.2f} s), open check median {row['check_us_median']:.0f} us, "
            f"p95 {row['check_us_p95']:.0f} us"
        )
    if args.json:
        write_json(report, args.json)


if __name__ == "__main__":
    main()
