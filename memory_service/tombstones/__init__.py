"""Tombstones: the writes of an erased user are refused, so nothing of them comes back.

Erasing a user (``pipeline/erasure.py``) writes the user's tombstone first (``erasing``),
removes the user's data store by store, each under the lock its writers take, and then marks
the tombstone ``erased`` with the time it finished. Every store that creates data for a user
calls ``check`` under that same lock before it writes (a store without a cross-process lock
checks again after writing and takes its write back):

- while an erase runs, every write for the user is refused;
- after it, a write whose work began before the erase finished (``RuntimeContext.started_at``:
  a chat call whose model answered late, a flush in flight) is refused;
- work that begins after it is served as for a new user.

A refused write raises ``UserErasedError`` (409 ``user_erased``). An erase that died half-way
leaves ``erasing``: the user's writes stay refused until the erase is run again. The file is
``tenants/<tenant>/erased/<digest>.json`` (see ``paths``): its name is a digest of the user id
and it holds only the two times, none of the user's data.

With a ``Database`` (``MEMORY_STATE__BACKEND=postgres``) the same two times live in a table
(``tombstones/postgres.py``), keyed by the same digest, so every replica refuses alike and the
workspace holds none.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import psycopg

from memory_service.context import RuntimeContext
from memory_service.errors import UserErasedError
from memory_service.fsutil import write_atomically
from memory_service.paths import WorkspacePaths
from memory_service.pgdb import Database
from memory_service.tombstones.postgres import PgTombstoneTable

log = logging.getLogger(__name__)

State = Literal["erasing", "erased"]


@dataclass(frozen=True, slots=True)
class Tombstone:
    state: State
    since: datetime  # when the erase began
    erased_at: datetime | None  # when it finished (state "erased")

    def refuses(self, started_at: datetime) -> bool:
        """Whether work that began at ``started_at`` may no longer write for the user."""
        return self.erased_at is None or started_at <= self.erased_at


class Tombstones:
    """The tombstones of one workspace's erased users: files in the workspace, or rows in
    ``database`` when one is given (shared by every replica)."""

    def __init__(self, workspace: Path, database: Database | None = None) -> None:
        self.workspace = Path(workspace)
        self.database = database
        self._table = PgTombstoneTable(database) if database is not None else None

    def path(self, ctx: RuntimeContext) -> Path:
        return WorkspacePaths(self.workspace).tombstone(ctx.tenant_id, ctx.user_id)

    def read(self, ctx: RuntimeContext, conn: psycopg.Connection | None = None) -> Tombstone | None:
        """The user's tombstone; None when the user was never erased. A file that cannot be
        read as one counts as an erase still running (refusing is the safe side). ``conn``:
        a PostgreSQL writer's own transaction (it reads there, holding no second connection)."""
        if self._table is not None:
            row = self._table.read(ctx.tenant_id, self._digest(ctx), conn)
            if row is None:
                return None
            since, erased_at = row
            return Tombstone("erased" if erased_at else "erasing", since, erased_at)
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
        """Refuse every write for the user from now on, until ``finish``."""
        if self._table is not None:
            self._table.write(ctx.tenant_id, self._digest(ctx), now, None)
            return
        self._write(ctx, {"state": "erasing", "since": now.isoformat(), "erased_at": None})

    def finish(self, ctx: RuntimeContext, began: datetime, now: datetime) -> None:
        """The erase is complete: refuse only work that began before ``now``."""
        if self._table is not None:
            self._table.write(ctx.tenant_id, self._digest(ctx), began, now)
            return
        record = {"state": "erased", "since": began.isoformat(), "erased_at": now.isoformat()}
        self._write(ctx, record)

    def refuses(self, ctx: RuntimeContext, conn: psycopg.Connection | None = None) -> bool:
        tombstone = self.read(ctx, conn)
        return tombstone is not None and tombstone.refuses(ctx.started_at)

    def check(self, ctx: RuntimeContext, conn: psycopg.Connection | None = None) -> None:
        """``UserErasedError`` when a write for ``ctx`` must not happen (see the module)."""
        if self.refuses(ctx, conn):
            raise UserErasedError(
                f"user {ctx.user_id!r} was erased while this request ran: nothing was written"
            )

    def _digest(self, ctx: RuntimeContext) -> str:
        """The digest of the user id that names the file (and keys the row)."""
        return self.path(ctx).stem

    def _write(self, ctx: RuntimeContext, record: dict[str, str | None]) -> None:
        write_atomically(self.path(ctx), json.dumps(record) + "\n")
