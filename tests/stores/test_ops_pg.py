"""Replica state in PostgreSQL (``MEMORY_STATE__BACKEND=postgres``): two services over two
workspaces and one schema stand for two replicas behind a load balancer. Tombstones, dead
letters (and their replay), usage, maintenance markers and the per-user maintenance lock are
shared through the real PostgreSQL, and none of it is left in either workspace."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memory_service.api.app import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.cli import main
from memory_service.config import load_settings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import BackendUnavailableError, UserErasedError
from memory_service.domain.facts import Fact, utcnow
from memory_service.domain.messages import Msg
from memory_service.llm import Usage
from memory_service.pipeline.replay import replay_dead_letters, users_with_dead_letters
from memory_service.services import Services, build_erasure, build_maintenance, build_services
from memory_service.stores.dead_letters.record import DeadLetterRecord
from memory_service.stores.maintenance_state.postgres import PostgresMaintenanceState
from tests.support.llm_server import delayed, error, text
from tests.support.postgres import PG_DSN

OWNER = RuntimeContext("acme", "alice")
CTX = OWNER.with_session("s1")
PEANUTS = "- [fact|10|user.allergy] The user is allergic to peanuts."
ADMIN_KEY = "acme-admin-key-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_LONGTERM__BACKEND"):
        monkeypatch.delenv(name, raising=False)
    for name in ("BASE_URL", "API_KEY", "MODEL", "MEMORY_MODEL"):
        monkeypatch.delenv(f"MEMORY_LLM__{name}", raising=False)


def _replica(workspace: Path, embedder, schema: str, llm_url: str) -> Services:
    """One replica: its own workspace, facts in a Qdrant of its own (nothing on disk), state
    in the shared schema."""
    settings = load_settings(
        workspace=workspace,
        longterm={"backend": "qdrant", "track_access": False},
        qdrant={"url": ":memory:"},
        state={"backend": "postgres"},
        postgres={"dsn": PG_DSN, "schema_name": schema, "pool_min": 1, "pool_max": 4},
        llm={"base_url": llm_url, "model": "chat", "max_retries": 0},
    )
    return build_services(settings, embedder=embedder)


@pytest.fixture
def replicas(tmp_path, embedder, pg_schema, llm_server, script) -> Iterator[tuple[Services, ...]]:
    pair = tuple(
        _replica(tmp_path / name, embedder, pg_schema, llm_server.base_url) for name in "ab"
    )
    yield pair
    for services in pair:
        services.close()


def _files(*workspaces: Path) -> list[str]:
    """Every file in the workspaces (none expected: the state is in PostgreSQL)."""
    return sorted(str(p) for ws in workspaces if ws.exists() for p in ws.rglob("*") if p.is_file())


def _fail_a_flush(services: Services, script, ctx: RuntimeContext = CTX) -> None:
    """A flush the model answers with errors (every try): its messages become a dead letter."""
    script.flush(*[error(400, "scripted outage", type="invalid_request_error")] * 2)
    state = AgentState(session_id=ctx.session_id)
    state.append(Msg.user("I am allergic to peanuts."), Msg.assistant("Noted."))
    assert services.flush is not None
    assert services.flush.flush(state, ctx, "pre_compaction").status == "failed"


def _letter(ctx: RuntimeContext) -> DeadLetterRecord:
    return DeadLetterRecord.of_flush(
        ctx,
        reason="post_call",
        error="down",
        attempts=1,
        messages=[Msg.user("hello")],
        at=utcnow(),
    )


# -- tombstones ------------------------------------------------------------------------------


def test_an_erase_on_one_replica_refuses_the_other_replicas_writes(replicas, script):
    a, b = replicas
    _fail_a_flush(b, script)  # the user has data on B's side
    in_flight = RuntimeContext("acme", "alice", "s1")  # work that began before the erase
    receipt = build_erasure(a).erase(OWNER, by="cli")
    assert receipt.removed["dead_letters"] == 1

    assert b.state.tombstones.refuses(in_flight)
    with pytest.raises(UserErasedError):
        b.state.dead_letters.box(in_flight).append(_letter(in_flight), in_flight)
    assert build_maintenance(b).run_user(in_flight, force=True).status == "erased"
    assert b.memory_docs is not None
    with pytest.raises(UserErasedError):  # MEMORY.md (in PostgreSQL) checks the same tombstone
        b.memory_docs.write(in_flight, "- [fact|5] The user is allergic to peanuts.")
    assert b.shortterm is not None
    with pytest.raises(UserErasedError):  # and so does the session log (in PostgreSQL)
        b.shortterm.log.append(in_flight, [Msg.user("I am allergic to peanuts.")])
    assert b.state.dead_letters.count_user(OWNER) == 0  # nothing came back

    fresh = RuntimeContext("acme", "alice", "s2")  # a new request after the erase: served
    b.state.dead_letters.box(fresh).append(_letter(fresh), fresh)
    assert a.state.dead_letters.count_user(OWNER) == 1
    assert _files(a.settings.workspace, b.settings.workspace) == []


# -- dead letters and replay -----------------------------------------------------------------


def test_a_dead_letter_left_by_one_replica_is_replayed_by_the_other(replicas, script):
    a, b = replicas
    _fail_a_flush(a, script)
    assert b.flush is not None
    assert users_with_dead_letters(b.settings.workspace, None, b.flush.dead_letters) == [OWNER]

    with a.state.dead_letters.box(OWNER).replaying() as alone:  # A is replaying this user
        assert alone
        busy = replay_dead_letters(b.flush, OWNER)
    assert busy.status == "busy"

    script.flush(text(PEANUTS, prompt_tokens=100, completion_tokens=20))  # healthy again
    report = replay_dead_letters(b.flush, OWNER)

    assert report.status == "replayed" and report.counts["facts"] == 1
    assert "allergic to peanuts" in script.requests["flush"][-1].prompt_text
    [hit] = b.longterm.retrieve(OWNER, "peanut allergy", 1)
    assert hit.fact.text == "The user is allergic to peanuts." and hit.fact.session_id == "s1"
    assert a.state.dead_letters.count_user(OWNER) == 0  # gone for every replica
    usage = a.state.usage.report("acme")  # the failure (A) and the replay (B), in one report
    assert usage["counters"]["flush_dead_letters"] == 1
    assert usage["tokens"]["flush_replay"]["total_tokens"] == 120
    assert _files(a.settings.workspace, b.settings.workspace) == []


def test_the_cli_lists_and_replays_dead_letters_from_a_fresh_workspace(
    replicas, script, tmp_path, pg_schema, llm_server, monkeypatch, capsys
):
    a, _ = replicas
    _fail_a_flush(a, script)
    monkeypatch.setenv("MEMORY_STATE__BACKEND", "postgres")
    monkeypatch.setenv("MEMORY_POSTGRES__DSN", PG_DSN)
    monkeypatch.setenv("MEMORY_POSTGRES__SCHEMA_NAME", pg_schema)
    fresh = tmp_path / "fresh"  # a third replica, that never saw the user
    base = ["maintain", "--replay-dead-letters", "--workspace", str(fresh)]

    assert main([*base, "--dry-run"]) == 0
    assert (
        "listed     acme/alice  entries=1 malformed=0  pre_compaction=1" in capsys.readouterr().out
    )

    monkeypatch.setenv("MEMORY_LLM__BASE_URL", llm_server.base_url)
    monkeypatch.setenv("MEMORY_LLM__API_KEY", "test-key")
    monkeypatch.setenv("MEMORY_LLM__MODEL", "test-model")
    monkeypatch.setenv("MEMORY_LLM__MAX_RETRIES", "0")
    monkeypatch.setenv("MEMORY_LONGTERM__BACKEND", "qdrant")
    monkeypatch.setenv("MEMORY_QDRANT__URL", ":memory:")
    script.flush(text(PEANUTS))
    assert main(base) == 0
    assert "replayed   acme/alice  replayed=1 failed=0" in capsys.readouterr().out
    assert a.state.dead_letters.count_user(OWNER) == 0
    assert _files(fresh) == []


# -- usage -----------------------------------------------------------------------------------


def test_usage_recorded_on_two_replicas_at_once_sums(replicas):
    a, b = replicas
    start = threading.Barrier(2)

    def spend(services: Services) -> None:
        start.wait()
        for _ in range(25):
            services.state.usage.record(
                "acme", tokens={"chat": Usage(10, 2, 12)}, counters={"flush_runs": 1}
            )

    threads = [threading.Thread(target=spend, args=(s,)) for s in (a, b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    with TestClient(create_app(b, ApiKeyRing({ADMIN_KEY: {"tenant": "acme"}}))) as client:
        report = client.get("/v1/usage", headers=ADMIN).json()
    chat = {"calls": 50, "prompt_tokens": 500, "completion_tokens": 100, "total_tokens": 600}
    assert report["tokens"] == {"chat": chat} and report["total"] == chat
    assert report["counters"] == {"flush_runs": 50} and report["updated_at"]
    assert b.state.usage.report("globex")["tokens"] == {}  # per tenant
    assert _files(a.settings.workspace, b.settings.workspace) == []


# -- maintenance -----------------------------------------------------------------------------


def test_two_replicas_maintaining_one_user_at_once_run_it_once(replicas, script):
    a, b = replicas
    for services in replicas:  # each replica's Qdrant holds the user's fact
        services.longterm.record(OWNER, [Fact(text="The user is allergic to peanuts.")])
    # whoever gets the lock first waits on its consolidation while the other one tries
    script.chat(delayed(2.0, text("- [fact|8|user.allergy] The user is allergic to peanuts.")))
    start = threading.Barrier(2)
    statuses: list[str] = []

    def maintain(services: Services) -> None:
        runner = build_maintenance(services)
        start.wait()
        statuses.append(runner.run_user(OWNER).status)

    threads = [threading.Thread(target=maintain, args=(s,)) for s in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(statuses) == ["busy", "ran"]
    assert len(script.requests["chat"]) == 1  # one consolidation, not two
    assert build_maintenance(b).run_user(OWNER).status == "skipped_recent"  # A's or B's run
    assert a.state.maintenance.last_run(OWNER) is not None
    left = _files(a.settings.workspace, b.settings.workspace)
    assert not any(".maintenance" in path for path in left), left


def test_the_scheduler_finds_users_postgres_knows_and_maintains_them_once(replicas, script):
    a, b = replicas
    _fail_a_flush(a, script, RuntimeContext("acme", "bob", "s1"))  # bob: a dead letter only
    assert [c.user_id for c in b.known_users() if c.scope == "user"] == ["bob"]
    bob = RuntimeContext("acme", "bob")
    assert build_maintenance(b).run_user(bob, consolidate=False).status == "ran"
    assert build_maintenance(a).run_user(bob, consolidate=False).status == "skipped_recent"
    assert _files(a.settings.workspace, b.settings.workspace) == []


def test_a_user_with_only_a_postgres_session_is_known_to_the_scheduler(
    tmp_path,
    embedder,
    pg_schema,
    pg_table,
):
    settings = load_settings(
        workspace=tmp_path / "c",
        longterm={"backend": "qdrant"},
        qdrant={"url": ":memory:"},
        shortterm={"backend": "postgres", "postgres_table": pg_table},  # state: auto
        postgres={"dsn": PG_DSN, "schema_name": pg_schema, "pool_min": 1, "pool_max": 4},
    )
    services = build_services(settings, embedder=embedder)
    try:
        assert services.database is not None and services.shortterm is not None
        state = AgentState(session_id="s1")
        state.append(Msg.user("hello"))
        services.shortterm.store.save(state, RuntimeContext("acme", "carol", "s1"))
        assert [(c.tenant_id, c.user_id) for c in services.known_users()] == [("acme", "carol")]
    finally:
        services.close()


# -- erasure and faults ----------------------------------------------------------------------


def test_erase_counts_and_empties_the_postgres_state(replicas, script):
    a, b = replicas
    _fail_a_flush(a, script)
    _fail_a_flush(a, script)
    assert build_maintenance(a).run_user(OWNER, consolidate=False).status == "ran"
    _fail_a_flush(a, script, RuntimeContext("acme", "bob", "s1"))  # another user: kept
    erasure = build_erasure(b)

    counts = erasure.inventory(OWNER)
    assert (counts["dead_letters"], counts["maintenance"]) == (2, 1)
    assert (counts["dead_letters.files"], counts["maintenance.files"]) == (0, 0)
    receipt = erasure.erase(OWNER, by="cli")

    assert (receipt.removed["dead_letters"], receipt.removed["maintenance"]) == (2, 1)
    assert a.state.dead_letters.count_user(OWNER) == 0
    assert a.state.maintenance.last_run(OWNER) is None
    assert a.state.dead_letters.count_user(RuntimeContext("acme", "bob")) == 1
    assert _files(a.settings.workspace, b.settings.workspace) == []


def test_an_erase_waits_for_a_maintenance_run_on_another_replica(replicas):
    a, b = replicas
    assert build_maintenance(a).run_user(OWNER, consolidate=False).status == "ran"
    assert b.database is not None
    impatient = PostgresMaintenanceState(b.database, erase_wait_s=0.5)
    with a.state.maintenance.lock(OWNER) as held:  # a run in progress on replica A
        assert held
        with pytest.raises(BackendUnavailableError) as refused:
            impatient.erase_user(OWNER)
    assert refused.value.code == "busy"
    assert impatient.count_user(OWNER) == 1  # nothing deleted while it ran
    assert impatient.erase_user(OWNER) == 1 and a.state.maintenance.last_run(OWNER) is None


def test_postgres_gone_mid_request_is_a_503_and_writes_nothing(replicas, script):
    a, b = replicas
    assert a.database is not None
    a.database.close()  # this replica loses its database
    with pytest.raises(BackendUnavailableError):
        a.state.dead_letters.box(CTX).append(_letter(CTX), CTX)
    with pytest.raises(BackendUnavailableError):
        a.state.usage.record("acme", tokens={"chat": Usage(1, 1, 2)})
    with TestClient(create_app(a, ApiKeyRing({ADMIN_KEY: {"tenant": "acme"}}))) as client:
        response = client.get("/v1/usage", headers=ADMIN)
    assert response.status_code == 503 and response.json()["error"]["code"] == "backend_unavailable"
    assert b.state.dead_letters.count_user(OWNER) == 0  # nothing half-written
    assert b.state.usage.report("acme")["tokens"] == {}
    assert _files(a.settings.workspace, b.settings.workspace) == []
