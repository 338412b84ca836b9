"""Long-term memories: record, search, list, get, delete, forget."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request
from pydantic import ConfigDict

from memory_service.api.deps import MemoriesDep, PrincipalDep, user_context, writer_of
from memory_service.api.errors import ApiError
from memory_service.api.responses import json_answer
from memory_service.api.routes import resource_router
from memory_service.api.schemas.common import AgentId, UserId
from memory_service.api.schemas.memories import (
    FILTER_FIELDS,
    ConfirmRequest,
    DeleteReceipt,
    FactOut,
    FactPage,
    FilterIn,
    RecordRequest,
    RecordResponse,
    SearchRequest,
    SearchResponse,
    UpdateRequest,
)
from memory_service.domain.context import SCOPES, Scope
from memory_service.domain.fact_filter import FactFilter
from memory_service.domain.limits import MAX_CURSOR_CHARS, MAX_FACT_ID_CHARS, MAX_PAGE_SIZE
from memory_service.domain.redaction import total
from memory_service.usecases.memories import (
    ConfirmFact,
    DeleteFact,
    GetFact,
    ListFacts,
    RecordFacts,
    SearchFacts,
    UpdateFact,
    confirm_fact,
    delete_fact,
    forget_facts,
    get_fact,
    list_facts,
    record_facts,
    search_facts,
    update_fact,
)

router = resource_router("memories")

UserQuery = Annotated[UserId, Query(description="the user whose memories these are")]
UserPath = Annotated[UserId, Path(description="the user whose memories these are")]
AgentQuery = Annotated[AgentId | None, Query(description="the agent the call is made for")]
ScopeQuery = Annotated[
    Scope, Query(description="whose memory the fact is in: user (default), agent or tenant")
]


@router.post("/memories", response_model=RecordResponse)
def record_memories(body: RecordRequest, principal: PrincipalDep, memories: MemoriesDep):
    """Record facts. Idempotent: the same text twice is one fact (``duplicate``; a ``source``
    sent with it is attached when the stored fact has none, and a fact's first source is
    never replaced); a fact with the ``key`` of an active fact replaces it (``superseded``).
    All or nothing. Each fact goes to its ``scope``: the user's own, the agent's
    (``agent_id``) or the tenant's; the shared scopes need a curator or admin key (403
    otherwise, nothing written). A ``source`` says where the fact came from (its session must
    be the user's). Card numbers, IBANs, identity numbers and secrets are replaced by a
    placeholder before anything is stored (``redacted`` counts them), or refused (422
    ``sensitive_data``) under ``MEMORY_PRIVACY__REDACTION=refuse``."""
    ctx = user_context(principal, body.user_id, body.session_id, agent_id=body.agent_id)
    facts = tuple(f.to_fact(body.session_id) for f in body.facts)
    results = record_facts(memories, RecordFacts(ctx, facts, writer_of(principal)))
    redacted = total(r.redacted for r in results)
    return json_answer(RecordResponse.model_validate({"results": results, "redacted": redacted}))


@router.post("/memories/search", response_model=SearchResponse)
def search_memories(body: SearchRequest, principal: PrincipalDep, memories: MemoriesDep):
    """Recall the user's facts. ``hybrid`` (the default) runs BM25 and dense vectors and fuses
    them as the configured retrieval strategy says (by default: standardised scores summed,
    with session neighbours and date terms; ``rrf-plain`` is Reciprocal Rank Fusion);
    ``bm25`` or ``dense`` is one retriever's own ranking. Each hit carries its rank and score
    in each leg. ``scopes`` (default: user, agent when ``agent_id`` is given, tenant) are
    merged; on the same ``key`` the narrower scope's fact wins and the wider one is hidden.
    ``filter`` narrows every leg before top-k."""
    ctx = user_context(principal, body.user_id, agent_id=body.agent_id)
    search = SearchFacts(
        ctx,
        body.query,
        body.top_k,
        body.threshold,
        mode=body.mode,
        scopes=body.scopes,
        filter=body.fact_filter(),
    )
    recalls = search_facts(memories, search)
    return json_answer(SearchResponse.model_validate({"hits": recalls}))


LIST_PARAMETERS = frozenset(
    {"user_id", "agent_id", "scope", "limit", "cursor", "include_inactive", *FILTER_FIELDS}
)


class FilterQuery(FilterIn):
    """``FilterIn`` read from the query string, beside the list's own parameters."""

    model_config = ConfigDict(extra="ignore")


async def list_filter(request: Request, filter_in: Annotated[FilterQuery, Query()]) -> FactFilter:
    """The list filter from the query string (``kind`` and the tags repeat). An unknown
    parameter is refused, so a misspelt filter never silently lists everything."""
    unknown = sorted(set(request.query_params) - LIST_PARAMETERS)
    if unknown:
        raise ApiError(
            422,
            "invalid_filter",
            f"{unknown[0]}: unknown parameter (filters: {', '.join(FILTER_FIELDS)})",
        )
    return filter_in.to_filter()


@router.get("/memories", response_model=FactPage)
def list_memories(
    principal: PrincipalDep,
    memories: MemoriesDep,
    user_id: UserQuery,
    fact_filter: Annotated[FactFilter, Depends(list_filter)],
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 100,
    cursor: Annotated[str | None, Query(max_length=MAX_CURSOR_CHARS)] = None,
    include_inactive: bool = False,
    agent_id: AgentQuery = None,
    scope: Annotated[
        list[Scope] | None,
        Query(
            max_length=len(SCOPES),
            description="scopes to list (repeat the parameter); default: the user's own",
        ),
    ] = None,
):
    """A page of the user's facts (or those of the named ``scope``s, none hidden), oldest
    first; pass ``next_cursor`` back for the next. The filter parameters narrow it
    (``FilterIn``; ``kind``, ``tags_any`` and ``tags_all`` repeat); an expired fact is
    listed only with ``include_inactive``."""
    ctx = user_context(principal, user_id, agent_id=agent_id)
    listing = ListFacts(ctx, limit, cursor, include_inactive, scopes=scope, filter=fact_filter)
    page = list_facts(memories, listing)
    return json_answer(FactPage.model_validate(page))


@router.get("/memories/{memory_id}", response_model=FactOut)
def get_memory(
    principal: PrincipalDep,
    memories: MemoriesDep,
    memory_id: Annotated[str, Path(max_length=MAX_FACT_ID_CHARS)],
    user_id: UserQuery,
    agent_id: AgentQuery = None,
    scope: ScopeQuery = "user",
):
    ctx = user_context(principal, user_id, agent_id=agent_id)
    return json_answer(
        FactOut.model_validate(get_fact(memories, GetFact(ctx, memory_id, (scope,))))
    )


@router.patch("/memories/{memory_id}", response_model=FactOut)
def update_memory(
    body: UpdateRequest,
    principal: PrincipalDep,
    memories: MemoriesDep,
    memory_id: Annotated[str, Path(max_length=MAX_FACT_ID_CHARS)],
):
    """Change one fact's metadata (``kind``, ``importance``, ``confidence``, ``tags``,
    ``expires_at``): the fields sent replace the stored ones; its text and id stay."""
    ctx = user_context(principal, body.user_id)
    update = UpdateFact(ctx, memory_id, body.changes(), writer_of(principal))
    updated = update_fact(memories, update)
    return json_answer(FactOut.model_validate(updated))


@router.post("/memories/{memory_id}/confirm", response_model=FactOut)
def confirm_memory(
    body: ConfirmRequest,
    principal: PrincipalDep,
    memories: MemoriesDep,
    memory_id: Annotated[str, Path(max_length=MAX_FACT_ID_CHARS)],
):
    """Confirm one fact as still true: its ``updated_at`` becomes now, its confidence its
    initial one again, and it no longer needs verification. 404 for an id the user does not
    have (another user's or tenant's included), 409 ``not_active`` for a superseded or
    closed fact (record what is true instead); a shared scope's fact needs a curator or
    admin key."""
    ctx = user_context(principal, body.user_id, agent_id=body.agent_id).in_scope(body.scope)
    confirmed = confirm_fact(memories, ConfirmFact(ctx, memory_id, writer_of(principal)))
    return json_answer(FactOut.model_validate(confirmed))


@router.delete("/memories/{memory_id}", response_model=DeleteReceipt)
def delete_memory(
    principal: PrincipalDep,
    memories: MemoriesDep,
    memory_id: Annotated[str, Path(max_length=MAX_FACT_ID_CHARS)],
    user_id: UserQuery,
    agent_id: AgentQuery = None,
    scope: ScopeQuery = "user",
):
    """Delete one fact, from the store and from its scope's MEMORY.md (a shared scope's
    fact needs a curator or admin key)."""
    ctx = user_context(principal, user_id, agent_id=agent_id).in_scope(scope)
    deleted = delete_fact(memories, DeleteFact(ctx, memory_id, writer_of(principal)))
    return json_answer(DeleteReceipt(deleted=deleted))


@router.delete("/users/{user_id}/memories", response_model=DeleteReceipt)
def forget_memories(principal: PrincipalDep, memories: MemoriesDep, user_id: UserPath):
    """Every long-term fact of the user, gone: the store, MEMORY.md, its snapshots and
    archived ledgers. Facts only: the user's sessions, logs, tool results and dead letters
    stay; ``DELETE /v1/users/{user_id}`` (admin key) erases all of it."""
    return json_answer(
        DeleteReceipt(deleted=forget_facts(memories, user_context(principal, user_id)))
    )
