"""Concurrency in CI: 16 clients with mixed operations against real ``serve`` processes.

The full run (16 clients x 1,000 operations) is ``python -m tests.support.reliability.concurrency``;
its figures are in benchmarks/RELIABILITY.md.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from tests.support.reliability.concurrency import run_concurrency


def _assert_adds_up(result: dict) -> None:
    assert result["errors"] == 0, result["error_samples"]  # 409 on a stale version is not one
    assert result["foreign_reads"] == 0
    assert result["final_state_problems"] == {
        "missing_facts": 0,
        "extra_facts": 0,
        "changed_texts": 0,
        "session_mismatch": 0,
        "version_mismatch": 0,
    }
    assert result["facts_acknowledged"] > 0 and result["deletes_acknowledged"] > 0
    assert result["messages_acknowledged"] > 0


@pytest.mark.subprocess
def test_sixteen_clients_on_one_server_add_up(tmp_path: Path):
    result = run_concurrency(tmp_path, clients=16, ops=25, servers=1, log=lambda _: None)

    _assert_adds_up(result)
    assert result["requests"] >= 16 * 25


@pytest.mark.subprocess
def test_two_server_processes_share_one_files_workspace_safely(tmp_path: Path):
    """Per-user file locks (ledgers, session states, logs) make a second process safe: the
    clients of both see one consistent state, and each server shows all of it."""
    result = run_concurrency(tmp_path, clients=16, ops=15, servers=2, log=lambda _: None)

    _assert_adds_up(result)


def test_another_process_rewrite_in_the_same_clock_tick_is_seen(tmp_path: Path, embedder):
    """Each process caches a user's index by the files' stat. A rewrite by another process
    that keeps the file's size and lands in the same mtime tick (coarse kernel clocks, or
    file systems with 1-2 s timestamps: simulated by setting the old mtime back) must still be
    seen: an atomic rewrite is a new file."""
    ctx = RuntimeContext("acme", "alice")
    first = FileSystemLongTermMemory(tmp_path, embedder)  # two processes' views of one folder
    second = FileSystemLongTermMemory(tmp_path, embedder)
    try:
        [recorded] = first.record(ctx, [Fact("Alice likes jazz", importance=5)])
        assert first.get(ctx, [recorded.id])[0].importance == 5  # now cached by the first
        [ledger] = (tmp_path / "tenants/acme/users/alice/memory").glob("*.md")
        old = ledger.stat()
        fact = second.get(ctx, [recorded.id])[0]
        assert second.update(ctx, [replace(fact, importance=6)]) == 1
        assert ledger.stat().st_size == old.st_size  # same length: 5 -> 6
        os.utime(ledger, ns=(old.st_atime_ns, old.st_mtime_ns))

        assert first.get(ctx, [recorded.id])[0].importance == 6
    finally:
        first.close()
        second.close()
