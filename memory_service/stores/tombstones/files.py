"""Tombstones as files: ``tenants/<tenant>/erased/<digest>.json`` (see ``paths``), one per
erased user, holding the erase's two times."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

from psycopg import Connection

from memory_service.domain.context import RuntimeContext
from memory_service.domain.paths import WorkspacePaths
from memory_service.stores.fsutil import write_atomically
from memory_service.stores.tombstones import Tombstone, TombstoneChecks

log = logging.getLogger(__name__)


class FilesTombstones(TombstoneChecks):
    """The workspace's tombstones, one file per erased user."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = Path(workspace)

    def path(self, ctx: RuntimeContext) -> Path:
        return WorkspacePaths(self.workspace).tombstone(ctx.tenant_id, ctx.user_id)

    def read(self, ctx: RuntimeContext, conn: Connection | None = None) -> Tombstone | None:
        """A file that cannot be read as a tombstone counts as an erase still running
        (refusing is the safe side)."""
        path = self.path(ctx)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        try:
            data = json.loads(raw)
            since = datetime.fromisoformat(data["since"])
            done = data.get("erased_at")
            erased_at = datetime.fromisoformat(done) if done else None
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("tombstone %s unreadable (%s): the user's writes stay refused", path, exc)
            return Tombstone("erasing", datetime.now(UTC), None)
        return Tombstone("erased" if erased_at else "erasing", since, erased_at)

    def begin(self, ctx: RuntimeContext, now: datetime) -> None:
        self._write(ctx, {"state": "erasing", "since": now.isoformat(), "erased_at": None})

    def finish(self, ctx: RuntimeContext, began: datetime, now: datetime) -> None:
        record = {"state": "erased", "since": began.isoformat(), "erased_at": now.isoformat()}
        self._write(ctx, record)

    def _write(self, ctx: RuntimeContext, record: dict[str, str | None]) -> None:
        write_atomically(self.path(ctx), json.dumps(record) + "\n")
