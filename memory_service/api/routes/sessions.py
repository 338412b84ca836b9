"""Sessions (short-term memory): append messages, read the state, compact, end, delete,
search."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import Depends, Path, Query

from memory_service.api.deps import MemoriesDep, PrincipalDep, ServicesDep, user_context
from memory_service.api.responses import json_answer
from memory_service.api.routes import resource_router
from memory_service.api.schemas.common import Merged, SessionId, UserId
from memory_service.api.schemas.sessions import (
    AppendRequest,
    AppendResponse,
    CompactRequest,
    CompactResponse,
    EndRequest,
    SessionDeleted,
    SessionEnded,
    SessionList,
    SessionOut,
    SessionSearchRequest,
    SessionSearchResponse,
    ToolResultText,
)
from memory_service.domain.limits import MAX_TOOL_RESULT_REF_CHARS
from memory_service.services.container import Services
from memory_service.shortterm.compaction_base import CompactionResult
from memory_service.shortterm.session import ShortTermMemory
from memory_service.stores.usage import RECORD_ERRORS
from memory_service.usecases import sessions as cases

log = logging.getLogger(__name__)

router = resource_router("sessions")

UserQuery = Annotated[UserId, Query(description="the user whose session this is")]
SessionPath = Annotated[SessionId, Path(description="the session id")]


async def get_shortterm(services: ServicesDep) -> ShortTermMemory:
    return services.memories.sessions()


ShortTermDep = Annotated[ShortTermMemory, Depends(get_shortterm)]


def account_compaction(services: Services, tenant_id: str, result: CompactionResult | None):
    """A compaction's summary tokens go to the tenant's usage file, as a chat call's do."""
    if result is None or result.usage is None:
        return
    try:
        services.state.usage.record(tenant_id, tokens={"compaction": result.usage})
    except RECORD_ERRORS as exc:
        log.warning("could not record compaction usage for %s: %s", tenant_id, exc)


@router.post("/sessions/search", response_model=SessionSearchResponse)
def search_sessions(body: SessionSearchRequest, principal: PrincipalDep, memories: MemoriesDep):
    """Past messages of the user's sessions that share terms with the query (session logs)."""
    ctx = user_context(principal, body.user_id)
    hits = cases.search_sessions(memories, cases.SearchSessions(ctx, body.query, body.limit))
    return json_answer(SessionSearchResponse.model_validate({"hits": hits}))


@router.get("/sessions", response_model=SessionList)
def list_sessions(principal: PrincipalDep, memories: MemoriesDep, user_id: UserQuery):
    """The user's stored (unexpired) sessions, most recently updated first."""
    ctx = user_context(principal, user_id)
    return json_answer(SessionList.model_validate({"sessions": cases.list_sessions(memories, ctx)}))


@router.post("/sessions/{session_id}/messages", response_model=AppendResponse)
def append_messages(
    body: AppendRequest,
    session_id: SessionPath,
    principal: PrincipalDep,
    memory: ShortTermDep,
    services: ServicesDep,
):
    """Append messages (logged, big tool results evicted), then run the compaction check.
    Appending works without an LLM; compaction then reports ``reason: no_model``. With
    ``expected_version``, a session changed meanwhile answers 409 ``conflict``."""
    ctx = user_context(principal, body.user_id, session_id)
    result = memory.append(
        ctx,
        [m.to_msg() for m in body.messages],
        expected_version=body.expected_version,
        compact=body.compact,
    )
    account_compaction(services, ctx.tenant_id, result.compaction)
    return json_answer(AppendResponse.model_validate(Merged(result, session_id=session_id)))


@router.get("/sessions/{session_id}", response_model=SessionOut)
def get_session(
    session_id: SessionPath, principal: PrincipalDep, memories: MemoriesDep, user_id: UserQuery
):
    """The session's state; 404 for a session with nothing stored (never appended to,
    deleted or expired), as for DELETE."""
    state = cases.get_session(memories, user_context(principal, user_id), session_id)
    window = memories.sessions().context_window
    return json_answer(SessionOut.of(state, session_id=session_id, user_id=user_id, window=window))


@router.post("/sessions/{session_id}/compact", response_model=CompactResponse)
def compact_session(
    body: CompactRequest,
    session_id: SessionPath,
    principal: PrincipalDep,
    memory: ShortTermDep,
    services: ServicesDep,
):
    """Compact now (flush first). Needs an LLM for the summary policy (503 otherwise); a
    model failure leaves the session as it was."""
    ctx = user_context(principal, body.user_id, session_id)
    state, result = memory.compact(
        ctx, expected_version=body.expected_version, keep_last=body.keep_last
    )
    account_compaction(services, ctx.tenant_id, result)
    return json_answer(
        CompactResponse.model_validate(
            Merged(session_id=session_id, state=state, compaction=result)
        )
    )


@router.get("/sessions/{session_id}/tool-results", response_model=ToolResultText)
def read_tool_result(
    session_id: SessionPath,
    principal: PrincipalDep,
    memory: ShortTermDep,
    user_id: UserQuery,
    ref: Annotated[str, Query(min_length=1, max_length=MAX_TOOL_RESULT_REF_CHARS)],
    start_line: Annotated[int | None, Query(ge=1)] = None,
    end_line: Annotated[int | None, Query(ge=1)] = None,
):
    """The full text of an evicted tool result, or a 1-based inclusive line range of it."""
    ctx = user_context(principal, user_id, session_id)
    text = memory.read_tool_result(ctx, ref, start_line, end_line)
    return json_answer(ToolResultText(ref=ref, start_line=start_line, end_line=end_line, text=text))


@router.delete("/sessions/{session_id}", response_model=SessionDeleted)
def delete_session(
    session_id: SessionPath,
    principal: PrincipalDep,
    memory: ShortTermDep,
    user_id: UserQuery,
    include_log: Annotated[bool, Query(description="also delete the session's log")] = False,
):
    """Delete the session's state and evicted tool results (404 when there was nothing)."""
    ctx = user_context(principal, user_id, session_id)
    return json_answer(SessionDeleted.model_validate(memory.delete(ctx, include_log=include_log)))


@router.post("/sessions/{session_id}/end", response_model=SessionEnded)
def end_session(
    body: EndRequest,
    session_id: SessionPath,
    principal: PrincipalDep,
    memories: MemoriesDep,
):
    """End the session: flush its unflushed messages to long-term memory, then clear its
    state and evicted tool results (the log stays). 404 without a session; a failed flush
    (502 ``flush_failed``, no LLM: 503 ``llm_not_configured``) clears nothing. ``DELETE``
    discards a session without flushing it."""
    ctx = user_context(principal, body.user_id)
    flush, cleared = cases.end_session(memories, ctx, session_id)
    return json_answer(
        SessionEnded.model_validate(Merged(session_id=session_id, flush=flush, **cleared))
    )
