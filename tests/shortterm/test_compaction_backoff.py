"""Summary replies in the shapes small models write, and the back-off after a failed summary.

Against the loopback LLM server (``tests/support/llm_server.py``, scripted by
``tests/support/chat_script.py``): a ``label:`` reply is accepted; after a failed summary the
next appends call neither the flush nor the summariser until the back-off (messages or minutes,
by setting) has passed; the back-off is part of the session's state, in both stores.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from memory_service.config import CompactionSettings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import utcnow
from memory_service.domain.messages import Msg
from memory_service.llm import LlmBadResponseError
from memory_service.shortterm.session import ShortTermMemory
from memory_service.shortterm.summary import parse_summary
from memory_service.stores.shortterm.session_logs.files import FilesSessionLogStore
from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore
from memory_service.stores.shortterm.tool_results.files import FilesToolResultStore
from tests.support.chat_script import SUMMARY_REPLY
from tests.support.llm_server import text
from tests.support.postgres import PG_DSN, postgres_state_store

ALICE = RuntimeContext("acme", "alice", "s1")

LABEL_REPLY = """Here is the summary.

Task overview: Plan a trip to Lisbon in May.
Current state: Flights compared;
hotel not booked yet.
Important discoveries: The user is allergic to peanuts.
Next steps: Book the hotel near Alfama.
Context to preserve: Budget 1200 EUR."""

EXPECTED = {
    "task_overview": "Plan a trip to Lisbon in May.",
    "current_state": "Flights compared;\nhotel not booked yet.",
    "important_discoveries": "The user is allergic to peanuts.",
    "next_steps": "Book the hotel near Alfama.",
    "context_to_preserve": "Budget 1200 EUR.",
}

NO_BLOCKS = "Sure! Here is a summary without any blocks."


# -- the shapes of a summary reply ------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        LABEL_REPLY,
        LABEL_REPLY.replace("Task overview:", "task_overview:").replace(
            "Next steps:", "NEXT_STEPS:"
        ),
        LABEL_REPLY.replace("Task overview:", "- **Task overview:**").replace(
            "Current state:", "**Current state**:"
        ),
        "\n".join(
            f"## {name.replace('_', ' ').title()}\n{body}\n" for name, body in EXPECTED.items()
        ),
        "\n".join(f"**{name}**\n{body}\n" for name, body in EXPECTED.items()),
        json.dumps(EXPECTED),
        "Sure:\n```json\n" + json.dumps(EXPECTED, indent=2) + "\n```",
        "".join(f"<{name}>{body}</{name}>" for name, body in EXPECTED.items()),
    ],
    ids=[
        "labels",
        "snake-labels",
        "bold-labels",
        "headings",
        "bold-lines",
        "json",
        "fenced-json",
        "xml",
    ],
)
def test_the_common_shapes_of_the_five_blocks_are_accepted(reply):
    assert parse_summary(reply) == EXPECTED


def test_json_lists_become_lines_and_missing_blocks_are_none():
    blocks = parse_summary(json.dumps({"next_steps": ["Book the hotel", "Pack"], "x": 1}))
    assert blocks["next_steps"] == "- Book the hotel\n- Pack"
    assert blocks["task_overview"] == "(none)"


@pytest.mark.parametrize(
    "reply", [NO_BLOCKS, "", "Status: fine\nNotes: none", '{"summary": "all good"}', "[1, 2]"]
)
def test_a_reply_without_any_block_is_still_refused(reply):
    with pytest.raises(LlmBadResponseError, match="none of the blocks"):
        parse_summary(reply)


def test_a_block_name_inside_a_sentence_is_not_a_label():
    blocks = parse_summary("Task overview: trip\nThe next steps: are unclear to me\n")
    assert blocks["task_overview"] == "trip\nThe next steps: are unclear to me"
    assert blocks["next_steps"] == "(none)"


# -- through short-term memory, against the loopback server ----------------------------------


@pytest.fixture(params=["files", pytest.param("postgres", marks=pytest.mark.postgres)])
def make_memory(request, tmp_path: Path) -> Iterator:
    """``make_memory(model, **compaction_settings)`` on a files or a PostgreSQL store."""
    workspace = tmp_path / "ws"
    table = f"agent_state_test_{uuid.uuid4().hex[:12]}"
    if request.param == "files":
        store = FilesAgentStateStore(workspace)
    else:
        store = postgres_state_store(table=table, pool_min=1, pool_max=2)

    def make(model, **config) -> ShortTermMemory:
        return ShortTermMemory(
            store,
            FilesSessionLogStore(workspace),
            FilesToolResultStore(workspace, max_chars=500, preview_chars=50),
            config=CompactionSettings(**config),
            model=model,
            context_window=8192,
        )

    try:
        yield make
    finally:
        store.close()
        if request.param == "postgres":
            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f'DROP TABLE IF EXISTS "{table}"')


def append_one(memory: ShortTermMemory, i: int):
    return memory.append(ALICE, [Msg.user(f"message {i}")]).compaction


def fill(memory: ShortTermMemory, count: int = 29) -> None:
    memory.append(ALICE, [Msg.user(f"message {i}") for i in range(count)])


def counting_flush(calls: list[str]):
    def flush(state: AgentState, ctx: RuntimeContext, reason: str) -> None:
        calls.append(reason)

    return flush


def test_a_label_reply_is_accepted_and_compacts(make_memory, script, chat_model):
    script.defaults["summary"] = text(LABEL_REPLY)
    memory = make_memory(chat_model)
    fill(memory)
    result = append_one(memory, 29)
    assert result.performed, result
    state = memory.load(ALICE)
    assert state.summary == EXPECTED and state.compaction_backoff is None
    assert len(script.requests["summary"]) == 1


def test_after_a_failed_summary_appends_wait_for_the_backoff(make_memory, script, chat_model):
    script.defaults["summary"] = text(NO_BLOCKS)
    memory = make_memory(chat_model, retry_after_messages=5, retry_after_minutes=60)
    flushes: list[str] = []
    memory.set_flush(counting_flush(flushes))
    fill(memory)
    failed = append_one(memory, 29)  # 30 messages: the trigger fires, the summary is refused
    assert failed.reason == "failed" and isinstance(failed.error, LlmBadResponseError)
    assert (len(script.requests["summary"]), flushes) == (1, ["pre_compaction"])
    backoff = memory.load(ALICE).compaction_backoff  # remembered by the stored session
    assert (backoff.failures, backoff.retry_at_seq) == (1, 35)

    for i in range(30, 34):  # 4 more messages: still inside the back-off
        waited = append_one(memory, i)
        assert not waited.performed and waited.reason == "backoff"
        assert waited.error.code == "llm_bad_response" and "back" in waited.error.message
    assert (len(script.requests["summary"]), flushes) == (1, ["pre_compaction"])

    again = append_one(memory, 34)  # the 5th: tried again, refused again, the wait doubles
    assert again.reason == "failed" and len(script.requests["summary"]) == 2
    backoff = memory.load(ALICE).compaction_backoff
    assert (backoff.failures, backoff.retry_at_seq) == (2, 45)

    script.defaults["summary"] = text(SUMMARY_REPLY)
    for i in range(35, 44):
        assert append_one(memory, i).reason == "backoff"
    assert len(script.requests["summary"]) == 2
    healed = append_one(memory, 44)
    assert healed.performed and len(script.requests["summary"]) == 3
    state = memory.load(ALICE)
    assert state.compaction_backoff is None and state.summary is not None
    assert len(flushes) == 3  # one flush per attempt, none while waiting


def test_the_backoff_also_ends_after_some_minutes(make_memory, script, chat_model):
    script.defaults["summary"] = text(NO_BLOCKS)
    memory = make_memory(chat_model, retry_after_messages=100, retry_after_minutes=10)
    fill(memory)
    assert append_one(memory, 29).reason == "failed"
    now = utcnow()
    memory.hook.clock = lambda: now + timedelta(minutes=9)
    assert append_one(memory, 30).reason == "backoff"
    assert len(script.requests["summary"]) == 1
    script.defaults["summary"] = text(SUMMARY_REPLY)
    memory.hook.clock = lambda: now + timedelta(minutes=11)
    assert append_one(memory, 31).performed
    assert len(script.requests["summary"]) == 2
    assert memory.load(ALICE).compaction_backoff is None


def test_a_forced_compaction_ignores_and_clears_the_backoff(make_memory, script, chat_model):
    script.defaults["summary"] = text(NO_BLOCKS)
    memory = make_memory(chat_model)
    fill(memory)
    assert append_one(memory, 29).reason == "failed"
    script.defaults["summary"] = text(SUMMARY_REPLY)
    state, result = memory.compact(ALICE)
    assert result.performed and state.compaction_backoff is None
    assert memory.load(ALICE).compaction_backoff is None


def test_the_backoff_round_trips_through_json():
    state = AgentState(session_id="s1")
    assert "compaction_backoff" in state.to_dict()
    old = state.to_dict()
    del old["compaction_backoff"]  # a state saved before the field existed
    assert AgentState.from_dict(old).compaction_backoff is None


def test_backoff_settings_are_validated():
    with pytest.raises(ValueError, match="retry_after_messages"):
        CompactionSettings(retry_after_messages=0)
    with pytest.raises(ValueError, match="retry_after_minutes"):
        CompactionSettings(retry_after_minutes=0)
    defaults = CompactionSettings()
    assert defaults.retry_after_messages >= 1 and defaults.retry_after_minutes > 0
