"""Each store's own part of an erase (``count_user`` / ``erase_user``), the tombstone every
writer checks, and Qdrant Edge's rewrite that leaves no deleted payload in its files."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from memory_service.config import QdrantSettings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import UserErasedError
from memory_service.domain.facts import Fact, utcnow
from memory_service.domain.messages import Msg
from memory_service.domain.paths import OwnerPaths
from memory_service.longterm.qdrant.backend import open_qdrant
from memory_service.longterm.qdrant.edge.engine import REPLACED_SUFFIX, EdgeEngine
from memory_service.pipeline.erasure import UserErasure
from memory_service.stores.dead_letters.files import FilesDeadLetterBox, FilesDeadLetterStore
from memory_service.stores.dead_letters.record import DeadLetterRecord
from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore
from memory_service.stores.tombstones.files import FilesTombstones
from tests.support.postgres import postgres_state_store

ALICE = RuntimeContext("acme", "alice", "s1")
BOB = RuntimeContext("acme", "bob", "s1")


def _letter(ctx: RuntimeContext, text: str) -> DeadLetterRecord:
    return DeadLetterRecord.of_flush(
        ctx, reason="post_call", error="boom", attempts=2, messages=[Msg.user(text)], at=utcnow()
    )


def test_dead_letters_lose_only_the_users_records_in_one_rewrite(tmp_path: Path):
    letters = FilesDeadLetterBox.of(tmp_path, ALICE)
    letters.append(_letter(ALICE, "alice one"))
    letters.append(_letter(BOB, "bob's line, planted in alice's file"))
    letters.append(_letter(ALICE, "alice two"))
    with open(letters.path, "a", encoding="utf-8") as handle:
        handle.write("not json at all\n")
    store = FilesDeadLetterStore(tmp_path)
    assert store.count_user(ALICE) == 2

    assert store.erase_user(ALICE) == 2

    kept = letters.path.read_text(encoding="utf-8").splitlines()
    assert len(kept) == 2 and "bob's line" in kept[0] and kept[1] == "not json at all"
    assert "alice" not in kept[0].replace("bob's line, planted in alice's file", "")
    assert store.erase_user(ALICE) == 0 and store.count_user(ALICE) == 0


def test_a_dead_letter_file_with_only_the_users_records_goes(tmp_path: Path):
    FilesDeadLetterBox.of(tmp_path, ALICE).append(_letter(ALICE, "alice"))
    assert FilesDeadLetterStore(tmp_path).erase_user(ALICE) == 1
    assert not OwnerPaths.of(tmp_path, ALICE).flush_dead_letters.exists()


def test_work_begun_before_an_erase_is_refused_and_work_after_it_is_served(tmp_path: Path):
    store = FilesAgentStateStore(tmp_path)
    before = RuntimeContext("acme", "alice", "s1")  # began before the erase
    state = store.load(before)
    state.append(Msg.user("kept"))
    store.save(state, before)
    tombstones = FilesTombstones(tmp_path)
    began = utcnow()
    tombstones.begin(before, began)
    during = RuntimeContext("acme", "alice", "s1")
    with pytest.raises(UserErasedError):  # while an erase runs, nobody writes
        store.save(AgentState(session_id="s1"), during)
    assert store.erase_user(before) == 1
    tombstones.finish(before, began, utcnow())

    late = store.load(before)
    late.append(Msg.user("late"))
    with pytest.raises(UserErasedError):
        store.save(late, before)
    assert store.count_user(before) == 0
    after = RuntimeContext("acme", "alice", "s1")
    fresh = store.load(after)
    fresh.append(Msg.user("new"))
    store.save(fresh, after)  # a new request: a new user's data
    assert store.count_user(after) == 1
    other = RuntimeContext("acme", "bob", "s1", started_at=before.started_at)
    store.save(AgentState(session_id="s1"), other)  # another user is never refused


def test_an_unreadable_tombstone_refuses_writes(tmp_path: Path):
    path = FilesTombstones(tmp_path).path(ALICE)
    path.parent.mkdir(parents=True)
    path.write_text("{broken")
    assert FilesTombstones(tmp_path).refuses(RuntimeContext("acme", "alice"))
    assert path.name.endswith(".json") and "alice" not in path.read_text() + path.name


def test_an_erase_that_died_half_way_is_finished_by_the_next(tmp_path: Path):
    store = FilesAgentStateStore(tmp_path)
    state = store.load(ALICE)
    state.append(Msg.user("x"))
    store.save(state, ALICE)
    erasure = UserErasure(tmp_path, [("sessions.files", store)])
    FilesTombstones(tmp_path).begin(ALICE, utcnow())  # as a killed erase leaves it
    assert store.erase_user(ALICE) == 1
    with pytest.raises(UserErasedError):
        store.save(AgentState(session_id="s2"), RuntimeContext("acme", "alice", "s2"))

    receipt = erasure.erase(RuntimeContext("acme", "alice"), by="cli")  # nothing left: finished

    assert receipt.removed == {"sessions.files": 0}
    data = json.loads(FilesTombstones(tmp_path).path(ALICE).read_text())
    assert data["state"] == "erased" and data["erased_at"] == receipt.erased_at.isoformat()
    store.save(AgentState(session_id="s2"), RuntimeContext("acme", "alice", "s2"))


def test_postgres_states_of_one_user_go_and_a_save_begun_before_is_refused(
    tmp_path: Path,
    pg_table: str,
):
    tombstones = FilesTombstones(tmp_path)
    store = postgres_state_store(table=pg_table, tombstones=tombstones)
    try:
        for ctx in (ALICE, ALICE.with_session("s2"), BOB):
            state = store.load(ctx)
            state.append(Msg.user(f"{ctx.user_id} {ctx.session_id}"))
            store.save(state, ctx)
        loaded = store.load(ALICE)  # a request in flight
        loaded.append(Msg.user("late"))
        began = utcnow()
        tombstones.begin(ALICE, began)
        assert store.count_user(ALICE) == 2
        assert store.erase_user(ALICE) == 2
        tombstones.finish(ALICE, began, utcnow())
        with pytest.raises(UserErasedError):
            store.save(loaded, ALICE)
        assert store.count_user(ALICE) == 0 and store.list_sessions(ALICE) == []
        assert [s.session_id for s in store.list_sessions(BOB)] == ["s1"]
    finally:
        store.close()


def _edge_files_hold(folder: Path, word: str) -> list[str]:
    return [
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and word.encode() in p.read_bytes()
    ]


def test_edge_keeps_no_byte_of_an_erased_users_facts(tmp_path: Path, embedder):
    memory = open_qdrant(QdrantSettings(path=tmp_path / "qdrant"), tmp_path, embedder)
    folder = tmp_path / "qdrant" / "memories"
    try:
        memory.record(ALICE, [Fact("Alice's safe word is Glimmerquartz")])
        memory.record(BOB, [Fact("Bob's safe word is Tumbleweed")])
        assert _edge_files_hold(folder, "Glimmerquartz")  # what the scan finds when it is there

        assert memory.erase_user(ALICE) == 1

        assert _edge_files_hold(folder, "Glimmerquartz") == []
        assert [f.text for f in memory.list(BOB).items] == ["Bob's safe word is Tumbleweed"]
        assert memory.retrieve(BOB, "safe word", 1)[0].fact.text.endswith("Tumbleweed")
        memory.record(ALICE, [Fact("Alice is back")])  # still a working collection
        assert memory.count_user(ALICE) == 1
    finally:
        memory.close()


def test_edge_open_finishes_a_rewrite_killed_between_its_renames(tmp_path: Path, embedder):
    memory = open_qdrant(QdrantSettings(path=tmp_path / "qdrant"), tmp_path, embedder)
    memory.record(BOB, [Fact("Bob keeps bees")])
    memory.close()
    folder = tmp_path / "qdrant" / "memories"
    os.rename(folder, folder.with_name(folder.name + REPLACED_SUFFIX))  # killed here

    engine = EdgeEngine.acquire(folder, embedder.dimension)
    engine.close()
    memory = open_qdrant(QdrantSettings(path=tmp_path / "qdrant"), tmp_path, embedder)
    try:
        assert [f.text for f in memory.list(BOB).items] == ["Bob keeps bees"]
        assert not folder.with_name(folder.name + REPLACED_SUFFIX).exists()
    finally:
        memory.close()


def test_a_record_begun_before_an_erase_is_refused_in_every_backend(memory):
    ctx = RuntimeContext("acme", "alice", started_at=utcnow() - timedelta(seconds=5))
    tombstones = memory._tombstones  # every backend the service builds checks them
    assert tombstones is not None
    began = utcnow()
    tombstones.begin(ctx, began)
    tombstones.finish(ctx, began, utcnow())
    with pytest.raises(UserErasedError):
        memory.record(ctx, [Fact("Alice returns from the past")])
    assert memory.count_user(RuntimeContext("acme", "alice")) == 0
