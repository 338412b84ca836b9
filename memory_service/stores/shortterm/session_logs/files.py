"""Session logs as files: ``.../users/<user>/sessions/<session>.log.jsonl``, one JSON line per
message, appended under a file lock and fsynced before the append returns;
``delete_old_session_logs`` is the retention step maintenance runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

from indexing.tokenize import tokenize
from memory_service.domain.context import ID_PATTERN, RuntimeContext
from memory_service.domain.errors import InvalidIdError
from memory_service.domain.facts import utcnow
from memory_service.domain.messages import Msg
from memory_service.domain.paths import OwnerPaths, lock_for
from memory_service.stores.fsutil import append_durably, ensure_dir, file_lock
from memory_service.stores.shortterm.session_logs import (
    DEFAULT_RETENTION_DAYS,
    LogEntry,
    SessionHit,
    retention_cutoff,
    snippet,
)
from memory_service.stores.shortterm.session_state import Clock, session_of
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones


class FilesSessionLogStore:
    """Append-only logs of a workspace's sessions."""

    def __init__(
        self, workspace: Path, *, clock: Clock = utcnow, tombstones: Tombstones | None = None
    ) -> None:
        self.workspace = Path(workspace)
        self._clock = clock
        self._tombstones = tombstones or FilesTombstones(self.workspace)

    def _path(self, ctx: RuntimeContext, session_id: str | None = None) -> Path:
        paths = OwnerPaths.of(self.workspace, ctx)
        return paths.inside(paths.session_log(session_id or session_of(ctx)))

    def append(self, ctx: RuntimeContext, messages: Sequence[Msg]) -> None:
        """Append ``messages`` to the session's log; durable when this returns."""
        if not messages:
            return
        path = self._path(ctx)
        at = self._clock().isoformat()
        text = "".join(
            json.dumps({"at": at, **m.to_dict()}, ensure_ascii=False) + "\n" for m in messages
        )
        self._tombstones.check(ctx)  # before the folder is made again
        ensure_dir(path.parent)
        with file_lock(lock_for(path), timeout=30):
            self._tombstones.check(ctx)  # under the lock an erase takes too
            append_durably(path, text)

    def read(self, ctx: RuntimeContext, session_id: str | None = None) -> list[LogEntry]:
        """A session's logged messages, oldest first (a torn last line is skipped)."""
        sid = session_id or session_of(ctx)
        return list(self._entries(self._path(ctx, sid), sid))

    @staticmethod
    def _entries(path: Path, session_id: str) -> Iterator[LogEntry]:
        if not path.is_file():
            return
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                try:
                    data = json.loads(line)
                    yield LogEntry(
                        session_id, datetime.fromisoformat(data["at"]), Msg.from_dict(data)
                    )
                except (ValueError, KeyError, TypeError):
                    continue  # a hand edit or a crash mid-line: skip, do not fail the search

    def sessions(self, ctx: RuntimeContext) -> list[str]:
        """Session ids with a log (files whose names are not valid ids are ignored)."""
        names = OwnerPaths.of(self.workspace, ctx).session_logs()
        return sorted(name for name in names if ID_PATTERN.fullmatch(name) and ".." not in name)

    def search(
        self,
        ctx: RuntimeContext,
        query: str,
        *,
        limit: int = 10,
        session_id: str | None = None,
    ) -> list[SessionHit]:
        """Past messages of the user's sessions that share terms with ``query``, best first
        (more query terms matched, then the literal phrase, then newer)."""
        terms = set(tokenize(query))
        phrase = query.casefold().strip()
        if not phrase or limit < 1:  # a negative limit would slice off the last hits only
            return []
        hits: list[SessionHit] = []
        for sid in [session_id] if session_id else self.sessions(ctx):
            for entry in self._entries(self._path(ctx, sid), sid):
                text = entry.message.content
                matched = len(terms & set(tokenize(text))) / len(terms) if terms else 0.0
                literal = phrase in text.casefold()
                if not matched and not literal:
                    continue
                hits.append(
                    SessionHit(
                        sid,
                        entry.message.seq,
                        entry.at,
                        entry.message.role,
                        snippet(text, phrase, terms),
                        round(matched + (0.5 if literal else 0.0), 4),
                    )
                )
        hits.sort(key=lambda h: (h.score, h.at, h.seq or 0), reverse=True)
        return hits[:limit]

    def count_user(self, ctx: RuntimeContext) -> int:
        """How many session logs the user has."""
        return len(OwnerPaths.of(self.workspace, ctx).session_logs())

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete every session log of the user, each under its lock; how many there were."""
        removed = 0
        for path in OwnerPaths.of(self.workspace, ctx).session_logs().values():
            with file_lock(lock_for(path), timeout=30):
                if path.exists():
                    path.unlink()
                    removed += 1
            lock_for(path).unlink(missing_ok=True)
        return removed

    def delete_session(self, ctx: RuntimeContext) -> bool:
        path = self._path(ctx)
        existed = path.exists()
        path.unlink(missing_ok=True)
        lock_for(path).unlink(missing_ok=True)
        return existed

    def delete_old(
        self,
        ctx: RuntimeContext,
        *,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        now: datetime | None = None,
    ) -> list[str]:
        """Maintenance's retention step (``delete_old_session_logs``) on this workspace."""
        return delete_old_session_logs(self.workspace, ctx, retention_days=retention_days, now=now)


def delete_old_session_logs(
    workspace: Path,
    ctx: RuntimeContext,
    *,
    retention_days: int = DEFAULT_RETENTION_DAYS,
    now: datetime | None = None,
) -> list[str]:
    """Delete the user's session logs not written to for ``retention_days``; returns the
    session ids whose logs went. Maintenance calls this once per user."""
    cutoff = retention_cutoff(retention_days, now).timestamp()
    paths = OwnerPaths.of(Path(workspace), ctx)
    deleted = []
    for session_id, found in paths.session_logs().items():
        try:
            path = paths.inside(found)
        except InvalidIdError:
            continue  # a link out of the user's folder: not ours to delete
        if os.stat(path).st_mtime < cutoff:
            path.unlink(missing_ok=True)
            lock_for(path).unlink(missing_ok=True)
            deleted.append(session_id)
    return deleted
