"""Deletes on Qdrant Edge beside searches: one user with 5,000 facts behind a real ``serve``;
``DELETE /v1/memories/{id}`` timed through ``MemoryClient``, and the same user's searches
(another client, one at a time, in a thread) timed without deletes and during them.

A delete answers once the point is gone from recall; the rewrite that takes its text out of
the folder's bytes runs after, in the background, so the searches during deletes share the
machine with that copy (two cores here) but wait for no lock of it but the swap. Phases take
turns (without, during, without, during, ...) so load from elsewhere skews both alike. After
each round's deletes, the time until the rewrite owed is done (the ``.deleted`` marker beside
the Edge folder gone) is the bound on deleted text staying readable in the folder's bytes.
A search answered with an error is counted by status and code (any 5xx is a fault) and the
searches go on; the folder's maintenance pass runs before the servers start, so the one
``serve`` schedules finds it done.

    python -m benchmarks.latency.edge_delete [--facts 5000] [--deletes 20] [--rounds 2]
        [--baseline CHECKOUT] [--json benchmarks/results/edge_delete.json]

``--baseline``: a checkout of another tree (``git worktree add``), served beside this one from
a copy of the same folder (its code first on ``PYTHONPATH``); the two take turns, round by
round, so a change is judged against the tree before it in one run.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections import Counter
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
from memory_service.evaluation.report import write_json
from memory_service.longterm.qdrant.edge.engine import DELETED_SUFFIX

OWNER = 0


def _fill(workspace: Path, facts: int) -> tuple[list[str], list[str]]:
    """The owner's facts recorded in-process: their ids, and the questions about them."""
    from memory_service.domain.context import RuntimeContext
    from memory_service.domain.facts import Fact
    from memory_service.pipeline.maintenance import all_facts
    from memory_service.services import build_services
    from memory_service.services.work import build_maintenance

    written, questions = texts(1, facts)[OWNER]
    services = build_services(settings_for(workspace, "qdrant"))
    try:
        ctx = RuntimeContext(TENANT, user_id(OWNER))
        for start in range(0, len(written), 250):
            services.longterm.record(ctx, [Fact(t) for t in written[start : start + 250]])
        # the pass ``serve`` would run a minute after it starts (near-duplicates merged, the
        # shard rewritten), run before: it would otherwise fall inside a timed phase
        build_maintenance(services).run_user(ctx, consolidate=False)
        # the ids stored (a near-duplicate merged two texts into one fact)
        ids = [f.id for f in all_facts(services.longterm, ctx)]
    finally:
        services.close()
    return ids, questions


def _phase(
    served: Any, questions: list[str], seconds: float, to_delete: list[str], pause_s: float
) -> dict[str, Any]:
    """Searches for ``seconds`` (at least until the deletes are done), with ``to_delete``
    deleted one by one meanwhile, ``pause_s`` apart."""
    from memory_service.client import ApiError, MemoryClient

    searched: list[float] = []
    deleted: list[float] = []
    errors: Counter[str] = Counter()
    last = 0.0
    stop = threading.Event()

    def search_loop() -> None:
        with MemoryClient(served.base_url, served.key, timeout=120, max_retries=0) as client:
            turn = 0
            while not stop.is_set():
                t0 = time.perf_counter()
                try:
                    client.search(user_id(OWNER), questions[turn % len(questions)])
                except ApiError as error:  # counted, and the searches go on
                    errors[f"{error.status} {error.code}"] += 1
                    print(f"search answered {error.status} {error.code}: {error}", flush=True)
                else:
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
                last = time.perf_counter()
                time.sleep(pause_s)
        time.sleep(max(0.0, seconds - (time.perf_counter() - started)))
    finally:
        stop.set()
        worker.join(timeout=120)
    unreadable_after = None
    if to_delete:
        marker = served.server.workspace / "qdrant" / ("memories" + DELETED_SUFFIX)
        for _ in range(2400):  # bounded: two minutes
            if not marker.exists():
                unreadable_after = round(time.perf_counter() - last, 2)
                break
            time.sleep(0.05)
    return {
        "search": searched,
        "delete": deleted,
        "errors": dict(errors),
        "unreadable_after_s": unreadable_after,
    }


def run(
    facts: int,
    deletes: int,
    rounds: int,
    seconds: float,
    pause_s: float,
    baseline: Path | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workspace = Path(tmp) / "ws"
        ids, questions = _fill(workspace, facts)
        servers = {"edge": stack.enter_context(serve_copy(workspace, Path(tmp) / "s", "qdrant"))}
        if baseline is not None:
            servers["baseline"] = stack.enter_context(
                # PYTHONSAFEPATH: ``-m`` does not put the working folder (this tree) first
                serve_copy(
                    workspace,
                    Path(tmp) / "b",
                    "qdrant",
                    PYTHONPATH=str(baseline.resolve()),
                    PYTHONSAFEPATH="1",
                )
            )
        from memory_service.client import MemoryClient

        for served in servers.values():  # every query embedded, the shard warm
            with MemoryClient(served.base_url, served.key, timeout=120) as warm:
                for question in questions:
                    warm.search(user_id(OWNER), question)
        times: dict[str, dict[str, list[float]]] = {
            name: {"search_alone": [], "search_during_deletes": [], "delete": []}
            for name in servers
        }
        errors: dict[str, Counter[str]] = {name: Counter() for name in servers}
        unreadable: dict[str, list[float | None]] = {name: [] for name in servers}
        for turn in range(rounds):
            batch = ids[turn * deletes : (turn + 1) * deletes]
            order = list(servers.items())
            for name, served in order[turn % len(order) :] + order[: turn % len(order)]:
                alone = _phase(served, questions, seconds, [], pause_s)
                during = _phase(served, questions, seconds, batch, pause_s)
                times[name]["search_alone"] += alone["search"]
                times[name]["search_during_deletes"] += during["search"]
                times[name]["delete"] += during["delete"]
                unreadable[name].append(during["unreadable_after_s"])
                errors[name].update(alone["errors"])
                errors[name].update(during["errors"])
                print(
                    f"{name} round {turn}: delete {summary(during['delete'])}, "
                    f"search alone {summary(alone['search'])}, "
                    f"during {summary(during['search'])}, "
                    f"unreadable after {during['unreadable_after_s']} s, "
                    f"search errors {alone['errors'] or 0} / {during['errors'] or 0}",
                    flush=True,
                )
    return {
        "facts": facts,
        "deletes_per_round": deletes,
        "rounds": rounds,
        "pause_s": pause_s,
        "unreadable_after_s": unreadable,
        "search_errors": {name: dict(counted) for name, counted in errors.items()},
        "trees": {name: {k: summary(v) for k, v in t.items()} for name, t in times.items()},
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=5000)
    parser.add_argument("--deletes", type=int, default=20, help="per round and tree")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="at least, per phase")
    parser.add_argument("--pause", type=float, default=0.25, help="seconds between deletes")
    parser.add_argument("--baseline", type=Path, help="a checkout served beside, taking turns")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    load_before = load_average()
    report = run(args.facts, args.deletes, args.rounds, args.seconds, args.pause, args.baseline)
    report.update(load_before=load_before, load_after=load_average())
    print(json.dumps(report, indent=2))
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
