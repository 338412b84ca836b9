"""The daily ledgers are append-only: a record that supersedes by key, and a maintenance pass
that merges duplicates and expires facts, leave every ledger line as it was written; what
they decided is in ``memory/decisions/journal.md``, and recall, list, export and MEMORY.md
answer as before. Only delete, forget and erase remove a ledger line."""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from indexing.hashing import content_hash
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, fact_id
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.files.fact_files import render_fact
from memory_service.longterm.near_duplicates import OFF
from memory_service.pipeline.consolidation import Consolidator
from memory_service.pipeline.maintenance import MaintenanceSettings, MemoryMaintenance
from memory_service.pipeline.transfer import export_records

NOW = datetime(2026, 6, 30, 12, 0, tzinfo=UTC)
ALICE = RuntimeContext("acme", "alice")
DIARY_OLD = "Alice keeps a travel diary with notes from every trip she takes to the mountains"
DIARY_NEW = "Alice keeps a travel diary with notes from every trip she takes to the mountain"


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW - timedelta(days=2))


@pytest.fixture
def memory(workspace, embedder, clock):
    # record merges no near-duplicate here: maintenance's own pass is part of what is tested
    backend = FileSystemLongTermMemory(workspace, embedder, clock=clock, near_duplicates=OFF)
    yield backend
    backend.close()


def maintain(memory, workspace, clock) -> dict[str, int]:
    runner = MemoryMaintenance(
        longterm=memory,
        workspace=workspace,
        consolidator=Consolidator(model=None),
        settings=MaintenanceSettings(near_duplicate_distance=6),
        clock=clock,
    )
    report = runner.run_user(ALICE, force=True)
    assert report.status == "ran", report.error
    return report.counts


def ledger_lines(paths: OwnerPaths) -> dict[str, list[str]]:
    """Each daily ledger's lines, by file name, as SHA-256 digests of their bytes."""
    return {
        p.name: [hashlib.sha256(line).hexdigest() for line in p.read_bytes().split(b"\n")]
        for p in sorted(paths.ledger_dir.glob("*.md"))
    }


def journal(paths: OwnerPaths) -> list[dict]:
    lines = paths.decisions_journal.read_text().split("\n")
    marker = "<!-- settled "
    return [
        json.loads(line.split(marker, 1)[1][: -len(" -->")])
        for line in lines
        if marker in line and line.endswith(" -->")  # a line cut by a crash is no decision
    ]


def texts(facts) -> set[str]:
    return {f.text for f in facts}


def recalled(memory, query: str) -> list[str]:
    return [hit.fact.text for hit in memory.retrieve(ALICE, query, 5)]


def test_supersession_dedup_and_expiry_leave_every_ledger_line_as_written(memory, workspace, clock):
    paths = OwnerPaths.of(workspace, ALICE)
    paris, _, dentist, peanuts = memory.record(
        ALICE,
        [
            Fact("Alice lives in Paris", key="city"),
            Fact(DIARY_OLD, tags=("travel",)),
            Fact("Alice has a dentist appointment on Monday", expires_at=NOW - timedelta(days=1)),
            Fact("Alice is allergic to peanuts", importance=9),
        ],
    )
    clock.now = NOW - timedelta(days=1)
    diary = memory.record(ALICE, [Fact(DIARY_NEW, tags=("diary",))])[0]
    # a person copies a bullet into the next day's ledger: the same fact on two lines
    day1, day2 = sorted(paths.ledger_dir.glob("*.md"))
    peanut_line = next(line for line in day1.read_text().split("\n") if "peanuts" in line)
    with day2.open("a") as handle:
        handle.write(peanut_line + "\n")
    before = ledger_lines(paths)
    assert sum(len(v) for v in before.values()) >= 9

    clock.now = NOW
    rome = memory.record(ALICE, [Fact("Alice lives in Rome", key="city")])[0]
    assert (rome.status, rome.superseded_ids) == ("superseded", (paris.id,))
    counts = maintain(memory, workspace, clock)
    assert {k: counts[k] for k in ("exact_duplicates", "near_duplicates", "expired")} == {
        "exact_duplicates": 1,
        "near_duplicates": 1,
        "expired": 1,
    }

    after = ledger_lines(paths)
    for name, digests in before.items():  # every earlier line still there, byte for byte
        assert after[name] == digests, name
    assert set(after) == {*before, f"{NOW.date().isoformat()}.md"}

    for reader in (memory, FileSystemLongTermMemory(workspace, memory._embedder, clock=clock)):
        listed = reader.list(ALICE).items
        assert texts(listed) == {"Alice lives in Rome", DIARY_NEW, "Alice is allergic to peanuts"}
        assert {f.text: set(f.tags) for f in listed}[DIARY_NEW] == {"travel", "diary"}
        exported = {r["text"]: r for r in export_records(reader, "acme", "alice")}
        assert set(exported) == {*texts(listed), "Alice lives in Paris"}
        assert exported["Alice lives in Paris"]["superseded_by"] == rome.id
        assert "Alice lives in Rome" in recalled(reader, "where does Alice live")
        assert "Alice lives in Paris" not in recalled(reader, "where does Alice live")
        assert DIARY_OLD not in recalled(reader, "travel diary mountains")
        assert not any("dentist" in t for t in recalled(reader, "dentist appointment Monday"))
        assert reader.get(ALICE, [dentist.id]) == []  # settled out, as a delete would have

    memory_md = paths.memory_md.read_text()
    assert "Alice lives in Rome" in memory_md and "peanuts" in memory_md
    assert "Paris" not in memory_md and "dentist" not in memory_md
    assert DIARY_OLD not in memory_md and DIARY_NEW in memory_md

    decisions = {(d["decision"], d["id"]) for d in journal(paths)}
    old_diary = fact_id("acme", "alice", content_hash(DIARY_OLD))
    assert decisions >= {
        ("superseded", paris.id),
        ("merged", old_diary),
        ("updated", diary.id),
        ("expired", dentist.id),
        ("duplicate", peanuts.id),
    }
    text = paths.decisions_journal.read_text()
    assert f"expired {dentist.id}: past its expires_at" in text  # said in words too
    assert stat.S_IMODE(paths.decisions_journal.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.decisions_journal.parent.stat().st_mode) == 0o700

    settled = paths.decisions_journal.read_bytes()
    maintain(memory, workspace, clock)  # nothing new to decide: the journal does not grow
    assert paths.decisions_journal.read_bytes() == settled
    assert ledger_lines(paths) == after


def test_a_fact_recorded_again_after_it_expired_reads_as_its_new_line(memory, workspace, clock):
    paths = OwnerPaths.of(workspace, ALICE)
    soon = NOW - timedelta(days=1)
    first = memory.record(ALICE, [Fact("Alice is in Lisbon this week", expires_at=soon)])[0]
    clock.now = NOW
    maintain(memory, workspace, clock)
    assert memory.get(ALICE, [first.id]) == []
    again = memory.record(ALICE, [Fact("Alice is in Lisbon this week", importance=7)])[0]
    assert (again.id, again.status) == (first.id, "created")
    [fact] = memory.get(ALICE, [first.id])
    assert (fact.importance, fact.expires_at) == (7, None)
    assert texts(memory.list(ALICE).items) == {"Alice is in Lisbon this week"}
    lines = [line for p in paths.ledger_dir.glob("*.md") for line in p.read_text().split("\n")]
    assert sum("Lisbon" in line for line in lines) == 2  # the old line stays


def test_update_journals_and_delete_removes_the_line_and_its_decisions(memory, workspace):
    paths = OwnerPaths.of(workspace, ALICE)
    tea, _ = memory.record(ALICE, [Fact("Alice drinks green tea"), Fact("Alice plays chess")])
    [ledger] = paths.ledger_dir.glob("*.md")
    written = ledger.read_bytes()
    [stored] = memory.get(ALICE, [tea.id])
    memory.update(ALICE, [replace(stored, importance=8, tags=("drinks",))])
    assert ledger.read_bytes() == written
    [updated] = memory.get(ALICE, [tea.id])
    assert (updated.importance, updated.tags) == (8, ("drinks",))
    assert [d["id"] for d in journal(paths)] == [tea.id]

    assert memory.delete(ALICE, [tea.id]) == 1
    assert "green tea" not in ledger.read_text() and "chess" in ledger.read_text()
    assert tea.id not in paths.decisions_journal.read_text()
    assert texts(memory.list(ALICE).items) == {"Alice plays chess"}


def test_a_ledger_settled_in_its_own_lines_loads_unchanged(workspace, embedder):
    """A workspace whose maintenance wrote its decisions into the ledger lines' comments
    (``superseded_by`` / ``valid_to``), with no journal: read as before, and left as it is."""
    paths = OwnerPaths.of(workspace, ALICE)

    def stored(text: str, day: int, **fields) -> Fact:
        h = content_hash(text)
        created = datetime(2026, 6, day, 9, 0, tzinfo=UTC)
        return Fact(
            text, created_at=created, content_hash=h, id=fact_id("acme", "alice", h), **fields
        )

    rome = stored("Alice lives in Rome", 29, key="city")
    paris = stored(
        "Alice lives in Paris", 28, key="city", superseded_by=rome.id, valid_to=rome.created_at
    )
    peanuts = stored("Alice is allergic to peanuts", 28, importance=9)
    paths.ledger_dir.mkdir(parents=True)
    for day, facts in (("2026-06-28", [paris, peanuts]), ("2026-06-29", [rome])):
        lines = "".join(render_fact(f) + "\n" for f in facts)
        (paths.ledger_dir / f"{day}.md").write_text(f"# Memory ledger {day}\n\n{lines}")
    before = ledger_lines(paths)

    memory = FileSystemLongTermMemory(workspace, embedder, clock=lambda: NOW)
    try:
        assert texts(memory.list(ALICE).items) == {"Alice lives in Rome", peanuts.text}
        [old] = memory.get(ALICE, [paris.id])
        assert (old.superseded_by, old.valid_to) == (rome.id, rome.created_at)
        assert recalled(memory, "where does Alice live")[0] == "Alice lives in Rome"
        assert "Alice lives in Paris" not in recalled(memory, "where does Alice live")
        counts = maintain(memory, workspace, lambda: NOW)
        assert counts["exact_duplicates"] == counts["superseded"] == 0
        assert not paths.decisions_journal.exists()  # nothing was left to decide
        assert ledger_lines(paths) == before
    finally:
        memory.close()


def test_a_journal_line_cut_by_a_crash_is_skipped(memory, workspace):
    paths = OwnerPaths.of(workspace, ALICE)
    tea = memory.record(ALICE, [Fact("Alice drinks green tea")])[0]
    [stored] = memory.get(ALICE, [tea.id])
    memory.update(ALICE, [replace(stored, importance=8)])
    full = paths.decisions_journal.read_text()
    paths.decisions_journal.write_text(full + full.strip().split("\n")[-1][:-20])  # torn
    assert memory.get(ALICE, [tea.id])[0].importance == 8
    memory.update(ALICE, [replace(stored, importance=3)])
    assert memory.get(ALICE, [tea.id])[0].importance == 3
    assert len(journal(paths)) == 2


def test_settling_drops_only_the_decisions_about_lines_deleted_by_hand(memory, workspace, clock):
    paths = OwnerPaths.of(workspace, ALICE)
    tea, chess = memory.record(ALICE, [Fact("Alice drinks green tea"), Fact("Alice plays chess")])
    for fid in (tea.id, chess.id):
        [stored] = memory.get(ALICE, [fid])
        memory.update(ALICE, [replace(stored, importance=8)])
    [ledger] = paths.ledger_dir.glob("*.md")
    ledger.write_text("\n".join(x for x in ledger.read_text().split("\n") if "tea" not in x))
    clock.now = NOW
    maintain(memory, workspace, clock)
    assert [d["id"] for d in journal(paths)] == [chess.id]
    assert memory.get(ALICE, [chess.id])[0].importance == 8
