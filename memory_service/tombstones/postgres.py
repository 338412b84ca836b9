"""Tombstones in PostgreSQL (``MEMORY_STATE__BACKEND=postgres``): one row per erased user, so
an erase on one replica refuses the writes of every replica.

The row holds what the file does (``tombstones/__init__.py``): the tenant, a digest of the
user id (the same one that names the file; no user id is stored), when the erase began and
when it finished (NULL while it runs).
"""

from __future__ import annotations

from datetime import datetime

import psycopg

from memory_service.pgdb import Database

MIGRATIONS = [
    """CREATE TABLE IF NOT EXISTS memory_tombstones (
        tenant_id text NOT NULL,
        user_digest text NOT NULL,
        since timestamptz NOT NULL,
        erased_at timestamptz,
        PRIMARY KEY (tenant_id, user_digest)
    )""",
]


class PgTombstoneTable:
    """The ``memory_tombstones`` table: read and upsert one user's times."""

    def __init__(self, database: Database) -> None:
        self.database = database
        database.ensure_schema("tombstones", MIGRATIONS)

    def read(
        self, tenant_id: str, digest: str, conn: psycopg.Connection | None = None
    ) -> tuple[datetime, datetime | None] | None:
        """(began, finished) of the user's erase; None when the user was never erased. On
        ``conn`` when given: a writer checks inside the transaction that holds its lock."""
        query = (
            "SELECT since, erased_at FROM memory_tombstones "
            "WHERE tenant_id = %s AND user_digest = %s"
        )
        if conn is not None:
            row = conn.execute(query, (tenant_id, digest)).fetchone()
        else:
            with self.database.connection() as own:
                row = own.execute(query, (tenant_id, digest)).fetchone()
        return (row[0], row[1]) if row else None

    def write(
        self, tenant_id: str, digest: str, since: datetime, erased_at: datetime | None
    ) -> None:
        with self.database.connection() as conn:
            conn.execute(
                "INSERT INTO memory_tombstones (tenant_id, user_digest, since, erased_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant_id, user_digest) "
                "DO UPDATE SET since = EXCLUDED.since, erased_at = EXCLUDED.erased_at",
                (tenant_id, digest, since, erased_at),
            )
