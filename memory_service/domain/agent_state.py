"""AgentState: everything one session remembers between calls, and its JSON form.

Two counters make it safe to build on:

- ``version`` is the optimistic-concurrency token: a store saves a state only if the stored
  version is still the one this state was loaded at, then bumps it.
- every appended message gets ``seq``, its position in the session's full history (the session
  log). ``last_flushed_index`` is the ``seq`` of the last message the long-term pipeline has
  flushed; compaction rewrites ``messages`` but never ``seq``, so the watermark stays true.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import utcnow
from memory_service.domain.messages import Msg, estimate_message_tokens

STATE_FORMAT = 1
MAX_TRAIL = 200  # the tool-call trail keeps the latest entries only
TRAIL_ARGS_CHARS = 500

PlanStatus = Literal["pending", "in_progress", "done", "cancelled"]
PLAN_STATUSES: tuple[str, ...] = ("pending", "in_progress", "done", "cancelled")


@dataclass(slots=True)
class PlanItem:
    """One step of the agent's plan."""

    id: str
    text: str
    status: PlanStatus = "pending"

    def __post_init__(self) -> None:
        if self.status not in PLAN_STATUSES:
            raise InvalidInputError(f"unknown plan status {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "status": self.status}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanItem:
        return cls(str(data["id"]), str(data["text"]), data.get("status", "pending"))


@dataclass(slots=True)
class ToolTrailEntry:
    """A tool call the agent made, kept after compaction summarised the messages away."""

    call_id: str
    name: str
    arguments: str
    seq: int | None
    at: datetime
    result_chars: int | None = None
    result_ref: str | None = None  # where an evicted result lives (see eviction.py)

    def to_dict(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "seq": self.seq,
            "at": self.at.isoformat(),
            "result_chars": self.result_chars,
            "result_ref": self.result_ref,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolTrailEntry:
        return cls(
            call_id=data["call_id"],
            name=data["name"],
            arguments=data.get("arguments", ""),
            seq=data.get("seq"),
            at=datetime.fromisoformat(data["at"]),
            result_chars=data.get("result_chars"),
            result_ref=data.get("result_ref"),
        )


@dataclass(frozen=True, slots=True)
class CompactionBackoff:
    """A failed compaction, remembered so that the next appends do not pay for another flush
    and summary at once: the hook tries again once ``next_seq`` reaches ``retry_at_seq`` or
    the clock passes ``retry_after``, whichever comes first (see ``compaction_hook``)."""

    failures: int  # in a row
    retry_at_seq: int
    retry_after: datetime
    error_code: str
    error_message: str

    def due(self, next_seq: int, now: datetime) -> bool:
        return next_seq >= self.retry_at_seq or now >= self.retry_after

    def to_dict(self) -> dict[str, Any]:
        return {
            "failures": self.failures,
            "retry_at_seq": self.retry_at_seq,
            "retry_after": self.retry_after.isoformat(),
            "error_code": self.error_code,
            "error_message": self.error_message,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompactionBackoff:
        return cls(
            failures=int(data["failures"]),
            retry_at_seq=int(data["retry_at_seq"]),
            retry_after=datetime.fromisoformat(data["retry_after"]),
            error_code=str(data.get("error_code", "")),
            error_message=str(data.get("error_message", "")),
        )


@dataclass(slots=True)
class AgentState:
    """One session's short-term memory. Mutable; stores copy it in and out as JSON."""

    session_id: str | None = None
    # new for every fresh state: a session deleted (or expired) and started again is another
    # incarnation, so a writer still holding the old one cannot overwrite the new one
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)
    messages: list[Msg] = field(default_factory=list)
    summary: dict[str, str] | None = None  # the five blocks of the latest compaction
    tool_trail: list[ToolTrailEntry] = field(default_factory=list)
    plan: list[PlanItem] = field(default_factory=list)
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)
    token_estimate: int = 0
    compaction_count: int = 0
    next_seq: int = 0  # messages ever appended; the next one gets this seq
    last_flushed_index: int = -1  # seq of the last message flushed to long-term memory
    version: int = 0  # 0: never saved
    flags: dict[str, Any] = field(default_factory=dict)  # status flags, e.g. needs_compaction
    compaction_backoff: CompactionBackoff | None = None  # set by a failed compaction
    extra: dict[str, Any] = field(default_factory=dict)  # for other pipelines' bookkeeping

    # -- changes --------------------------------------------------------------------------

    def append(self, *messages: Msg, now: datetime | None = None) -> list[Msg]:
        """Append messages, numbering them in history order; returns them as stored."""
        now = now or utcnow()
        stored = []
        for message in messages:
            numbered = message.with_seq(self.next_seq).stamped(now)
            self.next_seq += 1
            self.messages.append(numbered)
            self._trail(numbered, now)
            stored.append(numbered)
        self.touch(now)
        return stored

    def replace_messages(self, messages: Iterable[Msg], now: datetime | None = None) -> None:
        self.messages = list(messages)
        self.touch(now)

    def touch(self, now: datetime | None = None) -> None:
        self.updated_at = now or utcnow()
        self.token_estimate = estimate_message_tokens(self.messages)

    def mark_flushed(self, through_seq: int) -> None:
        """Move the flush watermark forward (never back)."""
        if through_seq >= self.next_seq:
            raise InvalidInputError(f"seq {through_seq} was never appended")
        self.last_flushed_index = max(self.last_flushed_index, through_seq)

    def _trail(self, message: Msg, now: datetime) -> None:
        for call in message.tool_calls:
            self.tool_trail.append(
                ToolTrailEntry(
                    call.id, call.name, call.arguments[:TRAIL_ARGS_CHARS], message.seq, now
                )
            )
        if message.role == "tool":
            for entry in reversed(self.tool_trail):
                if entry.call_id == message.tool_call_id:
                    entry.result_chars = int(message.metadata.get("chars", len(message.content)))
                    entry.result_ref = message.metadata.get("ref")
                    break
        del self.tool_trail[:-MAX_TRAIL]

    # -- views ----------------------------------------------------------------------------

    def unflushed(self) -> list[Msg]:
        """Conversation messages still in the state that the long-term flush has not seen."""
        return [
            m
            for m in self.messages
            if m.seq is not None and m.seq > self.last_flushed_index and m.mark != "summary"
        ]

    def context(self) -> list[Msg]:
        """The messages as the model sees them (summary first, then the verbatim tail)."""
        return list(self.messages)

    def context_openai(self) -> list[dict[str, Any]]:
        return [m.to_openai() for m in self.context()]

    @property
    def is_new(self) -> bool:
        return self.version == 0

    # -- JSON -----------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "session_id": self.session_id,
            "incarnation": self.incarnation,
            "messages": [m.to_dict() for m in self.messages],
            "summary": dict(self.summary) if self.summary is not None else None,
            "tool_trail": [e.to_dict() for e in self.tool_trail],
            "plan": [p.to_dict() for p in self.plan],
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "token_estimate": self.token_estimate,
            "compaction_count": self.compaction_count,
            "next_seq": self.next_seq,
            "last_flushed_index": self.last_flushed_index,
            "version": self.version,
            "flags": copy.deepcopy(self.flags),
            "compaction_backoff": (
                self.compaction_backoff.to_dict() if self.compaction_backoff else None
            ),
            "extra": copy.deepcopy(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AgentState:
        fmt = data.get("format", STATE_FORMAT)
        if fmt != STATE_FORMAT:
            raise InvalidInputError(f"unsupported AgentState format {fmt!r}")
        saved = datetime.fromisoformat(data["updated_at"])
        messages = [Msg.from_dict(m) for m in data.get("messages") or ()]
        return cls(
            session_id=data.get("session_id"),
            incarnation=data.get("incarnation") or uuid.uuid4().hex,
            # a state written before messages had times: each is as old as the state's save
            messages=[m if m.created_at else replace(m, created_at=saved) for m in messages],
            summary=dict(data["summary"]) if data.get("summary") is not None else None,
            tool_trail=[ToolTrailEntry.from_dict(e) for e in data.get("tool_trail") or ()],
            plan=[PlanItem.from_dict(p) for p in data.get("plan") or ()],
            created_at=datetime.fromisoformat(data["created_at"]),
            updated_at=datetime.fromisoformat(data["updated_at"]),
            token_estimate=int(data.get("token_estimate", 0)),
            compaction_count=int(data.get("compaction_count", 0)),
            next_seq=int(data.get("next_seq", 0)),
            last_flushed_index=int(data.get("last_flushed_index", -1)),
            version=int(data.get("version", 0)),
            flags=copy.deepcopy(dict(data.get("flags") or {})),
            compaction_backoff=(
                CompactionBackoff.from_dict(data["compaction_backoff"])
                if data.get("compaction_backoff")
                else None
            ),
            extra=copy.deepcopy(dict(data.get("extra") or {})),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> AgentState:
        return cls.from_dict(json.loads(text))

    def copy(self) -> AgentState:
        """A deep, independent copy (what a store hands out)."""
        return AgentState.from_dict(self.to_dict())
