"""The replica-state stores' contracts: files and PostgreSQL, one suite per store, the same
assertions, so the two implementations cannot drift.

Each section's fixture is parametrised over both implementations; the PostgreSQL case asks
for ``pg_database`` (a schema of its own) only when it runs, so the files case stays in the
fast tier. Session states have their own suite (``tests/shortterm/test_store.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.errors import (
    InvalidIdError,
    InvalidInputError,
    NotFoundError,
    UserErasedError,
)
from memory_service.domain.messages import Msg
from memory_service.llm import Usage
from memory_service.stores.api_keys import KeyStore, digest_of
from memory_service.stores.api_keys.files import FilesKeyStore
from memory_service.stores.build import ReplicaStores
from memory_service.stores.database import Database
from memory_service.stores.dead_letters import DeadLetterStore
from memory_service.stores.dead_letters.record import DeadLetterRecord
from memory_service.stores.maintenance_state import MaintenanceState
from memory_service.stores.memory_docs import MEMORY_MD, MemoryDocs, Snapshot, snapshot_name
from memory_service.stores.memory_docs.files import FilesMemoryDocs
from memory_service.stores.shortterm.session_logs import SessionLogStore
from memory_service.stores.shortterm.session_logs.files import FilesSessionLogStore
from memory_service.stores.shortterm.tool_results import ToolResultStore
from memory_service.stores.shortterm.tool_results.files import FilesToolResultStore
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.user_data import ListsUsers
from tests.support.clock import Clock

BACKENDS = ["files", pytest.param("postgres", marks=pytest.mark.postgres)]

ALICE = RuntimeContext("acme", "alice", "s1")
BOB = RuntimeContext("acme", "bob", "s1")
GLOBEX_ALICE = RuntimeContext("globex", "alice", "s1")


@dataclass
class Backing:
    """Where one test's stores live: the workspace, and the database when PostgreSQL."""

    workspace: Path
    database: Database | None
    stores: ReplicaStores

    @property
    def tombstones(self) -> Tombstones:
        return self.stores.tombstones


@pytest.fixture(params=BACKENDS)
def backing(request: pytest.FixtureRequest, tmp_path: Path) -> Backing:
    """The workspace alone (files), or the workspace beside a fresh schema (PostgreSQL)."""
    database = request.getfixturevalue("pg_database") if request.param == "postgres" else None
    workspace = tmp_path / "ws"
    return Backing(workspace, database, ReplicaStores.of(workspace, database))


def erased(tombstones: Tombstones, ctx: RuntimeContext) -> None:
    """``ctx``'s user erased, the erase finished now."""
    began = datetime.now(UTC)
    tombstones.begin(ctx, began)
    tombstones.finish(ctx, began, datetime.now(UTC))


def later(ctx: RuntimeContext) -> RuntimeContext:
    """``ctx`` for work that begins now."""
    return RuntimeContext(ctx.tenant_id, ctx.user_id, ctx.session_id)


# -- tombstones ----------------------------------------------------------------------------


def test_tombstones_a_user_never_erased_has_none(backing: Backing) -> None:
    tombstones = backing.tombstones
    assert tombstones.read(ALICE) is None
    assert tombstones.refuses(ALICE) is False
    tombstones.check(ALICE)


def test_tombstones_begin_refuses_every_write_until_finish(backing: Backing) -> None:
    tombstones = backing.tombstones
    began = datetime.now(UTC)
    tombstones.begin(ALICE, began)
    tombstone = tombstones.read(ALICE)
    assert tombstone is not None
    assert (tombstone.state, tombstone.since, tombstone.erased_at) == ("erasing", began, None)
    for ctx in (ALICE, later(ALICE)):  # work begun before and after the erase began
        assert tombstones.refuses(ctx)
        with pytest.raises(UserErasedError) as caught:
            tombstones.check(ctx)
        assert caught.value.http_status == 409 and caught.value.code == "user_erased"


def test_tombstones_finish_refuses_only_work_begun_before_it(backing: Backing) -> None:
    tombstones = backing.tombstones
    before = later(ALICE)
    began = datetime.now(UTC)
    tombstones.begin(ALICE, began)
    done = datetime.now(UTC)
    tombstones.finish(ALICE, began, done)
    tombstone = tombstones.read(ALICE)
    assert tombstone is not None
    assert (tombstone.state, tombstone.since, tombstone.erased_at) == ("erased", began, done)
    with pytest.raises(UserErasedError):
        tombstones.check(before)
    after = later(ALICE)
    assert tombstones.refuses(after) is False
    tombstones.check(after)


def test_tombstones_another_erase_refuses_again(backing: Backing) -> None:
    tombstones = backing.tombstones
    erased(tombstones, ALICE)
    after = later(ALICE)
    tombstones.begin(ALICE, datetime.now(UTC))
    assert tombstones.refuses(after)


def test_tombstones_keep_to_their_user_and_tenant(backing: Backing) -> None:
    tombstones = backing.tombstones
    tombstones.begin(ALICE, datetime.now(UTC))
    for ctx in (BOB, GLOBEX_ALICE):
        assert tombstones.read(ctx) is None
        tombstones.check(ctx)


# -- usage ---------------------------------------------------------------------------------


def test_usage_of_a_tenant_with_none_is_all_zero(backing: Backing) -> None:
    report = backing.stores.usage.report("acme")
    assert report["tenant_id"] == "acme"
    assert report["tokens"] == {} and report["counters"] == {}
    assert report["total"] == {
        "calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
    }
    assert report["updated_at"] is None


def test_usage_sums_tokens_by_purpose_and_counters(backing: Backing) -> None:
    usage = backing.stores.usage
    usage.record("acme", tokens={"chat": Usage(10, 5, 15)}, counters={"facts_flushed": 2})
    usage.record(
        "acme",
        tokens={"chat": Usage(1, 2, 3), "flush": Usage(100, 0, 100)},
        counters={"facts_flushed": 3, "flush_failures": 1, "dead_letters": 0},
    )
    usage.record("acme")  # nothing to add
    report = usage.report("acme")
    assert report["tokens"] == {
        "chat": {"calls": 2, "prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        "flush": {"calls": 1, "prompt_tokens": 100, "completion_tokens": 0, "total_tokens": 100},
    }
    assert report["total"] == {
        "calls": 3,
        "prompt_tokens": 111,
        "completion_tokens": 7,
        "total_tokens": 118,
    }
    assert report["counters"] == {"facts_flushed": 5, "flush_failures": 1}  # zeros left out
    assert datetime.fromisoformat(report["updated_at"]) <= datetime.now(UTC)


def test_usage_of_one_tenant_is_not_anothers(backing: Backing) -> None:
    usage = backing.stores.usage
    usage.record("acme", tokens={"chat": Usage(1, 1, 2)}, counters={"facts_flushed": 1})
    other = usage.report("globex")
    assert other["tokens"] == {} and other["counters"] == {} and other["total"]["calls"] == 0


# -- dead letters --------------------------------------------------------------------------


def letter(ctx: RuntimeContext, text: str) -> DeadLetterRecord:
    return DeadLetterRecord.of_flush(
        ctx,
        reason="post_call",
        error="boom",
        attempts=2,
        messages=[Msg.user(text).with_seq(4)],
        at=datetime.now(UTC),
    )


@pytest.fixture
def dead_letters(backing: Backing) -> DeadLetterStore:
    return backing.stores.dead_letters


def test_dead_letters_append_and_read_in_order(dead_letters: DeadLetterStore) -> None:
    box = dead_letters.box(ALICE)
    assert box.exists() is False
    assert box.read(ALICE).letters == [] and box.read(ALICE).malformed == 0
    first, second = letter(ALICE, "first"), letter(ALICE.with_session("s2"), "second")
    box.append(first)
    box.append(second, ALICE)
    assert box.exists()
    read = box.read(ALICE)
    assert read.malformed == 0
    assert [x.record.to_dict() for x in read.letters] == [first.to_dict(), second.to_dict()]
    assert [x.ctx.session_id for x in read.letters] == ["s1", "s2"]  # the record's session
    assert dead_letters.count_user(ALICE) == 2
    # ``relative`` differs by design: the file's path in the user's folder, or the table.
    assert isinstance(box.relative, str) and box.relative


def test_dead_letters_keep_every_character_of_a_message(dead_letters: DeadLetterStore) -> None:
    box = dead_letters.box(ALICE)
    text = 'one\u2028two\u2029three \u00e9\u4e2d \U0001f600 "quoted" \\ back'
    box.append(letter(ALICE, text))
    (read,) = box.read(ALICE).letters
    assert read.record.messages[0].content == text
    assert read.line == read.record.to_line()  # raw UTF-8: U+2028 split no line
    assert "\u2028".encode() in read.line and dead_letters.count_user(ALICE) == 1


def test_dead_letters_of_an_erased_user_are_refused(backing: Backing) -> None:
    erased(backing.tombstones, ALICE)
    box = backing.stores.dead_letters.box(ALICE)
    with pytest.raises(UserErasedError):
        box.append(letter(ALICE, "late"), ALICE)
    assert backing.stores.dead_letters.count_user(ALICE) == 0
    box.append(letter(ALICE, "new work"), later(ALICE))
    assert backing.stores.dead_letters.count_user(ALICE) == 1


def test_dead_letters_rewrite_changes_only_what_it_was_given(
    dead_letters: DeadLetterStore,
) -> None:
    box = dead_letters.box(ALICE)
    for text in ("one", "two", "three"):
        box.append(letter(ALICE, text))
    one, two, three = box.read(ALICE).letters
    box.append(letter(ALICE, "appended meanwhile"))
    retried = two.record.after_replay_failure(two.record.messages, "still down", datetime.now(UTC))

    box.rewrite([(one, None), (two, retried)])

    kept = box.read(ALICE).letters
    assert [x.record.messages[0].content for x in kept] == ["two", "three", "appended meanwhile"]
    assert kept[0].record.replay_attempts == 1
    assert kept[0].record.last_replay_error == "still down"
    assert kept[1].record.to_dict() == three.record.to_dict()
    box.rewrite([(one, None)])  # gone already: nothing else goes
    assert dead_letters.count_user(ALICE) == 3


def test_dead_letters_rewrite_after_an_erase_brings_nothing_back(
    dead_letters: DeadLetterStore,
) -> None:
    box = dead_letters.box(ALICE)
    box.append(letter(ALICE, "one"))
    (read,) = box.read(ALICE).letters
    assert dead_letters.erase_user(ALICE) == 1
    box.rewrite([(read, read.record.after_replay_failure((), "x", datetime.now(UTC)))])
    assert dead_letters.count_user(ALICE) == 0 and box.read(ALICE).letters == []


def test_dead_letters_erase_removes_only_the_users(dead_letters: DeadLetterStore) -> None:
    for ctx in (ALICE, ALICE, BOB, GLOBEX_ALICE):
        dead_letters.box(ctx).append(letter(ctx, f"{ctx.tenant_id}/{ctx.user_id}"))
    assert dead_letters.count_user(ALICE) == 2
    assert dead_letters.erase_user(ALICE) == 2
    assert dead_letters.count_user(ALICE) == 0 and dead_letters.erase_user(ALICE) == 0
    assert dead_letters.box(ALICE).read(ALICE).letters == []
    assert dead_letters.count_user(BOB) == 1 and dead_letters.count_user(GLOBEX_ALICE) == 1
    assert dead_letters.box(BOB).remove_user(BOB) == 1
    assert dead_letters.count_user(GLOBEX_ALICE) == 1


def test_dead_letters_another_user_never_reads_them(dead_letters: DeadLetterStore) -> None:
    dead_letters.box(ALICE).append(letter(ALICE, "alice's"))
    for ctx in (BOB, GLOBEX_ALICE):
        assert dead_letters.box(ctx).read(ctx).letters == []
        assert dead_letters.count_user(ctx) == 0


def test_dead_letters_one_replay_of_a_user_at_a_time(dead_letters: DeadLetterStore) -> None:
    box = dead_letters.box(ALICE)
    with box.replaying() as first:
        assert first is True
        with dead_letters.box(ALICE).replaying() as second:
            assert second is False
        with dead_letters.box(BOB).replaying() as other_user:
            assert other_user is True
        box.append(letter(ALICE, "a flush goes on meanwhile"))
    with box.replaying() as again:
        assert again is True
    assert dead_letters.count_user(ALICE) == 1


def test_dead_letters_users_are_listed_where_no_folder_names_them(
    dead_letters: DeadLetterStore,
) -> None:
    """PostgreSQL names the users with letters (``ListsUsers``); the files' users are the
    workspace's folders, which the scheduler lists itself: that store lists none."""
    for ctx in (BOB, ALICE, GLOBEX_ALICE):
        dead_letters.box(ctx).append(letter(ctx, "x"))
    if not isinstance(dead_letters, ListsUsers):
        return
    assert dead_letters.tenants() == ["acme", "globex"]
    assert dead_letters.users("acme") == ["alice", "bob"]
    assert dead_letters.users("initech") == []


# -- maintenance state ---------------------------------------------------------------------


@pytest.fixture
def maintenance(backing: Backing) -> MaintenanceState:
    return backing.stores.maintenance


def test_maintenance_last_run_round_trips(maintenance: MaintenanceState) -> None:
    assert maintenance.last_run(ALICE) is None and maintenance.count_user(ALICE) == 0
    first = datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    maintenance.remember(ALICE, first, {"expired": 1})
    assert maintenance.last_run(ALICE) == first
    second = first + timedelta(hours=6)
    maintenance.remember(ALICE, second, {"expired": 0})
    assert maintenance.last_run(ALICE) == second
    assert maintenance.count_user(ALICE) == 1


def test_maintenance_markers_keep_to_their_owner(maintenance: MaintenanceState) -> None:
    now = datetime.now(UTC)
    maintenance.remember(ALICE, now, {})
    agent = scope_context("acme", "agent", "helper")
    for ctx in (BOB, GLOBEX_ALICE, agent, scope_context("acme", "tenant")):
        assert maintenance.last_run(ctx) is None
    maintenance.remember(agent, now - timedelta(days=1), {})
    assert maintenance.last_run(agent) == now - timedelta(days=1)
    assert maintenance.last_run(ALICE) == now


def test_maintenance_lock_is_exclusive(maintenance: MaintenanceState) -> None:
    with maintenance.lock(ALICE) as held:
        assert held is True
        with maintenance.lock(ALICE) as second:
            assert second is False
        with maintenance.lock(BOB) as other_user, maintenance.lock(GLOBEX_ALICE) as other_tenant:
            assert other_user is True and other_tenant is True
    with maintenance.lock(ALICE) as again:
        assert again is True


def test_maintenance_erase_removes_only_the_users_marker(maintenance: MaintenanceState) -> None:
    now = datetime.now(UTC)
    for ctx in (ALICE, BOB, GLOBEX_ALICE):
        maintenance.remember(ctx, now, {"ok": True})
    assert maintenance.erase_user(ALICE) == 1
    assert maintenance.last_run(ALICE) is None and maintenance.count_user(ALICE) == 0
    assert maintenance.erase_user(ALICE) == 0
    assert maintenance.last_run(BOB) == now and maintenance.last_run(GLOBEX_ALICE) == now
    with maintenance.lock(ALICE) as held:  # the lock still works after an erase
        assert held is True


def test_maintenance_users_are_listed_where_no_folder_names_them(
    maintenance: MaintenanceState,
) -> None:
    """PostgreSQL names the users with a marker (``ListsUsers``, scope owners left out);
    the files' users are the workspace's folders: that store lists none."""
    now = datetime.now(UTC)
    for ctx in (BOB, ALICE, GLOBEX_ALICE, scope_context("acme", "agent", "helper")):
        maintenance.remember(ctx, now, {})
    if not isinstance(maintenance, ListsUsers):
        return
    assert maintenance.tenants() == ["acme", "globex"]
    assert maintenance.users("acme") == ["alice", "bob"]


# -- memory docs ---------------------------------------------------------------------------


@pytest.fixture
def docs(backing: Backing) -> MemoryDocs:
    """MEMORY.md as files, or in PostgreSQL (``ReplicaStores.memory_docs`` picks that one for
    the Qdrant backend only)."""
    if backing.database is None:
        return FilesMemoryDocs(backing.workspace, tombstones=backing.tombstones)
    from memory_service.stores.memory_docs.postgres import PostgresMemoryDocs

    return PostgresMemoryDocs(backing.database, backing.workspace, tombstones=backing.tombstones)


def test_memory_docs_none_yet(docs: MemoryDocs) -> None:
    assert docs.read(ALICE) == ""
    assert docs.read_named(ALICE, MEMORY_MD) is None
    assert docs.snapshots(ALICE) == [] and docs.count_user(ALICE) == 0


def test_memory_docs_write_keeps_the_snapshot_it_is_given(docs: MemoryDocs) -> None:
    assert docs.write(ALICE, "# Memory\n- likes tea\n") is None
    assert docs.read(ALICE) == "# Memory\n- likes tea\n"
    assert docs.read_named(ALICE, MEMORY_MD) == "# Memory\n- likes tea\n"

    kept = docs.write(
        ALICE, "# Memory\n- likes coffee\n", snapshot=Snapshot("20250102T030405", "old text")
    )
    # Where it went differs by design: the file's path, or the document's name; both end so.
    assert kept is not None and kept.endswith(snapshot_name("20250102T030405"))
    assert docs.read(ALICE) == "# Memory\n- likes coffee\n"
    assert docs.snapshots(ALICE) == [snapshot_name("20250102T030405")]
    assert docs.read_named(ALICE, snapshot_name("20250102T030405")) == "old text"
    assert docs.write(ALICE, "third", snapshot=Snapshot("20250103T000000", "")) is None
    assert docs.snapshots(ALICE) == [snapshot_name("20250102T030405")]  # empty: none kept
    assert docs.count_user(ALICE) == 2


def test_memory_docs_snapshots_are_listed_oldest_first(docs: MemoryDocs) -> None:
    for stamp in ("20250301T000000", "20241231T235959", "20250101T120000"):
        where = docs.write_snapshot(ALICE, Snapshot(stamp, f"as of {stamp}"))
        assert where.endswith(snapshot_name(stamp))
    names = docs.snapshots(ALICE)
    assert names == [
        snapshot_name("20241231T235959"),
        snapshot_name("20250101T120000"),
        snapshot_name("20250301T000000"),
    ]
    assert docs.read_named(ALICE, names[0]) == "as of 20241231T235959"
    assert docs.read(ALICE) == ""  # a snapshot alone is no MEMORY.md
    assert docs.read_named(ALICE, snapshot_name("20200101T000000")) is None
    assert docs.read_named(ALICE, "memory/2025-01-01.md") is None  # no memory document


def test_memory_docs_edit_rewrites_an_existing_document_only(docs: MemoryDocs) -> None:
    docs.edit(ALICE, lambda text: text + "- new\n")
    assert docs.read_named(ALICE, MEMORY_MD) is None  # nothing to edit: nothing made
    docs.write(ALICE, "- one\n")
    docs.edit(ALICE, lambda text: text + "- two\n")
    assert docs.read(ALICE) == "- one\n- two\n"
    docs.edit(ALICE, lambda text: None)
    assert docs.read(ALICE) == "- one\n- two\n"
    assert docs.snapshots(ALICE) == []


def test_memory_docs_of_an_erased_user_are_refused(backing: Backing, docs: MemoryDocs) -> None:
    erased(backing.tombstones, ALICE)
    with pytest.raises(UserErasedError):
        docs.write(ALICE, "late", snapshot=Snapshot("20250101T000000", "older"))
    with pytest.raises(UserErasedError):
        docs.write_snapshot(ALICE, Snapshot("20250101T000000", "older"))
    assert docs.count_user(ALICE) == 0
    docs.write(ALICE, "unchecked", check=False)  # a write that is not a user's work
    assert docs.read(ALICE) == "unchecked"
    docs.write(later(ALICE), "new work")
    assert docs.read(ALICE) == "new work"


def test_memory_docs_keep_to_their_owner(docs: MemoryDocs) -> None:
    agent, tenant = scope_context("acme", "agent", "helper"), scope_context("acme", "tenant")
    owners = (ALICE, BOB, GLOBEX_ALICE, agent, tenant)
    for ctx in owners:
        docs.write(ctx, f"memory of {ctx.tenant_id}/{ctx.owner!r}")
    for ctx in owners:
        assert docs.read(ctx) == f"memory of {ctx.tenant_id}/{ctx.owner!r}"
    assert docs.read(ALICE.in_scope("tenant")) == docs.read(tenant)  # shared by its users
    assert docs.read(RuntimeContext("acme", "carol")) == ""


def test_memory_docs_erase_removes_only_the_owners(docs: MemoryDocs) -> None:
    docs.write(ALICE, "alice", snapshot=Snapshot("20250101T000000", "alice before"))
    docs.write_snapshot(ALICE, Snapshot("20250102T000000", "alice imported"))
    docs.write(BOB, "bob")
    docs.write(GLOBEX_ALICE, "globex alice")
    assert docs.count_user(ALICE) == 3
    assert docs.erase_user(ALICE) == 3
    assert docs.count_user(ALICE) == 0 and docs.erase_user(ALICE) == 0
    assert docs.read(ALICE) == "" and docs.snapshots(ALICE) == []
    assert docs.read(BOB) == "bob" and docs.read(GLOBEX_ALICE) == "globex alice"


# -- session logs --------------------------------------------------------------------------

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def logs(backing: Backing, clock: Clock) -> SessionLogStore:
    if backing.database is None:
        return FilesSessionLogStore(backing.workspace, clock=clock, tombstones=backing.tombstones)
    from memory_service.stores.shortterm.session_logs.postgres import PostgresSessionLogStore

    return PostgresSessionLogStore(
        backing.database, backing.workspace, clock=clock, tombstones=backing.tombstones
    )


def test_session_logs_append_and_read_round_trip(logs: SessionLogStore, clock: Clock) -> None:
    assert logs.read(ALICE) == [] and logs.sessions(ALICE) == [] and logs.count_user(ALICE) == 0
    first = [
        Msg.user("hello there").with_seq(0),
        Msg.assistant("hi", metadata={"k": 1}).with_seq(1),
    ]
    logs.append(ALICE, first)
    clock.now = T0 + timedelta(minutes=5)
    logs.append(ALICE, [Msg.user("again").with_seq(2)])
    logs.append(ALICE, [])  # nothing to log
    entries = logs.read(ALICE)
    assert [e.message.to_dict() for e in entries] == [
        *(m.to_dict() for m in first),
        Msg.user("again").with_seq(2).to_dict(),
    ]
    assert [e.at for e in entries] == [T0, T0, T0 + timedelta(minutes=5)]
    assert {e.session_id for e in entries} == {"s1"}
    assert logs.read(ALICE.with_session("s2")) == []
    assert logs.read(RuntimeContext("acme", "alice"), "s1") == entries


def test_session_logs_sessions_and_counts(logs: SessionLogStore) -> None:
    for sid in ("s3", "s1", "s2"):
        logs.append(ALICE.with_session(sid), [Msg.user(f"in {sid}")])
    logs.append(ALICE, [Msg.user("more in s1")])
    assert logs.sessions(ALICE) == ["s1", "s2", "s3"]
    assert logs.count_user(ALICE) == 3
    assert [e.message.content for e in logs.read(ALICE, "s1")] == ["in s1", "more in s1"]


def test_session_logs_search(logs: SessionLogStore) -> None:
    logs.append(ALICE, [Msg.user("I booked a flight to Lisbon").with_seq(0)])
    logs.append(ALICE.with_session("s2"), [Msg.assistant("Lisbon flight is on Friday").with_seq(3)])
    logs.append(ALICE.with_session("s2"), [Msg.user("the weather is nice").with_seq(4)])
    hits = logs.search(ALICE, "flight to Lisbon")
    assert [(h.session_id, h.seq, h.role, h.snippet) for h in hits] == [
        ("s1", 0, "user", "I booked a flight to Lisbon"),
        ("s2", 3, "assistant", "Lisbon flight is on Friday"),
    ]
    assert [h.score for h in hits] == [1.5, 1.0]  # every term; the phrase too in the first
    assert [h.session_id for h in logs.search(ALICE, "Lisbon", session_id="s2")] == ["s2"]
    assert len(logs.search(ALICE, "Lisbon", limit=1)) == 1
    assert logs.search(ALICE, "Lisbon", limit=0) == logs.search(ALICE, "Lisbon", limit=-1) == []
    assert logs.search(ALICE, "   ") == []
    stop_words = logs.search(ALICE, "is on")  # no term: the literal text only
    assert [(h.seq, h.score) for h in stop_words] == [(3, 0.5)]
    assert logs.search(ALICE, "submarine") == []


def test_session_logs_refuse_an_id_that_is_no_session_id(logs: SessionLogStore) -> None:
    logs.append(ALICE, [Msg.user("hello")])
    with pytest.raises(InvalidIdError):
        logs.read(ALICE, "../s1")
    with pytest.raises(InvalidIdError):
        logs.search(ALICE, "hello", session_id="../s1")


def test_session_logs_another_user_never_sees_them(logs: SessionLogStore) -> None:
    logs.append(ALICE, [Msg.user("alice's secret plan")])
    for ctx in (BOB, GLOBEX_ALICE, ALICE.in_scope("tenant")):
        assert logs.read(ctx) == [] and logs.sessions(ctx) == []
        assert logs.search(ctx, "secret plan") == [] and logs.count_user(ctx) == 0


def test_session_logs_of_an_erased_user_are_refused(
    backing: Backing, logs: SessionLogStore
) -> None:
    erased(backing.tombstones, ALICE)
    with pytest.raises(UserErasedError):
        logs.append(ALICE, [Msg.user("late")])
    assert logs.count_user(ALICE) == 0
    logs.append(later(ALICE), [Msg.user("new work")])
    assert [e.message.content for e in logs.read(ALICE)] == ["new work"]


def test_session_logs_delete_session_and_erase(logs: SessionLogStore) -> None:
    for ctx in (ALICE, ALICE.with_session("s2"), BOB, GLOBEX_ALICE):
        logs.append(ctx, [Msg.user("x")])
    assert logs.delete_session(ALICE) is True
    assert logs.delete_session(ALICE) is False
    assert logs.sessions(ALICE) == ["s2"]
    assert logs.read(BOB) != [] and logs.read(GLOBEX_ALICE) != []

    logs.append(ALICE, [Msg.user("y")])
    assert logs.erase_user(ALICE) == 2
    assert logs.count_user(ALICE) == 0 and logs.erase_user(ALICE) == 0
    assert logs.count_user(BOB) == 1 and logs.count_user(GLOBEX_ALICE) == 1


def test_session_logs_delete_old_after_the_retention(logs: SessionLogStore, clock: Clock) -> None:
    """Retention counts from the log's last write: the file's modification time, or the
    newest row's time (the store's clock) in PostgreSQL; here both are now."""
    clock.now = datetime.now(UTC)
    logs.append(ALICE, [Msg.user("one")])
    logs.append(ALICE.with_session("s2"), [Msg.user("two")])
    logs.append(BOB, [Msg.user("bob's")])
    assert logs.delete_old(ALICE, retention_days=30, now=clock.now + timedelta(days=29)) == []
    gone = logs.delete_old(ALICE, retention_days=30, now=clock.now + timedelta(days=31))
    assert sorted(gone) == ["s1", "s2"]
    assert logs.sessions(ALICE) == [] and logs.sessions(BOB) == ["s1"]
    with pytest.raises(ValueError):
        logs.delete_old(ALICE, retention_days=0)


def test_session_logs_users_are_listed_where_no_folder_names_them(logs: SessionLogStore) -> None:
    """PostgreSQL names the users with logs (``ListsUsers``); the files' users are folders."""
    for ctx in (BOB, ALICE, GLOBEX_ALICE, ALICE.in_scope("tenant")):
        logs.append(ctx, [Msg.user("x")])
    if not isinstance(logs, ListsUsers):
        return
    assert logs.tenants() == ["acme", "globex"]
    assert logs.users("acme") == ["alice", "bob"]


# -- tool results --------------------------------------------------------------------------

BIG = "\n".join(f"line {i}" for i in range(1, 41))  # 40 lines, over max_chars


@pytest.fixture
def results(backing: Backing) -> ToolResultStore:
    sizes = {"max_chars": 100, "preview_chars": 20, "tombstones": backing.tombstones}
    if backing.database is None:
        return FilesToolResultStore(backing.workspace, **sizes)
    from memory_service.stores.shortterm.tool_results.postgres import PostgresToolResultStore

    return PostgresToolResultStore(backing.database, backing.workspace, **sizes)


def test_tool_results_only_big_tool_results_are_evicted(results: ToolResultStore) -> None:
    small = Msg.tool("call_1", "short")
    assert results.needs_eviction(small) is False and results.evict(ALICE, small) == small
    assert results.needs_eviction(Msg.user(BIG)) is False
    big = Msg.tool("call_1", BIG)
    assert results.needs_eviction(big) is True
    preview = results.evict(ALICE, big)
    assert results.needs_eviction(preview) is False  # evicted once, never again
    assert preview.mark == "tool_result" and preview.tool_call_id == "call_1"
    assert preview.metadata["ref"] == "tool-results/s1/call_1.txt"
    assert (preview.metadata["chars"], preview.metadata["lines"]) == (len(BIG), 40)
    assert preview.content.endswith("\n" + BIG[:20] + "\n[...]")  # the first 20 characters
    assert results.count_user(ALICE) == 1


def test_tool_results_read_whole_or_by_line_range(results: ToolResultStore) -> None:
    ref = results.evict(ALICE, Msg.tool("call_1", BIG)).metadata["ref"]
    assert results.read(ALICE, ref) == BIG
    assert results.read(ALICE, ref, 2, 3) == "line 2\nline 3\n"
    assert results.read(ALICE, ref, 39) == "line 39\nline 40"
    assert results.read(ALICE, ref, None, 1) == "line 1\n"
    with pytest.raises(InvalidInputError):
        results.read(ALICE, ref, 0)
    with pytest.raises(InvalidInputError):
        results.read(ALICE, ref, 5, 4)


def test_tool_results_one_call_id_twice_gets_two_results(results: ToolResultStore) -> None:
    one = results.evict(ALICE, Msg.tool("call_1", BIG)).metadata["ref"]
    two = results.evict(ALICE, Msg.tool("call_1", BIG + "\nmore")).metadata["ref"]
    assert (one, two) == ("tool-results/s1/call_1.txt", "tool-results/s1/call_1-2.txt")
    assert results.read(ALICE, two).endswith("more") and not results.read(ALICE, one).endswith(
        "more"
    )


def test_tool_results_references_keep_to_their_user_and_session(results: ToolResultStore) -> None:
    ref = results.evict(ALICE, Msg.tool("call_1", BIG)).metadata["ref"]
    for ctx in (BOB, GLOBEX_ALICE):
        with pytest.raises(NotFoundError):
            results.read(ctx, ref)
    with pytest.raises(InvalidInputError) as caught:
        results.read(ALICE.with_session("s2"), ref)
    assert caught.value.code == "path_outside_session"
    with pytest.raises(NotFoundError):
        results.read(ALICE, "tool-results/s1/nothing.txt")
    with pytest.raises(InvalidIdError):
        results.read(ALICE, "../tool-results/s1/call_1.txt")


def test_tool_results_of_an_erased_user_are_refused(
    backing: Backing, results: ToolResultStore
) -> None:
    erased(backing.tombstones, ALICE)
    with pytest.raises(UserErasedError):
        results.evict(ALICE, Msg.tool("call_1", BIG))
    assert results.count_user(ALICE) == 0
    ref = results.evict(later(ALICE), Msg.tool("call_1", BIG)).metadata["ref"]
    assert results.read(ALICE, ref) == BIG


def test_tool_results_remove_session_discard_and_erase(results: ToolResultStore) -> None:
    s2 = ALICE.with_session("s2")
    kept = results.evict(ALICE, Msg.tool("call_1", BIG))
    unsaved = results.evict(ALICE, Msg.tool("call_2", BIG))
    results.evict(s2, Msg.tool("call_1", BIG))
    results.evict(s2, Msg.tool("call_2", BIG))
    bob = results.evict(BOB, Msg.tool("call_1", BIG)).metadata["ref"]
    globex = results.evict(GLOBEX_ALICE, Msg.tool("call_1", BIG)).metadata["ref"]

    results.discard(ALICE, [unsaved, Msg.user("not evicted")])
    with pytest.raises(NotFoundError):
        results.read(ALICE, unsaved.metadata["ref"])
    assert results.read(ALICE, kept.metadata["ref"]) == BIG
    assert results.count_user(ALICE) == 3

    assert results.remove_session(s2) == 2 and results.remove_session(s2) == 0
    assert results.count_user(ALICE) == 1
    assert results.erase_user(ALICE) == 1
    assert results.count_user(ALICE) == 0 and results.erase_user(ALICE) == 0
    assert results.read(BOB, bob) == BIG and results.read(GLOBEX_ALICE, globex) == BIG


# -- api keys ------------------------------------------------------------------------------


@pytest.fixture
def keys(backing: Backing, tmp_path: Path) -> KeyStore:
    """The keys file, or the keys table with that file to migrate from."""
    path = tmp_path / "api-keys.json"
    if backing.database is None:
        return FilesKeyStore(path)
    from memory_service.stores.api_keys.postgres import PostgresKeyStore

    return PostgresKeyStore(backing.database, keys_file=path)


def test_api_keys_add_stores_only_the_digest(keys: KeyStore) -> None:
    assert keys.entries() == []
    key = keys.add("acme", "curator")
    other = keys.add("globex")
    assert key.startswith("msk_") and key != other
    assert keys.add("acme", prefix="dev_").startswith("dev_")
    entries = keys.entries()
    assert [(e.tenant, e.role) for e in entries] == [
        ("acme", "curator"),
        ("globex", "application"),
        ("acme", "application"),
    ]
    assert entries[0].digest == digest_of(key) and entries[0].plaintext is False
    assert entries[0].fingerprint == digest_of(key).hex()[:12]
    assert all(e.created_at for e in entries)


def test_api_keys_add_refuses_a_bad_tenant_or_role(keys: KeyStore) -> None:
    with pytest.raises(InvalidInputError):
        keys.add("not a tenant!")
    with pytest.raises(InvalidInputError):
        keys.add("acme", "root")  # type: ignore[arg-type]
    assert keys.entries() == []


def test_api_keys_a_personal_key_keeps_its_user_and_the_older_role_name_reads(
    keys: KeyStore,
) -> None:
    personal = keys.add("acme", "personal", user="alice")
    keys.add("acme", "user")  # the application role's older name
    entries = keys.entries()
    assert [(e.role, e.user) for e in entries] == [("personal", "alice"), ("application", None)]
    assert entries[0].digest == digest_of(personal)
    for role, user in (("personal", None), ("admin", "alice"), ("personal", "../alice")):
        with pytest.raises(InvalidInputError):
            keys.add("acme", role, user=user)
    assert len(keys.entries()) == 2


def test_api_keys_revoke_by_key_or_fingerprint_prefix(keys: KeyStore) -> None:
    one, two, three = keys.add("acme"), keys.add("acme", "admin"), keys.add("globex")
    assert keys.revoke(one).digest == digest_of(one)
    revoked = keys.revoke(digest_of(two).hex()[:8].upper())
    assert (revoked.digest, revoked.role) == (digest_of(two), "admin")
    assert [e.digest for e in keys.entries()] == [digest_of(three)]
    with pytest.raises(InvalidInputError, match="no key"):
        keys.revoke(digest_of(two).hex()[:8])  # revoked already
    with pytest.raises(InvalidInputError, match="fingerprint"):
        keys.revoke("msk_never-added-anywhere-at-all")  # neither a key here nor hex
    with pytest.raises(InvalidInputError, match="fingerprint"):
        keys.revoke(digest_of(three).hex()[:5])  # too short
    assert [e.digest for e in keys.entries()] == [digest_of(three)]


def test_api_keys_migrate_brings_plaintext_keys_in_as_digests(
    keys: KeyStore, tmp_path: Path
) -> None:
    """The files store rewrites its own file's plaintext keys as digests; PostgreSQL imports
    the keys file (digests and plaintext alike). Either way the keys then count, once."""
    plain = "plaintext-key-of-an-older-version"
    (tmp_path / "api-keys.json").write_text(
        json.dumps({plain: {"tenant": "acme", "role": "user"}}), encoding="utf-8"
    )
    assert keys.migrate() == 1
    assert [(e.digest, e.tenant, e.plaintext) for e in keys.entries()] == [
        (digest_of(plain), "acme", False)
    ]
    assert keys.migrate() == 0
    keys.revoke(plain)
    assert keys.entries() == []
