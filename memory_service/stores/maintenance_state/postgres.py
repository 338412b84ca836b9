"""Maintenance's per-user marker and lock in PostgreSQL (``MEMORY_STATE__BACKEND=postgres``).

The last run is a row of ``memory_maintenance_runs`` (tenant, scope, owner: users, agents and
the tenant's shared memory alike), with the run's report as JSON; the lock is a session
advisory lock, taken without waiting, so two replicas asked to maintain one user at the same
moment run it once and the other reports ``busy``, as the file lock does on one node. A
replica that dies releases its lock with its connection.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import BackendUnavailableError
from memory_service.stores.database import Database
from memory_service.stores.maintenance_state import ERASE_WAIT_S

MIGRATIONS = [
    """CREATE TABLE IF NOT EXISTS memory_maintenance_runs (
        tenant_id text NOT NULL,
        scope text NOT NULL,
        owner text NOT NULL,
        last_run timestamptz NOT NULL,
        report jsonb NOT NULL,
        PRIMARY KEY (tenant_id, scope, owner)
    )""",
]

POLL_S = 0.2  # an erase retries the lock this often while a run holds it
_KEY = "tenant_id = %s AND scope = %s AND owner = %s"


def _key(ctx: RuntimeContext) -> tuple[str, str, str]:
    return ctx.tenant_id, ctx.scope, ctx.owner


class PostgresMaintenanceState:
    """``MaintenanceState`` over PostgreSQL: nothing in the workspace."""

    def __init__(self, database: Database, *, erase_wait_s: float = ERASE_WAIT_S) -> None:
        self.database = database
        self.erase_wait_s = erase_wait_s
        database.ensure_schema("maintenance", MIGRATIONS)

    def last_run(self, ctx: RuntimeContext) -> datetime | None:
        with self.database.connection() as conn:
            row = conn.execute(
                f"SELECT last_run FROM memory_maintenance_runs WHERE {_KEY}", _key(ctx)
            ).fetchone()
        return row[0] if row else None

    def remember(self, ctx: RuntimeContext, now: datetime, report: dict[str, Any]) -> None:
        with self.database.connection() as conn:
            conn.execute(
                "INSERT INTO memory_maintenance_runs (tenant_id, scope, owner, last_run, report) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tenant_id, scope, owner) "
                "DO UPDATE SET last_run = EXCLUDED.last_run, report = EXCLUDED.report",
                (*_key(ctx), now, Jsonb(report)),
            )

    @contextmanager
    def lock(self, ctx: RuntimeContext) -> Iterator[bool]:
        """The user's advisory lock, not waiting: False when a run on any replica holds it."""
        with self.database.advisory_lock(self._lock_key(ctx), wait=False) as got:
            yield got

    def count_user(self, ctx: RuntimeContext) -> int:
        """The user's maintenance marker (0 or 1)."""
        return int(self.last_run(ctx) is not None)

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete the user's marker once a run in progress (on any replica) is over, waiting
        at most ``ERASE_WAIT_S`` (then ``busy``, nothing deleted: the erase can be rerun)."""
        deadline = time.monotonic() + self.erase_wait_s
        while True:
            with self.lock(ctx) as alone:
                if alone:
                    with self.database.connection() as conn:
                        query = f"DELETE FROM memory_maintenance_runs WHERE {_KEY}"
                        return conn.execute(query, _key(ctx)).rowcount
            if time.monotonic() >= deadline:
                raise BackendUnavailableError(
                    "maintenance of this user is running on a replica; erase again later",
                    code="busy",
                )
            time.sleep(POLL_S)

    def tenants(self) -> list[str]:
        """Tenants with a user's marker (``ListsUsers``, for the scheduler)."""
        with self.database.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT tenant_id FROM memory_maintenance_runs "
                "WHERE scope = 'user' ORDER BY 1"
            ).fetchall()
        return [row[0] for row in rows]

    def users(self, tenant_id: str) -> list[str]:
        with self.database.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT owner FROM memory_maintenance_runs "
                "WHERE scope = 'user' AND tenant_id = %s ORDER BY 1",
                (tenant_id,),
            ).fetchall()
        return [row[0] for row in rows]

    @staticmethod
    def _lock_key(ctx: RuntimeContext) -> str:
        return "maintenance:" + ":".join(_key(ctx))
