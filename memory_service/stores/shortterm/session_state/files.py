"""The default AgentStateStore: one JSON file per session in the user's folder.

``.../users/<user>/state/<session>.json`` holds ``{version, incarnation, updated_at,
expires_at, state}``. Saves compare-and-swap under a per-session file lock (so two processes
are as safe as two threads) and replace the file atomically, so a reader sees the old or the
new state, never half of one.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import (
    BackendUnavailableError,
    ConflictError,
    InvalidInputError,
    MemoryServiceError,
)
from memory_service.domain.facts import utcnow
from memory_service.domain.paths import OwnerPaths, WorkspacePaths, lock_for
from memory_service.stores.fsutil import ensure_dir, file_lock, write_atomically
from memory_service.stores.shortterm.session_state import (
    Clock,
    KeepExpired,
    SessionInfo,
    conflict_message,
    is_expired,
    saved_record,
    session_of,
)
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones


class FilesAgentStateStore:
    """``AgentStateStore`` over the workspace's files."""

    def __init__(
        self,
        workspace: Path,
        *,
        ttl: timedelta | None = None,
        clock: Clock = utcnow,
        lock_timeout_s: float = 30.0,
        tombstones: Tombstones | None = None,
    ) -> None:
        self.workspace = Path(workspace)
        self.ttl = ttl
        self._clock = clock
        self._lock_timeout_s = lock_timeout_s
        self._tombstones = tombstones if tombstones is not None else FilesTombstones(self.workspace)

    # -- paths ----------------------------------------------------------------------------

    def _file(self, ctx: RuntimeContext) -> tuple[OwnerPaths, Path]:
        paths = OwnerPaths.of(self.workspace, ctx)
        return paths, paths.inside(paths.state_file(session_of(ctx)))

    def _lock(self, path: Path) -> FileLock:
        ensure_dir(path.parent)
        return file_lock(lock_for(path), timeout=self._lock_timeout_s)

    @staticmethod
    def _read(path: Path) -> dict[str, Any] | None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            record = json.loads(text)
            record["updated_at"] = datetime.fromisoformat(record["updated_at"])
            expires = record.get("expires_at")
            record["expires_at"] = datetime.fromisoformat(expires) if expires else None
            return record
        except (ValueError, KeyError, TypeError) as exc:
            raise MemoryServiceError(
                f"session state {path.name} is not a valid state record: {exc}",
                code="corrupt_state",
            ) from exc

    # -- the contract ---------------------------------------------------------------------

    def load(self, ctx: RuntimeContext) -> AgentState:
        _, path = self._file(ctx)
        record = self._read(path)
        if record is None or is_expired(record["expires_at"], self._clock()):
            return AgentState(session_id=ctx.session_id)
        state = AgentState.from_dict(record["state"])
        state.version = int(record["version"])
        return state

    def save(self, state: AgentState, ctx: RuntimeContext) -> None:
        _, path = self._file(ctx)
        self._tombstones.check(ctx)  # before the folder is made again
        try:
            with self._lock(path):
                self._tombstones.check(ctx)  # under the lock an erase takes too
                now = self._clock()
                record = self._read(path)
                live = record is not None and not is_expired(record["expires_at"], now)
                stored_version = int(record["version"]) if live else 0
                reborn = live and record.get("incarnation") != state.incarnation
                if stored_version != state.version or reborn:
                    raise ConflictError(conflict_message(ctx, state.version))
                out = saved_record(state, ctx, now, self.ttl)
                new_version = out["version"]
                write_atomically(path, json.dumps(out, ensure_ascii=False))
        except Timeout as exc:
            raise BackendUnavailableError(f"session {ctx.session_id!r} is locked") from exc
        state.version = new_version
        state.session_id = ctx.session_id

    def remove(self, ctx: RuntimeContext) -> bool:
        _, path = self._file(ctx)
        with self._lock(path):
            record = self._read(path)
            if record is None:
                return False
            path.unlink(missing_ok=True)
            return not is_expired(record["expires_at"], self._clock())

    def list_sessions(self, ctx: RuntimeContext) -> list[SessionInfo]:
        paths = OwnerPaths.of(self.workspace, ctx)
        now = self._clock()
        found = []
        for session_id, path in paths.state_files().items():
            record = self._read(path)
            if record is None or is_expired(record["expires_at"], now):
                continue
            found.append(
                SessionInfo(
                    session_id=session_id,
                    version=int(record["version"]),
                    updated_at=record["updated_at"],
                    expires_at=record["expires_at"],
                    message_count=len(record["state"].get("messages") or ()),
                )
            )
        found.sort(key=lambda info: info.updated_at, reverse=True)
        return found

    def count_user(self, ctx: RuntimeContext) -> int:
        """How many session states the user has stored, expired ones included."""
        return len(OwnerPaths.of(self.workspace, ctx).state_files())

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete every session state of the user, each under its lock; how many there were."""
        paths = OwnerPaths.of(self.workspace, ctx)
        removed = 0
        for path in paths.state_files().values():
            with self._lock(path):
                if path.exists():
                    path.unlink()
                    removed += 1
            lock_for(path).unlink(missing_ok=True)
        return removed

    def purge_expired(self, keep: KeepExpired | None = None) -> int:
        """Delete every expired state file in the workspace (``keep`` may spare one: it is
        asked outside the file's lock, and a state saved meanwhile stays); how many went."""
        if self.ttl is None:
            return 0
        removed = 0
        for path in WorkspacePaths(self.workspace).all_state_files():
            found = self._expired(path)
            if found is None:
                continue
            ctx, state = found
            if keep is not None and keep(ctx, state):
                continue
            with self._lock(path):
                again = self._expired(path)
                if again is not None and again[1].version == state.version:
                    path.unlink(missing_ok=True)
                    removed += 1
        return removed

    def _expired(self, path: Path) -> tuple[RuntimeContext, AgentState] | None:
        """The session whose state ``path`` holds, if it has expired."""
        try:
            record = self._read(path)
        except MemoryServiceError:
            return None  # a corrupt file is for a person to look at, not to delete
        if record is None or not is_expired(record["expires_at"], self._clock()):
            return None
        tenant, user = path.parents[3].name, path.parents[1].name  # tenants/T/users/U/state
        try:
            ctx = RuntimeContext(tenant, user, path.stem)
        except InvalidInputError:
            return None  # a folder no id names: not the service's to delete
        state = AgentState.from_dict(record["state"])
        state.version = int(record["version"])
        return ctx, state

    def close(self) -> None:
        pass
