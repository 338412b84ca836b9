"""AgentStateStore on PostgreSQL, for several service processes sharing sessions.

One table of the shared ``Database``, created through its ``ensure_schema``::

    (tenant_id, user_id, session_id) primary key, version, state JSONB, updated_at, expires_at

Optimistic concurrency lives in the SQL itself: an update carries ``version = <loaded>`` (and the
state's incarnation) in its WHERE clause, a first save is an INSERT that only overwrites an
expired row. Zero rows touched means another writer got there first: ``ConflictError``.
Timestamps come from the store's clock, not the database's, so TTLs are testable.

Erasing a user and saving one of the user's sessions meet on a transaction-level advisory lock
per user: every save takes it shared and checks the user's tombstone inside its transaction,
``erase_user`` takes it exclusively, so no save begun before an erase commits after it.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ConfigurationError, ConflictError
from memory_service.domain.facts import utcnow
from memory_service.stores.database import Database
from memory_service.stores.shortterm.session_state import (
    Clock,
    KeepExpired,
    SessionInfo,
    conflict_message,
    expiry,
    session_of,
)
from memory_service.stores.tombstones import Tombstones

TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def migrations(table: str) -> list[sql.Composable]:
    """The table ``table`` (``MEMORY_SHORTTERM__POSTGRES_TABLE``) and its expiry index."""
    name, index = sql.Identifier(table), sql.Identifier(f"{table}_expires_at")
    return [
        sql.SQL(
            """CREATE TABLE IF NOT EXISTS {table} (
                tenant_id   text        NOT NULL,
                user_id     text        NOT NULL,
                session_id  text        NOT NULL,
                version     bigint      NOT NULL,
                state       jsonb       NOT NULL,
                updated_at  timestamptz NOT NULL,
                expires_at  timestamptz,
                PRIMARY KEY (tenant_id, user_id, session_id)
            )"""
        ).format(table=name),
        sql.SQL(
            "CREATE INDEX IF NOT EXISTS {index} ON {table} (expires_at) "
            "WHERE expires_at IS NOT NULL"
        ).format(index=index, table=name),
    ]


class PostgresAgentStateStore:
    """``AgentStateStore`` over one table of the shared ``Database``."""

    def __init__(
        self,
        database: Database,
        *,
        table: str = "agent_state",
        ttl: timedelta | None = None,
        clock: Clock = utcnow,
        tombstones: Tombstones | None = None,
        owns_database: bool = False,
    ) -> None:
        if not TABLE_NAME.fullmatch(table):
            raise ConfigurationError(f"MEMORY_SHORTTERM__POSTGRES_TABLE: bad table {table!r}")
        self.ttl = ttl
        self._db = database
        self._owns_database = owns_database  # a pool of its own: closed with the store
        self._clock = clock
        self._tombstones = tombstones  # None: no erase refuses a save (a store on its own)
        self._table = sql.Identifier(table)
        self._lock_key = f"memory_service:{table}"  # the schema: ``Database.lock_key``
        database.ensure_schema(f"agent_state:{table}", migrations(table))

    def _conn(self) -> AbstractContextManager[psycopg.Connection]:
        return self._db.connection()

    @staticmethod
    def _key(ctx: RuntimeContext) -> dict[str, Any]:
        return {"tenant": ctx.tenant_id, "user": ctx.user_id, "session": session_of(ctx)}

    # -- the contract ---------------------------------------------------------------------

    def load(self, ctx: RuntimeContext) -> AgentState:
        query = sql.SQL(
            "SELECT version, state FROM {table} WHERE tenant_id = %(tenant)s "
            "AND user_id = %(user)s AND session_id = %(session)s "
            "AND (expires_at IS NULL OR expires_at > %(now)s)"
        ).format(table=self._table)
        with self._conn() as conn:
            row = conn.execute(query, {**self._key(ctx), "now": self._clock()}).fetchone()
        if row is None:
            return AgentState(session_id=ctx.session_id)
        state = AgentState.from_dict(row[1])
        state.version = int(row[0])
        return state

    def save(self, state: AgentState, ctx: RuntimeContext) -> None:
        now = self._clock()
        new_version = state.version + 1
        body = state.to_dict()
        body["version"] = new_version
        body["session_id"] = ctx.session_id
        params = {
            **self._key(ctx),
            "version": state.version,
            "new_version": new_version,
            "incarnation": state.incarnation,
            "state": Jsonb(body),
            "now": now,
            "expires": expiry(now, self.ttl),
        }
        if state.version == 0:  # first save: create, or take over an expired row
            query = sql.SQL(
                """INSERT INTO {table} AS s
                       (tenant_id, user_id, session_id, version, state, updated_at, expires_at)
                   VALUES (%(tenant)s, %(user)s, %(session)s, %(new_version)s, %(state)s,
                           %(now)s, %(expires)s)
                   ON CONFLICT (tenant_id, user_id, session_id) DO UPDATE
                      SET version = EXCLUDED.version, state = EXCLUDED.state,
                          updated_at = EXCLUDED.updated_at, expires_at = EXCLUDED.expires_at
                    WHERE s.expires_at IS NOT NULL AND s.expires_at <= %(now)s"""
            ).format(table=self._table)
        else:
            query = sql.SQL(
                """UPDATE {table}
                      SET version = %(new_version)s, state = %(state)s,
                          updated_at = %(now)s, expires_at = %(expires)s
                    WHERE tenant_id = %(tenant)s AND user_id = %(user)s
                      AND session_id = %(session)s AND version = %(version)s
                      AND state->>'incarnation' = %(incarnation)s
                      AND (expires_at IS NULL OR expires_at > %(now)s)"""
            ).format(table=self._table)
        with self._conn() as conn:
            if self._tombstones is not None:  # inside the transaction: an erase waits for it
                self._user_lock(conn, ctx, shared=True)
                self._tombstones.check(ctx)
            touched = conn.execute(query, params).rowcount
        if touched != 1:
            raise ConflictError(conflict_message(ctx, state.version))
        state.version = new_version
        state.session_id = ctx.session_id

    def remove(self, ctx: RuntimeContext) -> bool:
        query = sql.SQL(
            "DELETE FROM {table} WHERE tenant_id = %(tenant)s AND user_id = %(user)s "
            "AND session_id = %(session)s "
            "RETURNING (expires_at IS NULL OR expires_at > %(now)s)"
        ).format(table=self._table)
        with self._conn() as conn:
            row = conn.execute(query, {**self._key(ctx), "now": self._clock()}).fetchone()
        return bool(row and row[0])

    def list_sessions(self, ctx: RuntimeContext) -> list[SessionInfo]:
        query = sql.SQL(
            "SELECT session_id, version, updated_at, expires_at, "
            "COALESCE(jsonb_array_length(state->'messages'), 0) FROM {table} "
            "WHERE tenant_id = %(tenant)s AND user_id = %(user)s "
            "AND (expires_at IS NULL OR expires_at > %(now)s) "
            "ORDER BY updated_at DESC, session_id"
        ).format(table=self._table)
        params = {"tenant": ctx.tenant_id, "user": ctx.user_id, "now": self._clock()}
        with self._conn() as conn:
            rows = conn.execute(query, params).fetchall()
        return [SessionInfo(r[0], int(r[1]), r[2], r[3], int(r[4])) for r in rows]

    def _user_lock(self, conn: psycopg.Connection, ctx: RuntimeContext, *, shared: bool) -> None:
        """The user's advisory lock, until the transaction ends (see the module docstring)."""
        key = f"{self._lock_key}:user:{ctx.tenant_id}/{ctx.user_id}"
        self._db.lock_key(conn, key, shared=shared)

    def count_user(self, ctx: RuntimeContext) -> int:
        """How many session states the user has stored, expired ones included."""
        query = sql.SQL(
            "SELECT count(*) FROM {table} WHERE tenant_id = %(tenant)s AND user_id = %(user)s"
        ).format(table=self._table)
        with self._conn() as conn:
            row = conn.execute(query, {"tenant": ctx.tenant_id, "user": ctx.user_id}).fetchone()
        return int(row[0]) if row else 0

    def erase_user(self, ctx: RuntimeContext) -> int:
        """Delete every session state of the user, after the saves in flight; how many."""
        query = sql.SQL(
            "DELETE FROM {table} WHERE tenant_id = %(tenant)s AND user_id = %(user)s"
        ).format(table=self._table)
        with self._conn() as conn:
            self._user_lock(conn, ctx, shared=False)
            return conn.execute(query, {"tenant": ctx.tenant_id, "user": ctx.user_id}).rowcount

    def tenants(self) -> list[str]:
        """Tenants with a stored session (``ListsUsers``: the scheduler's sweep, when no
        workspace folder names them)."""
        query = sql.SQL("SELECT DISTINCT tenant_id FROM {table} ORDER BY 1").format(
            table=self._table
        )
        with self._conn() as conn:
            return [row[0] for row in conn.execute(query).fetchall()]

    def users(self, tenant_id: str) -> list[str]:
        query = sql.SQL(
            "SELECT DISTINCT user_id FROM {table} WHERE tenant_id = %s ORDER BY 1"
        ).format(table=self._table)
        with self._conn() as conn:
            return [row[0] for row in conn.execute(query, (tenant_id,)).fetchall()]

    def purge_expired(self, keep: KeepExpired | None = None) -> int:
        """Delete the expired rows; with ``keep``, each is asked first (outside any
        transaction) and deleted only at the version it was asked about."""
        now = self._clock()
        if keep is None:
            query = sql.SQL("DELETE FROM {table} WHERE expires_at <= %(now)s").format(
                table=self._table
            )
            with self._conn() as conn:
                return conn.execute(query, {"now": now}).rowcount
        select = sql.SQL(
            "SELECT tenant_id, user_id, session_id, version, state FROM {table} "
            "WHERE expires_at <= %(now)s"
        ).format(table=self._table)
        delete = sql.SQL(
            "DELETE FROM {table} WHERE tenant_id = %(tenant)s AND user_id = %(user)s "
            "AND session_id = %(session)s AND version = %(version)s AND expires_at <= %(now)s"
        ).format(table=self._table)
        with self._conn() as conn:
            rows = conn.execute(select, {"now": now}).fetchall()
        removed = 0
        for tenant, user, session, version, body in rows:
            state = AgentState.from_dict(body)
            state.version = int(version)
            if keep(RuntimeContext(tenant, user, session), state):
                continue
            params = {"tenant": tenant, "user": user, "session": session, "version": version}
            with self._conn() as conn:
                removed += conn.execute(delete, {**params, "now": self._clock()}).rowcount
        return removed

    def close(self) -> None:
        if self._owns_database:
            self._db.close()
