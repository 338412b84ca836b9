"""Tombstones in PostgreSQL (``MEMORY_STATE__BACKEND=postgres``): one row per erased user, so
an erase on one replica refuses the writes of every replica.

The row holds what the file does (``files.py``): the tenant, a digest of the
user id (the same one that names the file; no user id is stored), when the erase began and
when it finished (NULL while it runs).
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from memory_service.domain.context import RuntimeContext
from memory_service.stores.database import Database
from memory_service.stores.tombstones import Tombstone, TombstoneChecks, user_digest

MIGRATIONS = [
    """CREATE TABLE IF NOT EXISTS memory_tombstones (
        tenant_id text NOT NULL,
        user_digest text NOT NULL,
        since timestamptz NOT NULL,
        erased_at timestamptz,
        PRIMARY KEY (tenant_id, user_digest)
    )""",
]


class PostgresTombstones(TombstoneChecks):
    """The ``memory_tombstones`` table: one row per erased user, shared by every replica."""

    def __init__(self, database: Database) -> None:
        self.database = database
        database.ensure_schema("tombstones", MIGRATIONS)

    def read(self, ctx: RuntimeContext, conn: psycopg.Connection | None = None) -> Tombstone | None:
        """On ``conn`` when given: a writer checks inside the transaction that holds its lock."""
        query = (
            "SELECT since, erased_at FROM memory_tombstones "
            "WHERE tenant_id = %s AND user_digest = %s"
        )
        params = (ctx.tenant_id, user_digest(ctx))
        if conn is not None:
            row = conn.execute(query, params).fetchone()
        else:  # one round trip: every record asks before it writes
            row = self.database.read(lambda own: own.execute(query, params).fetchone())
        if row is None:
            return None
        since, erased_at = row
        return Tombstone("erased" if erased_at else "erasing", since, erased_at)

    def begin(self, ctx: RuntimeContext, now: datetime) -> None:
        self._write(ctx, now, None)

    def finish(self, ctx: RuntimeContext, began: datetime, now: datetime) -> None:
        self._write(ctx, began, now)

    def _write(self, ctx: RuntimeContext, since: datetime, erased_at: datetime | None) -> None:
        with self.database.connection() as conn:
            conn.execute(
                "INSERT INTO memory_tombstones (tenant_id, user_digest, since, erased_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant_id, user_digest) "
                "DO UPDATE SET since = EXCLUDED.since, erased_at = EXCLUDED.erased_at",
                (ctx.tenant_id, user_digest(ctx), since, erased_at),
            )
