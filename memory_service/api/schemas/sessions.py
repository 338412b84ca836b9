"""Bodies of the session (short-term memory) routes: append, read, compact, list, search."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasPath,
    BaseModel,
    BeforeValidator,
    Field,
    PlainSerializer,
    WithJsonSchema,
    model_validator,
)

from memory_service.api.schemas.common import (
    ErrorOut,
    Merged,
    Out,
    Strict,
    TokenUsage,
    UserId,
    coded,
    max_bytes,
    no_nul,
)
from memory_service.domain.agent_state import AgentState
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.limits import (
    MAX_KEEP_LAST,
    MAX_MESSAGES_PER_APPEND,
    MAX_NAME_CHARS,
    MAX_QUERY_BYTES,
    MAX_SESSION_HITS,
    MAX_SESSION_MESSAGE_BYTES,
    MAX_TOOL_CALLS,
)
from memory_service.domain.messages import Msg, ToolCall, check_message, content_text

# NUL is refused in every text of a message, as ``Msg`` refuses it (and facts do).
NoNul = AfterValidator(no_nul("text"))
Content = Annotated[
    str, AfterValidator(max_bytes(MAX_SESSION_MESSAGE_BYTES, "message_too_large")), NoNul
]
ShortText = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS), NoNul]
Name = Annotated[str, Field(max_length=MAX_NAME_CHARS), NoNul]


def _count(value: Any) -> Any:
    return value if isinstance(value, int) else len(value)


Count = Annotated[int, BeforeValidator(_count)]  # read from the sequence it counts (or JSON)
# The state's own times (tool trail) keep Python's ISO form, "+00:00" and not "Z".
IsoTime = Annotated[datetime, PlainSerializer(datetime.isoformat, return_type=str)]

# -- requests --------------------------------------------------------------------------------


class FunctionCallIn(Strict):
    name: ShortText
    arguments: Content = "{}"


class ToolCallIn(Strict):
    id: ShortText
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ContentPartIn(BaseModel):
    """One part of an OpenAI content array: a ``text`` part (or an assistant's ``refusal``).
    A part of any other type (``image_url``, ``input_audio``, ``file``) is refused: memory
    keeps text, and never drops part of what was said."""

    type: Literal["text", "refusal"]
    text: str | None = None
    refusal: str | None = None


def _joined_parts(value: Any) -> Any:
    """A content array as the text it says (``messages.content_text``: parts joined with
    newlines); a string or null as it is."""
    if not isinstance(value, list):
        return value
    try:
        return content_text(value)
    except InvalidInputError as exc:
        raise coded(exc) from None


# Validated as text once the parts are joined; documented as OpenAI sends it.
_CONTENT_SCHEMA = WithJsonSchema(
    {
        "anyOf": [
            {"type": "string"},
            {"type": "array", "items": ContentPartIn.model_json_schema()},
            {"type": "null"},
        ],
        "description": "text, or an array of text parts (joined with newlines)",
    }
)


class MessageIn(Strict):
    """A message in OpenAI's chat format; ``mark: "hint"`` flags guidance for the model.
    ``content`` is a string or an array of text parts (stored joined with newlines)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: Annotated[Content | None, BeforeValidator(_joined_parts), _CONTENT_SCHEMA] = None
    tool_calls: Annotated[list[ToolCallIn], Field(max_length=MAX_TOOL_CALLS)] | None = None
    tool_call_id: ShortText | None = None
    name: Name | None = None
    mark: Literal["hint"] | None = None
    metadata: Annotated[dict[str, Any], NoNul] | None = None

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
        try:
            check_message(self.to_msg())  # the whole message, metadata included, as stored
        except InvalidInputError as exc:
            raise coded(exc) from None
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
    keep_last: Annotated[int, Field(ge=0, le=MAX_KEEP_LAST)] | None = None


class SessionSearchRequest(Strict):
    user_id: UserId
    query: Annotated[
        str,
        Field(
            description=f"words to find: text, at most {MAX_QUERY_BYTES} bytes of UTF-8",
            json_schema_extra={"minLength": 1},  # shown; the use case checks it (invalid_query)
        ),
    ]
    limit: Annotated[int, Field(ge=1, le=MAX_SESSION_HITS)] = 10


# -- responses -------------------------------------------------------------------------------


def _openai_calls(calls: Sequence[ToolCall | dict[str, Any]] | None) -> list[Any] | None:
    """A message's tool calls in OpenAI's shape; none: null."""
    return [c.to_openai() if isinstance(c, ToolCall) else c for c in calls or ()] or None


class MessageOut(Out):  # a messages.Msg
    """A stored message: ``seq`` is its place in the session's whole history."""

    seq: int | None
    role: str
    content: str
    mark: str | None
    metadata: dict[str, Any]
    tool_calls: Annotated[list[dict[str, Any]] | None, BeforeValidator(_openai_calls)] = None
    tool_call_id: str | None = None
    name: str | None = None


class CompactionOut(Out):  # a shortterm.compaction_base.CompactionResult
    """What compaction did; ``performed: false`` with ``reason`` says why not."""

    performed: bool
    reason: str
    removed: int
    kept: int
    tokens_before: int
    tokens_after: int
    usage: TokenUsage | None
    error: ErrorOut | None
    flushed: bool
    flush_error: str | None


class PlanItemOut(Out):  # an agent_state.PlanItem
    id: str
    text: str
    status: str


class ToolTrailOut(Out):  # an agent_state.ToolTrailEntry
    """A tool call the agent made, kept after compaction summarised its messages away."""

    call_id: str
    name: str
    arguments: str
    seq: int | None
    at: IsoTime
    result_chars: int | None
    result_ref: str | None


class SessionOut(Out):  # an agent_state.AgentState, with what the request adds
    """A session's state, and ``context``: the messages exactly as the model is sent them."""

    session_id: str
    user_id: str
    version: int
    created_at: datetime
    updated_at: datetime
    message_count: Count = Field(validation_alias="messages")
    token_estimate: int
    context_window: int
    compaction_count: int
    next_seq: int
    last_flushed_index: int
    flags: dict[str, Any]
    summary: dict[str, str] | None
    plan: list[PlanItemOut]
    tool_trail: list[ToolTrailOut]
    messages: list[MessageOut]
    context: list[dict[str, Any]]

    @classmethod
    def of(cls, state: AgentState, *, session_id: str, user_id: str, window: int) -> SessionOut:
        """The state, with what the request knows and the state does not."""
        extra = {"session_id": session_id, "user_id": user_id, "context_window": window}
        return cls.model_validate(Merged(state, context=state.context_openai(), **extra))


class SessionChange(Out):  # read from an object with ``state``: an AgentState
    """Where the session stands after the change."""

    session_id: str
    version: int = Field(validation_alias=AliasPath("state", "version"))
    message_count: Count = Field(validation_alias=AliasPath("state", "messages"))
    token_estimate: int = Field(validation_alias=AliasPath("state", "token_estimate"))


class AppendResponse(SessionChange):  # a shortterm.session.AppendResult
    """The messages as stored (``evicted``: the references of big tool results moved out of
    the conversation; ``redacted``: sensitive values replaced before they were stored, by
    kind) and what the compaction check did (null: not asked)."""

    appended: list[MessageOut]
    evicted: list[str]
    compaction: CompactionOut | None
    redacted: dict[str, int] = {}


class CompactResponse(SessionChange):
    compaction: CompactionOut


class SessionDeleted(Out):
    state: bool
    tool_results: int
    log: bool


class FlushedFactOut(Out):  # a pipeline FlushedFact
    id: str
    text: str
    status: str
    kind: str
    importance: int
    key: str | None


class FlushOut(Out):  # a pipeline FlushResult
    """One flush: ``reason`` (post_call, pre_compaction, overflow, end, ...) and its ``status``
    (flushed, no_reply, nothing_to_flush, skipped, failed)."""

    reason: str
    status: str
    facts: list[FlushedFactOut]
    through_seq: int | None
    messages: int
    attempts: int
    usage: TokenUsage
    detail: str | None
    error: str | None
    dead_letter: str | None


class EndRequest(Strict):
    user_id: UserId


class SessionArchiveOut(Out):  # a pipeline.session_archive.ArchiveResult
    """The session's messages recorded as events: new ones, ones already stored, and the
    messages left out (tool results, instructions, hints, tool calls alone)."""

    recorded: int
    duplicates: int
    left_out: int


class SessionEnded(Out):
    """What ending a session did: the archive of its messages as events (None: it did not
    run, ``MEMORY_MEMORY__SESSION_ARCHIVE``), the flush of its unflushed messages (None:
    there were none, or no model beside the archive) and what was cleared (the session log
    stays)."""

    session_id: str
    archive: SessionArchiveOut | None = None
    flush: FlushOut | None
    state: bool
    tool_results: int


class SessionInfoOut(Out):  # a shortterm.store.SessionInfo
    session_id: str
    version: int
    updated_at: datetime
    expires_at: datetime | None
    message_count: int


class SessionList(Out):
    sessions: list[SessionInfoOut]


class SessionHitOut(Out):  # a shortterm.session_log.SessionHit
    """A past message that shares terms with the query, and where it was said."""

    session_id: str
    seq: int | None
    at: datetime
    role: str
    snippet: str
    score: float


class SessionSearchResponse(Out):
    hits: list[SessionHitOut]


class ToolResultText(BaseModel):
    ref: str
    start_line: int | None
    end_line: int | None
    text: str
