"""Short-term memory's use cases: search the user's past messages, list the sessions, read
one, end one. Without short-term memory each is 503 ``unavailable`` (``Memories.sessions``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.queries import check_query
from memory_service.shortterm.flush_callback import FlushOutcome
from memory_service.stores.shortterm.session_logs import SessionHit
from memory_service.stores.shortterm.session_state import SessionInfo
from memory_service.usecases.base import Memories


@dataclass(frozen=True, slots=True)
class SearchSessions:
    """Past messages of the user's sessions sharing terms with ``query`` (the one query
    rule: ``invalid_query``, ``query_too_large``), at most ``limit``."""

    ctx: RuntimeContext
    query: str
    limit: int = 10

    def __post_init__(self) -> None:
        check_query(self.query)


def search_sessions(memories: Memories, request: SearchSessions) -> list[SessionHit]:
    return memories.sessions().search(request.ctx, request.query, limit=request.limit)


def list_sessions(memories: Memories, ctx: RuntimeContext) -> list[SessionInfo]:
    """The user's stored sessions, most recently updated first."""
    return memories.sessions().list_sessions(ctx)


def get_session(memories: Memories, ctx: RuntimeContext, session_id: str) -> AgentState:
    """The session's stored state, or ``NotFoundError``."""
    return memories.sessions().get(replace(ctx, session_id=session_id))


def end_session(
    memories: Memories, ctx: RuntimeContext, session_id: str
) -> tuple[FlushOutcome | None, dict]:
    """Archive and/or flush the session, then clear it (``ShortTermMemory.end``)."""
    return memories.sessions().end(replace(ctx, session_id=session_id))
