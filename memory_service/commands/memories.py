"""``memory-service record`` and ``search``: work on a workspace directly, no server."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from memory_service.commands.common import (
    add_scope_arguments,
    context_from,
    print_json,
    settings_from,
)
from memory_service.context import SCOPES, scope_context
from memory_service.errors import InvalidInputError
from memory_service.facts import FACT_KINDS, Fact


def register(sub: argparse._SubParsersAction) -> None:
    record = sub.add_parser("record", help="record facts for a user, an agent or the tenant")
    add_scope_arguments(record, user_required=False)
    record.add_argument(
        "--scope",
        choices=SCOPES,
        default="user",
        help="whose memory: the user's (default, needs --user), the agent's (needs --agent) "
        "or the tenant's, shared by all its users",
    )
    record.add_argument("--agent", help="agent id (the agent scope)")
    record.add_argument("text", nargs="*", help="fact texts; none: one fact per stdin line")
    record.add_argument(
        "--key",
        help="subject key, for one text only: a newer fact with the same key supersedes the "
        "older one (several texts with one key would supersede each other, so it is refused)",
    )
    record.add_argument("--kind", choices=FACT_KINDS, default="fact")
    record.add_argument("--importance", type=int, default=5, help="1-10 (default 5)")
    record.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    record.add_argument("--workspace", help="workspace folder")
    record.set_defaults(handler=run_record)

    search = sub.add_parser("search", help="recall a user's facts")
    add_scope_arguments(search)
    search.add_argument("query")
    search.add_argument("--top-k", type=int, default=5)
    search.add_argument("--threshold", type=float, default=0.0)
    search.add_argument("--mode", choices=("hybrid", "bm25", "dense"), default="hybrid")
    search.add_argument("--agent", help="the agent asking: its shared memory is searched too")
    search.add_argument(
        "--scope",
        action="append",
        choices=SCOPES,
        help="a scope to search (repeatable); default: user, agent (with --agent), tenant",
    )
    search.add_argument("--workspace", help="workspace folder")
    search.set_defaults(handler=run_search)


def run_record(args: argparse.Namespace) -> int:
    from memory_service.services import build_services

    texts = args.text or [line.strip() for line in sys.stdin if line.strip()]
    if not texts:
        raise InvalidInputError("no fact text given")
    if args.key is not None and len(texts) > 1:
        raise InvalidInputError(
            f"--key takes one text, got {len(texts)} (with one key each text would supersede "
            "the one before it): record each keyed text with its own command, or drop --key"
        )
    facts = [
        Fact(t, key=args.key, kind=args.kind, importance=args.importance, tags=tuple(args.tag))
        for t in texts
    ]
    if args.scope == "user":
        if not args.user:
            raise InvalidInputError("--user is required for the user scope")
        ctx = context_from(args)
    else:
        ctx = scope_context(args.tenant, args.scope, args.agent)
    for fact in facts:  # refuse bad input before loading the model
        fact.stamped(ctx)
    services = build_services(settings_from(args))
    try:
        results = services.longterm.record(ctx, facts)
    finally:
        services.close()
    if args.json:
        print_json([{"id": r.id, "status": r.status} for r in results])
    else:
        for result, fact in zip(results, facts, strict=True):
            print(f"{result.status:<10} {result.id}  {fact.text}")
    return 0


def run_search(args: argparse.Namespace) -> int:
    from memory_service.longterm.retrieval import validate_query
    from memory_service.services import build_services

    ctx = replace(context_from(args), agent_id=args.agent)
    validate_query(args.query, args.top_k, args.threshold)
    ctx.visible_scopes(args.scope)  # refuse the agent scope without --agent before loading
    services = build_services(settings_from(args))
    try:
        recalls = services.longterm.retrieve(
            ctx, args.query, args.top_k, args.threshold, mode=args.mode, scopes=args.scope
        )
    finally:
        services.close()
    if args.json:
        print_json(
            [
                {
                    "id": r.fact.id,
                    "text": r.fact.text,
                    "score": r.score,
                    "ranks": r.ranks,
                    "scope": r.fact.scope,
                    "agent_id": r.fact.agent_id,
                }
                for r in recalls
            ]
        )
    else:
        for r in recalls:
            ranks = " ".join(f"{leg}={rank if rank else '-'}" for leg, rank in r.ranks.items())
            print(f"{r.score:.4f}  [{ranks}]  ({r.fact.scope})  {r.fact.text}")
    return 0
