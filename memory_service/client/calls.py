"""Every endpoint once: what to send (built and checked with the API's request models) and
which of the API's response models reads the answer. ``MemoryClient`` and
``AsyncMemoryClient`` are thin senders over these, so both say the same thing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

from pydantic import BaseModel

from memory_service.api.schemas.chat import ChatRequest, ChatResponse
from memory_service.api.schemas.common import Health
from memory_service.api.schemas.maintenance import MaintenanceRequest, MaintenanceRun
from memory_service.api.schemas.me import WhoAmI
from memory_service.api.schemas.memories import (
    ConfirmRequest,
    DeleteReceipt,
    FactIn,
    FactOut,
    FactPage,
    FilterIn,
    RecordRequest,
    RecordResponse,
    SearchRequest,
    SearchResponse,
    UpdateRequest,
)
from memory_service.api.schemas.sessions import (
    AppendRequest,
    AppendResponse,
    CompactRequest,
    CompactResponse,
    EndRequest,
    MessageIn,
    SessionDeleted,
    SessionEnded,
    SessionList,
    SessionOut,
    SessionSearchRequest,
    SessionSearchResponse,
    ToolResultText,
)
from memory_service.api.schemas.transfer import ImportSummary
from memory_service.api.schemas.usage import UsageReport
from memory_service.api.schemas.users import EraseReceiptOut, MemoryDocOut, UserList
from memory_service.config.retrieval import Mode
from memory_service.domain.context import Scope
from memory_service.domain.facts import FactKind

T = TypeVar("T")
Method = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
IDEMPOTENT: frozenset[str] = frozenset({"GET", "PUT", "DELETE"})
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer (``parse`` gets the ``httpx.Response``)."""

    method: Method
    path: str
    parse: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def idempotent(self) -> bool:
        return self.method in IDEMPOTENT


B = TypeVar("B", bound=Callable[..., Any])
OPERATIONS: dict[str, tuple[Method, str]] = {}  # builder name -> (method, path template)


def operation(method: Method, path: str) -> Callable[[B], B]:
    """Marks a builder as the client's one call of ``method path``: the operation of the
    OpenAPI document whose parameters it offers, under the API's own names (checked by
    ``tests/client/test_signatures.py`` against ``app.openapi()``)."""

    def mark(build: B) -> B:
        OPERATIONS[build.__name__] = (method, path)
        return build

    return mark


def _reads(model: type[T]) -> Callable[[Any], T]:
    return lambda response: model.model_validate_json(response.content)  # type: ignore[attr-defined]


def _body(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json", exclude_unset=True)


def _segment(value: str) -> str:
    return quote(value, safe="")  # an id is checked by the service; never a path of ours


def _query(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _fact(value: FactIn | str | Mapping[str, Any]) -> FactIn:
    if isinstance(value, FactIn):
        return value
    return FactIn(text=value) if isinstance(value, str) else FactIn.model_validate(value)


def _lines(response: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def _as_ndjson(lines: Iterable[Mapping[str, Any]] | str | bytes) -> bytes:
    if isinstance(lines, bytes):
        return lines
    if isinstance(lines, str):
        return lines.encode("utf-8")
    return "".join(json.dumps(dict(line), ensure_ascii=False) + "\n" for line in lines).encode()


# -- memories ---------------------------------------------------------------------------------


@operation("POST", "/v1/memories")
def record(
    user_id: str,
    facts: Sequence[FactIn | str | Mapping[str, Any]],
    *,
    session_id: str | None = None,
    agent_id: str | None = None,
) -> Call[RecordResponse]:
    """Record facts (text, or ``FactIn`` / its fields, ``scope`` among them): created,
    duplicate, superseded or merged (into a near-duplicate: ``merged_into``). ``agent_id``:
    the agent whose memory ``scope="agent"`` facts go to (a curator or admin key writes
    shared scopes)."""
    body = RecordRequest(
        user_id=user_id,
        session_id=session_id,
        agent_id=agent_id,
        facts=[_fact(f) for f in facts],
    )
    return Call("POST", "/v1/memories", _reads(RecordResponse), json=_body(body))


def _filter(value: FilterIn | Mapping[str, Any] | None) -> FilterIn | None:
    if value is None or isinstance(value, FilterIn):
        return value
    return FilterIn.model_validate(value)


@operation("POST", "/v1/memories/search")
def search(
    user_id: str,
    query: str,
    *,
    top_k: int = 5,
    threshold: float = 0.0,
    mode: Mode = "hybrid",
    filter: FilterIn | Mapping[str, Any] | None = None,  # noqa: A002 - the API's name
    agent_id: str | None = None,
    scopes: Sequence[Scope] | None = None,
) -> Call[SearchResponse]:
    """Recall the user's facts most related to ``query``: ``filter`` (``FilterIn`` or its
    fields: ``kind``, ``tags_any``, ``tags_all``, ``min_importance``, ``key``,
    ``created_after``, ``created_before``, ``as_of``) narrows every leg before top-k;
    ``threshold`` is the least dense cosine (-1 to 1) a memory must reach (hybrid: nothing is
    recalled unless one does);
    ``agent_id`` adds that agent's shared memory; ``scopes`` narrows what is read."""
    fields: dict[str, Any] = {"filter": _filter(filter), "agent_id": agent_id}
    if scopes is not None:
        fields["scopes"] = list(scopes)
    body = SearchRequest(
        user_id=user_id,
        query=query,
        top_k=top_k,
        threshold=threshold,
        mode=mode,
        **{k: v for k, v in fields.items() if v is not None},
    )
    return Call("POST", "/v1/memories/search", _reads(SearchResponse), json=_body(body))


def _addressed(user_id: str, agent_id: str | None, scope: Scope | None) -> dict[str, Any]:
    return _query(user_id=user_id, agent_id=agent_id, scope=scope)


@operation("GET", "/v1/memories/{memory_id}")
def get(
    user_id: str,
    memory_id: str,
    *,
    agent_id: str | None = None,
    scope: Scope | None = None,
) -> Call[FactOut]:
    """One fact by id (``NotFoundError`` when there is none); ``scope`` (``agent`` with
    ``agent_id``, or ``tenant``) addresses a shared fact."""
    path = f"/v1/memories/{_segment(memory_id)}"
    return Call("GET", path, _reads(FactOut), params=_addressed(user_id, agent_id, scope))


@operation("GET", "/v1/memories")
def list_memories(
    user_id: str,
    *,
    limit: int = 100,
    cursor: str | None = None,
    include_inactive: bool = False,
    agent_id: str | None = None,
    scope: Sequence[Scope] | None = None,
    kind: Sequence[FactKind] = (),
    tags_any: Sequence[str] = (),
    tags_all: Sequence[str] = (),
    min_importance: int | None = None,
    key: str | None = None,
    created_after: datetime | str | None = None,
    created_before: datetime | str | None = None,
    as_of: datetime | str | None = None,
    needs_verification: bool | None = None,
) -> Call[FactPage]:
    """A page of the user's facts (or those of the ``scope``s named), oldest first;
    ``next_cursor`` asks for the next. The filter fields are the search filter's."""
    given = {
        "needs_verification": needs_verification,
        "kind": list(kind),
        "tags_any": list(tags_any),
        "tags_all": list(tags_all),
        "min_importance": min_importance,
        "key": key,
        "created_after": created_after,
        "created_before": created_before,
        "as_of": as_of,
    }
    checked = FilterIn.model_validate({k: v for k, v in given.items() if v not in (None, [])})
    params = _query(
        user_id=user_id,
        limit=limit,
        cursor=cursor,
        include_inactive=str(include_inactive).lower(),
        agent_id=agent_id,
        scope=list(scope) if scope is not None else None,
        **checked.model_dump(mode="json", exclude_unset=True),
    )
    return Call("GET", "/v1/memories", _reads(FactPage), params=params)


@operation("PATCH", "/v1/memories/{memory_id}")
def update(
    user_id: str,
    memory_id: str,
    *,
    kind: FactKind | None = None,
    importance: int | None = None,
    confidence: float | None = None,
    tags: Sequence[str] | None = None,
    expires_at: datetime | None = None,
    clear_expiry: bool = False,
) -> Call[FactOut]:
    """Change one fact's metadata (the arguments given); text and id stay. ``clear_expiry``:
    it no longer expires."""
    given = {
        "kind": kind,
        "importance": importance,
        "confidence": confidence,
        "tags": list(tags) if tags is not None else None,
        "expires_at": expires_at,
    }
    fields = {name: value for name, value in given.items() if value is not None}
    if clear_expiry:
        fields["expires_at"] = None
    body = UpdateRequest(user_id=user_id, **fields)
    path = f"/v1/memories/{_segment(memory_id)}"
    return Call("PATCH", path, _reads(FactOut), json=_body(body))


@operation("POST", "/v1/memories/{memory_id}/confirm")
def confirm(
    user_id: str,
    memory_id: str,
    *,
    agent_id: str | None = None,
    scope: Scope | None = None,
) -> Call[FactOut]:
    """Confirm one fact as still true: its confidence is its initial one again and it no
    longer needs verification (``NotFoundError`` when there is none, ``ConflictError``
    ``not_active`` for a superseded or closed one)."""
    fields = {"agent_id": agent_id, "scope": scope}
    body = ConfirmRequest(user_id=user_id, **{k: v for k, v in fields.items() if v is not None})
    path = f"/v1/memories/{_segment(memory_id)}/confirm"
    return Call("POST", path, _reads(FactOut), json=_body(body))


@operation("DELETE", "/v1/memories/{memory_id}")
def delete(
    user_id: str,
    memory_id: str,
    *,
    agent_id: str | None = None,
    scope: Scope | None = None,
) -> Call[DeleteReceipt]:
    """Delete one fact, from the store and from its scope's MEMORY.md (a shared fact:
    ``scope`` and, for an agent's, ``agent_id``; needs a curator or admin key)."""
    path = f"/v1/memories/{_segment(memory_id)}"
    params = _addressed(user_id, agent_id, scope)
    return Call("DELETE", path, _reads(DeleteReceipt), params=params)


@operation("DELETE", "/v1/users/{user_id}/memories")
def forget(user_id: str) -> Call[DeleteReceipt]:
    """Every long-term fact of the user, gone."""
    return Call("DELETE", f"/v1/users/{_segment(user_id)}/memories", _reads(DeleteReceipt))


@operation("DELETE", "/v1/users/{user_id}")
def erase_user(user_id: str) -> Call[EraseReceiptOut]:
    """Everything the service keeps of the user, gone (admin key); the receipt."""
    return Call("DELETE", f"/v1/users/{_segment(user_id)}", _reads(EraseReceiptOut))


@operation("GET", "/v1/users")
def list_users() -> Call[UserList]:
    """The tenant's users with their fact counts, its agents with shared memory, and the
    tenant's own shared facts."""
    return Call("GET", "/v1/users", _reads(UserList))


@operation("GET", "/v1/users/{user_id}/memory-md")
def read_memory_md(
    user_id: str, *, agent_id: str | None = None, scope: Scope | None = None
) -> Call[MemoryDocOut]:
    """The user's consolidated MEMORY.md (or the agent's or tenant's, with ``scope``)."""
    path = f"/v1/users/{_segment(user_id)}/memory-md"
    return Call("GET", path, _reads(MemoryDocOut), params=_query(agent_id=agent_id, scope=scope))


@operation("GET", "/v1/me")
def me() -> Call[WhoAmI]:
    """Who the key is: tenant, role, fingerprint, and what its role may do."""
    return Call("GET", "/v1/me", _reads(WhoAmI))


# -- sessions ---------------------------------------------------------------------------------


@operation("POST", "/v1/sessions/{session_id}/messages")
def append(
    user_id: str,
    session_id: str,
    messages: Sequence[MessageIn | Mapping[str, Any]],
    *,
    expected_version: int | None = None,
    compact: bool = True,
) -> Call[AppendResponse]:
    """Append messages (OpenAI chat format) to a session, then the compaction check."""
    body = AppendRequest(
        user_id=user_id,
        messages=[m if isinstance(m, MessageIn) else MessageIn.model_validate(m) for m in messages],
        expected_version=expected_version,
        compact=compact,
    )
    path = f"/v1/sessions/{_segment(session_id)}/messages"
    return Call("POST", path, _reads(AppendResponse), json=_body(body))


@operation("GET", "/v1/sessions/{session_id}")
def get_session(user_id: str, session_id: str) -> Call[SessionOut]:
    """The session's state (messages, summary, version) and its context window as the model
    sees it (``NotFoundError`` for a session that does not exist or has expired)."""
    path = f"/v1/sessions/{_segment(session_id)}"
    return Call("GET", path, _reads(SessionOut), params={"user_id": user_id})


@operation("GET", "/v1/sessions")
def list_sessions(user_id: str) -> Call[SessionList]:
    """The user's live sessions, most recently saved first (no messages)."""
    return Call("GET", "/v1/sessions", _reads(SessionList), params={"user_id": user_id})


@operation("POST", "/v1/sessions/{session_id}/compact")
def compact(
    user_id: str,
    session_id: str,
    *,
    expected_version: int | None = None,
    keep_last: int | None = None,
) -> Call[CompactResponse]:
    """Summarise all but the latest ``keep_last`` messages now (the configured number when
    None; needs a configured LLM: 503 otherwise); ``expected_version`` makes it conditional
    (``ConflictError`` when the session moved on). The answer says what compaction did."""
    body = CompactRequest(user_id=user_id, expected_version=expected_version, keep_last=keep_last)
    path = f"/v1/sessions/{_segment(session_id)}/compact"
    return Call("POST", path, _reads(CompactResponse), json=_body(body))


@operation("POST", "/v1/sessions/{session_id}/end")
def end_session(user_id: str, session_id: str) -> Call[SessionEnded]:
    """End the session: archive its messages as events (``MEMORY_MEMORY__SESSION_ARCHIVE``)
    and flush what is unflushed into long-term memory, then clear its state and tool results
    (the log stays); the answer has the flush's and the archive's outcome."""
    path = f"/v1/sessions/{_segment(session_id)}/end"
    return Call("POST", path, _reads(SessionEnded), json=_body(EndRequest(user_id=user_id)))


@operation("DELETE", "/v1/sessions/{session_id}")
def delete_session(
    user_id: str, session_id: str, *, include_log: bool = False
) -> Call[SessionDeleted]:
    """Discard the session's state and evicted tool results without flushing them, and its
    log too with ``include_log``; the answer says what went."""
    path = f"/v1/sessions/{_segment(session_id)}"
    params = {"user_id": user_id, "include_log": str(include_log).lower()}
    return Call("DELETE", path, _reads(SessionDeleted), params=params)


@operation("POST", "/v1/sessions/search")
def search_sessions(user_id: str, query: str, *, limit: int = 10) -> Call[SessionSearchResponse]:
    """Past messages of the user's sessions that share terms with ``query``."""
    body = SessionSearchRequest(user_id=user_id, query=query, limit=limit)
    return Call("POST", "/v1/sessions/search", _reads(SessionSearchResponse), json=_body(body))


@operation("GET", "/v1/sessions/{session_id}/tool-results")
def read_tool_result(
    user_id: str,
    session_id: str,
    ref: str,
    *,
    start_line: int | None = None,
    end_line: int | None = None,
) -> Call[ToolResultText]:
    """An evicted tool result by the reference its preview names, whole or its lines
    ``start_line..end_line`` (1-based, inclusive); only through its own session
    (``InvalidRequestError`` ``path_outside_session`` otherwise)."""
    path = f"/v1/sessions/{_segment(session_id)}/tool-results"
    params = _query(user_id=user_id, ref=ref, start_line=start_line, end_line=end_line)
    return Call("GET", path, _reads(ToolResultText), params=params)


# -- chat, transfer, usage, maintenance -------------------------------------------------------


@operation("POST", "/v1/chat")
def chat(
    user_id: str, session_id: str, message: str, *, agent_id: str | None = None
) -> Call[ChatResponse]:
    """One agent call with memory in place (needs a configured LLM: 503 otherwise);
    ``agent_id``: the agent answering, whose shared memory is recalled too."""
    fields = {"agent_id": agent_id} if agent_id is not None else {}
    body = ChatRequest(user_id=user_id, session_id=session_id, message=message, **fields)
    return Call("POST", "/v1/chat", _reads(ChatResponse), json=_body(body))


@operation("GET", "/v1/export")
def export(user_id: str | None = None) -> Call[list[dict[str, Any]]]:
    """Every fact of the key's tenant (or of one user) as the export's JSON lines."""
    return Call("GET", "/v1/export", _lines, params=_query(user_id=user_id))


@operation("GET", "/v1/users/{user_id}/export")
def export_user(user_id: str) -> Call[list[dict[str, Any]]]:
    """One user's own facts as the export's JSON lines (a personal key: its own user only)."""
    return Call("GET", f"/v1/users/{_segment(user_id)}/export", _lines)


@operation("POST", "/v1/import")
def import_lines(lines: Iterable[Mapping[str, Any]] | str | bytes) -> Call[ImportSummary]:
    """Record exported lines for the key's tenant (an admin key; a personal key: its own
    user's lines); all or nothing."""
    headers = {"Content-Type": NDJSON}
    content = _as_ndjson(lines)
    return Call("POST", "/v1/import", _reads(ImportSummary), content=content, headers=headers)


@operation("GET", "/v1/usage")
def usage() -> Call[UsageReport]:
    """The key's tenant's LLM token usage by purpose (chat, flush, compaction,
    consolidation) and its pipeline counters (a personal key: ``PermissionDeniedError``)."""
    return Call("GET", "/v1/usage", _reads(UsageReport))


@operation("POST", "/v1/maintenance/run")
def run_maintenance(user_id: str | None = None, *, force: bool = False) -> Call[MaintenanceRun]:
    """Maintenance now (an admin key): one report per user."""
    body = MaintenanceRequest(user_id=user_id, force=force)
    return Call("POST", "/v1/maintenance/run", _reads(MaintenanceRun), json=_body(body))


@operation("GET", "/healthz")
def health() -> Call[Health]:
    """Liveness (no key needed): ``status``, the backends in use and the version."""
    return Call("GET", "/healthz", _reads(Health))


@operation("GET", "/metrics")
def metrics() -> Call[str]:
    """The Prometheus metrics as text (a key is sent, as ``METRICS_REQUIRE_KEY`` may ask)."""
    return Call("GET", "/metrics", lambda response: response.text)
