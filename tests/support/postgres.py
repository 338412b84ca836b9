"""The test PostgreSQL: one DSN for every test and fixture that needs it.

``MEMORY_TEST_POSTGRES_DSN`` names the database (default ``test`` on 127.0.0.1:5432). Under
pytest-xdist each worker uses a database of its own beside it (``test_gw0``, ``test_gw1``,
made by ``ensure_database`` at the start of a run): every test already has its own schema or
table, but advisory locks and ``pg_stat_activity`` belong to a whole database, and two workers'
tests of one user's maintenance or one user's write would otherwise meet.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from memory_service.stores.shortterm.session_state.postgres import PostgresAgentStateStore

BASE_DSN = os.environ.get("MEMORY_TEST_POSTGRES_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def _with_database(dsn: str, suffix: str) -> tuple[str, str]:
    """``dsn`` with ``_<suffix>`` added to its database name; and that name."""
    if dsn.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(dsn)
        name = f"{parts.path.lstrip('/') or 'postgres'}_{suffix}"
        return urlunsplit(parts._replace(path=f"/{name}")), name
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"{conninfo_to_dict(dsn).get('dbname') or 'postgres'}_{suffix}"
    return make_conninfo(dsn, dbname=name), name


_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
PG_DSN, _DATABASE = _with_database(BASE_DSN, _WORKER) if _WORKER else (BASE_DSN, None)


def ensure_database() -> None:
    """Create this worker's database if it is missing (no-op outside xdist). Quiet when
    PostgreSQL cannot be reached: the tests that need it then fail and say so."""
    if _DATABASE is None:
        return
    import psycopg
    from psycopg import sql

    try:
        with psycopg.connect(BASE_DSN, autocommit=True, connect_timeout=5) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (_DATABASE,)
            ).fetchone()
            if not found:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(_DATABASE)))
    except psycopg.Error:
        pass


def postgres_state_store(
    *,
    schema: str | None = None,
    pool_min: int = 1,
    pool_max: int = 4,
    dsn: str | None = None,
    **options: Any,
) -> PostgresAgentStateStore:
    """A session-state store on a ``Database`` of its own over the test PostgreSQL (closed
    with the store), as ``stores.build.postgres_session_states`` builds one."""
    from memory_service.stores.database import Database
    from memory_service.stores.shortterm.session_state.postgres import PostgresAgentStateStore

    database = Database(dsn or PG_DSN, schema=schema, pool_min=pool_min, pool_max=pool_max)
    try:
        return PostgresAgentStateStore(database, owns_database=True, **options)
    except BaseException:
        database.close()
        raise
