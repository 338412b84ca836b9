"""The PostgreSQL backend when its database fails: unreachable at start, without pgvector,
and a connection cut in the middle of a write."""

from __future__ import annotations

import psycopg
import pytest

from memory_service.cli import main
from memory_service.config.settings import PostgresSettings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import BackendUnavailableError, ConfigurationError
from memory_service.domain.facts import Fact
from memory_service.longterm.postgres.backend import open_postgres
from tests.support.pgvector import schema_for, socket_path
from tests.support.postgres import PG_DSN
from tests.support.relay import Relay

ALICE = RuntimeContext("acme", "alice")


@pytest.mark.postgres
def test_an_unreachable_database_at_start_is_one_line_naming_the_setting(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("MEMORY_LONGTERM__BACKEND", "postgres")
    monkeypatch.setenv("MEMORY_POSTGRES__DSN", "postgresql://postgres:s3cret@127.0.0.1:1/x")
    monkeypatch.setenv("MEMORY_POSTGRES__CONNECT_TIMEOUT_S", "1")
    code = main(["search", "--workspace", str(tmp_path / "ws"), "--user", "alice", "tea"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("memory-service: error: MEMORY_POSTGRES__DSN") and "s3cret" not in err


@pytest.mark.postgres
def test_a_server_without_pgvector_says_who_must_create_the_extension(embedder, pg_schema):
    """The machine's own PostgreSQL has no pgvector package at all."""
    settings = PostgresSettings(dsn=PG_DSN, schema_name=pg_schema, connect_timeout_s=5)
    with pytest.raises(ConfigurationError) as err:
        open_postgres(settings, embedder)
    message = err.value.message
    assert "\n" not in message and "`CREATE EXTENSION vector`" in message
    assert "superuser" in message and "MEMORY_POSTGRES__DSN" in message


def test_a_role_that_may_not_create_pgvector_is_told_who_may(embedder, pgvector_dsn, tmp_path):
    """pgvector is on the server but not in the database, and the role is no superuser."""
    role, database = "memory_plain", "no_vector_" + schema_for(tmp_path)[2:12]
    with psycopg.connect(pgvector_dsn, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {role}")
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"CREATE DATABASE {database} OWNER {role}")
    dsn = pgvector_dsn.replace("postgres:@/postgres", f"{role}:@/{database}")
    with pytest.raises(ConfigurationError) as err:
        open_postgres(PostgresSettings(dsn=dsn), embedder)
    message = err.value.message
    assert f"role {role} may not create it" in message and "superuser" in message
    assert f"`CREATE EXTENSION vector` in database {database}" in message


def _count(memory, ctx=ALICE) -> int:
    return memory.count_user(ctx)


# the new fact's row on its way (the insert's parameters: its statement was prepared by the
# first record, so its text is not sent again), or the commit
@pytest.mark.parametrize("statement", [b"Alice rides a bike", b"COMMIT"])
def test_a_connection_cut_mid_write_writes_nothing_and_the_next_request_succeeds(
    embedder, pgvector_dsn, tmp_path, statement
):
    """The relay cuts when the write's row (or its commit) passes: the record fails
    as a 503 (``backend_unavailable``), none of its facts is stored, and once the database
    is back the first record goes through (no dead pooled connection answers it)."""
    relay = Relay(socket_path()).start()
    dsn = f"postgresql://postgres@127.0.0.1:{relay.port}/postgres"
    settings = PostgresSettings(
        dsn=dsn, schema_name=schema_for(tmp_path), connect_timeout_s=2, pool_max=2
    )
    memory = open_postgres(settings, embedder)
    try:
        memory.record(ALICE, [Fact("Alice drinks green tea", key="drink")])
        relay.cut_on = statement
        batch = [Fact("Alice drinks black coffee", key="drink"), Fact("Alice rides a bike")]
        with pytest.raises(BackendUnavailableError) as err:
            memory.record(ALICE, batch)
        assert relay.tripped.is_set() and err.value.http_status == 503
        relay.start()  # the database is reachable again, on the same port
        if statement == b"COMMIT":
            # a commit cut on the way may have been applied or not: all of it, or none
            assert _count(memory) in (1, 3)
        else:
            assert _count(memory) == 1
            (drink,) = memory.list(ALICE).items
            assert drink.text == "Alice drinks green tea"  # not closed by the lost write
        results = memory.record(ALICE, [Fact("Alice plays chess")])
        assert results[0].status == "created"
        open_facts = [f.text for f in memory.list(ALICE).items]
        assert open_facts.count("Alice plays chess") == 1
        assert len([t for t in open_facts if "drinks" in t]) == 1  # one value on the key
    finally:
        memory.close()
        relay.cut()
