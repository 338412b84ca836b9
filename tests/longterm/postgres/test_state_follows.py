"""With the facts in PostgreSQL (``MEMORY_LONGTERM__BACKEND=postgres``) and the replica state
left at ``auto``, the state lives in PostgreSQL too, whatever the short-term backend: two
services over one database with workspaces of their own share a user's erasure."""

from __future__ import annotations

import pytest

from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import UserErasedError
from memory_service.domain.facts import Fact, utcnow
from memory_service.services import build_services
from tests.support.pgvector import schema_for

pytestmark = pytest.mark.postgres

ALICE = RuntimeContext("acme", "alice")


def _services(tmp_path, name, embedder, pgvector_dsn, monkeypatch):
    monkeypatch.setenv("MEMORY_WORKSPACE", str(tmp_path / name))
    monkeypatch.setenv("MEMORY_LONGTERM__BACKEND", "postgres")
    monkeypatch.setenv("MEMORY_SHORTTERM__BACKEND", "files")
    monkeypatch.delenv("MEMORY_STATE__BACKEND", raising=False)
    monkeypatch.setenv("MEMORY_POSTGRES__DSN", pgvector_dsn)
    monkeypatch.setenv("MEMORY_POSTGRES__SCHEMA_NAME", schema_for(tmp_path))
    return build_services(load_settings(), embedder=embedder)


def test_an_erasure_on_one_service_holds_on_another_over_the_same_facts(
    tmp_path, embedder, pgvector_dsn, monkeypatch
):
    one = _services(tmp_path, "one", embedder, pgvector_dsn, monkeypatch)
    other = _services(tmp_path, "other", embedder, pgvector_dsn, monkeypatch)
    try:
        assert "replica state: postgres" in one.describe_storage()
        one.longterm.record(ALICE, [Fact("Alice keeps bees")])
        one.state.tombstones.begin(ALICE, utcnow())
        # the other service's workspace holds no tombstone: it reads the shared one
        assert other.state.tombstones.refuses(ALICE)
        with pytest.raises(UserErasedError):
            other.longterm.record(ALICE, [Fact("Alice keeps goats")])
    finally:
        one.close()
        other.close()
