"""Maintenance's marker and lock in the user's folder: ``.maintenance.json`` and a file lock
beside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import parse_time
from memory_service.domain.paths import OwnerPaths
from memory_service.stores.fsutil import (
    ensure_dir,
    file_lock,
    read_text,
    try_file_lock,
    write_atomically,
)
from memory_service.stores.maintenance_state import (
    ERASE_WAIT_S,
)


class FilesMaintenanceState:
    """The marker and lock in the user's folder (``.maintenance.json``, ``.maintenance.lock``)."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)

    def _paths(self, ctx: RuntimeContext) -> OwnerPaths:
        return OwnerPaths.of(self.workspace, ctx)

    def last_run(self, ctx: RuntimeContext) -> datetime | None:
        raw = read_text(self._paths(ctx).maintenance_state)
        if not raw:
            return None
        try:
            return parse_time(json.loads(raw).get("last_run"))
        except (ValueError, AttributeError):
            return None

    def remember(self, ctx: RuntimeContext, now: datetime, report: dict[str, Any]) -> None:
        record = {"last_run": now.astimezone(UTC).isoformat(), "report": report}
        write_atomically(self._paths(ctx).maintenance_state, json.dumps(record, indent=2))

    @contextmanager
    def lock(self, ctx: RuntimeContext) -> Iterator[bool]:
        paths = self._paths(ctx)
        ensure_dir(paths.root)
        with try_file_lock(paths.maintenance_lock) as got:
            yield got

    def count_user(self, ctx: RuntimeContext) -> int:
        """The user's maintenance marker (0 or 1)."""
        return int(self._paths(ctx).maintenance_state.is_file())

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete the user's maintenance marker, after a run in progress; 0 or 1."""
        paths = self._paths(ctx)
        if not paths.root.is_dir():
            return 0
        with file_lock(paths.maintenance_lock, timeout=ERASE_WAIT_S):
            found = paths.maintenance_state.is_file()
            paths.maintenance_state.unlink(missing_ok=True)
        paths.maintenance_lock.unlink(missing_ok=True)
        return int(found)
