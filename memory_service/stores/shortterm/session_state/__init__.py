"""AgentStateStore: where session states live between calls (files or PostgreSQL).

The contract every backend keeps (one test suite proves it):

- ``load(ctx)`` returns the session's state, or a new empty one (version 0) when there is none
  or it has expired. The caller owns what it gets: changing it changes nothing stored.
- ``save(state, ctx)`` is optimistic: it succeeds only if the stored version is still
  ``state.version`` (0: nothing stored yet), then bumps ``state.version``. Otherwise it raises
  ``ConflictError`` and stores nothing: of two writers on one session exactly one wins.
- the key is (tenant, user, session): the same session id under two tenants or users is two
  states.
- a state unused for the store's TTL expires: it is no longer loaded or listed, and
  ``purge_expired`` deletes it, except those its ``keep`` callback (given the expired state,
  outside any lock) answers True for: short-term memory flushes an expired state's unflushed
  messages there first and keeps a state whose flush failed. A state saved again meanwhile is
  not deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, runtime_checkable

from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError

Clock = Callable[[], datetime]
# Called with each expired state before it is deleted: True keeps it (its flush failed).
KeepExpired = Callable[[RuntimeContext, AgentState], bool]


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A stored session, as listed (without its messages)."""

    session_id: str
    version: int
    updated_at: datetime
    expires_at: datetime | None
    message_count: int


@runtime_checkable
class AgentStateStore(Protocol):
    def load(self, ctx: RuntimeContext) -> AgentState: ...

    def save(self, state: AgentState, ctx: RuntimeContext) -> None: ...

    def remove(self, ctx: RuntimeContext) -> bool: ...

    def list_sessions(self, ctx: RuntimeContext) -> list[SessionInfo]: ...

    def purge_expired(self, keep: KeepExpired | None = None) -> int: ...

    def close(self) -> None: ...


def session_of(ctx: RuntimeContext) -> str:
    """The session id a store call is about; a context without one is a caller bug."""
    if ctx.session_id is None:
        raise InvalidInputError("this operation needs a session_id", code="missing_session_id")
    return ctx.session_id


def expiry(now: datetime, ttl: timedelta | None) -> datetime | None:
    return now + ttl if ttl is not None else None


def is_expired(expires_at: datetime | None, now: datetime) -> bool:
    return expires_at is not None and expires_at <= now


def saved_record(
    state: AgentState, ctx: RuntimeContext, now: datetime, ttl: timedelta | None
) -> dict[str, Any]:
    """What a key-value store keeps for ``state`` saved at ``now`` (its next version):
    ``{version, incarnation, updated_at, expires_at, state}``, times as ISO 8601."""
    new_version = state.version + 1
    body = state.to_dict()
    body["version"] = new_version
    body["session_id"] = ctx.session_id
    expires_at = expiry(now, ttl)
    return {
        "version": new_version,
        "incarnation": state.incarnation,
        "updated_at": now.isoformat(),
        "expires_at": expires_at.isoformat() if expires_at else None,
        "state": body,
    }


def conflict_message(ctx: RuntimeContext, expected: int) -> str:
    return (
        f"session {ctx.session_id!r} changed since it was loaded at version {expected}: "
        "reload it and apply the change again"
    )
