"""Deletes leave no text behind on Qdrant Edge: after ``delete`` or ``forget`` the deleted text
is in no byte of the Edge folder once the background compaction they start has run (a shard of
up to ``REWRITE_AT_ONCE_POINTS`` points), or by the next maintenance pass (or close) for a
larger one; and the rewrite holds no search or write up while it copies. Scanned as the erase
test scans: every file's bytes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from memory_service.config import QdrantSettings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, Source
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
        assert [f.text for f in memory.list(ALICE, limit=10).items] == ["Alice likes tea"]
        assert memory.engine.compaction.wait(timeout=60)  # the rewrite the delete started
        assert _holding(folder, "Zq48817") == []
        assert memory.forget(BOB) == 1
        assert memory.engine.compaction.wait(timeout=60)
        assert _holding(folder, "Vx55120") == []
        assert _holding(folder, "Alice likes tea")  # what was kept is still there
    finally:
        memory.close()


def test_searches_and_writes_go_on_while_the_shard_is_rewritten(tmp_path, embedder):
    """The rewrite copies the shard beside it while calls go on, and swaps it in once; what
    was written or deleted during the copy is in the new shard as it was in the old."""
    memory = _open(tmp_path, embedder)
    folder = tmp_path / "qdrant"
    try:
        _seed(memory)
        tea = next(f.id for f in memory.list(ALICE, limit=10).items if "tea" in f.text)
        events: list[str] = []
        copying, answered = threading.Event(), threading.Event()

        def hold(copied: int) -> None:  # the copy waits here until the calls below answered
            events.append("copied")
            copying.set()
            answered.wait(timeout=10)  # bounded: a rewrite that held the calls up ends it

        def rewrite() -> None:
            memory.engine.rewrite_without_deleted(on_copied=hold)
            events.append("rewritten")

        worker = threading.Thread(target=rewrite)
        worker.start()
        try:
            assert copying.wait(timeout=30)
            hits = memory.retrieve(ALICE, "passport number", 5)
            memory.record(ALICE, [Fact("Alice moved to Porto")])
            assert memory.delete(ALICE, [tea]) == 1
            events.append("answered")
        finally:
            answered.set()
            worker.join(timeout=60)
        assert events == ["copied", "answered", "rewritten"]
        assert "Zq48817" in hits[0].fact.text
        texts = sorted(f.text for f in memory.list(ALICE, limit=10).items)
        assert texts == ["Alice moved to Porto", "Alice's passport is Zq48817"]
        assert memory.engine.compaction.wait(timeout=60)  # the delete during the copy is owed
        assert _holding(folder, "Alice likes tea") == []
        assert _holding(folder, "Alice moved to Porto")
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
