"""One dead letter's schema: ``DeadLetterRecord``, a failed flush as one JSON line of
``dead-letters/flush.jsonl`` (``dead_letters.py`` owns the file and its rules).

A line without ``version`` was written before the field existed and reads as version 1; a line
of a newer version is malformed (kept as it is for the version that wrote it). Unknown fields
are kept in ``extra`` and written back as read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from memory_service.domain.context import RuntimeContext
from memory_service.domain.messages import Msg

VERSION = 1
MAX_REPLY_CHARS = 4_000  # of the failed reply, kept for a person to read

_FIELDS = (
    "version",
    "at",
    "tenant_id",
    "user_id",
    "session_id",
    "reason",
    "error",
    "attempts",
    "from_seq",
    "through_seq",
    "messages",
    "facts",
    "reply",
    "replay_attempts",
    "last_replay_error",
    "last_replay_at",
)


@dataclass(frozen=True, slots=True)
class DeadLetterRecord:
    """One failed flush: whose, why, and the messages it could not record."""

    tenant_id: str
    user_id: str
    session_id: str | None
    reason: str  # the flush's reason: post_call | pre_compaction | overflow
    error: str | None
    messages: tuple[Msg, ...]
    at: str | None = None  # ISO time of the failure
    attempts: int = 0
    from_seq: int | None = None
    through_seq: int | None = None
    facts: tuple[str, ...] = ()  # parsed from the failed reply, if it got that far
    reply: str | None = None
    replay_attempts: int = 0
    last_replay_error: str | None = None
    last_replay_at: str | None = None
    version: int = VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)  # unknown fields, kept as read

    @classmethod
    def of_flush(
        cls,
        ctx: RuntimeContext,
        *,
        reason: str,
        error: str | None,
        attempts: int,
        messages: Sequence[Msg],
        facts: Sequence[str] = (),
        reply: str | None = None,
        at: datetime,
    ) -> DeadLetterRecord:
        """The record of a flush that failed now."""
        first, last = _seq_range(messages)
        return cls(
            ctx.tenant_id,
            ctx.user_id,
            ctx.session_id,
            reason,
            error,
            tuple(messages),
            at=at.isoformat(),
            attempts=attempts,
            from_seq=first,
            through_seq=last,
            facts=tuple(facts),
            reply=(reply or "")[:MAX_REPLY_CHARS] or None,
        )

    def after_replay_failure(
        self, rest: Sequence[Msg], error: str, at: datetime
    ) -> DeadLetterRecord:
        """This record after one more failed replay: only the messages still unrecorded."""
        first, last = _seq_range(rest)
        return replace(
            self,
            messages=tuple(rest),
            from_seq=self.from_seq if first is None else first,
            through_seq=self.through_seq if last is None else last,
            replay_attempts=self.replay_attempts + 1,
            last_replay_error=error,
            last_replay_at=at.isoformat(),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "version": self.version,
            "at": self.at,
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "session_id": self.session_id,
            "reason": self.reason,
            "error": self.error,
            "attempts": self.attempts,
            "from_seq": self.from_seq,
            "through_seq": self.through_seq,
            "messages": [m.to_dict() for m in self.messages],
            "facts": list(self.facts),
            "reply": self.reply,
        }
        if self.replay_attempts or self.last_replay_error or self.last_replay_at:
            out["replay_attempts"] = self.replay_attempts
            out["last_replay_error"] = self.last_replay_error
            out["last_replay_at"] = self.last_replay_at
        return {**out, **{k: v for k, v in self.extra.items() if k not in out}}

    def to_json(self) -> str:
        """The record as one line of the file, without its newline (raw Unicode, so a line
        holds no ``\\n`` but may hold U+2028)."""
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def to_line(self) -> bytes:
        return self.to_json().encode("utf-8")

    @classmethod
    def from_dict(cls, data: object) -> DeadLetterRecord:
        """The record ``data`` holds; ``ValueError`` (saying why) when it holds none: not an
        object, a newer version, no messages, a message that does not load, or ids that are
        not text. Other fields of the wrong type read as absent."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        version = data.get("version", 1)
        if version != VERSION or isinstance(version, bool):
            raise ValueError(f"version {version!r} is not {VERSION}")
        tenant_id, user_id, session_id = (
            data.get(k) for k in ("tenant_id", "user_id", "session_id")
        )
        if not isinstance(tenant_id, str) or not isinstance(user_id, str):
            raise ValueError("tenant_id/user_id missing")
        if session_id is not None and not isinstance(session_id, str):
            raise ValueError("session_id is not text")
        raw = data.get("messages")
        if not isinstance(raw, list) or not raw:
            raise ValueError("no messages")
        try:
            messages = tuple(Msg.from_dict(m) for m in raw)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ValueError(f"a message does not load: {exc!r}") from exc
        facts = data.get("facts")
        return cls(
            tenant_id,
            user_id,
            session_id,
            _text(data.get("reason")) or "unknown",
            _text(data.get("error")),
            messages,
            at=_text(data.get("at")),
            attempts=_count(data.get("attempts")) or 0,
            from_seq=_count(data.get("from_seq")),
            through_seq=_count(data.get("through_seq")),
            facts=tuple(f for f in facts if isinstance(f, str)) if isinstance(facts, list) else (),
            reply=_text(data.get("reply")),
            replay_attempts=_count(data.get("replay_attempts")) or 0,
            last_replay_error=_text(data.get("last_replay_error")),
            last_replay_at=_text(data.get("last_replay_at")),
            extra={k: v for k, v in data.items() if k not in _FIELDS},
        )


def _seq_range(messages: Sequence[Msg]) -> tuple[int | None, int | None]:
    seqs = [m.seq for m in messages if m.seq is not None]
    return min(seqs, default=None), max(seqs, default=None)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
