"""``memory-service end-session``: end one session of a workspace, as
``POST /v1/sessions/{id}/end`` does: its messages are archived as events when
``MEMORY_MEMORY__SESSION_ARCHIVE`` says so (no LLM needed), its unflushed messages are flushed
into long-term memory (the configured LLM), then its state and evicted tool results are
cleared (the log stays). A failed flush, or no LLM and no archive for a session with unflushed
messages, is one error line and exit 2, and the session is left as it was."""

from __future__ import annotations

import argparse

from memory_service.commands.common import print_json, settings_from
from memory_service.domain.context import RuntimeContext


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "end-session",
        help="end a session: archive its messages and/or flush them into long-term memory, "
        "then clear it",
    )
    parser.add_argument("session", help="the session id")
    parser.add_argument("--tenant", default="default", help="the user's tenant id")
    parser.add_argument("--user", required=True, help="the user whose session it is")
    parser.add_argument("--workspace", help="workspace folder")
    parser.add_argument("--json", action="store_true", help="print the outcome as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from memory_service.services.container import build_services
    from memory_service.usecases.sessions import end_session

    ctx = RuntimeContext(args.tenant, args.user, args.session)  # a bad id fails before work
    services = build_services(settings_from(args))
    try:
        flush, cleared = end_session(services.memories, ctx, args.session)
    finally:
        services.close()
    flushed = (
        {"status": flush.status, "facts_created": flush.facts_created}
        if flush is not None
        else None
    )
    if args.json:
        print_json({"session_id": args.session, "flush": flushed, **cleared})
        return 0
    said = (
        f"flushed ({flush.status}, {flush.facts_created} facts created)"
        if flush is not None
        else "nothing to flush"
    )
    if (archived := cleared.get("archive")) is not None:
        said = f"{archived['recorded']} messages archived as events; {said}"
    print(f"ended session {args.session} of {args.tenant}/{args.user}: {said}; cleared")
    return 0
