"""Two processes writing one user's memory in PostgreSQL: no write is lost, and one key never
has two open facts (the owner's advisory lock and the open keys' unique index)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_service.domain.context import RuntimeContext
from tests.support.pgvector import postgres_memory, schema_for

ROUNDS = 40


@pytest.mark.subprocess
def test_two_writer_processes_lose_no_write_and_leave_one_open_fact_per_key(
    embedder, pgvector_dsn, tmp_path
):
    memory = postgres_memory(tmp_path, embedder)  # the tables exist before the writers start
    go = tmp_path / "go"
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": str(root)}
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.pg_writer",
                pgvector_dsn,
                schema_for(tmp_path),
                name,
                str(ROUNDS),
                str(go),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=root,
        )
        for name in ("a", "b")
    ]
    go.touch()
    outputs = [w.communicate(timeout=300) for w in writers]
    for writer, (_out, err) in zip(writers, outputs, strict=True):
        assert writer.returncode == 0, err
    acknowledged = [fid for out, _ in outputs for fid in json.loads(out)]
    assert len(set(acknowledged)) == 2 * 2 * ROUNDS
    try:
        ctx = RuntimeContext("acme", "shared-user")
        stored = memory.get(ctx, acknowledged)
        assert len(stored) == len(acknowledged)  # every acknowledged write is there
        open_colors = [f for f in stored if f.key == "color" and f.is_active()]
        assert len(open_colors) == 1
        closed = [f for f in stored if f.key == "color" and f.superseded_by is not None]
        assert len(closed) == 2 * ROUNDS - 1
        assert all(f.superseded_by in {g.id for g in stored} for f in closed)
        recalled = memory.retrieve(ctx, "what color is it", top_k=10)
        assert [r.fact.id for r in recalled if r.fact.key == "color"] == [open_colors[0].id]
    finally:
        memory.close()
