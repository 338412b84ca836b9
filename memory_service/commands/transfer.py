"""``memory-service export`` and ``import``: move facts between backends as JSON lines.

One line per fact: ``{"tenant_id": ..., "user_id": ..., **Fact.to_dict()}``. Export lists every
fact, superseded and expired ones included, so history survives the move. Import checks every
line before writing anything (a bad file writes nothing and names its bad lines), then records
each user's facts with ``record()``: ids are derived from tenant, user and text, so they come
out equal, and importing a file twice changes nothing (every line ``duplicate``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from memory_service.commands.common import settings_from
from memory_service.context import RuntimeContext, validate_id
from memory_service.errors import InvalidInputError
from memory_service.facts import Fact
from memory_service.longterm.base import LongTermMemory

PAGE = 1000
RECORD_BATCH = 500
SHOWN_BAD_LINES = 50


@dataclass(frozen=True, slots=True)
class ImportLine:
    line_no: int
    ctx: RuntimeContext
    fact: Fact  # stamped: id and content hash derived


@dataclass(frozen=True, slots=True)
class BadLine:
    line_no: int
    message: str


def _check_scope(tenant_id: str, user_id: str | None) -> None:
    validate_id(tenant_id, "tenant_id")
    if user_id is not None:
        validate_id(user_id, "user_id")


def _users(longterm: LongTermMemory, tenant_id: str) -> list[str]:
    users = getattr(longterm, "users", None)
    if users is None:
        raise InvalidInputError(
            "this backend cannot list a tenant's users: export with --user", code="no_users"
        )
    return users(tenant_id)


def export_records(
    longterm: LongTermMemory, tenant_id: str, user_id: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every fact of the tenant (or of one user), inactive ones included, user by user."""
    _check_scope(tenant_id, user_id)
    for user in [user_id] if user_id else _users(longterm, tenant_id):
        ctx = RuntimeContext(tenant_id, user)
        cursor = None
        while True:
            page = longterm.list(ctx, limit=PAGE, cursor=cursor, include_inactive=True)
            for fact in page.items:
                yield {"tenant_id": tenant_id, "user_id": user, **fact.to_dict()}
            cursor = page.next_cursor
            if cursor is None:
                break


def _parse_line(line_no: int, raw: str) -> ImportLine:
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    ctx = RuntimeContext(data.get("tenant_id"), data.get("user_id"))
    if not isinstance(data.get("text"), str):
        raise ValueError("'text' must be a string")
    fact = Fact.from_dict(data)
    if not isinstance(data.get("tags") or [], list):
        raise ValueError("'tags' must be a list")
    stamped = fact.stamped(ctx)
    if fact.id and fact.id != stamped.id:
        raise ValueError(
            f"id {fact.id} does not belong to this tenant, user and text (ids are derived: "
            "leave 'id' out to record edited text as a new fact)"
        )
    if fact.content_hash and fact.content_hash != stamped.content_hash:
        raise ValueError("content_hash does not match the text")
    return ImportLine(line_no, ctx, stamped)


def parse_import(lines: Iterable[str]) -> tuple[list[ImportLine], list[BadLine]]:
    """Every line checked; blank lines skipped. Line numbers are 1-based."""
    good: list[ImportLine] = []
    bad: list[BadLine] = []
    for line_no, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            good.append(_parse_line(line_no, raw))
        except InvalidInputError as exc:
            bad.append(BadLine(line_no, exc.message))
        except (ValueError, TypeError, KeyError) as exc:
            bad.append(BadLine(line_no, f"{type(exc).__name__}: {exc}"))
    return good, bad


def _already_there(stored: Fact | None, incoming: Fact) -> bool:
    """True when recording ``incoming`` would change nothing: the fact is stored and active
    (``record`` says duplicate), or stored and closed and arriving closed."""
    if stored is None:
        return False
    return stored.is_active() or not incoming.is_active()


def import_records(longterm: LongTermMemory, lines: list[ImportLine]) -> Counter[str]:
    """Record parsed lines user by user; count statuses (created, superseded, duplicate)."""
    by_user: dict[tuple[str, str], list[ImportLine]] = {}
    for line in lines:
        by_user.setdefault((line.ctx.tenant_id, line.ctx.user_id), []).append(line)
    statuses: Counter[str] = Counter()
    for (tenant_id, user_id), items in by_user.items():
        ctx = RuntimeContext(tenant_id, user_id)
        for start in range(0, len(items), RECORD_BATCH):
            chunk = [line.fact for line in items[start : start + RECORD_BATCH]]
            stored = {f.id: f for f in longterm.get(ctx, [f.id for f in chunk])}
            todo = [f for f in chunk if not _already_there(stored.get(f.id), f)]
            if len(todo) < len(chunk):
                statuses["duplicate"] += len(chunk) - len(todo)
            if todo:
                statuses.update(r.status for r in longterm.record(ctx, todo))
    return statuses


def register(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser("export", help="write a tenant's facts as JSON lines")
    export.add_argument("--tenant", default="default", help="tenant id (default: default)")
    export.add_argument("--user", help="only this user (default: every user of the tenant)")
    export.add_argument("--workspace", help="workspace folder")
    export.set_defaults(handler=run_export)

    imp = sub.add_parser("import", help="record facts from JSON lines (as written by export)")
    imp.add_argument("file", nargs="?", default="-", help="JSON lines file (default: stdin)")
    imp.add_argument("--workspace", help="workspace folder")
    imp.add_argument("--json", action="store_true", help="print the summary as JSON")
    imp.set_defaults(handler=run_import)


def run_export(args: argparse.Namespace) -> int:
    from memory_service.services import build_services

    _check_scope(args.tenant, args.user)  # refuse a bad id before loading the model
    services = build_services(settings_from(args))
    count = 0
    try:
        for record in export_records(services.longterm, args.tenant, args.user):
            sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    finally:
        services.close()
    sys.stdout.flush()
    print(f"exported {count} facts of tenant {args.tenant}", file=sys.stderr)
    return 0


def _read(path: str) -> list[str]:
    if path == "-":
        return sys.stdin.read().split("\n")
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().split("\n")
    except OSError as exc:
        raise InvalidInputError(f"cannot read {path}: {exc}", code="unreadable_file") from exc


def _report_bad(bad: list[BadLine], out: TextIO) -> None:
    for line in bad[:SHOWN_BAD_LINES]:
        print(f"line {line.line_no}: {line.message}", file=out)
    if len(bad) > SHOWN_BAD_LINES:
        print(f"... and {len(bad) - SHOWN_BAD_LINES} more bad lines", file=out)
    print(f"memory-service: error: {len(bad)} bad lines, nothing imported", file=out)


def run_import(args: argparse.Namespace) -> int:
    from memory_service.services import build_services

    lines, bad = parse_import(_read(args.file))
    if bad:
        _report_bad(bad, sys.stderr)
        return 2
    services = build_services(settings_from(args))
    try:
        statuses = import_records(services.longterm, lines)
    finally:
        services.close()
    summary = {s: statuses.get(s, 0) for s in ("created", "superseded", "duplicate")}
    if args.json:
        print(json.dumps({"lines": len(lines), **summary}))
    else:
        parts = ", ".join(f"{name} {n}" for name, n in summary.items())
        print(f"imported {len(lines)} facts: {parts}")
    return 0
