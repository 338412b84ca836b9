"""One PostgreSQL database shared by a process's state stores: a connection pool, errors
turned into the service's own, and schema creation that replicas starting at once agree on.

Every store that keeps replica state in PostgreSQL (``StateSettings``) takes a ``Database``
rather than a DSN, so a process opens one pool, not one per store. A store declares its
tables as ``CREATE ... IF NOT EXISTS`` statements under a name and a version
(``ensure_schema``); the applied versions are kept in ``memory_schema``, so a later version
of a store adds its migration as the next version and every replica applies it once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from memory_service.domain.errors import BackendUnavailableError, ConfigurationError
from memory_service.stores import binary_arrays

DSN_SETTING = "MEMORY_POSTGRES__DSN"
T = TypeVar("T")
SCHEMA_TABLE = "memory_schema"


def describe_dsn(dsn: str) -> str:
    """The DSN without its password, for error messages."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    parts.pop("password", None)
    return " ".join(f"{k}={v}" for k, v in parts.items())


log = logging.getLogger(__name__)
_POOL_LOG = logging.getLogger("psycopg.pool")


class _FailedAttempts(logging.Filter):
    """The pool's failed connection attempts while start-up waits for the database: psycopg
    logs each at WARNING, but the wait's outcome is one line (the error naming the setting),
    so they are held back and the last one's cause goes into that line."""

    def __init__(self, pool_name: str) -> None:
        super().__init__()
        self.pool_name = pool_name
        self.last: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if str(record.msg).startswith("error connecting in") and args[:1] == (self.pool_name,):
            self.last = str(args[1]).splitlines()[0].strip() if len(args) > 1 else None
            return False
        return True


class Database:
    """A psycopg pool over ``dsn``. ``connection()`` is one transaction; a database that
    cannot be reached becomes ``BackendUnavailableError`` (HTTP 503), and at start-up a
    ``ConfigurationError`` that names ``MEMORY_POSTGRES__DSN``."""

    def __init__(
        self,
        dsn: str,
        *,
        pool_min: int = 1,
        pool_max: int = 10,
        connect_timeout_s: float = 10.0,
        schema: str | None = None,
        name: str = "memory-state",
    ) -> None:
        self.where = describe_dsn(dsn)
        self.schema = schema
        self._unchecked = threading.local()  # this thread's next checkout skips the check
        try:
            conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise ConfigurationError(f"{DSN_SETTING}: unparsable DSN ({exc})") from exc
        self._pool = ConnectionPool(
            dsn,
            min_size=pool_min,
            max_size=max(pool_max, pool_min, 1),
            timeout=connect_timeout_s,
            open=False,
            kwargs={"connect_timeout": max(1, int(connect_timeout_s))},
            configure=self._configure,
            # a connection the server dropped while it idled in the pool (a restart, an idle
            # timeout, a failover) is found and replaced before a request gets it: one
            # loopback round trip a checkout, against a 503 for the first request after
            check=self._check,
            name=name,
        )
        attempts = _FailedAttempts(name)
        _POOL_LOG.addFilter(attempts)
        try:
            self._pool.open(wait=True, timeout=connect_timeout_s)
            if schema is not None:
                self._create_schema(schema)
        except PoolTimeout as exc:
            self._pool.close()
            cause = f": {attempts.last}" if attempts.last else ""
            raise ConfigurationError(
                f"{DSN_SETTING}: PostgreSQL ({self.where}) cannot be reached within "
                f"{connect_timeout_s:g}s{cause}"
            ) from exc
        except BaseException:
            self._pool.close()
            raise
        finally:
            _POOL_LOG.removeFilter(attempts)

    def _configure(self, conn: psycopg.Connection) -> None:
        """Each new connection sends ``binary_arrays`` in binary, looks in ``schema`` first
        (tables are created there), and runs a prepared statement on its generic plan: every
        statement here reads one owner's or one key's rows through an index whatever the
        values, and planning a recall's statement anew for each call's values cost about a
        third of running it (``benchmarks/RESULTS.md``)."""
        binary_arrays.register(conn.adapters)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        if self.schema is not None:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        conn.commit()

    def _create_schema(self, schema: str) -> None:
        with self.connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"schema:{schema}",))
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection in one transaction (committed on success, rolled back on an
        error); connection trouble becomes a 503."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as exc:
            raise self._unavailable("no connection", "no connection") from exc
        except psycopg.OperationalError as exc:
            raise self._unavailable("the connection failed", str(exc)) from exc

    def read(self, work: Callable[[psycopg.Connection], T]) -> T:
        """``work`` (reads only: it may run twice) on a pooled connection in autocommit, so a
        read of one statement is one round trip: no check on checkout, no ``BEGIN`` nor
        ``COMMIT``. A connection that proves broken (the server restarted while it idled)
        is dropped and ``work`` runs once more on a checked one, so the first read after the
        database returns succeeds as ``connection``'s does; connection trouble then is a 503."""
        for attempt in (1, 2):
            self._unchecked.on = attempt == 1
            conn: psycopg.Connection | None = None
            try:
                with self._pool.connection() as conn:
                    self._unchecked.on = False
                    conn.autocommit = True
                    try:
                        return work(conn)
                    finally:
                        if not conn.broken and not conn.closed:
                            conn.autocommit = False  # back in the pool as the others are
            except PoolTimeout as exc:
                raise self._unavailable("no connection", "no connection") from exc
            except psycopg.OperationalError as exc:
                if attempt == 1 and conn is not None and (conn.broken or conn.closed):
                    continue
                raise self._unavailable("the connection failed", str(exc)) from exc
            finally:
                self._unchecked.on = False
        raise AssertionError("unreachable")  # pragma: no cover

    def _check(self, conn: psycopg.Connection) -> None:
        """The pool's check of a connection on checkout (one round trip), unless this
        thread's ``read`` takes it unchecked."""
        if not getattr(self._unchecked, "on", False):
            ConnectionPool.check_connection(conn)

    def _unavailable(self, said: str, detail: str) -> BackendUnavailableError:
        """A 503 whose message names the setting, not its value: it reaches callers who
        need no key to cause it (an unknown key is checked against this database). The log
        gets where the database is and the driver's words (``detail``)."""
        log.error("PostgreSQL (%s) is unavailable: %s", self.where, " ".join(detail.split()))
        return BackendUnavailableError(
            f"PostgreSQL is unavailable (the database {DSN_SETTING} names): {said}"
        )

    def ensure_schema(self, name: str, migrations: Sequence[str | sql.Composable]) -> None:
        """Apply the store ``name``'s migrations not applied yet, in order, once per database:
        ``migrations[i]`` is version ``i + 1``. Replicas starting at once serialise on an
        advisory lock, so each version runs exactly once."""
        with self.connection() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{SCHEMA_TABLE}:{name}",))
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, version int NOT NULL)"
                ).format(sql.Identifier(SCHEMA_TABLE))
            )
            row = conn.execute(
                sql.SQL("SELECT version FROM {} WHERE name = %s").format(
                    sql.Identifier(SCHEMA_TABLE)
                ),
                (name,),
            ).fetchone()
            applied = int(row[0]) if row else 0
            for statement in migrations[applied:]:
                conn.execute(statement)
            if len(migrations) > applied:
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {} (name, version) VALUES (%s, %s) "
                        "ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version"
                    ).format(sql.Identifier(SCHEMA_TABLE)),
                    (name, len(migrations)),
                )

    def _locked(self, key: str) -> str:
        """``key`` within this database's schema: advisory locks belong to a whole database,
        and two deployments in two schemas of one database must not contend (a maintenance
        lock held in one would read as ``busy`` in the other)."""
        return f"{self.schema or ''}\x1f{key}"

    def lock_key(self, conn: psycopg.Connection, key: str, *, shared: bool = False) -> None:
        """A transaction-level advisory lock on ``key``, on ``conn``'s transaction: shared for
        writers, exclusive for an erase (which waits for the writers' transactions)."""
        name = "pg_advisory_xact_lock_shared" if shared else "pg_advisory_xact_lock"
        query = sql.SQL("SELECT {}(hashtext(%s))").format(sql.Identifier(name))
        conn.execute(query, (self._locked(key),))

    @contextmanager
    def advisory_lock(self, key: str, *, wait: bool = True) -> Iterator[bool]:
        """A session-level advisory lock on ``key`` held for the block, across replicas;
        yields False (without the lock) when ``wait`` is off and another holder has it. The
        lock goes with the connection, so a replica that dies releases it."""
        key = self._locked(key)
        with self.connection() as conn:
            conn.autocommit = True  # the lock outlives statements, not one transaction
            got = False
            try:
                if wait:
                    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (key,))
                    got = True
                else:
                    query = "SELECT pg_try_advisory_lock(hashtext(%s))"
                    row = conn.execute(query, (key,)).fetchone()
                    got = bool(row and row[0])
                yield got
            finally:
                if got:
                    conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
                conn.autocommit = False  # back in the pool as every other connection is

    def close(self) -> None:
        self._pool.close()
