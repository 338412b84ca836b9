"""The MCP tools: their argument models (the HTTP API's own, less ``user_id``), their result
models (the API's responses) and what each runs on ``Services``.

Every argument a tool's schema offers reaches the service, as the matching HTTP route passes
it (``test_mcp_arguments`` checks each property of each schema). A tool returns its value
raw; the server validates it against ``McpTool.result``.

The user is not an argument of a user key's tools: it is the connection's (``Caller``), so a
model steered by a prompt cannot read another user's memory. An admin key's tools take an
optional ``user_id`` (``arguments_for``). The tenant is never an argument.

The keyed tools (``memory_extract``, ``memory_recall``, ``memory_consolidate``,
``memory_prune``) are the chat harness's own (``tools.memory_tools``): the same arguments, the
same checks and codes (``ToolArguments.parse``) and the same text answers; like
``memory_save`` they act on the caller's own memory only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model

from memory_service.api.schemas.common import AgentId, Merged, SessionId, Strict, UserId
from memory_service.api.schemas.memories import (
    DeleteReceipt,
    FactIn,
    FactOut,
    FactPage,
    RecordResultOut,
    SearchRequest,
    SearchResponse,
    UpdateRequest,
)
from memory_service.api.schemas.sessions import (
    SessionEnded,
    SessionList,
    SessionOut,
    SessionSearchRequest,
    SessionSearchResponse,
)
from memory_service.domain.context import RuntimeContext
from memory_service.domain.limits import MAX_CURSOR_CHARS, MAX_FACT_ID_CHARS, MAX_PAGE_SIZE
from memory_service.domain.messages import MEMORY_GET, MEMORY_SAVE, MEMORY_SEARCH, SESSION_SEARCH
from memory_service.services.container import Services
from memory_service.services.work import build_maintenance
from memory_service.tools.arguments import (
    MemoryConsolidateArgs,
    MemoryExtractArgs,
    MemoryGetArgs,
    MemoryPruneArgs,
    MemoryRecallArgs,
    ToolArguments,
)
from memory_service.tools.memory_tools import MemoryTools
from memory_service.usecases import memories, sessions
from memory_service.usecases.rights import MODEL

MEMORY_DELETE = "memory_delete"
MEMORY_UPDATE = "memory_update"
MEMORY_CONFIRM = "memory_confirm"
MEMORY_LIST = "memory_list"
MEMORY_READ = "memory_read"
SESSION_LIST = "session_list"
SESSION_GET = "session_get"
SESSION_END = "session_end"

FactId = Annotated[str, Field(min_length=1, max_length=MAX_FACT_ID_CHARS, description="a fact id")]


def _without_user(model: type[BaseModel], name: str, **more: tuple[Any, Any]) -> type[BaseModel]:
    """``model``'s fields less ``user_id`` (and ``more`` first): the same types, limits and
    checks as the API."""
    fields: dict[str, Any] = {
        field: (info.annotation, info)
        for field, info in model.model_fields.items()
        if field != "user_id"
    }
    return create_model(name, __base__=Strict, __doc__=model.__doc__, **more, **fields)


class MemoryIdRequest(Strict):
    id: FactId


class MemoryGetRequest(MemoryIdRequest):
    """An id as ``memory_search`` returns it, read from the scopes that search reads by
    default: the user's, the agent's (``agent_id``, as the search named it) and the
    tenant's."""

    agent_id: AgentId | None = None


class MemorySaveRequest(FactIn):
    """One fact, as ``POST /v1/memories`` takes it, and the session it came from. Always the
    user's own: shared (agent, tenant) memory is written over HTTP with a curator key."""

    session_id: SessionId | None = None
    scope: Literal["user"] = "user"


class MemoryListRequest(Strict):
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE_SIZE)] = 100
    cursor: Annotated[str, Field(max_length=MAX_CURSOR_CHARS)] | None = None
    include_inactive: bool = False


class NoArguments(Strict):
    pass


class SessionGetRequest(Strict):
    session_id: SessionId


class MemoryReadRequest(MemoryGetArgs):
    """The harness's ``memory_get`` arguments: a memory file's path and a line range."""


class MemoryExtractRequest(MemoryExtractArgs):
    """The harness's ``memory_extract`` arguments: a key, a fact, its importance and kind."""


class MemoryRecallRequest(MemoryRecallArgs):
    """The harness's ``memory_recall`` arguments: a key, or a key prefix."""


class MemoryConsolidateRequest(MemoryConsolidateArgs):
    """The harness's ``memory_consolidate`` arguments: fragments' keys, the insight's key and
    text, all three or none (none: rewrite MEMORY.md)."""


class MemoryPruneRequest(MemoryPruneArgs):
    """The harness's ``memory_prune`` arguments: ids, or else expiry and an importance."""


MemorySearchRequest = _without_user(SearchRequest, "MemorySearchRequest")
SessionSearchToolRequest = _without_user(SessionSearchRequest, "SessionSearchRequest")
MemoryUpdateRequest = _without_user(UpdateRequest, "MemoryUpdateRequest", id=(FactId, ...))

Run = Callable[[Services, RuntimeContext, Any], Any]  # a value of ``result``, or text


@dataclass(frozen=True, slots=True)
class McpTool:
    name: str
    description: str
    arguments: type[BaseModel]  # never with user_id: see ``arguments_for``
    result: type[BaseModel] | None  # None: the result is text
    run: Run
    read_only: bool = True
    needs_sessions: bool = False


def _search(services: Services, ctx: RuntimeContext, args: Any) -> Any:
    """As ``POST /v1/memories/search``."""
    ctx = replace(ctx, agent_id=args.agent_id) if args.agent_id else ctx
    fact_filter = args.filter.to_filter() if args.filter is not None else None
    search = memories.SearchFacts(
        ctx,
        args.query,
        args.top_k,
        args.threshold,
        mode=args.mode,
        scopes=args.scopes,
        filter=fact_filter,
    )
    return {"hits": memories.search_facts(services.memories, search)}


def _get(services: Services, ctx: RuntimeContext, args: MemoryGetRequest) -> Any:
    """The narrowest scope holding the id (a fact's id names its owner: at most one does)."""
    ctx = replace(ctx, agent_id=args.agent_id) if args.agent_id else ctx
    return memories.get_fact(services.memories, memories.GetFact(ctx, args.id))


def _save(services: Services, ctx: RuntimeContext, args: MemorySaveRequest) -> Any:
    """As ``POST /v1/memories`` with one fact: the session is the call's, and a source may
    name only the user's own sessions."""
    ctx = replace(ctx, session_id=args.session_id)
    fact_in = FactIn.model_validate(args.model_dump(include=set(FactIn.model_fields)))
    record = memories.RecordFacts(ctx, (fact_in.to_fact(args.session_id),), MODEL)
    return memories.record_facts(services.memories, record)[0]


def _update(services: Services, ctx: RuntimeContext, args: Any) -> Any:
    changes = args.model_dump(exclude_unset=True, exclude={"id", "user_id"})
    update = memories.UpdateFact(ctx, args.id, changes, MODEL)
    return memories.update_fact(services.memories, update)


def _confirm(services: Services, ctx: RuntimeContext, args: MemoryIdRequest) -> Any:
    """As ``POST /v1/memories/{id}/confirm`` for the user's own fact."""
    confirm = memories.ConfirmFact(ctx, args.id, MODEL)
    return memories.confirm_fact(services.memories, confirm)


def _delete(services: Services, ctx: RuntimeContext, args: MemoryIdRequest) -> Any:
    deleted = memories.delete_fact(services.memories, memories.DeleteFact(ctx, args.id, MODEL))
    return {"deleted": deleted}


def _list(services: Services, ctx: RuntimeContext, args: MemoryListRequest) -> Any:
    listing = memories.ListFacts(ctx, args.limit, args.cursor, args.include_inactive)
    return memories.list_facts(services.memories, listing)


def _read(services: Services, ctx: RuntimeContext, args: MemoryReadRequest) -> str:
    workspace, docs = services.settings.workspace, services.memory_docs
    tools = MemoryTools(workspace, services.longterm, services.shortterm, docs=docs)
    return tools.memory_get(ctx, args.path, args.start_line, args.end_line)


def _keyed(services: Services) -> MemoryTools:
    """The harness's memory tools over ``services``, with maintenance (consolidate, prune)."""
    workspace, docs = services.settings.workspace, services.memory_docs
    maintenance = build_maintenance(services)
    return MemoryTools(
        workspace, services.longterm, services.shortterm, maintenance=maintenance, docs=docs
    )


def _extract(services: Services, ctx: RuntimeContext, args: MemoryExtractRequest) -> str:
    return _keyed(services).memory_extract(ctx, args.key, args.text, args.importance, args.kind)


def _recall(services: Services, ctx: RuntimeContext, args: MemoryRecallRequest) -> str:
    return _keyed(services).memory_recall(ctx, args.key, args.prefix)


def _consolidate(services: Services, ctx: RuntimeContext, args: MemoryConsolidateRequest) -> str:
    keys = list(args.keys_to_merge) if args.keys_to_merge is not None else None
    return _keyed(services).memory_consolidate(ctx, keys, args.new_key, args.text)


def _prune(services: Services, ctx: RuntimeContext, args: MemoryPruneRequest) -> str:
    ids = list(args.ids) if args.ids is not None else None
    return _keyed(services).memory_prune(ctx, args.dry_run, args.max_importance, ids)


def _session_search(services: Services, ctx: RuntimeContext, args: Any) -> Any:
    search = sessions.SearchSessions(ctx, args.query, args.limit)
    return {"hits": sessions.search_sessions(services.memories, search)}


def _session_list(services: Services, ctx: RuntimeContext, _: NoArguments) -> Any:
    return {"sessions": sessions.list_sessions(services.memories, ctx)}


def _session_get(services: Services, ctx: RuntimeContext, args: SessionGetRequest) -> Any:
    state = sessions.get_session(services.memories, ctx, args.session_id)
    return Merged(
        state,
        context=state.context_openai(),
        session_id=args.session_id,
        user_id=ctx.user_id,
        context_window=services.memories.sessions().context_window,
    )


def _session_end(services: Services, ctx: RuntimeContext, args: SessionGetRequest) -> Any:
    """As ``POST /v1/sessions/{id}/end``: archive and/or flush, then clear."""
    flush, cleared = sessions.end_session(services.memories, ctx, args.session_id)
    return Merged(session_id=args.session_id, flush=flush, **cleared)


TOOLS: tuple[McpTool, ...] = (
    McpTool(
        MEMORY_SEARCH,
        "Recall the user's long-term memories most related to a query (hybrid BM25 + dense "
        "search); each hit has its id, text, fused score and each retriever's rank.",
        MemorySearchRequest,
        SearchResponse,
        _search,
    ),
    McpTool(
        MEMORY_GET,
        "One stored memory by its id, as memory_search or memory_list return it: the "
        "user's own or a shared one (pass the agent_id the search was given for the "
        "agent's).",
        MemoryGetRequest,
        FactOut,
        _get,
    ),
    McpTool(
        MEMORY_SAVE,
        "Remember one durable fact about the user (a stable fact, preference, decision or "
        "commitment) as one self-contained sentence. Saving the same text twice is one "
        "memory; a fact with the key of an older one replaces it.",
        MemorySaveRequest,
        RecordResultOut,
        _save,
        read_only=False,
    ),
    McpTool(
        MEMORY_UPDATE,
        "Change the metadata of one of the user's own memories by its id: kind, importance, "
        "confidence, tags or expires_at (null: never expires). Its text stays: save a new "
        "fact for new text.",
        MemoryUpdateRequest,
        FactOut,
        _update,
        read_only=False,
    ),
    McpTool(
        MEMORY_CONFIRM,
        "Confirm one of the user's own memories as still true by its id (one that "
        "needs_verification, after the user said so): its confidence is its initial one "
        "again. A superseded memory cannot be confirmed: save what is true instead.",
        MemoryIdRequest,
        FactOut,
        _confirm,
        read_only=False,
    ),
    McpTool(
        MEMORY_DELETE,
        "Delete one of the user's own memories by its id, from the store and from the "
        "user's MEMORY.md.",
        MemoryIdRequest,
        DeleteReceipt,
        _delete,
        read_only=False,
    ),
    McpTool(
        MEMORY_LIST,
        "A page of the user's memories, oldest first; pass next_cursor back for the next page.",
        MemoryListRequest,
        FactPage,
        _list,
    ),
    McpTool(
        MEMORY_READ,
        "Read lines of one of the user's memory files: MEMORY.md or memory/YYYY-MM-DD.md "
        "(relative paths only).",
        MemoryReadRequest,
        None,
        _read,
    ),
    McpTool(
        MemoryExtractArgs.tool,
        MemoryExtractArgs.description,
        MemoryExtractRequest,
        None,
        _extract,
        read_only=False,
    ),
    McpTool(
        MemoryRecallArgs.tool,
        MemoryRecallArgs.description,
        MemoryRecallRequest,
        None,
        _recall,
    ),
    McpTool(
        MemoryConsolidateArgs.tool,
        MemoryConsolidateArgs.description,
        MemoryConsolidateRequest,
        None,
        _consolidate,
        read_only=False,
    ),
    McpTool(
        MemoryPruneArgs.tool,
        MemoryPruneArgs.description,
        MemoryPruneRequest,
        None,
        _prune,
        read_only=False,
    ),
    McpTool(
        SESSION_SEARCH,
        "Find messages said in the user's past sessions (verbatim history, not curated memory).",
        SessionSearchToolRequest,
        SessionSearchResponse,
        _session_search,
        needs_sessions=True,
    ),
    McpTool(
        SESSION_LIST,
        "The user's stored sessions, most recently updated first.",
        NoArguments,
        SessionList,
        _session_list,
        needs_sessions=True,
    ),
    McpTool(
        SESSION_GET,
        "One session's state: its messages, summary and the context the model is sent.",
        SessionGetRequest,
        SessionOut,
        _session_get,
        needs_sessions=True,
    ),
    McpTool(
        SESSION_END,
        "End one of the user's sessions: its messages are archived as events when the "
        "service's session archive setting says so (no LLM needed), what it has not yet "
        "flushed is extracted into long-term memory by the service's LLM when there is one, "
        "then the session is cleared.",
        SessionGetRequest,
        SessionEnded,
        _session_end,
        read_only=False,
        needs_sessions=True,
    ),
)


def available(services: Services) -> dict[str, McpTool]:
    """The tools this service offers: the session tools only with short-term memory."""
    return {t.name: t for t in TOOLS if services.shortterm is not None or not t.needs_sessions}


_ADMIN_MODELS: dict[str, type[BaseModel]] = {}


def validate_arguments(tool: McpTool, may_choose_user: bool, sent: dict[str, Any]) -> Any:
    """The call's arguments, validated by the caller's model: a harness tool's refusal is
    its ``InvalidInputError`` with the harness's code (one mistake, one code), any other's
    pydantic's ``ValidationError``."""
    model = arguments_for(tool, may_choose_user)
    if issubclass(model, ToolArguments):
        return model.parse(sent)
    return model.model_validate(sent)


def arguments_for(tool: McpTool, may_choose_user: bool) -> type[BaseModel]:
    """The tool's arguments for this caller: an admin key's also take ``user_id``."""
    if not may_choose_user:
        return tool.arguments
    if tool.name not in _ADMIN_MODELS:
        _ADMIN_MODELS[tool.name] = create_model(
            f"{tool.arguments.__name__}ForAdmin",
            __base__=tool.arguments,
            user_id=(
                UserId | None,
                Field(None, description="another user of the key's tenant (admin keys only)"),
            ),
        )
    return _ADMIN_MODELS[tool.name]
