"""Whose sessions a fact's source may name: only the caller's own.

A ``Source`` names a session; recorded through the API or the CLI, that session must be the
request's own or one the user has in short-term memory. Sessions are stored per user, so a
session id of another user (or a made-up one) is not found under this user and is refused
(``unknown_session``, a 422) before anything is written: a fact never claims to come from a
conversation its user did not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from memory_service.context import RuntimeContext
from memory_service.errors import InvalidInputError
from memory_service.facts import Fact
from memory_service.shortterm.session import ShortTermMemory


def check_source_sessions(
    shortterm: ShortTermMemory | None, ctx: RuntimeContext, facts: Sequence[Fact]
) -> None:
    """``InvalidInputError`` (``unknown_session``) when a fact's source names a session that is
    neither ``ctx``'s nor one of the user's stored sessions."""
    named = {
        f.source.session_id
        for f in facts
        if f.source is not None and f.source.session_id is not None
    }
    named.discard(ctx.session_id)
    for session_id in sorted(named):
        if shortterm is None or shortterm.load(replace(ctx, session_id=session_id)).is_new:
            raise InvalidInputError(
                f"source session_id {session_id!r} is not a session of user {ctx.user_id!r}",
                code="unknown_session",
            )
