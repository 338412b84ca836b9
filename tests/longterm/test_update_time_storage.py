"""A fact's update time as each backend stores it: written only when it says something, and a
fact stored before facts had one reads as updated when it was created, its confidence kept."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, utcnow
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.files.fact_files import parse_line, render_fact
from memory_service.longterm.qdrant.payload import fact_of, payload_of

ALICE = RuntimeContext("acme", "alice")
OLD_BULLET = (
    '- Alice keeps bees <!-- memory {"kind":"event","importance":5,'
    '"created_at":"2024-05-01T08:00:00+00:00"} -->'
)


def test_an_old_fact_file_bullet_reads_as_updated_when_created_and_is_written_unchanged():
    fact = parse_line(OLD_BULLET, default_created_at=None)
    assert fact is not None and fact.confidence == 1.0
    assert fact.updated_at == fact.created_at
    assert render_fact(fact) == OLD_BULLET  # nothing added to a fact never confirmed
    later = fact.created_at + timedelta(days=30)
    confirmed = render_fact(replace(fact, updated_at=later))
    assert f'"updated_at":"{later.isoformat()}"' in confirmed
    assert parse_line(confirmed, default_created_at=None).updated_at == later


def test_an_old_qdrant_payload_reads_as_updated_when_created():
    stamped = Fact("Alice keeps bees", kind="event", confidence=0.8).stamped(ALICE)
    payload = payload_of(ALICE, stamped, embedder=None)
    assert payload["updated_at"] == payload["created_at"]
    del payload["updated_at"]  # as a point written before facts had an update time
    old = fact_of(stamped.id, payload)
    assert old.updated_at == old.created_at == stamped.created_at and old.confidence == 0.8


def test_an_old_ledger_loads_unchanged_and_its_decay_counts_from_creation(tmp_path, embedder):
    workspace = tmp_path / "ws"
    ledger = OwnerPaths.of(workspace, ALICE).ledger(utcnow().date())
    ledger.parent.mkdir(parents=True)
    ledger.write_text(f"# Memories\n\n{OLD_BULLET}\n", encoding="utf-8")
    before = ledger.read_bytes()
    memory = FileSystemLongTermMemory(workspace, embedder)
    try:
        [hit] = memory.retrieve(ALICE, "bees", 1)
        assert hit.fact.updated_at == hit.fact.created_at and hit.fact.confidence == 1.0
        assert hit.fact.needs_verification  # an event from 2024: long below 0.5
        assert ledger.read_bytes() == before
    finally:
        memory.close()
