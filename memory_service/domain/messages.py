"""Msg: one message of a session, and its conversion to and from OpenAI chat message dicts.

A message carries an optional ``mark`` so the memory machinery can tell its own messages apart
from the conversation: ``summary`` (written by compaction), ``tool_result`` (a tool result whose
full text was evicted to a file), ``hint`` (guidance injected for the model, not said by anyone).
``seq`` is the message's position in the session's full history (the session log); it stays the
same when compaction rewrites the state, so watermarks built on it survive compaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from memory_service.domain.characters import check_text
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.limits import MAX_SESSION_MESSAGE_BYTES
from memory_service.domain.tokens import cl100k_tokens

Role = Literal["system", "user", "assistant", "tool"]
Mark = Literal["summary", "tool_result", "hint"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
MARKS: tuple[str, ...] = ("summary", "tool_result", "hint")

# The memory tools' names (``memory_service.tools`` offers them): defined here, below both the
# tools and the pipeline, because the flush leaves these tools' calls out of its transcripts.
MEMORY_SEARCH = "memory_search"
MEMORY_GET = "memory_get"
MEMORY_SAVE = "memory_save"
SESSION_SEARCH = "session_search"
MEMORY_EXTRACT = "memory_extract"  # a keyed tool: record with same-key comparison, ...
MEMORY_RECALL = "memory_recall"
MEMORY_CONSOLIDATE = "memory_consolidate"
MEMORY_PRUNE = "memory_prune"
MEMORY_TOOL_NAMES = frozenset(
    {
        MEMORY_SEARCH,
        MEMORY_GET,
        MEMORY_SAVE,
        SESSION_SEARCH,
        MEMORY_EXTRACT,
        MEMORY_RECALL,
        MEMORY_CONSOLIDATE,
        MEMORY_PRUNE,
    }
)

# NUL in a message (``characters``) is refused with the code a fact's gets (``Fact.validate``):
# one mistake, one code, whichever entry point it comes through.
NUL_CODE = "invalid_fact"


def refuse_nul(value: object, what: str) -> None:
    """``InvalidInputError`` (code ``NUL_CODE``) when ``value`` holds a NUL (``characters``)."""
    check_text(value, what, NUL_CODE)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A function call requested by the assistant; ``arguments`` is the raw JSON string."""

    id: str
    name: str
    arguments: str = "{}"

    def __post_init__(self) -> None:
        refuse_nul(self.id, "a tool call's id")
        refuse_nul(self.name, "a tool call's function name")
        refuse_nul(self.arguments, "a tool call's arguments")

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    @classmethod
    def from_openai(cls, data: Mapping[str, Any]) -> ToolCall:
        function = data.get("function") or {}
        arguments = function.get("arguments", "{}")
        if not isinstance(arguments, str):  # some servers send an object
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_id, name = data.get("id"), function.get("name")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            raise InvalidInputError("a tool call needs an 'id' and a 'function.name'")
        return cls(call_id, name, arguments)


@dataclass(frozen=True, slots=True)
class Msg:
    """One message. Immutable: state changes replace messages, so a failed step changes nothing."""

    role: Role
    content: str = ""
    mark: Mark | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    seq: int | None = None
    created_at: datetime | None = None  # stamped when appended to a session (``AgentState``)
    tokens: int | None = None  # its cl100k tokens, content and tool calls (``message_tokens``)

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InvalidInputError(f"unknown role {self.role!r}; use one of {', '.join(ROLES)}")
        if self.mark is not None and self.mark not in MARKS:
            raise InvalidInputError(f"unknown mark {self.mark!r}; use one of {', '.join(MARKS)}")
        if not isinstance(self.content, str):
            raise InvalidInputError("message content must be text")
        refuse_nul(self.content, "message content")
        refuse_nul(self.name, "a message's name")
        refuse_nul(self.tool_call_id, "a tool message's tool_call_id")
        refuse_nul(self.metadata, "a message's metadata")
        if self.role == "tool" and not self.tool_call_id:
            raise InvalidInputError("a tool message needs the 'tool_call_id' it answers")
        if self.tool_calls and self.role != "assistant":
            raise InvalidInputError("only assistant messages carry tool calls")

    # -- convenience constructors ---------------------------------------------------------

    @classmethod
    def system(cls, content: str, **kw: Any) -> Msg:
        return cls("system", content, **kw)

    @classmethod
    def user(cls, content: str, **kw: Any) -> Msg:
        return cls("user", content, **kw)

    @classmethod
    def assistant(cls, content: str = "", **kw: Any) -> Msg:
        return cls("assistant", content, **kw)

    @classmethod
    def tool(cls, tool_call_id: str, content: str, **kw: Any) -> Msg:
        return cls("tool", content, tool_call_id=tool_call_id, **kw)

    def with_seq(self, seq: int | None) -> Msg:
        return replace(self, seq=seq)

    def stamped(self, now: datetime) -> Msg:
        """The message with its creation time (kept when it has one) and its token count."""
        return replace(
            self,
            created_at=self.created_at or now,
            tokens=self.tokens if self.tokens is not None else message_tokens(self),
        )

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(call.id for call in self.tool_calls)

    # -- OpenAI chat format ---------------------------------------------------------------

    def to_openai(self) -> dict[str, Any]:
        """The dict the chat completions API expects; marks and metadata stay on our side."""
        out: dict[str, Any] = {"role": self.role}
        if self.role == "assistant" and self.tool_calls and not self.content:
            out["content"] = None
        else:
            out["content"] = self.content
        if self.tool_calls:
            out["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role != "tool":
            out["name"] = self.name
        return out

    @classmethod
    def from_openai(cls, data: Mapping[str, Any], **kw: Any) -> Msg:
        """A message from an OpenAI chat dict (content as text or a list of text parts)."""
        if not isinstance(data, Mapping):
            raise InvalidInputError("a message must be an object")
        role = data.get("role")
        if role == "developer":  # the newer name of the system role
            role = "system"
        calls = tuple(ToolCall.from_openai(c) for c in data.get("tool_calls") or ())
        return cls(
            role=role,  # type: ignore[arg-type]
            content=content_text(data.get("content")),
            tool_calls=calls,
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            **kw,
        )

    # -- storage format -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.mark is not None:
            out["mark"] = self.mark
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        if self.tool_calls:
            out["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.seq is not None:
            out["seq"] = self.seq
        if self.created_at is not None:
            out["created_at"] = self.created_at.isoformat()
        if self.tokens is not None:
            out["tokens"] = self.tokens
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Msg:
        return cls(
            role=data["role"],
            content=data.get("content") or "",
            mark=data.get("mark"),
            metadata=dict(data.get("metadata") or {}),
            tool_calls=tuple(ToolCall.from_openai(c) for c in data.get("tool_calls") or ()),
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            seq=data.get("seq"),
            created_at=datetime.fromisoformat(data["created_at"])
            if data.get("created_at")
            else None,
            tokens=int(data["tokens"]) if data.get("tokens") is not None else None,
        )


def parse_created_at(value: object) -> datetime | None:
    """A stored message's creation time (ISO 8601, with its offset), or None."""
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def stored_bytes(message: Msg) -> int:
    """The message's size as stored (its JSON, UTF-8): content, tool calls, metadata, name,
    everything the state file and the session log hold of it."""
    return len(json.dumps(message.to_dict(), ensure_ascii=False).encode("utf-8"))


def check_message(message: Msg, limit: int = MAX_SESSION_MESSAGE_BYTES) -> Msg:
    """``message``, or ``InvalidInputError`` (``message_too_large``) when the whole of it, not
    only its content, is over ``limit`` bytes as stored. Checked where messages come in
    (``ShortTermMemory.append``, the API's body), not on every ``Msg``: a stored message is
    read back as it was written. (NUL, the one character no text may hold, is refused when
    a ``Msg`` is made.)"""
    size = stored_bytes(message)
    if size > limit:
        raise InvalidInputError(
            f"a message is {size} bytes as stored (content, tool calls, metadata and name "
            f"together): over the {limit}-byte limit",
            code="message_too_large",
        )
    return message


# The content parts that are text, and the field that holds it (an assistant's ``refusal``
# part is what it said, too).
TEXT_PARTS = {"text": "text", "refusal": "refusal"}


def content_text(content: object) -> str:
    """Text of an OpenAI ``content`` field: a string, None, or a list of content parts, whose
    text (``text`` parts; an assistant's ``refusal`` parts) is joined with newlines. A memory
    holds text: a part of another type (``image_url``, ``input_audio``, ``file``, ...) is
    refused (``unsupported_content``), never dropped, so the stored conversation is never
    silently less than what was said; send its text, or a description, as a text part."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list | tuple):
        parts = []
        for index, part in enumerate(content):
            if isinstance(part, str):  # a bare string part: its text
                parts.append(part)
                continue
            kind = part.get("type") if isinstance(part, Mapping) else None
            field = TEXT_PARTS.get(kind) if isinstance(kind, str) else None
            if field is not None and isinstance(part.get(field), str):  # type: ignore[union-attr]
                parts.append(part[field])  # type: ignore[index]
                continue
            if field is not None:
                problem = f"a {kind} part needs its {field!r} as a string"
            elif isinstance(kind, str):
                problem = (
                    f"a part of type {kind!r} is not taken: memory keeps text parts only "
                    "(send its text, or a description of it, as a text part)"
                )
            else:
                problem = "a content part must be an object with a 'type'"
            raise InvalidInputError(f"content[{index}]: {problem}", code="unsupported_content")
        return "\n".join(parts)
    raise InvalidInputError("message content must be text or a list of text parts")


def estimate_tokens(text: str) -> int:
    """``text``'s tokens in cl100k_base (``tokens.cl100k_tokens``): the compaction trigger,
    every prompt budget and the token figures the service reports count with it. The
    character heuristic it replaced (4 ASCII characters a token, one per other character) was
    11 % high over LoCoMo's turns and 19 % low on Chinese; cl100k costs ~8.5 us a turn against
    ~4.3 us (RESULTS.md, "Token counts")."""
    return cl100k_tokens(text)


MESSAGE_OVERHEAD_TOKENS = 4  # role and separators, as chat templates add them


def message_tokens(message: Msg) -> int:
    """The message's own tokens: its content and its tool calls (names and arguments)."""
    calls = sum(estimate_tokens(c.name) + estimate_tokens(c.arguments) for c in message.tool_calls)
    return estimate_tokens(message.content) + calls


def estimate_message_tokens(messages: Iterable[Msg]) -> int:
    """The messages' tokens with each one's overhead (its stored count where it has one)."""
    return sum(
        MESSAGE_OVERHEAD_TOKENS + (m.tokens if m.tokens is not None else message_tokens(m))
        for m in messages
    )


def to_openai(messages: Iterable[Msg]) -> list[dict[str, Any]]:
    return [m.to_openai() for m in messages]


def from_openai(messages: Iterable[Mapping[str, Any]]) -> list[Msg]:
    return [Msg.from_openai(m) for m in messages]
