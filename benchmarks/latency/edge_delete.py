"""Deletes on Qdrant Edge beside searches: one user with 5,000 facts behind a real ``serve``;
``DELETE /v1/memories/{id}`` timed through ``MemoryClient``, and the same user's searches
(another client, one at a time, in a thread) timed without deletes and during them.

A delete answers once the point is gone from recall; the rewrite that takes its text out of
the folder's bytes runs after, in the background, so the searches during deletes share the
machine with that copy (two cores here) but wait for no lock of it but the swap. Phases take
turns (without, during, without, during, ...) so load from elsewhere skews both alike.
``--other-tree`` serves a second copy from another source tree (its ``PYTHONPATH``), asked in
the same turns: a before-and-after in one run.

    python -m benchmarks.latency.edge_delete [--facts 5000] [--deletes 20] [--rounds 2]
        [--other-tree /path/to/older/checkout] [--json benchmarks/results/edge_delete.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks.latency.served import (
    TENANT,
    load_average,
    serve_copy,
    settings_for,
    summary,
    texts,
    user_id,
)

OWNER = 0


def _fill(workspace: Path, facts: int) -> tuple[list[str], list[str]]:
    """The owner's facts recorded in-process: their ids, and the questions about them."""
    from memory_service.context import RuntimeContext
    from memory_service.facts import Fact
    from memory_service.services import build_services

    written, questions = texts(1, facts)[OWNER]
    services = build_services(settings_for(workspace, "qdrant"))
    ids: list[str] = []
    try:
        ctx = RuntimeContext(TENANT, user_id(OWNER))
        for start in range(0, len(written), 250):
            batch = [Fact(t) for t in written[start : start + 250]]
            ids += [r.id for r in services.longterm.record(ctx, batch)]
    finally:
        services.close()
    return ids, questions


def _phase(
    served: Any, questions: list[str], seconds: float, to_delete: list[str], pause_s: float
) -> dict[str, list[float]]:
    """Searches for ``seconds`` (at least until the deletes are done), with ``to_delete``
    deleted one by one meanwhile, ``pause_s`` apart."""
    from memory_service.client import MemoryClient

    searched: list[float] = []
    deleted: list[float] = []
    stop = threading.Event()

    def search_loop() -> None:
        with MemoryClient(served.base_url, served.key, timeout=120, max_retries=0) as client:
            turn = 0
            while not stop.is_set():
                t0 = time.perf_counter()
                client.search(user_id(OWNER), questions[turn % len(questions)])
                searched.append(1000.0 * (time.perf_counter() - t0))
                turn += 1

    worker = threading.Thread(target=search_loop)
    worker.start()
    started = time.perf_counter()
    try:
        with MemoryClient(served.base_url, served.key, timeout=120, max_retries=0) as client:
            for memory_id in to_delete:
                t0 = time.perf_counter()
                client.delete(user_id(OWNER), memory_id)
                deleted.append(1000.0 * (time.perf_counter() - t0))
                time.sleep(pause_s)
        time.sleep(max(0.0, seconds - (time.perf_counter() - started)))
    finally:
        stop.set()
        worker.join(timeout=120)
    return {"search": searched, "delete": deleted}


def run(
    facts: int, deletes: int, rounds: int, seconds: float, pause_s: float, other: Path | None
) -> dict[str, Any]:
    trees: dict[str, dict[str, str]] = {"this tree": {}}
    if other is not None:
        trees[f"other tree ({other})"] = {"PYTHONPATH": str(other)}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workspace = Path(tmp) / "ws"
        ids, questions = _fill(workspace, facts)
        servers = {
            name: stack.enter_context(
                serve_copy(workspace, Path(tmp) / f"served-{i}", "qdrant", **env)
            )
            for i, (name, env) in enumerate(trees.items())
        }
        from memory_service.client import MemoryClient

        for served in servers.values():  # every query embedded, the shard warm
            with MemoryClient(served.base_url, served.key, timeout=120) as warm:
                for question in questions:
                    warm.search(user_id(OWNER), question)
        times: dict[str, dict[str, list[float]]] = {
            name: {"search_alone": [], "search_during_deletes": [], "delete": []}
            for name in servers
        }
        for turn in range(rounds):
            batch = ids[turn * deletes : (turn + 1) * deletes]
            for name, served in servers.items():
                alone = _phase(served, questions, seconds, [], pause_s)
                during = _phase(served, questions, seconds, batch, pause_s)
                times[name]["search_alone"] += alone["search"]
                times[name]["search_during_deletes"] += during["search"]
                times[name]["delete"] += during["delete"]
                print(
                    f"{name} round {turn}: delete {summary(during['delete'])}, "
                    f"search alone {summary(alone['search'])}, "
                    f"during {summary(during['search'])}",
                    flush=True,
                )
    return {
        "facts": facts,
        "deletes_per_round": deletes,
        "rounds": rounds,
        "pause_s": pause_s,
        "trees": {name: {k: summary(v) for k, v in t.items()} for name, t in times.items()},
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=5000)
    parser.add_argument("--deletes", type=int, default=20, help="per round and tree")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="at least, per phase")
    parser.add_argument("--pause", type=float, default=0.25, help="seconds between deletes")
    parser.add_argument("--other-tree", type=Path, help="serve a second copy from this tree")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    load_before = load_average()
    report = run(args.facts, args.deletes, args.rounds, args.seconds, args.pause, args.other_tree)
    report.update(load_before=load_before, load_after=load_average())
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
