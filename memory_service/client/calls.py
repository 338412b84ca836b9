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
from memory_service.api.schemas.memories import (
    DeleteReceipt,
    FactIn,
    FactOut,
    FactPage,
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
    MessageIn,
    SessionDeleted,
    SessionList,
    SessionOut,
    SessionSearchRequest,
    SessionSearchResponse,
    ToolResultText,
)
from memory_service.api.schemas.transfer import ImportSummary
from memory_service.api.schemas.usage import UsageReport
from memory_service.api.schemas.users import EraseReceiptOut
from memory_service.config.retrieval import Mode
from memory_service.facts import FactKind

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


def _reads(model: type[T]) -> Callable[[Any], T]:
    return lambda response: model.model_validate(response.json())  # type: ignore[attr-defined]


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


def record(
    user_id: str,
    facts: Sequence[FactIn | str | Mapping[str, Any]],
    *,
    session_id: str | None = None,
) -> Call[RecordResponse]:
    """Record facts (text, or ``FactIn`` / its fields): created, duplicate or superseded."""
    body = RecordRequest(user_id=user_id, session_id=session_id, facts=[_fact(f) for f in facts])
    return Call("POST", "/v1/memories", _reads(RecordResponse), json=_body(body))


def search(
    user_id: str,
    query: str,
    *,
    top_k: int = 5,
    threshold: float = 0.0,
    mode: Mode = "hybrid",
) -> Call[SearchResponse]:
    """Recall the user's facts most related to ``query``."""
    body = SearchRequest(user_id=user_id, query=query, top_k=top_k, threshold=threshold, mode=mode)
    return Call("POST", "/v1/memories/search", _reads(SearchResponse), json=_body(body))


def get(user_id: str, memory_id: str) -> Call[FactOut]:
    """One fact by id (``NotFoundError`` when the user has none with it)."""
    path = f"/v1/memories/{_segment(memory_id)}"
    return Call("GET", path, _reads(FactOut), params={"user_id": user_id})


def list_memories(
    user_id: str,
    *,
    limit: int = 100,
    cursor: str | None = None,
    include_inactive: bool = False,
) -> Call[FactPage]:
    """A page of the user's facts, oldest first; ``next_cursor`` asks for the next."""
    params = _query(
        user_id=user_id,
        limit=limit,
        cursor=cursor,
        include_inactive=str(include_inactive).lower(),
    )
    return Call("GET", "/v1/memories", _reads(FactPage), params=params)


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


def delete(user_id: str, memory_id: str) -> Call[DeleteReceipt]:
    """Delete one fact, from the store and from MEMORY.md."""
    path = f"/v1/memories/{_segment(memory_id)}"
    return Call("DELETE", path, _reads(DeleteReceipt), params={"user_id": user_id})


def forget(user_id: str) -> Call[DeleteReceipt]:
    """Every long-term fact of the user, gone."""
    return Call("DELETE", f"/v1/users/{_segment(user_id)}/memories", _reads(DeleteReceipt))


def erase_user(user_id: str) -> Call[EraseReceiptOut]:
    """Everything the service keeps of the user, gone (admin key); the receipt."""
    return Call("DELETE", f"/v1/users/{_segment(user_id)}", _reads(EraseReceiptOut))


# -- sessions ---------------------------------------------------------------------------------


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


def get_session(user_id: str, session_id: str) -> Call[SessionOut]:
    path = f"/v1/sessions/{_segment(session_id)}"
    return Call("GET", path, _reads(SessionOut), params={"user_id": user_id})


def list_sessions(user_id: str) -> Call[SessionList]:
    return Call("GET", "/v1/sessions", _reads(SessionList), params={"user_id": user_id})


def compact(
    user_id: str,
    session_id: str,
    *,
    expected_version: int | None = None,
    keep_last: int | None = None,
) -> Call[CompactResponse]:
    body = CompactRequest(user_id=user_id, expected_version=expected_version, keep_last=keep_last)
    path = f"/v1/sessions/{_segment(session_id)}/compact"
    return Call("POST", path, _reads(CompactResponse), json=_body(body))


def delete_session(
    user_id: str, session_id: str, *, include_log: bool = False
) -> Call[SessionDeleted]:
    path = f"/v1/sessions/{_segment(session_id)}"
    params = {"user_id": user_id, "include_log": str(include_log).lower()}
    return Call("DELETE", path, _reads(SessionDeleted), params=params)


def search_sessions(user_id: str, query: str, *, limit: int = 10) -> Call[SessionSearchResponse]:
    """Past messages of the user's sessions that share terms with ``query``."""
    body = SessionSearchRequest(user_id=user_id, query=query, limit=limit)
    return Call("POST", "/v1/sessions/search", _reads(SessionSearchResponse), json=_body(body))


def read_tool_result(
    user_id: str,
    session_id: str,
    ref: str,
    *,
    start_line: int | None = None,
    end_line: int | None = None,
) -> Call[ToolResultText]:
    path = f"/v1/sessions/{_segment(session_id)}/tool-results"
    params = _query(user_id=user_id, ref=ref, start_line=start_line, end_line=end_line)
    return Call("GET", path, _reads(ToolResultText), params=params)


# -- chat, transfer, usage, maintenance -------------------------------------------------------


def chat(user_id: str, session_id: str, message: str) -> Call[ChatResponse]:
    """One agent call with memory in place (needs a configured LLM: 503 otherwise)."""
    body = ChatRequest(user_id=user_id, session_id=session_id, message=message)
    return Call("POST", "/v1/chat", _reads(ChatResponse), json=_body(body))


def export(user_id: str | None = None) -> Call[list[dict[str, Any]]]:
    """Every fact of the key's tenant (or of one user) as the export's JSON lines."""
    return Call("GET", "/v1/export", _lines, params=_query(user_id=user_id))


def import_lines(lines: Iterable[Mapping[str, Any]] | str | bytes) -> Call[ImportSummary]:
    """Record exported lines for the key's tenant (an admin key); all or nothing."""
    headers = {"Content-Type": NDJSON}
    content = _as_ndjson(lines)
    return Call("POST", "/v1/import", _reads(ImportSummary), content=content, headers=headers)


def usage() -> Call[UsageReport]:
    return Call("GET", "/v1/usage", _reads(UsageReport))


def run_maintenance(user_id: str | None = None, *, force: bool = False) -> Call[MaintenanceRun]:
    """Maintenance now (an admin key): one report per user."""
    body = MaintenanceRequest(user_id=user_id, force=force)
    return Call("POST", "/v1/maintenance/run", _reads(MaintenanceRun), json=_body(body))


def health() -> Call[Health]:
    return Call("GET", "/healthz", _reads(Health))
