"""Typed bodies of the session (short-term memory) API. Limits live here, so OpenAPI shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field, model_validator

from memory_service.api.schemas import Strict, UserId, max_bytes
from memory_service.messages import Msg, ToolCall
from memory_service.shortterm.compaction import CompactionResult
from memory_service.shortterm.session_log import SessionHit
from memory_service.shortterm.state import AgentState
from memory_service.shortterm.store import SessionInfo

MAX_MESSAGES_PER_APPEND = 500
MAX_MESSAGE_BYTES = 1024 * 1024
MAX_TOOL_CALLS = 128


Content = Annotated[str, AfterValidator(max_bytes(MAX_MESSAGE_BYTES))]
ShortText = Annotated[str, Field(min_length=1, max_length=256)]


class FunctionCallIn(Strict):
    name: ShortText
    arguments: Annotated[str, AfterValidator(max_bytes(MAX_MESSAGE_BYTES))] = "{}"


class ToolCallIn(Strict):
    id: ShortText
    type: Literal["function"] = "function"
    function: FunctionCallIn


class MessageIn(Strict):
    """A message in OpenAI's chat format; ``mark: "hint"`` flags guidance for the model."""

    role: Literal["system", "user", "assistant", "tool"]
    content: Content | None = None
    tool_calls: Annotated[list[ToolCallIn], Field(max_length=MAX_TOOL_CALLS)] | None = None
    tool_call_id: ShortText | None = None
    name: Annotated[str, Field(max_length=256)] | None = None
    mark: Literal["hint"] | None = None
    metadata: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> MessageIn:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the 'tool_call_id' it answers")
        if self.role != "tool" and self.tool_call_id:
            raise ValueError("only tool messages carry a 'tool_call_id'")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry 'tool_calls'")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs 'content'")
        return self

    def to_msg(self) -> Msg:
        return Msg(
            role=self.role,
            content=self.content or "",
            mark=self.mark,
            metadata=dict(self.metadata or {}),
            tool_calls=tuple(
                ToolCall(c.id, c.function.name, c.function.arguments) for c in self.tool_calls or ()
            ),
            tool_call_id=self.tool_call_id,
            name=self.name,
        )


class AppendRequest(Strict):
    user_id: UserId
    messages: Annotated[list[MessageIn], Field(min_length=1, max_length=MAX_MESSAGES_PER_APPEND)]
    expected_version: Annotated[int, Field(ge=0)] | None = Field(
        None, description="fail with 409 unless the session is at this version (0: new)"
    )
    compact: bool = Field(True, description="run the compaction check after appending")


class CompactRequest(Strict):
    user_id: UserId
    expected_version: Annotated[int, Field(ge=0)] | None = None
    keep_last: Annotated[int, Field(ge=0, le=1000)] | None = None


class SessionSearchRequest(Strict):
    user_id: UserId
    query: Annotated[str, Field(min_length=1, max_length=4096)]
    limit: Annotated[int, Field(ge=1, le=100)] = 10


class MessageOut(BaseModel):
    seq: int | None
    role: str
    content: str
    mark: str | None
    metadata: dict[str, Any]
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @classmethod
    def of(cls, msg: Msg) -> MessageOut:
        return cls(
            seq=msg.seq,
            role=msg.role,
            content=msg.content,
            mark=msg.mark,
            metadata=dict(msg.metadata),
            tool_calls=[c.to_openai() for c in msg.tool_calls] or None,
            tool_call_id=msg.tool_call_id,
            name=msg.name,
        )


class ErrorOut(BaseModel):
    code: str
    message: str


class CompactionOut(BaseModel):
    """What compaction did; ``performed: false`` with ``reason`` says why not."""

    performed: bool
    reason: str
    removed: int
    kept: int
    tokens_before: int
    tokens_after: int
    usage: dict[str, int] | None
    error: ErrorOut | None
    flushed: bool
    flush_error: str | None

    @classmethod
    def of(cls, result: CompactionResult) -> CompactionOut:
        return cls.model_validate(result.to_dict())


class SessionOut(BaseModel):
    """A session's state, and ``context``: the messages exactly as the model is sent them."""

    session_id: str
    user_id: str
    version: int
    created_at: datetime
    updated_at: datetime
    message_count: int
    token_estimate: int
    context_window: int
    compaction_count: int
    next_seq: int
    last_flushed_index: int
    flags: dict[str, Any]
    summary: dict[str, str] | None
    plan: list[dict[str, Any]]
    tool_trail: list[dict[str, Any]]
    messages: list[MessageOut]
    context: list[dict[str, Any]]

    @classmethod
    def of(cls, state: AgentState, session_id: str, user_id: str, window: int) -> SessionOut:
        return cls(
            session_id=session_id,
            user_id=user_id,
            version=state.version,
            created_at=state.created_at,
            updated_at=state.updated_at,
            message_count=len(state.messages),
            token_estimate=state.token_estimate,
            context_window=window,
            compaction_count=state.compaction_count,
            next_seq=state.next_seq,
            last_flushed_index=state.last_flushed_index,
            flags=dict(state.flags),
            summary=state.summary,
            plan=[p.to_dict() for p in state.plan],
            tool_trail=[e.to_dict() for e in state.tool_trail],
            messages=[MessageOut.of(m) for m in state.messages],
            context=state.context_openai(),
        )


class AppendResponse(BaseModel):
    session_id: str
    version: int
    message_count: int
    token_estimate: int
    appended: list[MessageOut]
    evicted: list[str]
    compaction: CompactionOut | None


class CompactResponse(BaseModel):
    session_id: str
    version: int
    message_count: int
    token_estimate: int
    compaction: CompactionOut


class SessionDeleted(BaseModel):
    state: bool
    tool_results: int
    log: bool


class SessionInfoOut(BaseModel):
    session_id: str
    version: int
    updated_at: datetime
    expires_at: datetime | None
    message_count: int

    @classmethod
    def of(cls, info: SessionInfo) -> SessionInfoOut:
        return cls(
            session_id=info.session_id,
            version=info.version,
            updated_at=info.updated_at,
            expires_at=info.expires_at,
            message_count=info.message_count,
        )


class SessionList(BaseModel):
    sessions: list[SessionInfoOut]


class SessionHitOut(BaseModel):
    session_id: str
    seq: int | None
    at: datetime
    role: str
    snippet: str
    score: float

    @classmethod
    def of(cls, hit: SessionHit) -> SessionHitOut:
        return cls(
            session_id=hit.session_id,
            seq=hit.seq,
            at=hit.at,
            role=hit.role,
            snippet=hit.snippet,
            score=hit.score,
        )


class SessionSearchResponse(BaseModel):
    hits: list[SessionHitOut]


class ToolResultText(BaseModel):
    ref: str
    start_line: int | None
    end_line: int | None
    text: str
