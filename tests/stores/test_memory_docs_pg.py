"""MEMORY.md and its snapshots of the Qdrant backend in PostgreSQL (``MEMORY_STATE__BACKEND``):
what one replica consolidates, another one over another workspace reads (the harness prompt,
memory_get and memory_search, the flush's view); neither workspace holds a MEMORY.md or a
snapshot; erase and forget remove them; agents, the tenant and other tenants keep their own.
Real parts throughout: PostgreSQL (a schema per test), qdrant-client's local mode, the
embedding model, and the loopback LLM server behind the openai SDK."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.errors import BackendUnavailableError, InvalidInputError
from memory_service.domain.facts import Fact
from memory_service.pipeline.memory_md import plain_memory
from memory_service.services import (
    Services,
    build_erasure,
    build_harness,
    build_maintenance,
    build_services,
)
from memory_service.stores.memory_docs import Snapshot
from memory_service.stores.memory_docs.files import FilesMemoryDocs
from tests.support.llm_server import text
from tests.support.postgres import PG_DSN

ALICE = RuntimeContext("acme", "alice", "s1")
BOB = RuntimeContext("acme", "bob", "s1")
GLOBEX_ALICE = RuntimeContext("globex", "alice", "s1")
SUPPORT = scope_context("acme", "agent", "support")
SHARED = scope_context("acme", "tenant")

FIRST = "# Long-term memory\n\n## Facts\n\n- Alice keeps an axolotl named Wobbleton\n"
SECOND = FIRST + "- Alice rows a kayak called Brindlewood\n"

USER_KEY = "acme-user-key-0123456789abcdef"
KEYS = {USER_KEY: {"tenant": "acme", "role": "user"}}
USER = {"Authorization": f"Bearer {USER_KEY}"}

Replica = Callable[..., Services]


@pytest.fixture
def replica(tmp_path, embedder, pg_schema, monkeypatch) -> Iterator[Replica]:
    """``replica(name, llm=server or None, backend="qdrant")``: services over a workspace of
    their own, sharing the test's PostgreSQL schema, as two replicas behind a balancer do."""
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    opened: list[Services] = []

    def build(name: str, llm=None, backend: str = "qdrant") -> Services:
        settings = load_settings(
            workspace=tmp_path / name,
            longterm={"backend": backend, "track_access": False},
            qdrant={"url": ":memory:"},
            state={"backend": "postgres"},
            postgres={"dsn": PG_DSN, "schema_name": pg_schema, "pool_max": 4},
            llm={"base_url": llm.base_url, "model": "chat", "context_window": 8192} if llm else {},
        )
        services = build_services(settings, embedder=embedder)
        opened.append(services)
        return services

    yield build
    for services in opened:
        services.close()


def _rows(schema: str) -> list[tuple[str, str, str, str, str]]:
    """(tenant, scope, owner, name, body) of every stored document, in key order (none when
    the table was never created)."""
    with psycopg.connect(PG_DSN) as conn:
        table = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".memory_docs',)).fetchone()
        if table is None or table[0] is None:
            return []
        return conn.execute(
            f'SELECT tenant_id, scope, owner, name, body FROM "{schema}".memory_docs '
            "ORDER BY tenant_id, scope, owner, name"
        ).fetchall()


def _memory_files(workspace: Path) -> list[str]:
    """MEMORY.md files and their snapshots anywhere in ``workspace``."""
    if not workspace.exists():
        return []
    found = [p for p in workspace.rglob("*") if p.name.startswith("MEMORY.")]
    return sorted(str(p.relative_to(workspace)) for p in found)


def _consolidate(services: Services, ctx: RuntimeContext, *facts: str) -> None:
    services.longterm.record(ctx, [Fact(f, importance=8) for f in facts])
    report = build_maintenance(services).run_user(ctx, force=True)
    assert report.status == "ran" and report.consolidation, report
    assert report.consolidation.written, report.consolidation


def test_one_replica_consolidates_and_another_reads_it_with_no_file_on_either(
    replica, llm_server, script, pg_schema
):
    a, b = replica("a", llm_server), replica("b", llm_server)
    script.chat(text(FIRST))
    _consolidate(a, ALICE, "Alice keeps an axolotl named Wobbleton")
    script.chat(text(SECOND))
    a.longterm.record(ALICE, [Fact("Alice rows a kayak called Brindlewood", importance=8)])
    second = build_maintenance(a).run_user(ALICE, force=True).consolidation
    assert second is not None and second.written and second.snapshot

    rows = _rows(pg_schema)
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("acme", "user", "alice", "MEMORY.md"),
        ("acme", "user", "alice", second.snapshot),
    ]
    assert second.snapshot.startswith("memory/archive/MEMORY.")
    # the text the model wrote; consolidation adds each bullet's sources ("of") as comments
    assert plain_memory(rows[0][4]) == SECOND and plain_memory(rows[1][4]) == FIRST
    assert '"of":' in rows[0][4]

    tools = build_harness(b).tools
    assert "Brindlewood" in tools.memory_get(ALICE, "MEMORY.md")
    old = tools.memory_get(ALICE, second.snapshot)
    assert "Wobbleton" in old and "Brindlewood" not in old
    assert "Source: MEMORY.md#6: Alice rows a kayak called Brindlewood" in tools.memory_search(
        ALICE, "kayak"
    )

    script.chat(text("You row Brindlewood."))
    outcome = build_harness(b).call(ALICE, "Which boat do I row?")
    assert outcome.prompt.memory_md_tokens > 0
    chat_system = script.requests["chat"][-1].messages[0]["content"]
    assert "MEMORY.md" in chat_system and "Alice rows a kayak called Brindlewood" in chat_system
    flushed = script.requests["flush"][-1].prompt_text
    assert "<memory_md" in flushed and "Alice rows a kayak called Brindlewood" in flushed

    assert _memory_files(a.settings.workspace) == []
    assert _memory_files(b.settings.workspace) == []


def test_the_files_backend_keeps_its_memory_md_a_file_with_postgres_state(replica, pg_schema):
    files = replica("files", backend="files")
    _consolidate(files, ALICE, "Alice keeps an axolotl named Wobbleton")
    assert _memory_files(files.settings.workspace) == ["tenants/acme/users/alice/MEMORY.md"]
    assert _rows(pg_schema) == []


def test_scopes_keep_their_own_documents_and_tenants_never_see_each_other(replica, pg_schema):
    a, b = replica("a"), replica("b")  # no model: deterministic consolidation
    _consolidate(a, ALICE, "Alice's cat is called Tom")
    _consolidate(a, SUPPORT, "Refunds need a manager")
    _consolidate(a, SHARED, "Lunch is at noon")
    _consolidate(a, GLOBEX_ALICE, "Globex Alice flies gliders")

    owners = {(r[0], r[1], r[2]) for r in _rows(pg_schema)}
    assert owners == {
        ("acme", "user", "alice"),
        ("acme", "agent", "support"),
        ("acme", "tenant", ""),
        ("globex", "user", "alice"),
    }
    tools = build_harness(b).tools
    assert "Tom" in tools.memory_get(ALICE, "MEMORY.md")
    for other in ("Refunds", "Lunch", "gliders"):
        assert other not in tools.memory_get(ALICE, "MEMORY.md")
    assert "Refunds" in tools.memory_get(SUPPORT, "MEMORY.md")
    assert "Lunch" in tools.memory_get(SHARED, "MEMORY.md")
    globex = tools.memory_get(GLOBEX_ALICE, "MEMORY.md")
    assert "gliders" in globex and "Tom" not in globex
    with pytest.raises(LookupError, match="no memory file"):
        tools.memory_get(BOB, "MEMORY.md")  # no document: as a missing file

    receipt = build_erasure(b).erase(ALICE, by="test")
    assert receipt.removed["memory_md.postgres"] == 1
    assert {(r[0], r[1], r[2]) for r in _rows(pg_schema)} == owners - {("acme", "user", "alice")}
    assert "gliders" in tools.memory_get(GLOBEX_ALICE, "MEMORY.md")


def test_erase_removes_memory_md_and_its_snapshots_and_leaves_another_user(
    replica, llm_server, script, pg_schema
):
    a, b = replica("a", llm_server), replica("b", llm_server)
    script.chat(text(FIRST), text(SECOND), text("# Bob\n\n- Bob plays the oboe\n"))
    _consolidate(a, ALICE, "Alice keeps an axolotl named Wobbleton")
    _consolidate(a, ALICE, "Alice rows a kayak called Brindlewood")
    _consolidate(a, BOB, "Bob plays the oboe")
    erasure = build_erasure(b)
    assert erasure.inventory(ALICE)["memory_md.postgres"] == 2

    receipt = erasure.erase(ALICE, by="test")

    assert receipt.removed["memory_md.postgres"] == 2  # MEMORY.md and its snapshot
    assert [(r[2], r[3]) for r in _rows(pg_schema)] == [("bob", "MEMORY.md")]
    assert build_harness(a).prompts.system_prompt(ALICE, "boat").memory_md_tokens == 0
    assert "oboe" in build_harness(a).tools.memory_get(BOB, "MEMORY.md")
    assert _memory_files(a.settings.workspace) == _memory_files(b.settings.workspace) == []


def test_the_api_drops_a_deleted_fact_from_memory_md_and_forget_drops_the_documents(
    replica, pg_schema
):
    a = replica("a")
    _consolidate(a, ALICE, "Alice keeps an axolotl named Wobbleton")
    _consolidate(a, ALICE, "Alice rows a kayak called Brindlewood")
    kayak = next(f for f in a.longterm.list(ALICE).items if "kayak" in f.text)
    with TestClient(create_app(a, ApiKeyRing(KEYS))) as client:
        deleted = client.delete(f"/v1/memories/{kayak.id}?user_id=alice", headers=USER)
        assert deleted.status_code == 200, deleted.text
        memory_md = a.memory_docs.read(ALICE) if a.memory_docs else ""
        assert "Wobbleton" in memory_md and "Brindlewood" not in memory_md

        forgotten = client.delete("/v1/users/alice/memories", headers=USER)
        assert forgotten.status_code == 200, forgotten.text
    assert _rows(pg_schema) == []


def test_a_replica_starting_with_postgres_state_moves_the_workspace_files_there(
    replica, pg_schema, tmp_path
):
    a = replica("a")
    assert a.memory_docs is not None
    a.memory_docs.write(BOB, "- Bob plays the oboe\n")  # stored by another replica already
    before = FilesMemoryDocs(tmp_path / "b")  # the workspace of a Qdrant deployment with files
    before.write(ALICE, SECOND, snapshot=Snapshot("20260101T000000", FIRST))
    before.write(SUPPORT, "- Refunds need a manager\n")
    before.write(BOB, "- Bob plays the tuba\n")  # stale: the stored one wins

    b = replica("b")

    assert _memory_files(tmp_path / "b") == []
    assert {(r[1], r[2], r[3]): r[4] for r in _rows(pg_schema)} == {
        ("user", "alice", "MEMORY.md"): SECOND,
        ("user", "alice", "memory/archive/MEMORY.20260101T000000.md"): FIRST,
        ("agent", "support", "MEMORY.md"): "- Refunds need a manager\n",
        ("user", "bob", "MEMORY.md"): "- Bob plays the oboe\n",
    }
    assert "Brindlewood" in build_harness(b).tools.memory_get(ALICE, "MEMORY.md")


def test_text_postgresql_cannot_hold_is_replaced_and_a_bad_stamp_is_refused(replica, pg_schema):
    docs = replica("a").memory_docs
    assert docs is not None
    docs.write(ALICE, "- Alice's code is 12\x0034 \udcff\n")  # a NUL, a lone surrogate
    assert docs.read(ALICE) == "- Alice's code is 12\ufffd34 \ufffd\n"
    with pytest.raises(InvalidInputError, match="YYYYMMDDTHHMMSS") as refused:
        docs.write(ALICE, SECOND, snapshot=Snapshot("../../x", FIRST))
    assert refused.value.code == "invalid_snapshot"
    assert [r[3] for r in _rows(pg_schema)] == ["MEMORY.md"]  # nothing else written


def test_postgres_lost_mid_write_is_a_503_and_nothing_half_written(replica, pg_schema):
    a = replica("a")
    _consolidate(a, ALICE, "Alice keeps an axolotl named Wobbleton")
    before = _rows(pg_schema)
    a.longterm.record(ALICE, [Fact("Alice rows a kayak called Brindlewood", importance=8)])
    failure: list[BaseException] = []

    def consolidate() -> None:
        try:
            build_maintenance(a).consolidate_user(ALICE)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    with psycopg.connect(PG_DSN) as holder:  # holds MEMORY.md's row: the write waits on it
        holder.execute(
            f'SELECT 1 FROM "{pg_schema}".memory_docs WHERE name = %s FOR UPDATE', ("MEMORY.md",)
        )
        writer = threading.Thread(target=consolidate)
        writer.start()
        pid = _waiting_writer(holder)  # the snapshot is written, MEMORY.md's update waits
        holder.execute("SELECT pg_terminate_backend(%s)", (pid,))
        writer.join(timeout=30)
        holder.rollback()

    [error] = failure
    assert isinstance(error, BackendUnavailableError)
    assert error.http_status == 503 and error.code == "backend_unavailable"
    assert _rows(pg_schema) == before  # no snapshot without its MEMORY.md
    assert "Brindlewood" not in (a.memory_docs.read(ALICE) if a.memory_docs else "")


def _waiting_writer(conn: psycopg.Connection) -> int:
    """The backend whose MEMORY.md upsert waits on a row lock (after its snapshot's)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with psycopg.connect(PG_DSN, autocommit=True) as watcher:
            row = watcher.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database() AND query LIKE 'INSERT INTO memory_docs%%' "
                "AND pid <> %s",
                (conn.info.backend_pid,),
            ).fetchone()
        if row:
            return int(row[0])
        time.sleep(0.05)
    raise AssertionError("the write never waited on MEMORY.md's row")
