"""``memory-service erase``: erase one user from every store of a workspace, with a receipt.

The same erase as ``DELETE /v1/users/{user_id}`` (``pipeline/erasure.py``), run on the
workspace directly; the receipt says ``by: cli``. A user with nothing stored is an error (one
line, exit 2) and nothing is written.
"""

from __future__ import annotations

import argparse

from memory_service.commands.common import print_json, settings_from
from memory_service.domain.context import RuntimeContext


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "erase",
        help="erase a user completely: facts, MEMORY.md, sessions, logs, tool results, "
        "dead letters (not undoable)",
    )
    parser.add_argument("--tenant", required=True, help="the user's tenant id")
    parser.add_argument("--user", required=True, help="the user id to erase")
    parser.add_argument("--workspace", help="workspace folder")
    parser.add_argument("--json", action="store_true", help="print the receipt as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from memory_service.services.container import build_services
    from memory_service.services.erasure_stores import build_erasure

    ctx = RuntimeContext(args.tenant, args.user)  # a malformed id fails before any work
    services = build_services(settings_from(args))
    try:
        erasure = build_erasure(services)
        try:
            receipt = erasure.erase(ctx, by="cli")
        finally:
            erasure.close()
    finally:
        services.close()
    if args.json:
        print_json(receipt.to_dict())
        return 0
    print(f"erased {receipt.tenant_id}/{receipt.user_id} at {receipt.erased_at.isoformat()}")
    for name, count in receipt.removed.items():
        print(f"  {name:<20} {count}")
    print(f"  {'total':<20} {receipt.total}")
    if receipt.left_behind:
        print(f"  {receipt.left_behind} files no store claims were left in the user's folder")
    return 0
