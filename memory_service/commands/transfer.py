"""``memory-service export`` and ``import``: move facts between backends as JSON lines.

The format and the checks live in ``memory_service.pipeline.transfer``, shared with the HTTP API's
``/v1/export`` and ``/v1/import``; this module is only the command line around them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TextIO

from memory_service.commands.common import settings_from
from memory_service.domain.errors import InvalidInputError
from memory_service.pipeline.transfer import (
    SHOWN_BAD_LINES,
    BadLine,
    import_records,
    parse_import,
    summarize,
    to_line,
)


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
    from memory_service.services.container import build_services
    from memory_service.usecases.transfer import ExportFacts, export_facts

    request = ExportFacts(args.tenant, args.user)  # a bad id fails before the model loads
    services = build_services(settings_from(args))
    count = 0
    try:
        for page in export_facts(services.memories, request):
            sys.stdout.write("".join(to_line(record) for record in page))
            count += len(page)
    finally:
        services.close()
    sys.stdout.flush()
    whose = f"user {args.user} of tenant {args.tenant}" if args.user else f"tenant {args.tenant}"
    note = _no_data(services.describe_backend()) if count == 0 else ""
    print(f"exported {count} facts of {whose}{note}", file=sys.stderr)
    return 0


def _no_data(backend: str) -> str:
    """An empty export is an empty answer, as ``GET /v1/export`` (and list, and search) give
    for a user or tenant with no facts, not an error; the note says where it looked, since a
    mistyped ``--tenant`` (default: default) is the usual reason."""
    return f" (none in the long-term backend: {backend}; --tenant defaults to 'default')"


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
    from memory_service.services.container import build_services
    from memory_service.services.stores import build_redactor

    settings = settings_from(args)
    lines, bad = parse_import(_read(args.file), redactor=build_redactor(settings))
    if bad:
        _report_bad(bad, sys.stderr)
        return 2
    services = build_services(settings)
    try:
        statuses = import_records(services.longterm, lines)
    finally:
        services.close()
    summary = summarize(lines, statuses)
    if args.json:
        print(json.dumps(summary))
    else:
        parts = ", ".join(f"{name} {n}" for name, n in summary.items() if name != "lines")
        print(f"imported {summary['lines']} facts: {parts}")
    return 0
