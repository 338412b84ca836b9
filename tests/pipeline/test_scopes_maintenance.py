"""Maintenance, consolidation and erasure follow scopes: each shared scope is maintained on its
own, into its own MEMORY.md, and a user's erasure never touches shared memory."""

from __future__ import annotations

from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.facts import Fact
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.near_duplicates import OFF
from memory_service.pipeline.consolidation import Consolidator
from memory_service.pipeline.erasure import erase_facts, forget_user
from memory_service.pipeline.maintenance import MemoryMaintenance
from memory_service.pipeline.scheduler import known_users, run_all

ALICE = RuntimeContext("acme", "alice", agent_id="support")
TENANT = scope_context("acme", "tenant")
SUPPORT = scope_context("acme", "agent", "support")


def _maintenance(memory, workspace) -> MemoryMaintenance:
    return MemoryMaintenance(
        longterm=memory, workspace=workspace, consolidator=Consolidator(model=None)
    )


def _seed(memory) -> None:
    memory.near_duplicates = OFF  # the near duplicate below is for maintenance's pass to find
    memory.record(ALICE, [Fact("Alice's cat is called Tom", importance=8)])
    memory.record(ALICE, [Fact("Refunds need a manager", importance=8, scope="agent")])
    memory.record(ALICE, [Fact("Lunch is at noon", importance=8, scope="tenant")])
    memory.record(ALICE, [Fact("Lunch is at noon.", importance=8, scope="tenant")])  # near dup


def test_every_scope_is_maintained_into_its_own_memory_md(memory, tmp_path):
    workspace = tmp_path / "workspace"
    _seed(memory)
    targets = list(known_users(workspace, memory, ["acme"]))
    assert [(c.scope, c.user_id if c.scope == "user" else c.agent_id) for c in targets] == [
        ("user", "alice"),
        ("agent", "support"),
        ("tenant", None),
    ]
    reports = run_all(_maintenance(memory, workspace), targets, progress=False)
    assert [(r.status, r.owner, r.user_id) for r in reports] == [
        ("ran", "alice", "alice"),
        ("ran", "agent:support", None),
        ("ran", "tenant", None),
    ]
    assert reports[2].counts["near_duplicates"] == 1
    memory_md = {
        owner: OwnerPaths.of(workspace, ctx).memory_md.read_text()
        for owner, ctx in (("user", ALICE), ("agent", SUPPORT), ("tenant", TENANT))
    }
    assert "Tom" in memory_md["user"] and "Lunch" not in memory_md["user"]
    assert "Refunds" in memory_md["agent"] and "Tom" not in memory_md["agent"]
    assert memory_md["tenant"].count("Lunch is at noon") == 1
    assert (workspace / "tenants/acme/shared/MEMORY.md").is_file()
    assert (workspace / "tenants/acme/agents/support/MEMORY.md").is_file()


def test_erasing_a_user_leaves_shared_memory_and_a_shared_delete_leaves_the_user(memory, tmp_path):
    workspace = tmp_path / "workspace"
    _seed(memory)
    run_all(
        _maintenance(memory, workspace), known_users(workspace, memory, ["acme"]), progress=False
    )
    assert forget_user(memory, workspace, ALICE) == 1
    assert not OwnerPaths.of(workspace, ALICE).memory_md.exists()
    assert "Lunch" in OwnerPaths.of(workspace, TENANT).memory_md.read_text()

    lunch = [f.id for f in memory.list(TENANT).items]
    assert erase_facts(memory, workspace, TENANT, lunch) == 1
    assert "Lunch" not in OwnerPaths.of(workspace, TENANT).memory_md.read_text()
    bob = RuntimeContext("acme", "bob", agent_id="support")
    assert [r.fact.text for r in memory.retrieve(bob, "refunds lunch", 5)] == [
        "Refunds need a manager"
    ]


def test_files_scopes_without_facts_are_not_maintained(tmp_path, embedder):
    memory = FileSystemLongTermMemory(tmp_path / "ws", embedder)
    memory.record(ALICE, [Fact("Alice's cat is called Tom")])
    assert [c.scope for c in known_users(tmp_path / "ws", memory)] == ["user"]
    assert not (tmp_path / "ws/tenants/acme/shared").exists()
