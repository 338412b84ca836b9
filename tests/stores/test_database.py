"""The shared PostgreSQL of replica state: migrations once, locks across connections, and a
start-up error that names the setting to fix."""

from __future__ import annotations

import threading

import psycopg
import pytest

from memory_service.domain.errors import ConfigurationError
from memory_service.stores.database import Database
from tests.support.postgres import PG_DSN


def test_migrations_apply_once_and_in_order(pg_database: Database) -> None:
    steps = ["CREATE TABLE notes (id int PRIMARY KEY)", "ALTER TABLE notes ADD COLUMN body text"]
    pg_database.ensure_schema("notes", steps[:1])
    pg_database.ensure_schema("notes", steps[:1])  # applied already: nothing runs twice
    pg_database.ensure_schema("notes", steps)  # the next version only
    with pg_database.connection() as conn:
        conn.execute("INSERT INTO notes (id, body) VALUES (1, 'x')")
        version = conn.execute("SELECT version FROM memory_schema WHERE name = 'notes'").fetchone()
    assert version == (2,)


def test_replicas_starting_at_once_create_the_tables_once(pg_schema: str) -> None:
    databases = [Database(PG_DSN, schema=pg_schema, pool_max=2) for _ in range(4)]
    errors: list[BaseException] = []

    def start(db: Database) -> None:
        try:
            db.ensure_schema("race", ["CREATE TABLE race (id int)"])
        except BaseException as exc:  # a second CREATE TABLE would raise
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(db,)) for db in databases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for db in databases:
        db.close()
    assert errors == []


def test_a_schema_keeps_its_tables_to_itself(pg_database: Database, pg_schema: str) -> None:
    pg_database.ensure_schema("mine", ["CREATE TABLE mine (id int)"])
    with pg_database.connection() as conn:
        row = conn.execute(
            "SELECT table_schema FROM information_schema.tables WHERE table_name = 'mine'"
        ).fetchall()
    assert row == [(pg_schema,)]


def test_an_advisory_lock_is_held_across_connections(pg_database: Database) -> None:
    with pg_database.advisory_lock("user:acme/alice", wait=False) as first:
        with pg_database.advisory_lock("user:acme/alice", wait=False) as second:
            assert (first, second) == (True, False)
        with pg_database.advisory_lock("user:acme/bob", wait=False) as other:
            assert other is True
    with pg_database.advisory_lock("user:acme/alice", wait=False) as again:
        assert again is True  # released at the end of the block
    with pg_database.connection() as conn:  # the pooled connection is transactional again
        assert conn.autocommit is False


@pytest.mark.slow  # waits out the connect timeout
def test_an_unreachable_database_names_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="MEMORY_POSTGRES__DSN") as err:
        Database("postgresql://postgres@127.0.0.1:1/test", connect_timeout_s=1)
    assert "password" not in str(err.value)


def test_an_unparsable_dsn_names_the_setting() -> None:
    with pytest.raises(ConfigurationError, match="MEMORY_POSTGRES__DSN"):
        Database("garbage = = x")


def test_the_first_call_after_the_database_dropped_its_connections_succeeds(
    pg_schema: str,
) -> None:
    """A restart (or an idle timeout, a failover) closes every pooled connection on the
    server's side; the pool finds out only when it hands one out, and the request that got it
    would answer 503 although the database is back."""
    database = Database(PG_DSN, schema=pg_schema, pool_min=2, pool_max=2)
    try:
        with database.connection() as a, database.connection() as b:
            pids = [c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in (a, b)]
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        for _ in range(2):  # each pooled connection was dropped: neither may fail a call
            with database.connection() as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
                assert conn.execute("SELECT pg_backend_pid()").fetchone()[0] not in pids
    finally:
        database.close()


def test_a_read_after_the_database_dropped_its_connections_succeeds(pg_schema: str) -> None:
    """``read`` takes a pooled connection without the checkout's check (one round trip per
    read): a connection the server dropped meanwhile fails the read's statement, and the
    read runs again on a fresh connection instead of answering 503."""
    database = Database(PG_DSN, schema=pg_schema, pool_min=2, pool_max=2)
    try:
        with database.connection() as a, database.connection() as b:
            pids = [c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in (a, b)]
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))
        tries: list[int] = []

        def work(conn: psycopg.Connection) -> int:
            tries.append(1)
            return conn.execute("SELECT pg_backend_pid()").fetchone()[0]

        for _ in range(2):  # each pooled connection was dropped: neither may fail a read
            assert database.read(work) not in pids
        assert len(tries) > 2  # a dropped connection was used, found dead and replaced
        # a read leaves no transaction open and hands the connection back as it found it
        with database.connection() as conn:
            assert not conn.autocommit
    finally:
        database.close()


def test_a_read_runs_outside_a_transaction(pg_database: Database) -> None:
    """One statement, one round trip: no ``BEGIN`` before it nor ``COMMIT`` after it."""

    def status(conn: psycopg.Connection) -> tuple[bool, object]:
        conn.execute("SELECT 1").fetchone()
        return conn.autocommit, conn.info.transaction_status

    assert pg_database.read(status) == (True, psycopg.pq.TransactionStatus.IDLE)
