"""Would a recall gain by running its lexical work while the model embeds the query?

A hybrid recall's BM25 leg (the fact files' signature, the index, the lexical search) needs
no vector, so it could run in the calling thread while another thread embeds the query (ONNX
Runtime releases the GIL). Whether that pays depends on free cores: the model already runs
``MEMORY_EMBEDDING__THREADS`` threads (2 on this 2-core host). Question by question, taking
turns in one process, on LoCoMo's facts with their sources (files backend):

- the query embedded by the model alone, and a ``bm25`` recall alone;
- the two one after the other (what a hybrid recall does now);
- the two at once: the embedding handed to a thread, the recall run meanwhile, then joined.

    python -m benchmarks.latency.embedding_overlap --data ../shared/data/locomo-dev.json \\
        [--rounds 2] [--json benchmarks/results/embedding_overlap.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from benchmarks.latency.recall_stages import locomo_conversations, recorded

VARIANTS = ("embedding alone", "bm25 recall alone", "one after the other", "at once")


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=os.environ.get("LOCOMO_DATA"))
    parser.add_argument("--rounds", type=int, default=2, help="timed passes over the questions")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.data is None:
        parser.error("--data (or $LOCOMO_DATA): the LoCoMo JSON file")

    from indexing.embeddings import default_threads
    from memory_service.config.settings import Settings
    from memory_service.evaluation.embedding import cold_embedder
    from memory_service.evaluation.metrics import percentile

    settings = Settings()
    conversations = locomo_conversations(args.data, args.conversations)
    embedder = cold_embedder(settings, cache_entries=200_000)
    questions = [(i, q.text) for i, c in enumerate(conversations) for q in c.questions]
    model = embedder.model
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with (
        tempfile.TemporaryDirectory(prefix="embedding-overlap-") as tmp,
        ExitStack() as stack,
        ThreadPoolExecutor(1) as pool,
    ):
        memory, contexts = recorded(stack, settings, embedder, "files", Path(tmp), conversations)
        for ctx in contexts:  # first reads build indexes
            memory.retrieve(ctx, "warm up", top_k=10, mode="bm25")
        for _ in range(args.rounds):
            for index, text in questions:
                ctx = contexts[index]

                def lexical(ctx=ctx, text=text) -> object:
                    return memory.retrieve(ctx, text, top_k=10, mode="bm25")

                def embed(text=text) -> object:
                    return model.embed([text])

                def both_at_once(embed=embed, lexical=lexical) -> object:
                    vector = pool.submit(embed)
                    lexical()
                    return vector.result()

                times["embedding alone"].append(_timed(embed))
                times["bm25 recall alone"].append(_timed(lexical))
                times["one after the other"].append(_timed(lambda e=embed, x=lexical: (e(), x())))
                times["at once"].append(_timed(both_at_once))

    summary = {
        name: {"p50": 1000 * (percentile(v, 50) or 0.0), "p95": 1000 * (percentile(v, 95) or 0.0)}
        for name, v in times.items()
    }
    threads = settings.embedding.threads or default_threads()
    print(
        f"LoCoMo facts with sources, files backend: {len(questions)} questions x "
        f"{args.rounds} rounds, taking turns; the model on {threads} threads, "
        f"{os.cpu_count()} cores"
    )
    print(f"{'':24s} {'p50 ms':>8s} {'p95 ms':>8s}")
    for name in VARIANTS:
        print(f"{name:24s} {summary[name]['p50']:8.2f} {summary[name]['p95']:8.2f}")
    gain = summary["one after the other"]["p50"] - summary["at once"]["p50"]
    print(f"at once saves {gain:+.2f} ms p50 over one after the other")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"latency_ms": summary, "threads": threads, "cores": os.cpu_count()}
        doc["questions"], doc["rounds"] = len(questions), args.rounds
        args.json.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
