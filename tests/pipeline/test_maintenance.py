"""Maintenance: each step on crafted ledgers, the 25% guard, locks and the minimum gap."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from filelock import FileLock

from indexing.hashing import content_hash
from memory_service.config.memory_settings import validate_consolidation_prompt
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.domain.facts import Fact, fact_id
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.files.fact_files import render_fact
from memory_service.pipeline.consolidation import Consolidator, deterministic_memory, lost_facts
from memory_service.pipeline.maintenance import MaintenanceSettings, MemoryMaintenance
from memory_service.pipeline.policy import plan_maintenance
from memory_service.stores.fsutil import remove_stale_temp_files
from tests.support.llm_server import text
from tests.support.waiting import wait_until

NOW = datetime(2026, 6, 30, 12, 0, tzinfo=UTC)
ALICE = RuntimeContext("acme", "alice")
TTL = ExpiryPolicy(by_importance=True)  # the importance TTL, switched on


def fact(text_: str, days_old: float, **fields) -> Fact:
    created = NOW - timedelta(days=days_old)
    h = content_hash(text_)
    return Fact(text_, created_at=created, content_hash=h, id=fact_id("acme", "alice", h), **fields)


# -- the rules, on fact lists -------------------------------------------------------------


def test_near_duplicates_keep_the_newest_with_merged_tags_and_top_importance():
    old = fact(
        "The user lives in Berlin and works as a software engineer at a startup",
        3,
        tags=("work",),
        importance=8,
    )
    new = fact(
        "The user lives in Berlin and works as a software engineer at a start-up",
        1,
        tags=("city",),
        importance=6,
    )
    other = fact("Grandma's apple pie needs two cups of sugar", 2)
    tea, coffee = fact("User likes tea", 1), fact("User likes coffee", 1)
    # SimHash bits are hash luck: this pair is 7 bits apart under the light stemmer and 9 under
    # the Snowball stemmer; every other pair here is 24 or more apart.
    plan = plan_maintenance(
        [old, new, other, tea, coffee], NOW, expiry=ExpiryPolicy(), near_duplicate_distance=10
    )
    assert plan.delete == {old.id}
    assert plan.update[new.id].tags == ("city", "work")
    assert plan.update[new.id].importance == 8
    assert plan.counts["near_duplicates"] == 1


def test_facts_with_different_keys_never_merge():
    a = fact("User's favourite colour is blue", 1, key="color")
    b = fact("User's favourite colour is blue!", 1, key="colour")
    plan = plan_maintenance([a, b], NOW, expiry=ExpiryPolicy(), near_duplicate_distance=64)
    assert plan.delete == set()


def test_newest_wins_among_open_facts_with_one_key():
    paris = fact("Lives in Paris", 5, key="city")
    rome = fact("Lives in Rome", 2, key="city")
    plan = plan_maintenance([paris, rome], NOW, expiry=ExpiryPolicy(), near_duplicate_distance=0)
    assert plan.update[paris.id].superseded_by == rome.id
    assert plan.update[paris.id].valid_to == rome.created_at
    assert rome.id not in plan.update


@pytest.mark.parametrize(
    ("importance", "days_old", "expired"),
    [
        (4, 6, False),
        (4, 8, True),
        (5, 8, False),
        (5, 29, False),
        (5, 31, True),
        (9, 31, True),
        (10, 4000, False),
    ],
)
def test_expiry_by_importance(importance, days_old, expired):
    f = fact("A note", days_old, importance=importance)
    plan = plan_maintenance([f], NOW, expiry=TTL, near_duplicate_distance=0)
    assert (f.id in plan.delete) is expired


@pytest.mark.parametrize("importance", [1, 5, 9])
def test_without_the_importance_ttl_an_old_fact_is_kept(importance):
    f = fact("A note", 400, importance=importance)
    plan = plan_maintenance([f], NOW, expiry=ExpiryPolicy(), near_duplicate_distance=0)
    assert f.id not in plan.delete


def test_own_expiry_wins_and_consolidated_facts_stay():
    soon = fact("Door code 1234", 1, importance=10, expires_at=NOW - timedelta(hours=1))
    kept = fact("Old but consolidated", 100, importance=1)
    plan = plan_maintenance(
        [soon, kept],
        NOW,
        expiry=TTL,
        near_duplicate_distance=0,
        protected_ids=frozenset({kept.id}),
    )
    assert plan.delete == {soon.id}


def test_consolidation_prompt_needs_exactly_two_placeholders():
    assert validate_consolidation_prompt("max %d tokens, %d chars")
    assert validate_consolidation_prompt("keep 100%% of facts; %d tokens, %d chars")
    for bad in ("max %d tokens", "%d %d %d", "%d and %s and %d", "no placeholders"):
        with pytest.raises(ValueError, match="exactly two"):
            validate_consolidation_prompt(bad)


def test_deterministic_memory_respects_the_budget_by_importance():
    facts = [
        fact(f"Low importance fact number {i} " + "word " * 20, 1, importance=2) for i in range(40)
    ]
    facts.append(fact("Allergic to peanuts", 1, importance=10, kind="fact"))
    facts.append(fact("Prefers aisle seats", 1, importance=7, kind="preference"))
    markdown = deterministic_memory(facts, 300, NOW)
    assert "## Facts" in markdown and "## Preferences" in markdown
    assert "Allergic to peanuts" in markdown and "Prefers aisle seats" in markdown
    assert markdown.count("Low importance fact") < 40
    assert lost_facts(facts[-2:], markdown) == []


# -- the steps, on a real files workspace ---------------------------------------------------


@pytest.fixture
def workspace(tmp_path):
    return tmp_path / "ws"


@pytest.fixture
def memory(workspace, embedder):
    backend = FileSystemLongTermMemory(workspace, embedder, clock=lambda: NOW)
    yield backend
    backend.close()


def maintenance(memory, workspace, model=None, **settings) -> MemoryMaintenance:
    return MemoryMaintenance(
        longterm=memory,
        workspace=workspace,
        consolidator=Consolidator(model=model, max_tokens=settings.pop("max_tokens", 4000)),
        settings=MaintenanceSettings(**settings),
        clock=lambda: NOW,
    )


def write_ledger(paths: OwnerPaths, day: str, *facts: Fact) -> None:
    paths.ledger_dir.mkdir(parents=True, exist_ok=True)
    (paths.ledger_dir / f"{day}.md").write_text(
        f"# Memory ledger {day}\n\n" + "".join(render_fact(f) + "\n" for f in facts)
    )


def test_each_step_on_crafted_ledgers(memory, workspace):
    paths = OwnerPaths.of(workspace, ALICE)
    keep = fact("Alice is allergic to peanuts", 2, importance=9)
    write_ledger(
        paths,
        "2026-06-27",
        fact("Alice lives in Paris", 3, key="city"),
        fact(
            "Alice keeps a travel diary with notes from every trip she takes to the mountains",
            3,
            tags=("travel",),
        ),
        keep,
    )
    write_ledger(
        paths,
        "2026-06-28",
        fact("Alice lives in Rome", 2, key="city"),
        fact(
            "Alice keeps a travel diary with notes from every trip she takes to the mountain",
            2,
            tags=("diary",),
        ),
        keep,
    )  # an exact repeat of a bullet in another ledger
    write_ledger(paths, "2026-06-10", fact("Alice had a cold", 20, importance=3))
    write_ledger(paths, "2026-01-02", fact("Alice's 2025 goals are set", 179, importance=10))
    paths.sessions_dir.mkdir(parents=True)
    old_log = paths.session_log("s-old")
    old_log.write_text('{"seq": 0, "role": "user", "content": "hi"}\n')
    old = (NOW - timedelta(days=200)).timestamp()
    os.utime(old_log, (old, old))
    fresh_log = paths.session_log("s-new")
    fresh_log.write_text('{"seq": 0, "role": "user", "content": "hello"}\n')
    # a write killed between its temp file and the rename, and one in progress right now
    orphan = paths.ledger_dir / ".2026-06-27.md.k1ll3d.tmp"
    orphan.write_text("half a ledger")
    two_hours_ago = (NOW - timedelta(hours=2)).timestamp()
    os.utime(orphan, (two_hours_ago, two_hours_ago))
    in_progress = paths.ledger_dir / ".2026-06-28.md.l1v3.tmp"
    in_progress.write_text("being written")
    os.utime(in_progress, (NOW.timestamp(), NOW.timestamp()))

    memory.expiry = TTL  # the cold (importance 3, 20 days old) expires by age
    report = maintenance(memory, workspace, near_duplicate_distance=6, expiry=TTL).run_user(ALICE)
    assert report.status == "ran", report.error
    assert report.counts == {
        "exact_duplicates": 1,
        "near_duplicates": 1,
        "superseded": 1,
        "expired": 1,
        "ledgers_archived": 1,
        "session_logs_deleted": 1,
        "stale_temp_files_removed": 1,
        "consolidated": 1,
    }
    assert not orphan.exists() and in_progress.exists()
    texts = [f.text for f in memory.list(ALICE).items]
    assert "Alice lives in Rome" in texts and "Alice lives in Paris" not in texts
    assert "Alice had a cold" not in texts
    diary = [f for f in memory.list(ALICE).items if "travel diary" in f.text]
    assert len(diary) == 1 and set(diary[0].tags) == {"travel", "diary"}
    assert (paths.archive_dir / "2026-01-02.md").exists()
    assert not old_log.exists() and fresh_log.exists()
    md = paths.memory_md.read_text()
    assert "Alice is allergic to peanuts" in md and "Alice lives in Rome" in md
    assert "Alice lives in Paris" not in md
    recalled = [r.fact.text for r in memory.retrieve(ALICE, "peanuts allergy", 3)]
    assert recalled[0] == "Alice is allergic to peanuts"


def test_a_second_consolidation_snapshots_the_previous_memory_md(memory, workspace):
    memory.record(ALICE, [Fact("Alice is allergic to peanuts", importance=9)])
    runner = maintenance(memory, workspace)
    assert runner.run_user(ALICE, force=True).counts["consolidated"] == 1
    memory.record(ALICE, [Fact("Alice started learning the cello", importance=6)])
    second = runner.run_user(ALICE, force=True)
    assert second.counts["consolidated"] == 1
    snapshot = second.consolidation.snapshot
    assert snapshot and "cello" not in Path(snapshot).read_text()
    assert "cello" in OwnerPaths.of(workspace, ALICE).memory_md.read_text()


def test_a_rewrite_that_loses_over_a_quarter_is_refused(memory, workspace):
    topics = [
        "cello lessons",
        "marathon training",
        "sourdough baking",
        "chess openings",
        "orchid care",
        "kayak trips",
        "pottery classes",
        "birdwatching logs",
    ]
    facts = [
        Fact(
            f"Alice spends weekends on {t} " + " ".join(f"{t.split()[0]}{n}" for n in range(25)),
            importance=6,
        )
        for t in topics
    ]
    memory.record(ALICE, facts)
    maintenance(memory, workspace).run_user(ALICE, force=True)
    paths = OwnerPaths.of(workspace, ALICE)
    before = paths.memory_md.read_text()
    tight = maintenance(memory, workspace, max_tokens=200).run_user(ALICE, force=True)
    assert tight.counts["consolidated"] == 0
    assert "lose" in tight.consolidation.refused
    assert paths.memory_md.read_text() == before


def test_llm_consolidation_uses_the_prompt_and_the_guard(memory, workspace, llm_server, chat_model):
    memory.record(
        ALICE,
        [
            Fact("Alice is allergic to peanuts", importance=9),
            Fact("Alice prefers window seats", kind="preference"),
        ],
    )
    llm_server.push(
        text(
            "## Health\n- Alice is allergic to peanuts\n\n## Travel\n- Alice prefers window seats\n"
        )
    )
    runner = maintenance(memory, workspace, model=chat_model, max_tokens=1234)
    report = runner.run_user(ALICE, force=True)
    assert report.counts["consolidated"] == 1
    prompt = llm_server.requests[-1].prompt_text
    assert "1234 tokens" in prompt and "4936 characters" in prompt
    assert "Alice is allergic to peanuts" in prompt
    paths = OwnerPaths.of(workspace, ALICE)
    assert paths.memory_md.read_text().startswith("## Health")

    llm_server.push(text("- Alice likes tea\n"))  # drops both facts it was given
    refused = runner.run_user(ALICE, force=True)
    assert refused.consolidation.refused and refused.counts["consolidated"] == 0
    assert "window seats" in paths.memory_md.read_text()


def test_llm_failure_leaves_memory_md_unchanged_and_is_reported(
    memory, workspace, llm_server, chat_model
):
    memory.record(ALICE, [Fact("Alice is allergic to peanuts", importance=9)])
    maintenance(memory, workspace).run_user(ALICE, force=True)
    paths = OwnerPaths.of(workspace, ALICE)
    before = paths.memory_md.read_text()
    llm_server.push(text("I cannot help with that."), text("Sorry."))
    report = maintenance(memory, workspace, model=chat_model).run_user(ALICE, force=True)
    assert report.status == "failed" and "consolidation" in report.error
    assert paths.memory_md.read_text() == before


def test_minimum_gap_and_the_per_user_lock(memory, workspace):
    memory.record(ALICE, [Fact("Alice is allergic to peanuts")])
    runner = maintenance(memory, workspace)
    assert runner.run_user(ALICE).status == "ran"
    assert runner.run_user(ALICE).status == "skipped_recent"
    state = json.loads((OwnerPaths.of(workspace, ALICE).root / ".maintenance.json").read_text())
    assert state["report"]["status"] == "ran"
    with FileLock(str(OwnerPaths.of(workspace, ALICE).maintenance_lock)):
        assert runner.run_user(ALICE, force=True).status == "busy"
    assert runner.run_user(ALICE, force=True).status == "ran"


# -- the CLI and the API ---------------------------------------------------------------------


def test_maintain_command_runs_every_user_or_one(tmp_path, capsys, monkeypatch):
    from memory_service.cli import main

    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    ws = str(tmp_path / "ws")
    assert main(["record", "--workspace", ws, "--user", "alice", "Alice likes tea"]) == 0
    assert main(["record", "--workspace", ws, "--tenant", "t2", "--user", "bob", "Bob"]) == 0
    capsys.readouterr()
    assert main(["maintain", "--workspace", ws, "--json"]) == 0
    reports = json.loads(capsys.readouterr().out)
    assert {(r["tenant_id"], r["user_id"], r["status"]) for r in reports} == {
        ("default", "alice", "ran"),
        ("t2", "bob", "ran"),
    }
    assert main(["maintain", "--workspace", ws, "--tenant", "t2", "--user", "bob"]) == 0
    assert capsys.readouterr().out.startswith("skipped_recent t2/bob")
    assert main(["maintain", "--workspace", ws, "--user", "bob"]) == 2
    assert "--tenant" in capsys.readouterr().err


def test_maintenance_endpoint_needs_an_admin_key_and_stays_in_its_tenant(tmp_path, embedder):
    from fastapi.testclient import TestClient

    from memory_service.api import create_app
    from memory_service.api.keys import ApiKeyRing
    from memory_service.config import load_settings
    from memory_service.services import build_services

    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    ring = ApiKeyRing(
        {
            "user-key-0123456789abcdef": {"tenant": "acme", "role": "user"},
            "admin-key-0123456789abcdef": {"tenant": "acme", "role": "admin"},
        }
    )
    services.longterm.record(RuntimeContext("acme", "alice"), [Fact("Alice likes tea")])
    services.longterm.record(RuntimeContext("globex", "gus"), [Fact("Gus likes coffee")])
    with TestClient(create_app(services, ring)) as client:
        user = {"Authorization": "Bearer user-key-0123456789abcdef"}
        admin = {"Authorization": "Bearer admin-key-0123456789abcdef"}
        denied = client.post("/v1/maintenance/run", json={}, headers=user)
        assert denied.status_code == 403 and denied.json()["error"]["code"] == "forbidden"
        ran = client.post("/v1/maintenance/run", json={"force": True}, headers=admin).json()
        assert [(r["tenant_id"], r["user_id"]) for r in ran["reports"]] == [("acme", "alice")]
        assert ran["reports"][0]["counts"]["consolidated"] == 1
        one = client.post("/v1/maintenance/run", json={"user_id": "alice"}, headers=admin)
        assert one.json()["reports"][0]["status"] == "skipped_recent"
    services.close()
    assert not OwnerPaths(tmp_path / "ws", "globex", "gus").memory_md.exists()


def test_scheduler_maintains_known_users_in_the_background(memory, workspace):

    from memory_service.pipeline.scheduler import MemoryMaintenanceScheduler, known_users

    memory.record(ALICE, [Fact("Alice is allergic to peanuts", importance=9)])
    runner = maintenance(memory, workspace)
    scheduler = MemoryMaintenanceScheduler(
        runner,
        lambda: known_users(workspace, memory, ["acme", "empty-tenant"]),
        interval=timedelta(hours=6),
        first_delay=timedelta(milliseconds=10),
    )
    scheduler.start()
    try:
        wait_until(lambda: scheduler.passes, 60, message="the scheduler never ran")
    finally:
        scheduler.stop()
    assert scheduler.passes == 1
    assert "peanuts" in OwnerPaths.of(workspace, ALICE).memory_md.read_text()


def test_the_temp_file_sweep_removes_only_old_hidden_temp_files(tmp_path):
    old = (NOW - timedelta(days=1)).timestamp()
    user = tmp_path / "user"
    (user / "memory" / "archive").mkdir(parents=True)
    orphan = user / "memory" / "archive" / ".2026-01-02.md.x1.tmp"
    visible = user / "notes.tmp"  # not a name an atomic write uses
    outside = tmp_path / "elsewhere.md"
    link = user / ".MEMORY.md.x2.tmp"
    for path in (orphan, visible, outside):
        path.write_text("x")
        os.utime(path, (old, old))
    link.symlink_to(outside)

    removed = remove_stale_temp_files(user, older_than=timedelta(hours=1), now=NOW)

    assert removed == [orphan] and not orphan.exists()
    assert visible.exists() and link.is_symlink() and outside.exists()
