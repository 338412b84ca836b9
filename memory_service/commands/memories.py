"""``memory-service record``, ``search``, ``list`` and ``confirm``: work on a workspace
directly, no server. ``search`` and ``list`` take the same filter options as the API's
``filter``."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from datetime import datetime

from memory_service.commands.common import (
    add_scope_arguments,
    context_from,
    print_json,
    settings_from,
)
from memory_service.config.retrieval import MODES
from memory_service.domain.context import SCOPES, scope_context
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.fact_filter import ExpiryPolicy, FactFilter
from memory_service.domain.facts import Fact, Source, utcnow
from memory_service.domain.limits import (
    MAX_CONFIDENCE,
    MAX_THRESHOLD,
    MAX_TOP_K,
    MIN_CONFIDENCE,
    MIN_THRESHOLD,
)
from memory_service.domain.redaction import describe

KIND_HELP = (
    "fact (default), preference, event or procedure; episodic, factual, procedural and "
    "semantic name event, fact, procedure and preference"
)


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
    record.add_argument("--kind", default="fact", help=KIND_HELP)
    record.add_argument("--importance", type=int, default=5, help="1-10 (default 5)")
    record.add_argument(
        "--confidence",
        type=float,
        default=1.0,
        help=f"how sure ({MIN_CONFIDENCE:g}-{MAX_CONFIDENCE:g}, default 1: a person's own "
        "record); it decays with the fact's age by its kind",
    )
    record.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    record.add_argument(
        "--source-text",
        help="what was said that the fact comes from (recall searches it beside the fact)",
    )
    record.add_argument(
        "--source-session", help="the session the fact comes from (one of the user's own)"
    )
    record.add_argument(
        "--source-message",
        type=int,
        action="append",
        default=[],
        help="a sequence number of a source message in that session (repeatable)",
    )
    record.add_argument("--source-origin", help="a label for where it came from (e.g. crm)")
    record.add_argument("--workspace", help="workspace folder")
    record.set_defaults(handler=run_record)

    search = sub.add_parser("search", help="recall a user's facts")
    add_scope_arguments(search)
    search.add_argument("query")
    search.add_argument(
        "--top-k", type=int, default=5, help=f"how many facts at most (1-{MAX_TOP_K}, default 5)"
    )
    search.add_argument(
        "--threshold",
        type=float,
        default=0.0,
        help="the least dense (cosine) similarity a fact needs to be a dense hit; in hybrid "
        "mode nothing is recalled unless one fact reaches it "
        f"({MIN_THRESHOLD:g} to {MAX_THRESHOLD:g}, default 0)",
    )
    search.add_argument(
        "--mode",
        choices=MODES,
        default="hybrid",
        help="hybrid (default): BM25 and dense vectors, fused; bm25 or dense: that retriever "
        "alone, with its own score",
    )
    add_filter_arguments(search)
    search.add_argument("--agent", help="the agent asking: its shared memory is searched too")
    search.add_argument(
        "--scope",
        action="append",
        choices=SCOPES,
        help="a scope to search (repeatable); default: user, agent (with --agent), tenant",
    )
    search.add_argument("--workspace", help="workspace folder")
    search.set_defaults(handler=run_search)

    listing = sub.add_parser("list", help="list a user's facts, oldest first")
    add_scope_arguments(listing)
    listing.add_argument("--limit", type=int, default=100, help="facts per page (default 100)")
    listing.add_argument("--cursor", help="the next_cursor a previous page printed")
    listing.add_argument(
        "--include-inactive",
        action="store_true",
        help="superseded and expired facts too (marked so in the text output)",
    )
    add_filter_arguments(listing)
    listing.add_argument("--workspace", help="workspace folder")
    listing.set_defaults(handler=run_list)

    confirm = sub.add_parser(
        "confirm",
        help="confirm a user's fact as still true: its confidence is its initial one again",
    )
    add_scope_arguments(confirm)
    confirm.add_argument("id", help="the fact's id (as search and list print it)")
    confirm.add_argument("--workspace", help="workspace folder")
    confirm.set_defaults(handler=run_confirm)


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``FactFilter`` options (checked by the backend, before the model loads)."""
    group = parser.add_argument_group("filters")
    group.add_argument(
        "--kind", action="append", default=[], help="this kind or memory type (repeatable)"
    )
    group.add_argument("--tag-any", action="append", default=[], help="one of these tags")
    group.add_argument("--tag-all", action="append", default=[], help="every one of these tags")
    group.add_argument("--min-importance", type=int, help="importance at least this")
    group.add_argument("--key", dest="filter_key", help="exactly this subject key")
    group.add_argument("--created-after", help="created at or after this ISO-8601 time")
    group.add_argument("--created-before", help="created before this ISO-8601 time")
    group.add_argument("--as-of", help="what was valid at this past ISO-8601 time")
    group.add_argument(
        "--needs-verification",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="only facts whose decayed confidence is below the verification threshold "
        "(--no-needs-verification: only the others)",
    )


def fact_filter_from(args: argparse.Namespace) -> FactFilter:
    """The options as a filter (the use case's request checks it: a bad one is one error
    line before any work)."""
    return FactFilter(
        kinds=tuple(args.kind),
        tags_any=tuple(args.tag_any),
        tags_all=tuple(args.tag_all),
        min_importance=args.min_importance,
        key=args.filter_key,
        created_after=args.created_after,
        created_before=args.created_before,
        as_of=args.as_of,
        needs_verification=args.needs_verification,
    )


def run_record(args: argparse.Namespace) -> int:
    from memory_service.services.container import build_services
    from memory_service.services.stores import build_redactor
    from memory_service.usecases.memories import RecordFacts, record_facts
    from memory_service.usecases.rights import OPERATOR

    texts = args.text or [line.strip() for line in sys.stdin if line.strip()]
    if not texts:
        raise InvalidInputError("no fact text given")
    if args.key is not None and len(texts) > 1:
        raise InvalidInputError(
            f"--key takes one text, got {len(texts)} (with one key each text would supersede "
            "the one before it): record each keyed text with its own command, or drop --key"
        )
    source = _source_from(args)
    facts = [
        Fact(
            t,
            key=args.key,
            kind=args.kind,
            importance=args.importance,
            confidence=args.confidence,
            tags=tuple(args.tag),
            source=source,
        )
        for t in texts
    ]
    if args.scope == "user":
        if not args.user:
            raise InvalidInputError("--user is required for the user scope")
        ctx = context_from(args)
    else:
        ctx = scope_context(args.tenant, args.scope, args.agent)
    request = RecordFacts(ctx, tuple(facts), OPERATOR)
    settings = settings_from(args)
    redactor = build_redactor(settings)
    stored = [redactor.fact(f)[0] for f in facts]  # refuse: before loading the model
    for fact in stored:  # refuse bad input before loading the model
        fact.stamped(ctx)
    services = build_services(settings)
    try:
        results = record_facts(services.memories, request)
    finally:
        services.close()
    if args.json:
        print_json(
            [
                {
                    "id": r.id,
                    "status": r.status,
                    "merged_into": r.merged_into,
                    "redacted": r.redacted,
                }
                for r in results
            ]
        )
    else:
        for result, fact in zip(results, stored, strict=True):
            note = describe(result.redacted)
            if result.merged_into is not None:
                note = ", ".join(filter(None, ["kept as a phrasing of this near-duplicate", note]))
            print(f"{result.status:<10} {result.id}  {fact.text}" + (f"  ({note})" if note else ""))
    return 0


def _source_from(args: argparse.Namespace) -> Source | None:
    """The ``--source-*`` options as one source (None when none is given)."""
    source = Source(
        origin=args.source_origin,
        session_id=args.source_session,
        messages=tuple(args.source_message),
        text=args.source_text,
    )
    return None if source.is_empty() else source


def run_search(args: argparse.Namespace) -> int:
    from memory_service.services.container import build_services
    from memory_service.usecases.memories import SearchFacts, search_facts

    request = SearchFacts(  # checked here: a bad request fails before the model loads
        replace(context_from(args), agent_id=args.agent),
        args.query,
        args.top_k,
        args.threshold,
        mode=args.mode,
        scopes=args.scope,
        filter=fact_filter_from(args),
    )
    services = build_services(settings_from(args))
    try:
        recalls = search_facts(services.memories, request)
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
                    "confidence": r.confidence,
                    "needs_verification": r.fact.needs_verification,
                    "updated_at": r.fact.updated_at,
                    "scope": r.fact.scope,
                    "agent_id": r.fact.agent_id,
                    "source": r.fact.source.to_dict() if r.fact.source else None,
                }
                for r in recalls
            ]
        )
    else:
        for r in recalls:
            ranks = " ".join(f"{leg}={rank if rank else '-'}" for leg, rank in r.ranks.items())
            mark = verify_mark(r.fact)
            print(f"{r.score:.4f}  [{ranks}]  ({r.fact.scope})  {r.fact.text}{mark}")
    return 0


def verify_mark(fact: Fact) -> str:
    """The text output's mark of a fact that needs verification (empty: it does not)."""
    return "  [needs verification]" if fact.needs_verification else ""


def inactive_mark(fact: Fact, expiry: ExpiryPolicy, now: datetime) -> str:
    """Why ``list --include-inactive`` shows a fact recall does not (empty: it is active)."""
    if fact.superseded_by is not None:
        return f"  [superseded by {fact.superseded_by}]"
    if fact.valid_to is not None:
        return f"  [closed at {fact.valid_to.isoformat()}]"
    deadline = expiry.expires_at(fact)
    if deadline is not None and deadline <= now:
        return f"  [expired at {deadline.isoformat()}]"
    return ""


def run_list(args: argparse.Namespace) -> int:
    from memory_service.services.container import build_services
    from memory_service.services.stores import build_expiry
    from memory_service.usecases.memories import ListFacts, list_facts

    request = ListFacts(
        context_from(args),
        args.limit,
        args.cursor,
        args.include_inactive,
        filter=fact_filter_from(args),
    )
    settings = settings_from(args)
    expiry = build_expiry(settings)
    services = build_services(settings)
    now = utcnow()
    try:
        page = list_facts(services.memories, request)
    finally:
        services.close()
    if args.json:
        items = [{**f.to_dict(), "needs_verification": f.needs_verification} for f in page.items]
        print_json({"items": items, "next_cursor": page.next_cursor})
    else:
        for fact in page.items:
            when = fact.created_at.isoformat() if fact.created_at else "-"
            mark = inactive_mark(fact, expiry, now) + verify_mark(fact)
            print(f"{fact.id}  {when}  [{fact.kind}|{fact.importance}]  {fact.text}{mark}")
        if page.next_cursor:
            print(f"next: --cursor {page.next_cursor}")
    return 0


def run_confirm(args: argparse.Namespace) -> int:
    from memory_service.services.container import build_services
    from memory_service.usecases.memories import ConfirmFact, confirm_fact
    from memory_service.usecases.rights import OPERATOR

    request = ConfirmFact(context_from(args), args.id, OPERATOR)
    services = build_services(settings_from(args))
    try:
        fact = confirm_fact(services.memories, request)
    finally:
        services.close()
    if args.json:
        print_json({**fact.to_dict(), "needs_verification": fact.needs_verification})
    else:
        print(f"confirmed  {fact.id}  {fact.text}")
    return 0
