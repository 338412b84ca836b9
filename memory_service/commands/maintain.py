"""``memory-service maintain``: run the maintenance steps now, for one user or all of them.

``--replay-dead-letters`` replays the users' failed flushes instead (see
``memory_service.pipeline.replay``); with ``--dry-run`` it only lists them, without a model.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memory_service.commands.common import print_json, settings_from
from memory_service.domain.context import RuntimeContext

if TYPE_CHECKING:
    from memory_service.pipeline.replay import ReplayReport


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("maintain", help="dedup, expire, archive and consolidate memory now")
    parser.add_argument("--tenant", help="only this tenant (default: every tenant)")
    parser.add_argument("--user", help="only this user (needs --tenant)")
    parser.add_argument("--force", action="store_true", help="ignore the minimum gap per user")
    parser.add_argument(
        "--replay-dead-letters",
        action="store_true",
        help="instead of maintenance: send failed flushes (dead letters) to the model again",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --replay-dead-letters: list the dead letters per user, call no model",
    )
    parser.add_argument("--workspace", help="workspace folder")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    parser.set_defaults(handler=run)


def _scope(args: argparse.Namespace) -> RuntimeContext | None:
    """The one user asked for, if any; bad ids and combinations fail before any work."""
    from memory_service.domain.context import validate_id
    from memory_service.domain.errors import InvalidInputError

    if args.user and not args.tenant:
        raise InvalidInputError("--user needs --tenant")
    if args.dry_run and not args.replay_dead_letters:
        raise InvalidInputError("--dry-run goes with --replay-dead-letters")
    if args.force and args.replay_dead_letters:
        raise InvalidInputError("--force is for maintenance, not for --replay-dead-letters")
    if args.tenant:
        validate_id(args.tenant, "tenant")
    return RuntimeContext(args.tenant, args.user) if args.user else None


def run(args: argparse.Namespace) -> int:
    only = _scope(args)
    if args.replay_dead_letters:
        return run_replay(args, only)
    from memory_service.pipeline.scheduler import run_all
    from memory_service.services.container import build_services
    from memory_service.services.work import build_maintenance

    services = build_services(settings_from(args))
    try:
        maintenance = build_maintenance(services)
        if only is not None:
            targets = [only]
        else:
            targets = [
                ctx
                for ctx in services.known_users()
                if args.tenant is None or ctx.tenant_id == args.tenant
            ]
        reports = run_all(maintenance, targets, force=args.force)
    finally:
        services.close()
    _print(reports, args.json, _maintenance_line)
    return 1 if any(r.status == "failed" for r in reports) else 0


def _print(reports: Sequence[Any], as_json: bool, line: Callable[[Any], str]) -> None:
    """The reports as one JSON list, or one line each."""
    if as_json:
        print_json([r.to_dict() for r in reports])
    else:
        for r in reports:
            print(line(r))


def _maintenance_line(r: Any) -> str:
    counts = " ".join(f"{k}={v}" for k, v in r.counts.items() if v)
    note = f"  ({r.error})" if r.error else ""
    return f"{r.status:<14} {r.tenant_id}/{r.owner}  {counts or '-'}{note}"


def run_replay(args: argparse.Namespace, only: RuntimeContext | None) -> int:
    """List or replay dead letters; 1 when an entry is left (failed again, or malformed)."""
    from memory_service.llm import NOT_CONFIGURED_MESSAGE, LlmNotConfiguredError
    from memory_service.pipeline.replay import (
        list_dead_letters,
        replay_all,
        users_with_dead_letters,
    )
    from memory_service.services.container import build_services
    from memory_service.stores.build import ReplicaStores, open_database

    settings = settings_from(args)
    workspace = settings.workspace
    if args.dry_run:  # no model and no embedder: only the place the letters live
        database = open_database(settings)
        try:
            store = ReplicaStores.of(workspace, database).dead_letters
            targets = [only] if only else users_with_dead_letters(workspace, args.tenant, store)
            reports = [list_dead_letters(workspace, ctx, store) for ctx in targets]
        finally:
            if database is not None:
                database.close()
    else:
        if not (settings.llm.memory_model or settings.llm.model):  # before loading the embedder
            message = f"replaying dead letters needs an LLM; {NOT_CONFIGURED_MESSAGE}"
            raise LlmNotConfiguredError(message)
        services = build_services(settings)
        try:
            if services.flush is None:  # the settings named a model, but no flush was built
                raise LlmNotConfiguredError(
                    f"replaying dead letters needs an LLM; {NOT_CONFIGURED_MESSAGE}"
                )
            store = services.flush.dead_letters
            targets = [only] if only else users_with_dead_letters(workspace, args.tenant, store)
            reports = replay_all(services.flush, targets)
        finally:
            services.close()
    _print(reports, args.json, lambda r: _replay_line(r, dry_run=args.dry_run))
    if not reports and not args.json:
        print("no dead letters")
    return 0 if all(r.clean for r in reports) else 1


def _replay_line(report: ReplayReport, *, dry_run: bool) -> str:
    """One user's line: counts always, the first error when there is one."""
    c = report.counts
    if dry_run:
        reasons = " ".join(f"{k}={v}" for k, v in sorted(report.reasons.items()))
        counts = f"entries={c['entries']} malformed={c['malformed']}"
        return f"{report.status:<10} {report.tenant_id}/{report.user_id}  {counts}  {reasons}"
    counts = f"replayed={c['replayed']} failed={c['failed']} malformed={c['malformed']}"
    extra = " ".join(f"{k}={c[k]}" for k in ("covered", "facts") if c[k])
    note = f"  ({report.error or report.errors[0]})" if report.error or report.errors else ""
    line = f"{report.status:<10} {report.tenant_id}/{report.user_id}  {counts} {extra}"
    return line.rstrip() + note
