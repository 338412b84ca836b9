"""Session logs: every message appended to a session, the session's full history (compaction
rewrites the state, never the log).

``SessionLogStore`` is what callers type against: append, read a session back, ``search``
past messages across the user's sessions (the ``session_search`` tool) and delete logs past
retention (maintenance). ``FilesSessionLogStore`` (``files.py``) keeps one JSON-lines file per
session; ``PostgresSessionLogStore`` (``postgres.py``, ``MEMORY_STATE__BACKEND=postgres``)
keeps rows, with the same entries, hits and snippets (the values and ``snippet`` here).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import utcnow
from memory_service.domain.messages import Msg

DEFAULT_RETENTION_DAYS = 180


SNIPPET_CHARS = 300


@dataclass(frozen=True, slots=True)
class LogEntry:
    session_id: str
    at: datetime
    message: Msg


@dataclass(frozen=True, slots=True)
class SessionHit:
    """A past message that matches a query, with where it was said."""

    session_id: str
    seq: int | None
    at: datetime
    role: str
    snippet: str
    score: float


@runtime_checkable
class SessionLogStore(Protocol):
    """Where session logs live (files, or PostgreSQL with replica state there): what
    ``ShortTermMemory``, the ``session_search`` tool, session delete, erase and maintenance's
    retention call. Every implementation answers with the same ``LogEntry`` and ``SessionHit``
    shapes and the same snippets."""

    def append(self, ctx: RuntimeContext, messages: Sequence[Msg]) -> None: ...

    def read(self, ctx: RuntimeContext, session_id: str | None = None) -> list[LogEntry]: ...

    def sessions(self, ctx: RuntimeContext) -> list[str]: ...

    def search(
        self,
        ctx: RuntimeContext,
        query: str,
        *,
        limit: int = 10,
        session_id: str | None = None,
    ) -> list[SessionHit]: ...

    def count_user(self, ctx: RuntimeContext) -> int: ...

    def erase_user(self, ctx: RuntimeContext) -> int: ...

    def delete_session(self, ctx: RuntimeContext) -> bool: ...

    def delete_old(
        self,
        ctx: RuntimeContext,
        *,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        now: datetime | None = None,
    ) -> list[str]: ...


def session_search(
    log: SessionLogStore, ctx: RuntimeContext, query: str, *, limit: int = 10
) -> list[SessionHit]:
    """The ``session_search`` tool: past messages of ``ctx``'s user, any session."""
    return log.search(ctx, query, limit=limit)


def snippet(text: str, phrase: str, terms: set[str]) -> str:
    """Up to ``SNIPPET_CHARS`` of ``text`` around the first match."""
    if len(text) <= SNIPPET_CHARS:
        return text
    folded = text.casefold()
    positions = [folded.find(phrase)] + [folded.find(t) for t in terms]
    found = [p for p in positions if p >= 0]
    start = max(0, min(found) - SNIPPET_CHARS // 3) if found else 0
    piece = text[start : start + SNIPPET_CHARS]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_CHARS < len(text) else "")


def retention_cutoff(retention_days: int, now: datetime | None = None) -> datetime:
    """Logs last written before this go (every implementation counts the same way)."""
    if retention_days <= 0:
        raise ValueError("retention_days must be positive")
    return (now or utcnow()) - timedelta(days=retention_days)
