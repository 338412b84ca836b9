"""Whose sessions a fact's source may name: only the caller's own.

A ``Source`` names a session, or takes the fact's or the request's when it names none;
recorded through any entry point (``memories.record_facts``), that session must be one the
user has in short-term memory, however the source came by it. Sessions are stored per user,
so a session id of another user (or a made-up one) is not found under this user and is
refused (``unknown_session``, a 422) before anything is written: a fact never claims to come
from a conversation its user did not have, and a provenance link always opens a session that
exists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import Fact
from memory_service.shortterm.session import ShortTermMemory


def check_source_sessions(
    shortterm: ShortTermMemory | None,
    ctx: RuntimeContext,
    facts: Sequence[Fact],
    *,
    in_session: bool = False,
) -> None:
    """``InvalidInputError`` (``unknown_session``) when a fact's source would name a session
    that is not one of the user's stored sessions: its own, else (in the user's own memory,
    as ``Fact.stamped`` fills it) the fact's or ``ctx``'s. ``in_session``: the call is made
    from inside ``ctx``'s session (a harness turn's tool call), which is the user's by
    construction, even before its first message is stored."""
    named = {session_id for f in facts if (session_id := _source_session(f, ctx)) is not None}
    if in_session:
        named.discard(ctx.session_id)
    for session_id in sorted(named):
        if shortterm is None or shortterm.load(replace(ctx, session_id=session_id)).is_new:
            raise InvalidInputError(
                f"source session_id {session_id!r} is not a session of user {ctx.user_id!r}",
                code="unknown_session",
            )


def _source_session(fact: Fact, ctx: RuntimeContext) -> str | None:
    if fact.source is None:
        return None
    if fact.source.session_id is not None:
        return fact.source.session_id
    shared = (fact.scope or ctx.scope) != "user"  # a shared fact's source is given no session
    return None if shared else fact.session_id or ctx.session_id
