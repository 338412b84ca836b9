"""Deletes on Qdrant Edge beside searches: one user with 5,000 facts behind a real ``serve``;
``DELETE /v1/memories/{id}`` timed through ``MemoryClient``, and the same user's searches
(other clients, ``--clients`` of them, each one search at a time, in threads) timed without
deletes and during them.

A delete answers once the point is gone from recall; the rewrite that takes its text out of
the folder's bytes runs after, in the background, so the searches during deletes share the
machine with that copy (two cores here) but wait for no lock of it but the swap. Each round
takes three phases, without deletes, during them, without again, so load from elsewhere skews
both kinds alike; the round's searches' p95 during deletes is set against the mean of the two
phases without ("above alone"), and the two phases without against each other ("alone to
alone") say how far p95 moves with no delete at all: the noise the first is judged by. The
phase with deletes searches on until their text is gone (the ``.deleted`` marker beside the
Edge folder gone and the replaced shard's folder removed), so it holds the whole rewrite,
its swap included; that time, from the last delete, is the bound on deleted text staying
readable in the folder's bytes. The slowest search of each phase is reported beside p95:
the swap holds every call off while the new shard opens.
A search answered with an error is counted by status and code (any 5xx is a fault) and the
searches go on; the folder's maintenance pass runs before the servers start, so the one
``serve`` schedules finds it done.

    python -m benchmarks.latency.edge_delete [--facts 5000] [--deletes 20] [--rounds 2]
        [--clients 1] [--baseline CHECKOUT ...] [--json benchmarks/results/edge_delete.json]

``--baseline``: a checkout of another tree (``git worktree add``), served beside this one from
a copy of the same folder (its code first on ``PYTHONPATH``) and named by its folder; given
more than once, each is; the trees take turns, round by round, so a change is judged against
the tree before it (or several variants against each other) in one run.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.latency.served import (
    TENANT,
    load_average,
    percentile,
    serve_copy,
    settings_for,
    summary,
    texts,
    user_id,
)
from memory_service.evaluation.report import write_json
from memory_service.longterm.qdrant.edge.engine import DELETED_SUFFIX, REPLACED_SUFFIX

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
    served: Any,
    questions: list[str],
    seconds: float,
    to_delete: list[str],
    pause_s: float,
    clients: int = 1,
) -> dict[str, Any]:
    """``clients`` searching, each one search at a time, for ``seconds`` (at least until the
    deletes are done), with ``to_delete`` deleted one by one meanwhile, ``pause_s`` apart;
    after deletes, the searches go on until their text is gone (the rewrite's copy and its
    swap both fall inside the phase)."""
    from memory_service.client import ApiError, MemoryClient

    searched: list[float] = []
    deleted: list[float] = []
    errors: Counter[str] = Counter()
    last = 0.0
    stop = threading.Event()

    def search_loop(turn: int) -> None:
        with MemoryClient(served.base_url, served.key, timeout=120, max_retries=0) as client:
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

    workers = [threading.Thread(target=search_loop, args=(7 * i,)) for i in range(clients)]
    for worker in workers:
        worker.start()
    started = time.perf_counter()
    unreadable_after = None
    try:
        with MemoryClient(served.base_url, served.key, timeout=120, max_retries=0) as client:
            for memory_id in to_delete:
                t0 = time.perf_counter()
                client.delete(user_id(OWNER), memory_id)
                deleted.append(1000.0 * (time.perf_counter() - t0))
                last = time.perf_counter()
                time.sleep(pause_s)
        time.sleep(max(0.0, seconds - (time.perf_counter() - started)))
        if to_delete:
            unreadable_after = _text_gone_after(served.server.workspace / "qdrant", last)
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=120)
    return {
        "search": searched,
        "delete": deleted,
        "errors": dict(errors),
        "unreadable_after_s": unreadable_after,
    }


def _text_gone_after(folder: Path, last: float) -> float | None:
    """Seconds from ``last`` until no rewrite is owed (the ``.deleted`` marker gone) and the
    replaced shard's folder is removed: the deleted text is in no byte of ``folder`` then.
    None past two minutes."""
    left = [folder / ("memories" + suffix) for suffix in (DELETED_SUFFIX, REPLACED_SUFFIX)]
    for _ in range(2400):
        if not any(path.exists() for path in left):
            return round(time.perf_counter() - last, 2)
        time.sleep(0.05)
    return None


def run(
    facts: int,
    deletes: int,
    rounds: int,
    seconds: float,
    pause_s: float,
    baselines: Sequence[Path] = (),
    clients: int = 1,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workspace = Path(tmp) / "ws"
        ids, questions = _fill(workspace, facts)
        servers = {"this": stack.enter_context(serve_copy(workspace, Path(tmp) / "s", "qdrant"))}
        for baseline in baselines:
            servers[baseline.resolve().name] = stack.enter_context(
                # PYTHONSAFEPATH: ``-m`` does not put the working folder (this tree) first
                serve_copy(
                    workspace,
                    Path(tmp) / f"b{len(servers)}",
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
        p95s: dict[str, list[RoundP95]] = {name: [] for name in servers}
        for turn in range(rounds):
            batch = ids[turn * deletes : (turn + 1) * deletes]
            order = list(servers.items())
            for name, served in order[turn % len(order) :] + order[: turn % len(order)]:
                before = _phase(served, questions, seconds, [], pause_s, clients)
                during = _phase(served, questions, seconds, batch, pause_s, clients)
                after = _phase(served, questions, seconds, [], pause_s, clients)
                times[name]["search_alone"] += before["search"] + after["search"]
                times[name]["search_during_deletes"] += during["search"]
                times[name]["delete"] += during["delete"]
                unreadable[name].append(during["unreadable_after_s"])
                for phase in (before, during, after):
                    errors[name].update(phase["errors"])
                p95s[name].append(RoundP95.of(before["search"], during["search"], after["search"]))
                print(
                    f"{name} round {turn}: delete {summary(during['delete'])}, "
                    f"search alone {summary(before['search'])} then {summary(after['search'])}, "
                    f"during {summary(during['search'])}, "
                    f"unreadable after {during['unreadable_after_s']} s, "
                    f"search errors {before['errors'] or 0} / {during['errors'] or 0} / "
                    f"{after['errors'] or 0}",
                    flush=True,
                )
    return {
        "facts": facts,
        "deletes_per_round": deletes,
        "rounds": rounds,
        "pause_s": pause_s,
        "search_clients": clients,
        "unreadable_after_s": unreadable,
        "search_errors": {name: dict(counted) for name, counted in errors.items()},
        "trees": {name: {k: summary(v) for k, v in t.items()} for name, t in times.items()},
        "search_p95_by_round": {
            name: [r.as_dict() for r in rounds_] for name, rounds_ in p95s.items()
        },
        "search_p95_verdict": {name: verdict(rounds_) for name, rounds_ in p95s.items()},
    }


@dataclass(frozen=True, slots=True)
class RoundP95:
    """One round's searches' p95, ms: without deletes, during them, without again; and the
    slowest search without deletes and during them."""

    before: float
    during: float
    after: float
    slowest_alone: float = 0.0
    slowest_during: float = 0.0

    @classmethod
    def of(cls, before: list[float], during: list[float], after: list[float]) -> RoundP95:
        def p95(ms: list[float]) -> float:
            return round(percentile(ms, 0.95), 2) if ms else 0.0

        alone = before + after
        return cls(
            p95(before),
            p95(during),
            p95(after),
            round(max(alone, default=0.0), 1),
            round(max(during, default=0.0), 1),
        )

    @property
    def above_alone(self) -> float:
        return self.during - (self.before + self.after) / 2

    @property
    def alone_to_alone(self) -> float:
        return self.after - self.before

    def as_dict(self) -> dict[str, float]:
        return {
            "alone_before": self.before,
            "during_deletes": self.during,
            "alone_after": self.after,
            "above_alone": round(self.above_alone, 2),
            "alone_to_alone": round(self.alone_to_alone, 2),
            "slowest_alone": self.slowest_alone,
            "slowest_during_deletes": self.slowest_during,
        }


def verdict(rounds: Sequence[RoundP95]) -> dict[str, float | bool]:
    """Whether the searches' p95 during deletes stays within the noise: the mean of the
    rounds' excess over their phases without deletes is no larger than the mean distance
    between two phases without deletes (how far p95 moves on this host with no delete)."""
    counted = len(rounds) or 1  # no round: nothing above the noise
    above = sum(r.above_alone for r in rounds) / counted
    noise = sum(abs(r.alone_to_alone) for r in rounds) / counted
    return {
        "mean_above_alone_ms": round(above, 2),
        "mean_alone_to_alone_ms": round(noise, 2),
        "within_noise": above <= noise,
    }


def p95_table(report: dict[str, Any]) -> str:
    """The searches' p95 by round, as a Markdown table, and each tree's verdict."""
    lines = [
        "| tree | round | p95 alone | p95 during deletes | p95 alone again "
        "| above alone | alone to alone | slowest alone | slowest during |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rounds_ in report["search_p95_by_round"].items():
        for turn, r in enumerate(rounds_):
            lines.append(
                f"| {name} | {turn} | {r['alone_before']:.2f} | {r['during_deletes']:.2f} "
                f"| {r['alone_after']:.2f} | {r['above_alone']:+.2f} | {r['alone_to_alone']:+.2f} "
                f"| {r['slowest_alone']:.1f} | {r['slowest_during_deletes']:.1f} |"
            )
    for name, judged in report["search_p95_verdict"].items():
        within = "within" if judged["within_noise"] else "beyond"
        lines.append(
            f"\n{name}: p95 during deletes {judged['mean_above_alone_ms']:+.2f} ms above alone "
            f"(mean of rounds), p95 alone moves {judged['mean_alone_to_alone_ms']:.2f} ms "
            f"between phases: {within} the noise"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=5000)
    parser.add_argument("--deletes", type=int, default=20, help="per round and tree")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0, help="at least, per phase")
    parser.add_argument("--pause", type=float, default=0.25, help="seconds between deletes")
    parser.add_argument(
        "--clients", type=int, default=1, help="searching at once, one search each at a time"
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        help="a checkout served beside, taking turns (repeat for several)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    load_before = load_average()
    report = run(
        args.facts,
        args.deletes,
        args.rounds,
        args.seconds,
        args.pause,
        args.baseline,
        args.clients,
    )
    report.update(load_before=load_before, load_after=load_average())
    print(json.dumps(report, indent=2))
    print(p95_table(report))
    if args.json:
        write_json(report, args.json)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
