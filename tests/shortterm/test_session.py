"""ShortTermMemory end to end on real files: append, eviction, logs, search, retention,
compaction with and without a model, concurrent appends; and AgentState's own rules."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memory_service.config import CompactionSettings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ConflictError, InvalidInputError
from memory_service.domain.messages import Msg, ToolCall
from memory_service.llm import LlmNotConfiguredError, LlmUnavailableError
from memory_service.shortterm.session import ShortTermMemory
from memory_service.stores.shortterm.session_logs import session_search
from memory_service.stores.shortterm.session_logs.files import (
    FilesSessionLogStore,
    delete_old_session_logs,
)
from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore
from memory_service.stores.shortterm.tool_results.files import FilesToolResultStore
from tests.support.chat_script import TRIP_SUMMARY
from tests.support.llm_server import server_error, text

ALICE = RuntimeContext("acme", "alice", "s1")
BOB = RuntimeContext("acme", "bob", "s1")


def build(workspace: Path, model=None, **config) -> ShortTermMemory:
    return ShortTermMemory(
        FilesAgentStateStore(workspace),
        FilesSessionLogStore(workspace),
        FilesToolResultStore(workspace, max_chars=500, preview_chars=50),
        config=CompactionSettings(**config),
        model=model,
        context_window=8192,
    )


@pytest.fixture
def ws(tmp_path) -> Path:
    return tmp_path / "ws"


def log_lines(ws: Path, ctx: RuntimeContext) -> list[dict]:
    path = ws / f"tenants/{ctx.tenant_id}/users/{ctx.user_id}/sessions/{ctx.session_id}.log.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# -- AgentState ------------------------------------------------------------------------------


def test_state_numbers_messages_and_keeps_the_watermark():
    state = AgentState()
    stored = state.append(Msg.user("a"), Msg.assistant("b"))
    assert [m.seq for m in stored] == [0, 1]
    assert state.next_seq == 2 and state.token_estimate > 0
    assert [m.content for m in state.unflushed()] == ["a", "b"]
    state.mark_flushed(0)
    state.mark_flushed(0)
    assert [m.content for m in state.unflushed()] == ["b"]
    with pytest.raises(InvalidInputError):
        state.mark_flushed(5)
    state.mark_flushed(1)
    state.mark_flushed(0)  # never moves back
    assert state.last_flushed_index == 1
    assert AgentState.from_json(state.to_json()).to_dict() == state.to_dict()


def test_messages_validate_roles_marks_and_tool_fields():
    with pytest.raises(InvalidInputError):
        Msg("robot", "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        Msg("user", "x", mark="important")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError):
        Msg("tool", "result without a call id")
    with pytest.raises(InvalidInputError):
        Msg("user", "x", tool_calls=(ToolCall("c", "f"),))


# -- append, log, eviction -------------------------------------------------------------------


def test_append_saves_logs_and_evicts(ws):
    memory = build(ws)
    big = "row\n" * 400
    result = memory.append(
        ALICE,
        [
            Msg.user("find the rows"),
            Msg.assistant(tool_calls=(ToolCall("call_1", "query", "{}"),)),
            Msg.tool("call_1", big),
        ],
    )
    assert result.state.version == 1
    assert [m.seq for m in result.appended] == [0, 1, 2]
    assert result.evicted == ["tool-results/s1/call_1.txt"]
    assert result.compaction.reason == "not_needed"

    state = memory.load(ALICE)
    assert state.messages[2].mark == "tool_result"
    assert memory.read_tool_result(ALICE, result.evicted[0]) == big
    assert memory.read_tool_result(ALICE, result.evicted[0], 1, 2) == "row\nrow\n"

    lines = log_lines(ws, ALICE)
    assert [line["seq"] for line in lines] == [0, 1, 2]
    assert lines[2]["content"] == big  # the log keeps the full text, the state a preview
    assert all("at" in line for line in lines)

    memory.append(ALICE, [Msg.user("thanks")])
    assert [line["seq"] for line in log_lines(ws, ALICE)] == [0, 1, 2, 3]


def test_expected_version_guards_the_append(ws):
    memory = build(ws)
    memory.append(ALICE, [Msg.user("one")], expected_version=0)
    with pytest.raises(ConflictError):
        memory.append(ALICE, [Msg.user("stale")], expected_version=0)
    memory.append(ALICE, [Msg.user("two")], expected_version=1)
    assert [m.content for m in memory.load(ALICE).messages] == ["one", "two"]
    assert [line["content"] for line in log_lines(ws, ALICE)] == ["one", "two"]


def test_a_refused_append_leaves_no_evicted_files(ws):
    memory = build(ws)
    memory.append(ALICE, [Msg.user("one")])
    with pytest.raises(ConflictError):
        memory.append(ALICE, [Msg.tool("call_9", "y" * 2000)], expected_version=0)
    assert not list((ws / "tenants/acme/users/alice/tool-results/s1").glob("*.txt"))


def test_concurrent_appends_without_expected_version_all_land(ws):
    memory = build(ws)
    barrier = threading.Barrier(4)
    errors: list[Exception] = []

    def writer(i: int) -> None:
        barrier.wait()
        try:
            memory.append(ALICE, [Msg.user(f"writer {i}")])
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    # three attempts each: a writer may still lose, but never silently
    landed = {m.content for m in memory.load(ALICE).messages}
    assert all(isinstance(e, ConflictError) for e in errors)
    assert len(landed) + len(errors) == 4
    assert len(landed) >= 3  # a writer failing thrice means three others succeeded


# -- compaction through the session ----------------------------------------------------------


def test_append_without_a_model_stores_and_reports_no_model(ws):
    memory = build(ws)
    result = memory.append(ALICE, [Msg.user(f"m{i}") for i in range(30)])
    assert result.compaction.reason == "no_model" and not result.compaction.performed
    assert isinstance(result.compaction.error, LlmNotConfiguredError)
    state = memory.load(ALICE)
    assert len(state.messages) == 30 and state.flags["needs_compaction"] is True
    with pytest.raises(LlmNotConfiguredError):
        memory.compact(ALICE)


def test_append_compacts_when_the_trigger_fires_and_flushes_first(ws, llm_server, chat_model):
    memory = build(ws, chat_model)
    flushed: list[tuple[str, int]] = []

    def flush(state, ctx, reason):
        flushed.append((reason, len(state.unflushed())))
        state.mark_flushed(state.unflushed()[-1].seq)

    memory.set_flush(flush)
    memory.append(ALICE, [Msg.user(f"m{i}") for i in range(29)])
    assert llm_server.requests == [] and flushed == []
    llm_server.push(text(TRIP_SUMMARY))
    result = memory.append(ALICE, [Msg.user("m29")])
    assert result.compaction.performed and result.compaction.flushed
    assert flushed == [("pre_compaction", 30)]
    state = memory.load(ALICE)
    assert state.messages[0].mark == "summary" and len(state.messages) == 11
    assert state.last_flushed_index == 29
    assert len(log_lines(ws, ALICE)) == 30  # the log keeps every message


def test_a_failing_model_does_not_lose_the_append(ws, llm_server, chat_model):
    memory = build(ws, chat_model)
    llm_server.push(server_error(), server_error())
    result = memory.append(ALICE, [Msg.user(f"m{i}") for i in range(30)])
    assert result.compaction.reason == "failed"
    assert len(memory.load(ALICE).messages) == 30


def test_compact_now_raises_model_errors_and_keeps_the_stored_state(ws, llm_server, chat_model):
    memory = build(ws, chat_model)
    memory.append(ALICE, [Msg.user(f"m{i}") for i in range(12)])
    before = memory.load(ALICE).to_dict()
    llm_server.push(server_error(), server_error())
    with pytest.raises(LlmUnavailableError):
        memory.compact(ALICE)
    assert memory.load(ALICE).to_dict() == before
    llm_server.push(text(TRIP_SUMMARY))
    state, result = memory.compact(ALICE, keep_last=2)
    assert result.performed and (result.removed, result.kept) == (10, 2)
    assert state.version == 2 and memory.load(ALICE).version == 2


def test_sliding_window_needs_no_model(ws):
    memory = build(ws, policy="sliding_window", window_rounds=3)
    result = memory.append(ALICE, [Msg.user(f"q{i}") for i in range(5)])
    assert result.compaction.performed
    assert [m.content for m in memory.load(ALICE).messages] == ["q2", "q3", "q4"]


# -- logs: search and retention --------------------------------------------------------------


def test_session_search_finds_the_users_past_messages(ws):
    memory = build(ws)
    memory.append(ALICE, [Msg.user("I am allergic to peanuts"), Msg.assistant("Noted!")])
    memory.append(
        ALICE.with_session("s2"),
        [Msg.user("Book a table, no peanuts please"), Msg.assistant("Booked at Luigi's")],
    )
    memory.append(BOB, [Msg.user("peanuts are my favourite snack")])

    hits = memory.search(ALICE, "allergic to peanuts")
    assert [h.session_id for h in hits] == ["s1", "s2"]
    assert hits[0].snippet == "I am allergic to peanuts"
    assert hits[0].role == "user" and hits[0].seq == 0
    assert hits[0].score > hits[1].score
    assert all("favourite" not in h.snippet for h in hits)  # Bob's log is not Alice's
    assert session_search(memory.log, ALICE, "Luigi")[0].session_id == "s2"
    assert memory.search(ALICE, "volcano") == []
    assert memory.search(ALICE, "花生") == []


def test_search_skips_a_torn_line(ws):
    memory = build(ws)
    memory.append(ALICE, [Msg.user("first about tea")])
    path = ws / "tenants/acme/users/alice/sessions/s1.log.jsonl"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"at": "2025-01-01T00:00:00+00:00", "role": "us')
    memory.append(ALICE, [Msg.user("second about tea")])
    assert sorted(h.snippet for h in memory.search(ALICE, "tea")) == [
        "first about tea",
        "second about tea",
    ]


def test_old_session_logs_are_deleted_after_the_retention(ws):
    memory = build(ws)
    for sid in ("old", "recent"):
        memory.append(ALICE.with_session(sid), [Msg.user(f"hello from {sid}")])
    memory.append(BOB.with_session("old"), [Msg.user("bob's old one")])
    now = datetime(2025, 6, 1, tzinfo=UTC)
    for ctx, age in ((ALICE, 181), (BOB, 181)):
        path = ws / f"tenants/acme/users/{ctx.user_id}/sessions/old.log.jsonl"
        stamp = (now - timedelta(days=age)).timestamp()
        os.utime(path, (stamp, stamp))
    recent = ws / "tenants/acme/users/alice/sessions/recent.log.jsonl"
    stamp = (now - timedelta(days=179)).timestamp()
    os.utime(recent, (stamp, stamp))

    user = RuntimeContext("acme", "alice")
    assert delete_old_session_logs(ws, user, retention_days=180, now=now) == ["old"]
    assert memory.log.sessions(user) == ["recent"]
    assert memory.log.sessions(RuntimeContext("acme", "bob")) == ["old"]  # per user only
    assert delete_old_session_logs(ws, user, now=now) == []


def test_delete_removes_state_and_results_and_optionally_the_log(ws):
    memory = build(ws)
    memory.append(ALICE, [Msg.tool("c1", "z" * 2000)])
    assert memory.delete(ALICE) == {"state": True, "tool_results": 1, "log": False}
    assert memory.load(ALICE).version == 0
    assert memory.log.read(ALICE)  # still searchable
    assert memory.delete(ALICE, include_log=True) == {
        "state": False,
        "tool_results": 0,
        "log": True,
    }
    assert memory.log.read(ALICE) == []
