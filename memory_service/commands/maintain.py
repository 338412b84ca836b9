"""``memory-service maintain``: run the maintenance steps now, for one user or all of them."""

from __future__ import annotations

import argparse

from memory_service.commands.common import print_json, settings_from


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("maintain", help="dedup, expire, archive and consolidate memory now")
    parser.add_argument("--tenant", help="only this tenant (default: every tenant)")
    parser.add_argument("--user", help="only this user (needs --tenant)")
    parser.add_argument("--force", action="store_true", help="ignore the minimum gap per user")
    parser.add_argument("--workspace", help="workspace folder")
    parser.add_argument("--json", action="store_true", help="print the reports as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from memory_service.context import RuntimeContext, validate_id
    from memory_service.errors import InvalidInputError
    from memory_service.pipeline.factory import build_maintenance
    from memory_service.pipeline.scheduler import known_users, run_all
    from memory_service.services import build_services

    if args.user and not args.tenant:
        raise InvalidInputError("--user needs --tenant")
    if args.tenant:
        validate_id(args.tenant, "tenant")
    only = RuntimeContext(args.tenant, args.user) if args.user else None
    services = build_services(settings_from(args))
    try:
        maintenance = build_maintenance(services)
        if only is not None:
            targets = [only]
        else:
            targets = [
                ctx
                for ctx in known_users(services.settings.workspace, services.longterm)
                if args.tenant is None or ctx.tenant_id == args.tenant
            ]
        reports = run_all(maintenance, targets, force=args.force)
    finally:
        services.close()
    if args.json:
        print_json([r.to_dict() for r in reports])
    else:
        for r in reports:
            counts = " ".join(f"{k}={v}" for k, v in r.counts.items() if v)
            note = f"  ({r.error})" if r.error else ""
            print(f"{r.status:<14} {r.tenant_id}/{r.user_id}  {counts or '-'}{note}")
    return 1 if any(r.status == "failed" for r in reports) else 0
