"""Qdrant engines: an Edge folder survives close and crash, is owned by one process, and a
collection built for another embedding size is refused with a way out."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from memory_service.config import QdrantSettings, load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import BackendUnavailableError, ConfigurationError
from memory_service.domain.facts import Fact, utcnow
from memory_service.longterm.qdrant.backend import QdrantLongTermMemory, open_qdrant
from memory_service.longterm.qdrant.client_engine import ClientEngine
from memory_service.longterm.qdrant.edge.engine import EdgeEngine
from memory_service.services import build_longterm

ALICE = RuntimeContext("acme", "alice")
REPO = Path(__file__).resolve().parents[3]


def _edge(tmp_path: Path, embedder) -> QdrantLongTermMemory:
    return open_qdrant(QdrantSettings(path=tmp_path / "qdrant"), tmp_path, embedder)


def _everything(memory) -> dict[str, dict]:
    return {f.id: f.to_dict() for f in memory.list(ALICE, include_inactive=True).items}


def _write_history(memory) -> dict[str, str]:
    """Facts, a supersession, an expired fact and a delete: what a reopen must bring back."""
    ids = {}
    ids["diet_old"] = memory.record(ALICE, [Fact("Alice is vegetarian", key="user.diet")])[0].id
    ids["diet_new"] = memory.record(ALICE, [Fact("Alice became vegan", key="user.diet")])[0].id
    past = utcnow() - timedelta(days=1)
    ids["expired"] = memory.record(ALICE, [Fact("Door code 4711", expires_at=past)])[0].id
    ids["kept"] = memory.record(ALICE, [Fact("Alice plays the violin", tags=("music",))])[0].id
    ids["deleted"] = memory.record(ALICE, [Fact("Alice owns a red kayak")])[0].id
    assert memory.delete(ALICE, [ids["deleted"]]) == 1
    return ids


def test_reopened_edge_folder_has_everything(tmp_path, embedder):
    memory = _edge(tmp_path, embedder)
    ids = _write_history(memory)
    before = _everything(memory)
    memory.close()

    reopened = _edge(tmp_path, embedder)
    try:
        assert _everything(reopened) == before
        assert set(before) == {ids["diet_old"], ids["diet_new"], ids["expired"], ids["kept"]}
        assert before[ids["diet_old"]]["superseded_by"] == ids["diet_new"]
        recalled = [r.fact.id for r in reopened.retrieve(ALICE, "vegan vegetarian diet", 5)]
        assert recalled[0] == ids["diet_new"] and ids["diet_old"] not in recalled
        assert [r.fact.id for r in reopened.retrieve(ALICE, "violin", 5, mode="bm25")] == [
            ids["kept"]
        ]
        assert reopened.record(ALICE, [Fact("Alice plays the violin")])[0].status == "duplicate"
    finally:
        reopened.close()


@pytest.mark.subprocess
def test_writes_are_durable_when_record_returns(tmp_path, embedder):
    """A process that records, supersedes and deletes, then dies without closing: all of it
    is in the folder."""
    script = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from indexing.embeddings import SentenceTransformerEmbedder
        from memory_service.config import QdrantSettings
        from memory_service.domain.context import RuntimeContext
        from memory_service.domain.facts import Fact
        from memory_service.longterm.qdrant.backend import open_qdrant

        ctx = RuntimeContext("acme", "alice")
        root = Path({str(tmp_path)!r})
        memory = open_qdrant(QdrantSettings(path=root / "qdrant"), root,
                             SentenceTransformerEmbedder(num_threads=1))
        memory.record(ctx, [Fact("Lives in Paris", key="user.city")])
        memory.record(ctx, [Fact("Lives in Berlin", key="user.city")])
        gone = memory.record(ctx, [Fact("Owns a red kayak")])[0].id
        memory.delete(ctx, [gone])
        print("segment flushes", memory.engine.commit.flushes, flush=True)
        os._exit(0)  # no close, no flush at exit
        """
    )
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "segment flushes 0" in done.stdout  # only the write-ahead log was on disk
    memory = _edge(tmp_path, embedder)
    try:
        facts = memory.list(ALICE, include_inactive=True).items
        by_text = {f.text: f for f in facts}
        assert set(by_text) == {"Lives in Paris", "Lives in Berlin"}
        assert by_text["Lives in Paris"].superseded_by == by_text["Lives in Berlin"].id
        assert [f.text for f in memory.list(ALICE).items] == ["Lives in Berlin"]
    finally:
        memory.close()


@pytest.mark.subprocess
def test_a_second_process_gets_a_clear_error(tmp_path, embedder):
    memory = _edge(tmp_path, embedder)
    folder = tmp_path / "qdrant" / "memories"
    script = textwrap.dedent(
        f"""
        from memory_service.domain.errors import MemoryServiceError
        from memory_service.longterm.qdrant.edge.engine import EdgeEngine
        try:
            EdgeEngine.acquire({str(folder)!r}, 384)
        except MemoryServiceError as exc:
            print(type(exc).__name__, exc.code, exc.message)
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("BackendUnavailableError backend_unavailable"), done.stdout
        assert str(folder.resolve()) in done.stdout
        assert "in use by another process" in done.stdout
        # ... while this process keeps working
        assert memory.record(ALICE, [Fact("Still writable")])[0].status == "created"
    finally:
        memory.close()


def test_one_process_shares_one_edge_instance(tmp_path, embedder):
    first = _edge(tmp_path, embedder)
    second = _edge(tmp_path, embedder)  # a second open of the same folder would fail in Edge
    assert first.engine is second.engine
    first.record(ALICE, [Fact("Shared between both")])
    first.close()
    assert [f.text for f in second.list(ALICE).items] == ["Shared between both"]
    second.close()
    with pytest.raises(BackendUnavailableError):
        second.list(ALICE)
    third = _edge(tmp_path, embedder)  # the last close released the folder
    assert third.engine is not first.engine
    assert [f.text for f in third.list(ALICE).items] == ["Shared between both"]
    third.close()


def test_edge_folder_with_another_dimension_is_refused(tmp_path, embedder):
    _edge(tmp_path, embedder).close()
    folder = tmp_path / "qdrant" / "memories"
    with pytest.raises(ConfigurationError) as caught:
        EdgeEngine.acquire(folder, 768)
    message = caught.value.message
    assert "384-dimensional" in message and "768-dimensional" in message
    assert "memory-service export" in message and "memory-service import" in message
    assert str(folder.resolve()) in message
    reopened = _edge(tmp_path, embedder)  # the refused open left the folder usable
    reopened.close()


def test_server_collection_with_another_dimension_is_refused(embedder):
    client = QdrantClient(location=":memory:")
    engine = ClientEngine.attach(client, "memories", embedder.dimension)
    memory = QdrantLongTermMemory(engine, embedder)
    memory.record(ALICE, [Fact("Stored with MiniLM")])
    with pytest.raises(ConfigurationError) as caught:
        ClientEngine.attach(client, "memories", 768)
    assert "384-dimensional" in caught.value.message
    assert "memory-service export" in caught.value.message
    again = ClientEngine.attach(client, "memories", embedder.dimension)  # same size: accepted
    assert [f.text for f in QdrantLongTermMemory(again, embedder).list(ALICE).items] == [
        "Stored with MiniLM"
    ]
    memory.close()


def test_backend_is_chosen_by_settings_alone(tmp_path, embedder, monkeypatch):
    monkeypatch.setenv("MEMORY_LONGTERM__BACKEND", "qdrant")
    monkeypatch.setenv("MEMORY_WORKSPACE", str(tmp_path / "ws"))
    memory = build_longterm(load_settings(), embedder)
    try:
        assert isinstance(memory, QdrantLongTermMemory)
        memory.record(ALICE, [Fact("Configured by environment")])
        assert (tmp_path / "ws" / "qdrant" / "memories" / "edge_config.json").is_file()
    finally:
        memory.close()
    monkeypatch.setenv("MEMORY_QDRANT__URL", ":memory:")
    memory = build_longterm(load_settings(), embedder)
    try:
        assert "qdrant (:memory:" in memory.engine.description
        assert memory.list(ALICE).items == []  # a different store
    finally:
        memory.close()
    monkeypatch.setenv("MEMORY_QDRANT__PATH", str(tmp_path / "elsewhere"))
    with pytest.raises(ConfigurationError, match="both set"):
        build_longterm(load_settings(), embedder)


def test_update_rewrites_metadata_and_keeps_text(tmp_path, embedder):
    memory = _edge(tmp_path, embedder)
    try:
        fid = memory.record(ALICE, [Fact("Alice likes jazz", importance=3)])[0].id
        stored = memory.get(ALICE, [fid])[0]
        changed = replace(stored, text="ignored", importance=8, tags=("music",))
        assert memory.update(ALICE, [changed, replace(stored, id="not-an-id")]) == 1
        after = memory.get(ALICE, [fid])[0]
        assert (after.text, after.importance, after.tags) == ("Alice likes jazz", 8, ("music",))
        assert [r.fact.id for r in memory.retrieve(ALICE, "jazz", 3, mode="bm25")] == [fid]
    finally:
        memory.close()


def test_unreachable_server_is_a_clear_error(embedder):
    settings = QdrantSettings(url="http://127.0.0.1:9", timeout_s=1)
    with pytest.raises(BackendUnavailableError) as caught:
        open_qdrant(settings, Path("unused"), embedder)
    assert "http://127.0.0.1:9" in caught.value.message


def test_naive_times_are_taken_as_utc(tmp_path, embedder):
    memory = _edge(tmp_path, embedder)
    try:
        memory.record(
            ALICE, [Fact("Lives in Paris", key="user.city", created_at=datetime(2020, 1, 1))]
        )
        later = memory.record(
            ALICE, [Fact("Lives in Rome", key="user.city", created_at=datetime(2024, 1, 1))]
        )[0]
        assert later.status == "superseded" and later.superseded_ids
        stored = memory.get(ALICE, [later.id])[0]
        assert stored.created_at == datetime(2024, 1, 1, tzinfo=UTC)
    finally:
        memory.close()


@pytest.mark.parametrize("kind", ["edge", "client"])
def test_both_engines_refuse_a_point_without_both_vectors(tmp_path, kind):
    from indexing.sparse import SparseTerms
    from memory_service.longterm.qdrant.filters import OwnerFilter
    from memory_service.longterm.qdrant.points import StoredPoint

    if kind == "edge":
        engine = EdgeEngine.acquire(tmp_path / "edge", 4)
    else:
        engine = ClientEngine.attach(QdrantClient(location=":memory:"), "memories", 4)
    point_id = "00000000-0000-5000-8000-000000000001"
    payload = {"tenant_id": "acme", "user_id": "alice", "text": "x"}
    sparse = SparseTerms((1,), (1.0,))
    try:
        for point in (
            StoredPoint(point_id, payload, None, sparse),  # Edge would write [] here
            StoredPoint(point_id, payload, [0.5, 0.5, 0.5, 0.5], None),
        ):
            with pytest.raises(ValueError, match="both vectors"):
                engine.upsert([point])
        assert engine.count(OwnerFilter("acme", "alice")) == 0
    finally:
        engine.close()


def test_a_new_edge_folder_stores_float16_and_an_older_float32_one_keeps_working(
    tmp_path, embedder
):
    import json

    import qdrant_edge as qe

    fresh = _edge(tmp_path / "new", embedder)
    fresh.record(ALICE, [Fact("Alice plays the violin")])
    fresh.close()
    layout = json.loads((tmp_path / "new" / "qdrant" / "memories" / "edge_config.json").read_text())
    assert layout["vectors"]["dense"]["datatype"] == "float16"

    older = tmp_path / "old" / "qdrant" / "memories"  # as every folder was made before float16
    older.mkdir(parents=True)
    params = qe.EdgeVectorParams(size=embedder.dimension, distance=qe.Distance.Cosine)
    sparse = qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)
    config = qe.EdgeConfig(vectors={"dense": params}, sparse_vectors={"bm25": sparse})
    qe.EdgeShard.create(str(older), config).close()
    memory = _edge(tmp_path / "old", embedder)
    try:
        memory.record(ALICE, [Fact("Alice plays the violin"), Fact("Alice lives in Lyon")])
        hits = memory.retrieve(ALICE, "which instrument does Alice play", 2, mode="dense")
        assert [h.fact.text for h in hits][0] == "Alice plays the violin"
    finally:
        memory.close()
    kept = json.loads((older / "edge_config.json").read_text())["vectors"]["dense"]
    assert kept.get("datatype", "float32") == "float32"


@pytest.mark.parametrize("kind", ["edge", "client"])
def test_a_payload_change_reaches_the_points_of_its_owner_alone(tmp_path, kind):
    """``set_payload`` names point ids and an owner: an id of another owner's point, or of
    no point, changes nothing, whatever the ids say."""
    from indexing.sparse import SparseTerms
    from memory_service.longterm.qdrant.filters import OwnerFilter
    from memory_service.longterm.qdrant.points import StoredPoint

    if kind == "edge":
        engine = EdgeEngine.acquire(tmp_path / "edge", 4)
    else:
        engine = ClientEngine.attach(QdrantClient(location=":memory:"), "memories", 4)
    alices, bobs, gone = (f"00000000-0000-5000-8000-00000000000{i}" for i in (1, 2, 3))
    owned = {"tenant_id": "acme", "scope": "user", "text": "x", "access_count": 0}
    try:
        engine.upsert(
            [
                StoredPoint(pid, {**owned, "user_id": user}, [0.5] * 4, SparseTerms((1,), (1.0,)))
                for pid, user in ((alices, "alice"), (bobs, "bob"))
            ]
        )
        counted = {pid: {"access_count": 3} for pid in (alices, bobs, gone)}
        engine.set_payload(OwnerFilter("acme", "alice"), counted)
        counts = {
            p.id: p.payload["access_count"] for p in engine.scroll(OwnerFilter("acme", "alice"))
        }
        assert counts == {alices: 3}
        (bob,) = engine.scroll(OwnerFilter("acme", "bob"))
        assert bob.payload["access_count"] == 0
    finally:
        engine.close()


@pytest.mark.parametrize("kind", ["edge", "client"])
def test_facts_by_id_are_read_whole_of_their_owner_alone(tmp_path, kind):
    """A recall reads its surviving hits' facts by id: never another owner's point (nor one
    held since a read of its owner), an id no longer stored (deleted since the query) is
    simply absent, and a write is read at once."""
    from indexing.sparse import SparseTerms
    from memory_service.longterm.qdrant.filters import OwnerFilter
    from memory_service.longterm.qdrant.points import StoredPoint

    if kind == "edge":
        engine = EdgeEngine.acquire(tmp_path / "edge", 4)
    else:
        engine = ClientEngine.attach(QdrantClient(location=":memory:"), "memories", 4)
    alices, bobs, gone = (f"00000000-0000-5000-8000-00000000000{i}" for i in (1, 2, 3))
    source = {"origin": "chat", "text": "said at length " * 100}
    owned = {"tenant_id": "acme", "scope": "user", "text": "x", "source": source}
    try:
        engine.upsert(
            [
                StoredPoint(
                    alices, {**owned, "user_id": "alice"}, [0.5] * 4, SparseTerms((1,), (1.0,))
                ),
                StoredPoint(
                    bobs, {**owned, "user_id": "bob"}, [0.5] * 4, SparseTerms((1,), (1.0,))
                ),
            ]
        )
        got = engine.facts(OwnerFilter("acme", "alice"), [alices, bobs, gone])
        assert {fid: fact.source.text for fid, fact in got.items()} == {alices: source["text"]}
        assert list(engine.facts(OwnerFilter("acme", "bob"), [alices, bobs])) == [bobs]
        assert engine.facts(OwnerFilter("globex", "alice"), [alices]) == {}
        assert engine.facts(OwnerFilter("acme", "alice"), []) == {}
        rewritten = {**owned, "user_id": "alice", "text": "y"}
        engine.upsert([StoredPoint(alices, rewritten, [0.5] * 4, SparseTerms((1,), (1.0,)))])
        assert engine.facts(OwnerFilter("acme", "alice"), [alices])[alices].text == "y"
    finally:
        engine.close()
