"""Crash safety in CI: SIGKILL a real ``serve`` process while clients write, three times.

The full run (20 kills per backend, files and Qdrant Edge) is
``python -m tests.support.reliability.crash``; its figures are in benchmarks/RELIABILITY.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from tests.support.postgres import PG_DSN
from tests.support.redis import REDIS_URL
from tests.support.reliability.crash import run_crash_test

# serve processes killed with SIGKILL, and a child that fills the disk
pytestmark = pytest.mark.subprocess


def test_acknowledged_writes_survive_sigkill_files_backend(tmp_path: Path):
    report = run_crash_test(
        tmp_path, backend="files", kills=3, writers=4, min_run_s=0.2, max_run_s=1.5, log=None
    )

    assert report.kills == 3
    assert report.acked_facts > 0 and report.acked_messages > 0  # the kills hit real traffic
    assert report.lost_facts == 0, report.problems
    assert report.lost_messages == 0 and report.messages_out_of_order == 0, report.problems
    assert report.resurrected_deletes == 0, report.problems
    assert report.foreign_or_garbled_visible == 0 and report.partial_batches == 0, report.problems
    assert report.corrupt_records == 0, report.problems
    assert report.server_errors == 0, report.unexpected_statuses


def test_acknowledged_writes_survive_sigkill_qdrant_edge(tmp_path: Path):
    """Edge acknowledges a write once its write-ahead log is fsynced, segments flushed later
    (``qdrant_edge_commit``): a kill between the two must lose nothing."""
    report = run_crash_test(
        tmp_path, backend="qdrant", kills=3, writers=4, min_run_s=0.2, max_run_s=1.5, log=None
    )

    assert report.kills == 3
    assert report.acked_facts > 0 and report.acked_messages > 0
    assert report.lost_facts == 0 and report.resurrected_deletes == 0, report.problems
    assert report.foreign_or_garbled_visible == 0 and report.partial_batches == 0, report.problems
    assert report.corrupt_records == 0, report.problems
    assert report.server_errors == 0, report.unexpected_statuses


def test_acknowledged_writes_survive_sigkill_with_replica_state_in_postgres(tmp_path, pg_schema):
    """The same check with sessions, logs and the rest of the replica state in PostgreSQL
    (a replica of the scaled-out shape, facts in the files backend)."""
    env = {
        "MEMORY_SHORTTERM__BACKEND": "postgres",
        "MEMORY_POSTGRES__DSN": PG_DSN,
        "MEMORY_POSTGRES__SCHEMA_NAME": pg_schema,
    }
    _two_kills_lose_nothing(tmp_path, env)
    assert not list((tmp_path / "workspace").rglob("*.log.jsonl"))  # logs in PostgreSQL


def _two_kills_lose_nothing(tmp_path: Path, env: dict[str, str]) -> None:
    """Two SIGKILLs of a files-backend server under 4 writers, with ``env``'s replica state:
    every acknowledged fact and message is there, in order, nothing half-written."""
    report = run_crash_test(
        tmp_path,
        backend="files",
        kills=2,
        writers=4,
        min_run_s=0.2,
        max_run_s=1.5,
        log=None,
        env=env,
    )
    assert report.kills == 2
    assert report.acked_facts > 0 and report.acked_messages > 0
    assert report.lost_facts == 0 and report.lost_messages == 0, report.problems
    assert report.messages_out_of_order == 0 and report.partial_batches == 0, report.problems
    assert report.resurrected_deletes == 0 and report.corrupt_records == 0, report.problems
    assert report.server_errors == 0, report.unexpected_statuses


CHILD = """
import json, resource, signal, sys
from pathlib import Path
from indexing.embeddings import SentenceTransformerEmbedder
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.longterm.files.backend import FileSystemLongTermMemory

workspace, limit, texts = Path(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
memory = FileSystemLongTermMemory(workspace, SentenceTransformerEmbedder(num_threads=1))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails like a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    memory.record(RuntimeContext("acme", "alice"), [Fact(t) for t in texts])
except OSError as exc:
    print("refused", exc.errno)
else:
    print("recorded")
"""


def test_acknowledged_writes_survive_sigkill_with_sessions_in_redis(tmp_path, redis_prefix):
    """The same check with session states in Redis (facts and logs in the workspace)."""
    env = {
        "MEMORY_SHORTTERM__BACKEND": "redis",
        "MEMORY_REDIS__URL": REDIS_URL,
        "MEMORY_REDIS__KEY_PREFIX": redis_prefix,
    }
    _two_kills_lose_nothing(tmp_path, env)
    assert not list((tmp_path / "workspace").rglob("state/*.json"))  # states in Redis


def test_a_disk_that_fills_up_mid_record_leaves_the_ledger_whole(tmp_path: Path, embedder):
    """The write of a batch fails part-way (the file-size limit stands in for a full disk): the
    ledger must read as it was, with no torn bullet and no part of the batch."""
    memory = FileSystemLongTermMemory(tmp_path, embedder)
    ctx = RuntimeContext("acme", "alice")
    kept = ["Alice is allergic to peanuts", "Alice lives in Lisbon", "Alice plays the cello"]
    memory.record(ctx, [Fact(t) for t in kept])
    memory.close()
    [ledger] = (tmp_path / "tenants/acme/users/alice/memory").glob("*.md")
    before = ledger.read_bytes()
    batch = [f"Alice visited museum number {n} and liked its garden" for n in range(40)]

    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path), str(len(before) + 1500), json.dumps(batch)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )

    assert child.stdout.startswith("refused"), child.stdout + child.stderr
    assert ledger.read_bytes() == before
    fresh = FileSystemLongTermMemory(tmp_path, embedder)
    try:
        assert sorted(f.text for f in fresh.list(ctx).items) == sorted(kept)
    finally:
        fresh.close()
    assert list(ledger.parent.glob(".*.tmp")) == []  # the failed temp file was removed
