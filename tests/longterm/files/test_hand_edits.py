"""A person edits the daily fact files by hand (README: "edit that file by hand and the next
search sees the change"), also after consolidation has copied the fact into MEMORY.md: the
edit is what recall and lists answer, and MEMORY.md's bullet about the old text is left out
until the next consolidation rewrites it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.pipeline.consolidation import Consolidator
from memory_service.pipeline.maintenance import MaintenanceSettings, MemoryMaintenance
from tests.support.llm_server import text

ALICE = RuntimeContext("acme", "alice")
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.fixture
def memory(workspace, embedder):
    backend = FileSystemLongTermMemory(workspace, embedder, clock=lambda: NOW)
    yield backend
    backend.close()


def _consolidate(memory, workspace, model=None) -> None:
    runner = MemoryMaintenance(
        longterm=memory,
        workspace=workspace,
        consolidator=Consolidator(model=model),
        settings=MaintenanceSettings(),
        clock=lambda: NOW,
    )
    report = runner.run_user(ALICE, force=True)
    assert report.counts["consolidated"] == 1, report


def _edit_ledger(workspace, old: str, new: str) -> None:
    (ledger,) = OwnerPaths.of(workspace, ALICE).ledger_dir.glob("*.md")
    content = ledger.read_text()
    assert old in content
    ledger.write_text(content.replace(old, new))


def _texts(memory, query: str) -> list[str]:
    return [hit.fact.text for hit in memory.retrieve(ALICE, query, 5)]


def _listed(memory) -> list[str]:
    return sorted(f.text for f in memory.list(ALICE).items)


def test_an_edited_ledger_line_replaces_the_consolidated_fact(memory, workspace):
    memory.record(ALICE, [Fact("Alice takes her coffee black"), Fact("Alice plays the cello")])
    _consolidate(memory, workspace)
    assert "coffee black" in OwnerPaths.of(workspace, ALICE).memory_md.read_text()

    _edit_ledger(workspace, "coffee black", "coffee with oat milk")

    assert _texts(memory, "how does Alice take her coffee")[0] == (
        "Alice takes her coffee with oat milk"
    )
    assert "Alice takes her coffee black" not in _texts(memory, "coffee black")
    assert _listed(memory) == ["Alice plays the cello", "Alice takes her coffee with oat milk"]


def test_a_line_deleted_from_the_ledger_is_gone_from_recall(memory, workspace):
    memory.record(ALICE, [Fact("Alice takes her coffee black"), Fact("Alice plays the cello")])
    _consolidate(memory, workspace)
    (ledger,) = OwnerPaths.of(workspace, ALICE).ledger_dir.glob("*.md")
    ledger.write_text("".join(line for line in ledger.open() if "coffee" not in line))

    assert _listed(memory) == ["Alice plays the cello"]


def test_a_merged_bullet_about_an_edited_fact_is_left_out(
    memory, workspace, llm_server, chat_model
):
    memory.record(
        ALICE,
        [Fact("Alice takes her coffee black"), Fact("Alice drinks two cups of coffee a day")],
    )
    llm_server.push(text("## Habits\n- Alice drinks two cups of black coffee a day\n"))
    _consolidate(memory, workspace, model=chat_model)
    assert "two cups of black coffee" in " ".join(_listed(memory))

    _edit_ledger(workspace, "coffee black", "coffee with oat milk")

    assert _listed(memory) == [
        "Alice drinks two cups of coffee a day",
        "Alice takes her coffee with oat milk",
    ]


def test_archived_facts_stay_recalled_through_memory_md(memory, workspace):
    memory.record(ALICE, [Fact("Alice takes her coffee black")])
    _consolidate(memory, workspace)
    memory.archive_fact_files(ALICE, before=datetime(2100, 1, 1).date())
    assert not list(OwnerPaths.of(workspace, ALICE).ledger_dir.glob("*.md"))

    assert _listed(memory) == ["Alice takes her coffee black"]


def test_a_bullet_written_into_memory_md_by_hand_is_a_fact(memory, workspace):
    memory.record(ALICE, [Fact("Alice takes her coffee black")])
    _consolidate(memory, workspace)
    memory_md = OwnerPaths.of(workspace, ALICE).memory_md
    memory_md.write_text(memory_md.read_text() + "- Alice lives in Lyon\n")

    assert _listed(memory) == ["Alice lives in Lyon", "Alice takes her coffee black"]
