"""Deletes leave no text behind on Qdrant Edge: after ``delete`` or ``forget`` the deleted text
is in no byte of the Edge folder, at once for a shard of up to ``REWRITE_AT_ONCE_POINTS``
points, and by the next maintenance pass (or close) for a larger one. Scanned as the erase
test scans: every file's bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from memory_service.config import QdrantSettings
from memory_service.context import RuntimeContext
from memory_service.facts import Fact, Source
from memory_service.longterm.qdrant import backend as qdrant_backend
from memory_service.longterm.qdrant.edge import engine as edge_engine
from memory_service.pipeline.scheduler import run_all

ALICE = RuntimeContext("acme", "alice", "s1")
BOB = RuntimeContext("acme", "bob", "s1")


def _holding(folder: Path, word: str) -> list[str]:
    return [
        str(p.relative_to(folder))
        for p in sorted(folder.rglob("*"))
        if p.is_file() and word.encode() in p.read_bytes()
    ]


def _open(tmp_path: Path, embedder):
    return qdrant_backend.open_qdrant(QdrantSettings(path=tmp_path / "qdrant"), tmp_path, embedder)


def _seed(memory) -> None:
    said = Source("flush", "s1", (1,), "my passport number is Zq48817")
    facts = [Fact("Alice's passport is Zq48817", source=said), Fact("Alice likes tea")]
    memory.record(ALICE, facts)
    memory.record(BOB, [Fact("Bob's visa is Vx55120")])


def test_a_delete_and_a_forget_leave_no_text_in_a_small_shard(tmp_path, embedder):
    memory = _open(tmp_path, embedder)
    folder = tmp_path / "qdrant"
    try:
        _seed(memory)
        passport = next(f.id for f in memory.list(ALICE, limit=10).items if "Zq" in f.text)
        memory.close()
        memory = _open(tmp_path, embedder)  # flushed to segments, not only the WAL
        assert _holding(folder, "Zq48817")
        assert memory.delete(ALICE, [passport]) == 1
        assert _holding(folder, "Zq48817") == []  # the delete itself rewrote the shard
        assert [f.text for f in memory.list(ALICE, limit=10).items] == ["Alice likes tea"]
        assert memory.forget(BOB) == 1
        assert _holding(folder, "Vx55120") == []
        assert _holding(folder, "Alice likes tea")  # what was kept is still there
    finally:
        memory.close()


@pytest.mark.slow  # fills a shard past the rewrite limit
def test_a_large_shard_is_rewritten_by_the_next_maintenance_pass(tmp_path, embedder, monkeypatch):
    from memory_service.config import load_settings
    from memory_service.services import build_services
    from memory_service.services.work import build_maintenance

    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    monkeypatch.setattr(edge_engine, "REWRITE_AT_ONCE_POINTS", 0)  # every shard is "large"
    settings = load_settings(workspace=tmp_path / "ws", longterm={"backend": "qdrant"})
    services = build_services(settings, embedder=embedder)
    memory = services.longterm
    folder = memory.engine.folder
    try:
        _seed(memory)
        passport = next(f.id for f in memory.list(ALICE, limit=10).items if "Zq" in f.text)
        assert memory.delete(ALICE, [passport]) == 1
        assert _holding(folder, "Zq48817")  # left for the pass: a rewrite copies every point
        run_all(build_maintenance(services), [], progress=False)
        assert _holding(folder, "Zq48817") == []
        assert memory.compact_deleted() is False  # nothing owed now
        memory.forget(BOB)
        assert _holding(folder, "Vx55120")
    finally:
        services.close()  # close pays what is owed
    assert _holding(folder, "Vx55120") == []
    assert _holding(folder, "Alice likes tea")
