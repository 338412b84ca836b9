"""Session logs, ``session_search`` and evicted tool results in PostgreSQL (replica state):
two replicas over different workspaces and one schema see the same conversations, find the
same hits the files log finds, resolve each other's tool-result references, and keep nothing
of the user in their folders. Real PostgreSQL throughout (a schema per test); faults are real
too: a closed pool, and a server that drops the connection in the middle of a transaction."""

from __future__ import annotations

import random
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import (
    BackendUnavailableError,
    InvalidInputError,
    MemoryServiceError,
    UserErasedError,
)
from memory_service.domain.messages import Msg, ToolCall
from memory_service.services import build_maintenance, build_services, build_shortterm
from memory_service.shortterm.session import ShortTermMemory
from memory_service.stores.build import ReplicaStores
from memory_service.stores.database import Database
from memory_service.stores.logs_from_files import move_workspace_logs
from memory_service.stores.shortterm.session_logs import SessionLogStore
from memory_service.stores.shortterm.session_logs.files import FilesSessionLogStore
from memory_service.stores.shortterm.session_logs.postgres import PostgresSessionLogStore
from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore
from memory_service.stores.shortterm.tool_results import ToolResultStore
from memory_service.stores.shortterm.tool_results.files import FilesToolResultStore
from memory_service.stores.shortterm.tool_results.postgres import PostgresToolResultStore
from memory_service.stores.tombstones import Tombstones
from memory_service.stores.tombstones.files import FilesTombstones
from tests.support.postgres import PG_DSN, postgres_state_store

ALICE = RuntimeContext("acme", "alice", "s1")
BOB = RuntimeContext("acme", "bob", "s1")
SECRET = "Xyloquartz-Flumphbridge"  # in every message of Alice's: a byte scan finds any copy
BIG = "\n".join(f"line {i}: {SECRET} " + "x" * 40 for i in range(1, 201))  # 200 lines
LIMITS = {"max_chars": 500, "preview_chars": 50}


@dataclass
class Replica:
    workspace: Path
    database: Database
    memory: ShortTermMemory

    @property
    def log(self) -> SessionLogStore:
        return self.memory.log

    @property
    def results(self) -> ToolResultStore:
        return self.memory.tool_results


def open_replica(workspace: Path, schema: str, tombstones: Tombstones | None = None) -> Replica:
    """One service process's short-term memory with every piece of it in PostgreSQL."""
    database = Database(PG_DSN, schema=schema, pool_max=3)
    tombstones = tombstones or FilesTombstones(workspace)
    store = postgres_state_store(schema=schema, pool_max=2, tombstones=tombstones)
    memory = ShortTermMemory(
        store,
        PostgresSessionLogStore(database, workspace, tombstones=tombstones),
        PostgresToolResultStore(database, workspace, tombstones=tombstones, **LIMITS),
        context_window=8192,
    )
    return Replica(workspace, database, memory)


@pytest.fixture
def replicas(tmp_path: Path, pg_schema: str) -> Iterator[tuple[Replica, Replica]]:
    pair = (open_replica(tmp_path / "a", pg_schema), open_replica(tmp_path / "b", pg_schema))
    yield pair
    for replica in pair:
        replica.memory.close()
        replica.database.close()


def files_replica(workspace: Path) -> ShortTermMemory:
    return ShortTermMemory(
        FilesAgentStateStore(workspace),
        FilesSessionLogStore(workspace),
        FilesToolResultStore(workspace, **LIMITS),
        context_window=8192,
    )


def files_in(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def holding(folder: Path, needle: str) -> list[Path]:
    return [p for p in files_in(folder) if needle.encode() in p.read_bytes()]


def conversation() -> list[Msg]:
    return [
        Msg.user(f"grep the logs for {SECRET}, I am allergic to peanuts"),
        Msg.assistant(tool_calls=(ToolCall("call_7", "grep", "{}"),)),
        Msg.tool("call_7", BIG),
        Msg.assistant(f"Found it: {SECRET} appears 200 times."),
    ]


# -- two replicas, one conversation ----------------------------------------------------------


def test_a_conversation_from_one_replica_is_read_searched_and_resolved_on_the_other(replicas):
    a, b = replicas
    appended = a.memory.append(ALICE, conversation())
    assert appended.evicted == ["tool-results/s1/call_7.txt"]

    logged = b.log.read(ALICE)
    assert [e.message for e in logged] == [m.with_seq(i) for i, m in enumerate(conversation())]
    assert b.log.sessions(RuntimeContext("acme", "alice")) == ["s1"]
    assert b.memory.get(ALICE).messages[2].metadata["ref"] == "tool-results/s1/call_7.txt"

    hits = b.memory.search(ALICE, "allergic to peanuts")
    assert [(h.session_id, h.seq, h.role) for h in hits] == [("s1", 0, "user")]
    assert hits[0].snippet == conversation()[0].content

    ref = appended.evicted[0]
    assert b.memory.read_tool_result(ALICE, ref) == BIG
    assert b.memory.read_tool_result(ALICE, ref, 2, 3) == "".join(BIG.splitlines(True)[1:3])
    assert b.memory.search(BOB, "peanuts") == []  # Bob's sessions are not Alice's


def test_nothing_of_the_user_is_left_in_either_workspace(replicas):
    a, b = replicas
    a.memory.append(ALICE, conversation())
    b.memory.append(ALICE.with_session("s2"), [Msg.tool("call_8", BIG)])
    assert b.memory.search(ALICE, SECRET)  # stored, and searchable
    assert a.memory.read_tool_result(ALICE.with_session("s2"), "tool-results/s2/call_8.txt")
    for replica in replicas:
        assert holding(replica.workspace, SECRET) == []
        assert holding(replica.workspace, "call_7") == []
        assert files_in(replica.workspace) == []


def test_an_append_on_two_replicas_at_once_lands_in_one_log_in_order(replicas):
    a, b = replicas
    a.memory.append(ALICE, [Msg.user("first")])
    b.memory.append(ALICE, [Msg.user("second"), Msg.assistant("third")])
    entries = a.log.read(ALICE)
    assert [(e.message.seq, e.message.content) for e in entries] == [
        (0, "first"),
        (1, "second"),
        (2, "third"),
    ]
    assert all(e.at.tzinfo is not None and e.at.utcoffset() == timedelta(0) for e in entries)


# -- session_search: the files log's hits, on an index ---------------------------------------

SAID = {
    "s1": ["I am allergic to peanuts", "Noted!"],
    "s2": ["Book a table, no peanuts please", "Booked at Luigi's"],
    "s3": ["用户对花生过敏", "The theatre is closed on Mondays"],
    "s4": ["lorem ipsum " * 40 + "the peanuts are in the middle " + "dolor sit " * 40],
}
QUERIES = [
    "allergic to peanuts",
    "peanut allergy",
    "Luigi",
    "花生",
    "the",
    "PEANUTS please",
    "volcano",
    "   ",
]


def said(memory: ShortTermMemory) -> None:
    for sid, texts in SAID.items():
        msgs = [Msg.user(t) if i % 2 == 0 else Msg.assistant(t) for i, t in enumerate(texts)]
        memory.append(ALICE.with_session(sid), msgs)
    memory.append(BOB, [Msg.user("peanuts are my favourite snack")])


@pytest.mark.parametrize("query", QUERIES)
def test_session_search_finds_what_the_files_log_finds(replicas, tmp_path, query):
    a, _ = replicas
    files = files_replica(tmp_path / "files")
    said(files)
    said(a.memory)

    def found(memory: ShortTermMemory) -> list[tuple] | str:
        try:
            hits = memory.search(ALICE, query, limit=20)
        except InvalidInputError as exc:  # a blank query is refused by both, with one code
            return exc.code
        return sorted((-h.score, h.session_id, h.seq, h.role, h.snippet) for h in hits)

    assert found(a.memory) == found(files)
    assert (found(files) == "invalid_query") == (not query.strip())


def test_session_search_snippets_stemming_and_scripts(replicas):
    a, b = replicas
    said(a.memory)
    long_hit = b.memory.search(ALICE, "peanuts middle")[0]
    assert long_hit.session_id == "s4" and long_hit.snippet.startswith("…")
    assert "the peanuts are in the middle" in long_hit.snippet and len(long_hit.snippet) <= 302
    assert {h.session_id for h in b.memory.search(ALICE, "peanut")} == {"s1", "s2", "s4"}
    assert b.memory.search(ALICE, "花生")[0].snippet == "用户对花生过敏"
    quoted = b.memory.search(ALICE, "Luigi's o'neill \\ back\\slash")  # quotes are not syntax
    assert [h.snippet for h in quoted] == ["Booked at Luigi's"]


def test_session_search_orders_by_terms_then_rank_then_recency(replicas):
    a, b = replicas
    a.memory.append(ALICE, [Msg.user("peanuts")])
    a.memory.append(ALICE.with_session("s2"), [Msg.user("peanuts")])  # same text, newer
    a.memory.append(ALICE.with_session("s3"), [Msg.user("peanuts and cashews")])
    a.memory.append(  # the newest, but peanuts are one word of many here
        ALICE.with_session("s4"),
        [Msg.user("the peanuts came with walnuts, almonds, pecans, hazelnuts and sunflower oil")],
    )
    hits = b.memory.search(ALICE, "peanuts cashews")
    assert hits[0].session_id == "s3" and hits[0].score == 1.0  # both terms
    assert {h.score for h in hits[1:]} == {0.5}
    assert [h.session_id for h in hits[1:]] == ["s2", "s1", "s4"]  # ts_rank, then newer
    assert [h.session_id for h in b.memory.search(ALICE, "walnuts", limit=2)] == ["s4"]
    assert [h.session_id for h in b.memory.search(ALICE, "peanuts", limit=2)] == ["s2", "s1"]
    assert b.log.search(ALICE, "peanuts", session_id="s1")[0].session_id == "s1"


def test_huge_messages_are_logged_whole_and_found_by_their_words(replicas):
    a, b = replicas
    giant_word = "z" * 5000  # longer than a PostgreSQL lexeme may be
    draw = random.Random(7)  # 200k CJK characters: over 1 MiB of distinct bigrams
    han = "".join(chr(0x4E00 + draw.randrange(20_000)) for _ in range(200_000))
    text = f"{giant_word} needle {han} haystack"
    a.memory.append(ALICE, [Msg.user(text)])
    assert b.log.read(ALICE)[0].message.content == text
    assert [h.session_id for h in b.memory.search(ALICE, "needle")] == ["s1"]
    assert b.memory.search(ALICE, "haystack") == []  # past what one message may index


# -- tool results ----------------------------------------------------------------------------


def test_the_model_sees_the_same_preview_and_reference_as_with_files(replicas, tmp_path):
    a, _ = replicas
    files = FilesToolResultStore(tmp_path / "files", **LIMITS)
    for call_id in ("call_1", "call_1", "../../etc/passwd"):
        message = Msg.tool(call_id, BIG, metadata={"tool": "grep"})
        on_files, on_pg = files.evict(ALICE, message), a.results.evict(ALICE, message)
        if call_id.startswith(".."):  # a generated name: only its shape can match
            assert on_pg.metadata["ref"].startswith("tool-results/s1/")
            assert ".." not in on_pg.metadata["ref"]
            continue
        assert on_pg == on_files
    assert a.results.count_user(ALICE) == 3


def test_two_replicas_evicting_one_call_id_get_two_results(replicas):
    a, b = replicas
    first = a.results.evict(ALICE, Msg.tool("dup", BIG)).metadata["ref"]
    second = b.results.evict(ALICE, Msg.tool("dup", BIG + "!")).metadata["ref"]
    assert (first, second) == ("tool-results/s1/dup.txt", "tool-results/s1/dup-2.txt")
    assert a.results.read(ALICE, second).endswith("!")
    assert b.results.read(ALICE, first) == BIG


BAD_REFS = [
    "/etc/passwd",
    "../../../../etc/passwd",
    "tool-results/../state/s1.json",
    "tool-results/s1/../../MEMORY.md",
    "state/s1.json",
    "MEMORY.md",
    "",
    "tool-results/s2/call_1.txt",  # another session's
    "tool-results/s1/call_1.txt/more",
    "tool-results/s1/nothing.txt",
    "tool-results/s1/call_1",
    "tool-results\\s1\\nothing.txt",
]


def _refusal(store: ToolResultStore, ctx: RuntimeContext, ref: str, *lines: int) -> tuple:
    with pytest.raises(MemoryServiceError) as caught:
        store.read(ctx, ref, *lines)
    return type(caught.value), caught.value.code, str(caught.value)


@pytest.mark.parametrize("ref", BAD_REFS)
def test_bad_references_get_the_errors_the_files_store_gives(replicas, tmp_path, ref):
    a, _ = replicas
    files = FilesToolResultStore(tmp_path / "files", **LIMITS)
    for store in (files, a.results):
        store.evict(ALICE, Msg.tool("call_1", BIG))
    assert _refusal(a.results, ALICE, ref) == _refusal(files, ALICE, ref)


def test_other_users_references_and_bad_line_ranges_are_refused(replicas):
    a, b = replicas
    ref = a.results.evict(ALICE, Msg.tool("call_1", BIG)).metadata["ref"]
    assert _refusal(b.results, BOB, ref)[1] == "not_found"
    assert _refusal(b.results, ALICE, ref, 0, 3)[0] is InvalidInputError
    assert _refusal(b.results, ALICE, ref, 5, 4)[0] is InvalidInputError
    assert b.results.read(ALICE, ref, 199, 10_000).count("\n") == 1
    assert b.results.read(ALICE, ref, 300, 400) == ""


# -- delete, erase, retention ----------------------------------------------------------------


def test_deleting_a_session_on_one_replica_deletes_what_the_other_wrote(replicas):
    a, b = replicas
    a.memory.append(ALICE, conversation())
    a.memory.append(ALICE.with_session("s2"), [Msg.tool("call_1", BIG)])
    assert b.memory.delete(ALICE) == {"state": True, "tool_results": 1, "log": False}
    assert _refusal(a.results, ALICE, "tool-results/s1/call_7.txt")[1] == "not_found"
    assert a.log.read(ALICE)  # still searchable
    assert b.memory.delete(ALICE, include_log=True) == {
        "state": False,
        "tool_results": 0,
        "log": True,
    }
    assert a.log.read(ALICE) == [] and a.memory.search(ALICE, "peanuts") == []
    assert a.memory.read_tool_result(ALICE.with_session("s2"), "tool-results/s2/call_1.txt")


def test_erase_counts_and_removes_the_users_logs_and_results_only(replicas):
    a, b = replicas
    a.memory.append(ALICE, conversation())
    a.memory.append(ALICE.with_session("s2"), [Msg.user(f"more {SECRET}")])
    a.memory.append(BOB, [Msg.tool("call_9", BIG)])
    user = RuntimeContext("acme", "alice")
    assert (b.log.count_user(user), b.results.count_user(user)) == (2, 1)
    assert (b.log.erase_user(user), b.results.erase_user(user)) == (2, 1)
    assert (a.log.count_user(user), a.results.count_user(user)) == (0, 0)
    assert a.memory.search(ALICE, SECRET) == []
    bob = RuntimeContext("acme", "bob")
    assert (a.log.count_user(bob), a.results.count_user(bob)) == (1, 1)
    assert b.log.erase_user(user) == 0  # again: nothing left


SLOW_ON = """
CREATE FUNCTION slow_on_slow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.body = 'slow' THEN PERFORM pg_sleep(1.5); END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER slow_on_slow BEFORE INSERT ON session_log FOR EACH ROW
    EXECUTE FUNCTION slow_on_slow();
"""


def test_an_erase_waits_for_the_append_in_flight_and_takes_it_too(replicas):
    a, b = replicas
    with a.database.connection() as conn:
        conn.execute(SLOW_ON)
    appending = threading.Thread(target=a.log.append, args=(ALICE, [Msg.user("slow")]))
    appending.start()
    deadline = time.monotonic() + 10
    while not _inserting(b.database) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _inserting(b.database), "the append never reached PostgreSQL"
    assert b.log.erase_user(RuntimeContext("acme", "alice")) == 1  # after the append committed
    appending.join()
    assert a.log.read(ALICE) == []


def _inserting(database: Database) -> bool:
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
        "AND query LIKE 'INSERT INTO session_log%%'"
    )
    with database.connection() as conn:
        row = conn.execute(query).fetchone()
    return bool(row and row[0])


def test_an_erased_users_append_writes_nothing(tmp_path, pg_schema):
    tombstones = FilesTombstones(tmp_path / "shared")  # one tombstone store for both replicas
    a = open_replica(tmp_path / "a", pg_schema, tombstones)
    b = open_replica(tmp_path / "b", pg_schema, tombstones)
    try:
        tombstones.begin(ALICE, datetime.now(UTC))
        with pytest.raises(UserErasedError):
            a.log.append(ALICE, [Msg.user(SECRET)])
        with pytest.raises(UserErasedError):
            a.results.evict(ALICE, Msg.tool("call_1", BIG))
        assert b.log.count_user(ALICE) == 0 and b.results.count_user(ALICE) == 0
    finally:
        for replica in (a, b):
            replica.memory.close()
            replica.database.close()


def test_old_session_logs_are_deleted_after_the_retention(replicas, pg_schema):
    a, b = replicas
    for ctx in (ALICE.with_session("old"), ALICE.with_session("recent"), BOB.with_session("old")):
        a.memory.append(ctx, [Msg.user(f"hello from {ctx.session_id}")])
    now = datetime.now(UTC)
    with a.database.connection() as conn:
        for sid, age in (("old", 181), ("recent", 179)):
            conn.execute(
                "UPDATE session_log SET created_at = %s WHERE session_id = %s",
                (now - timedelta(days=age), sid),
            )
    user = RuntimeContext("acme", "alice")
    assert b.log.delete_old(user, retention_days=180, now=now) == ["old"]
    assert a.log.sessions(user) == ["recent"]
    assert a.log.sessions(RuntimeContext("acme", "bob")) == ["old"]  # per user only
    assert b.log.delete_old(user, now=now) == []
    with pytest.raises(ValueError):
        b.log.delete_old(user, retention_days=0)


def test_the_users_with_logs_are_listed_for_the_scheduler(replicas):
    a, b = replicas
    a.memory.append(ALICE, [Msg.user("hi")])
    a.memory.append(RuntimeContext("globex", "carol", "s9"), [Msg.user("hi")])
    a.log.append(ALICE.in_scope("agent", "helper"), [Msg.user("an agent's, not a user's")])
    assert b.log.tenants() == ["acme", "globex"]
    assert (b.log.users("acme"), b.log.users("globex"), b.log.users("initech")) == (
        ["alice"],
        ["carol"],
        [],
    )


def test_a_files_deployment_moves_its_logs_and_results_at_the_first_start(tmp_path, pg_database):
    workspace = tmp_path / "ws"
    files = files_replica(workspace)
    ref = files.append(ALICE, conversation()).evicted[0]
    files.append(ALICE.with_session("s2"), [Msg.user(f"later {SECRET}")])
    files.append(BOB, [Msg.user("bob's own words")])
    before = {ctx: files.log.read(ctx) for ctx in (ALICE, ALICE.with_session("s2"), BOB)}
    shutil.copytree(workspace, tmp_path / "copy")  # the same files again: a move cut short

    logs = PostgresSessionLogStore(pg_database, workspace)
    results = PostgresToolResultStore(pg_database, workspace, **LIMITS)
    assert move_workspace_logs(workspace, logs, results) == (6, 1)
    for needle in (SECRET, "bob's own"):  # the session states are not this move's
        assert [p for p in holding(workspace, needle) if "state" not in p.parts] == []
    assert {ctx: logs.read(ctx) for ctx in before} == before  # times and messages kept
    assert sorted(h.session_id for h in logs.search(ALICE, SECRET)) == ["s1"] * 3 + ["s2"]
    assert results.read(ALICE, ref) == BIG  # the preview in the state still resolves

    assert move_workspace_logs(tmp_path / "copy", logs, results) == (0, 0)
    assert [p for p in holding(tmp_path / "copy", SECRET) if "state" not in p.parts] == []
    assert {ctx: logs.read(ctx) for ctx in before} == before  # no message twice


def test_a_user_being_erased_is_left_to_the_erase_by_the_move(tmp_path, pg_database):
    workspace = tmp_path / "ws"
    files = files_replica(workspace)
    files.append(ALICE, conversation())
    files.append(BOB, [Msg.user("bob's own words")])
    FilesTombstones(workspace).begin(ALICE, datetime.now(UTC))
    logs = PostgresSessionLogStore(pg_database, workspace)
    results = PostgresToolResultStore(pg_database, workspace, **LIMITS)
    assert move_workspace_logs(workspace, logs, results) == (1, 0)
    assert logs.count_user(ALICE) == 0 and results.count_user(ALICE) == 0
    alice = workspace / "tenants/acme/users/alice"  # Alice's erase, run again, removes them
    assert (alice / "sessions/s1.log.jsonl").is_file()
    assert (alice / "tool-results/s1/call_7.txt").is_file()


# -- faults ----------------------------------------------------------------------------------


def test_postgresql_gone_is_backend_unavailable(replicas):
    a, b = replicas
    a.memory.append(ALICE, conversation())
    b.database.close()  # the pool is gone, as when PostgreSQL stops
    calls = [
        lambda: b.log.append(ALICE, [Msg.user("lost")]),
        lambda: b.log.read(ALICE),
        lambda: b.memory.search(ALICE, "peanuts"),
        lambda: b.memory.read_tool_result(ALICE, "tool-results/s1/call_7.txt"),
        lambda: b.results.evict(ALICE, Msg.tool("call_2", BIG)),
        lambda: b.results.remove_session(ALICE),
        lambda: b.log.erase_user(ALICE),
        lambda: b.log.delete_old(ALICE),
    ]
    for call in calls:
        with pytest.raises(BackendUnavailableError) as caught:
            call()
        assert caught.value.code == "backend_unavailable"
    b.results.discard(ALICE, [a.memory.get(ALICE).messages[2]])  # logged, not raised
    assert len(a.log.read(ALICE)) == 4  # nothing of the failed calls came through


KILL_ON = """
CREATE FUNCTION kill_on_boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF {column} LIKE '%%boom%%' THEN
        PERFORM pg_terminate_backend(pg_backend_pid());  -- the server drops the connection
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER kill_on_boom BEFORE INSERT ON {table} FOR EACH ROW
    EXECUTE FUNCTION kill_on_boom();
"""


def test_an_append_cut_off_mid_transaction_writes_none_of_its_messages(replicas):
    a, b = replicas
    a.log.append(ALICE, [Msg.user("before")])
    with a.database.connection() as conn:
        conn.execute(KILL_ON.format(column="NEW.body", table="session_log"))
    with pytest.raises(BackendUnavailableError):
        a.log.append(ALICE, [Msg.user("one"), Msg.user("two"), Msg.user("boom"), Msg.user("x")])
    assert [e.message.content for e in b.log.read(ALICE)] == ["before"]
    a.log.append(ALICE, [Msg.user("after")])  # the pool recovers
    assert [e.message.content for e in b.log.read(ALICE)] == ["before", "after"]


def test_a_state_save_cut_off_takes_its_evicted_results_back(replicas):
    a, b = replicas
    with a.database.connection() as conn:
        conn.execute(KILL_ON.format(column="NEW.state::text", table="agent_state"))
    with pytest.raises(BackendUnavailableError):
        a.memory.append(ALICE, [Msg.tool("call_1", BIG), Msg.user("boom")])
    assert b.results.count_user(ALICE) == 0
    assert b.log.read(ALICE) == [] and b.memory.load(ALICE).version == 0


# -- wiring ----------------------------------------------------------------------------------


def test_build_shortterm_keeps_logs_in_the_database_it_is_given(tmp_path, pg_database):
    settings = load_settings(workspace=tmp_path / "ws")
    on_files = build_shortterm(settings, None)
    on_pg = build_shortterm(
        settings, None, replicas=ReplicaStores.of(settings.workspace, pg_database)
    )
    assert isinstance(on_files.log, FilesSessionLogStore)
    assert isinstance(on_files.tool_results, FilesToolResultStore)
    assert isinstance(on_pg.log, PostgresSessionLogStore)
    assert isinstance(on_pg.tool_results, PostgresToolResultStore)
    assert isinstance(on_pg.log, SessionLogStore) and isinstance(
        on_pg.tool_results, ToolResultStore
    )
    on_files.close()
    on_pg.close()


KEY = "acme-user-key-0123456789abcdef"
ADMIN_KEY = "acme-admin-key-0123456789abcdef"
KEYS = {KEY: {"tenant": "acme", "role": "user"}, ADMIN_KEY: {"tenant": "acme", "role": "admin"}}
USER = {"Authorization": f"Bearer {KEY}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def test_two_services_share_logs_and_results_through_the_api(
    tmp_path,
    pg_schema,
    pg_table,
    embedder,
):
    sizes = {f"tool_result_{k}": v for k, v in LIMITS.items()}

    def serve(name: str):
        settings = load_settings(
            workspace=tmp_path / name,
            shortterm={"backend": "postgres", "postgres_table": pg_table, **sizes},
            postgres={"dsn": PG_DSN, "schema_name": pg_schema},
        )
        services = build_services(settings, embedder=embedder)
        return services, TestClient(create_app(services, ApiKeyRing(KEYS)))

    (one, api_one), (two, api_two) = serve("one"), serve("two")
    try:
        assert isinstance(two.shortterm.log, PostgresSessionLogStore)
        messages = [
            {"role": "user", "content": f"I am allergic to peanuts, {SECRET}"},
            {"role": "tool", "tool_call_id": "q1", "content": BIG},
        ]
        body = {"user_id": "alice", "messages": messages}
        appended = api_one.post("/v1/sessions/s1/messages", json=body, headers=USER)
        assert appended.status_code == 200, appended.text
        ref = appended.json()["evicted"][0]

        params = {"user_id": "alice", "ref": ref, "start_line": 2, "end_line": 2}
        read = api_two.get("/v1/sessions/s1/tool-results", params=params, headers=USER)
        assert read.json()["text"] == BIG.splitlines(True)[1]
        search = {"user_id": "alice", "query": "peanuts"}
        hits = api_two.post("/v1/sessions/search", json=search, headers=USER).json()["hits"]
        assert [h["session_id"] for h in hits] == ["s1"]

        with two.database.connection() as conn:
            conn.execute("UPDATE session_log SET created_at = created_at - interval '400 days'")
        report = build_maintenance(two).run_user(
            RuntimeContext("acme", "alice"), force=True, consolidate=False
        )
        assert report.counts["session_logs_deleted"] == 1
        api_one.post("/v1/sessions/s2/messages", json=body, headers=USER)

        erased = api_two.delete("/v1/users/alice", headers=ADMIN)
        assert erased.status_code == 200, erased.text
        removed = erased.json()["removed"]
        assert (removed["session_logs"], removed["tool_results"]) == (1, 2)
        assert (removed["session_logs.files"], removed["tool_results.files"]) == (0, 0)
        for services in (one, two):
            assert holding(services.settings.workspace, SECRET) == []

        one.database.close()  # PostgreSQL gone for this replica: 503 with a code
        search = api_one.post("/v1/sessions/search", json=search, headers=USER)
        assert search.status_code == 503
        assert search.json()["error"]["code"] == "backend_unavailable"
    finally:
        for services in (one, two):
            services.close()
