"""The Agents SDK session adapter on real short-term memory (files), through the SDK's own
Runner with a scripted model, and over HTTP against a served process."""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse
from agents.memory.session import Session
from agents.memory.session_settings import SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

from memory_service.client.sync_client import MemoryClient
from memory_service.config import CompactionSettings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.messages import Msg, ToolCall
from memory_service.integrations.openai_agents import MemoryServiceSession
from memory_service.longterm.protocol import LongTermMemory
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.shortterm.session import ShortTermMemory
from memory_service.stores.shortterm.session_logs.files import FilesSessionLogStore
from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore
from memory_service.stores.shortterm.tool_results.files import FilesToolResultStore
from tests.support.backends import LONGTERM_BACKENDS
from tests.support.llm_server import text

USER = {"role": "user", "content": "What is the weather in Lyon?"}
DEVELOPER = {"role": "developer", "content": "Answer briefly."}
PARTS = {
    "type": "message",
    "role": "user",
    "content": [{"type": "input_text", "text": "and in Paris?"}],
}
CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "weather",
    "arguments": '{"city": "Lyon"}',
    "id": "fc_1",
    "status": "completed",
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 24 C"}
REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "The user wants the weather."}],
}
ANSWER = {
    "type": "message",
    "role": "assistant",
    "id": "msg_1",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Sunny, 24 C.", "annotations": []}],
}
EVERY_KIND = [DEVELOPER, USER, REASONING, CALL, OUTPUT, ANSWER, PARTS]


def build(workspace: Path, model=None) -> ShortTermMemory:
    return ShortTermMemory(
        FilesAgentStateStore(workspace),
        FilesSessionLogStore(workspace),
        FilesToolResultStore(workspace, max_chars=500, preview_chars=50),
        config=CompactionSettings(),
        model=model,
        context_window=8192,
    )


@pytest.fixture
def shortterm(tmp_path) -> ShortTermMemory:
    return build(tmp_path / "ws")


def session_of(shortterm: ShortTermMemory, tenant="acme", user="alice", session="s1", **kw):
    return MemoryServiceSession.in_process(shortterm, RuntimeContext(tenant, user, session), **kw)


def run(coro):
    return asyncio.run(coro)


def test_is_the_sdks_session_and_every_item_kind_round_trips(shortterm):
    session = session_of(shortterm)
    assert isinstance(session, Session) and session.session_id == "s1"
    run(session.add_items(EVERY_KIND[:3]))
    run(session.add_items(EVERY_KIND[3:]))
    assert run(session.get_items()) == EVERY_KIND
    # what compaction, the flush and search read: the text of each item
    messages = shortterm.get(RuntimeContext("acme", "alice", "s1")).messages
    assert [m.role for m in messages] == [
        "system", "user", "assistant", "assistant", "tool", "assistant", "user",
    ]  # fmt: skip
    assert messages[1].content == USER["content"]
    assert messages[2].content == "The user wants the weather."
    assert (messages[3].tool_calls[0].name, messages[3].tool_calls[0].arguments) == (
        "weather",
        '{"city": "Lyon"}',
    )
    assert (messages[4].tool_call_id, messages[4].content) == ("call_1", "sunny, 24 C")
    assert messages[5].content == "Sunny, 24 C." and messages[6].content == "and in Paris?"


def test_limit_gives_the_latest_items_oldest_first(shortterm):
    session = session_of(shortterm)
    run(session.add_items(EVERY_KIND))
    assert run(session.get_items(limit=2)) == [ANSWER, PARTS]
    assert run(session.get_items(limit=0)) == []
    assert run(session.get_items(limit=100)) == EVERY_KIND
    assert run(session.get_items(limit=-1)) == EVERY_KIND
    limited = session_of(shortterm, session_settings=SessionSettings(limit=3))
    assert run(limited.get_items()) == [OUTPUT, ANSWER, PARTS]
    assert run(limited.get_items(limit=1)) == [PARTS]


def test_pop_item_removes_the_latest_and_an_empty_session_pops_none(shortterm):
    session = session_of(shortterm)
    assert run(session.pop_item()) is None
    run(session.add_items([USER, CALL, OUTPUT]))
    assert run(session.pop_item()) == OUTPUT
    assert run(session.get_items()) == [USER, CALL]
    run(session.add_items([OUTPUT]))
    assert run(session.get_items()) == [USER, CALL, OUTPUT]
    assert [run(session.pop_item()) for _ in range(4)] == [OUTPUT, CALL, USER, None]


def test_clear_session_empties_it_without_an_llm(shortterm):
    session = session_of(shortterm)
    run(session.clear_session())  # nothing there: nothing to do
    run(session.add_items([USER, ANSWER]))
    run(session.clear_session())
    assert run(session.get_items()) == []
    run(session.add_items([USER]))
    assert run(session.get_items()) == [USER]


def test_clear_session_ends_it_flushing_facts_into_long_term_memory(
    tmp_path, embedder, chat_model, script
):
    workspace = tmp_path / "ws"
    longterm: LongTermMemory = LONGTERM_BACKENDS["files"](tmp_path, embedder)
    shortterm = build(workspace, chat_model)
    shortterm.set_flush(MemoryFlushManager(longterm, chat_model, workspace))
    session = session_of(shortterm)
    run(session.add_items([{"role": "user", "content": "I moved to Paris"}, CALL, OUTPUT]))
    script.flush(text("- [fact|8|user.city] The user lives in Paris."))

    run(session.clear_session())

    assert run(session.get_items()) == []
    transcript = str(script.wait_for("flush").body)
    assert "I moved to Paris" in transcript and "weather" in transcript
    facts = longterm.list(RuntimeContext("acme", "alice"))
    assert [f.text for f in facts.items] == ["The user lives in Paris."]
    longterm.close()


def test_sessions_users_and_tenants_are_isolated(shortterm):
    first, second = session_of(shortterm), session_of(shortterm, session="s2")
    bob, other_tenant = session_of(shortterm, user="bob"), session_of(shortterm, tenant="globex")
    run(first.add_items([USER]))
    run(second.add_items([PARTS]))
    for stranger in (bob, other_tenant):
        assert run(stranger.get_items()) == []
        assert run(stranger.pop_item()) is None
        run(stranger.clear_session())
    assert run(first.get_items()) == [USER] and run(second.get_items()) == [PARTS]


@pytest.mark.parametrize(
    "bad",
    ["just text", ["a", "list"], {"role": "user", "content": "a \x00 NUL"}, {"x": object()}],
)
def test_a_bad_item_is_refused_and_nothing_is_written(shortterm, bad):
    session = session_of(shortterm)
    run(session.add_items([USER]))
    with pytest.raises(InvalidInputError):
        run(session.add_items([ANSWER, bad]))
    assert run(session.get_items()) == [USER]


def test_sqlite_session_failed_add_items_raises_type_error_for_an_item_json_cannot_write(
    shortterm,
):
    """As SQLiteSession: ``TypeError`` for an item that is no JSON (still the project's
    ``InvalidInputError``), and nothing of the batch written."""
    session = session_of(shortterm)
    with pytest.raises(TypeError) as raised:
        run(session.add_items([USER, {"type": "message", "role": "user", "content": object()}]))
    assert isinstance(raised.value, InvalidInputError) and raised.value.code == "invalid_input"
    assert run(session.get_items()) == []


BARE_ANSWER = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}],
}
UNTYPED = [
    BARE_ANSWER,  # no id, no status: what a caller writes, and SQLiteSession keeps
    {"type": "reasoning", "summary": []},  # the id a run omitted
    {"role": "robot", "content": "beep"},  # a role the mapping does not know
    {"type": "function_call", "name": "weather"},  # a call without its id
    {"type": "function_call_output", "output": "x"},
    {"type": "custom_item", "payload": {"deep": [1, 2.5, None, True]}},
]


def test_whatever_sqlite_session_keeps_round_trips(shortterm, tmp_path):
    from agents import SQLiteSession

    reference = SQLiteSession("s1", tmp_path / "ref.db")
    run(reference.add_items(UNTYPED))
    assert run(reference.get_items()) == UNTYPED
    session = session_of(shortterm)
    run(session.add_items(UNTYPED))
    assert run(session.get_items()) == UNTYPED
    assert run(session.pop_item()) == UNTYPED[-1]
    assert run(session_of(shortterm).get_items()) == UNTYPED[:-1]


def test_an_evicted_output_reads_back_as_its_preview(shortterm):
    session = session_of(shortterm)
    big = {**OUTPUT, "output": "row\n" * 400}
    run(session.add_items([CALL, big]))
    call, output = run(session.get_items())
    assert call == CALL
    assert output["call_id"] == "call_1" and output["type"] == "function_call_output"
    assert output["output"].startswith("[tool result stored outside the conversation")
    assert len(output["output"]) < 400


def test_a_message_without_an_item_reads_as_one(shortterm):
    """A compaction summary or a message appended through the API has no stored item."""
    ctx = RuntimeContext("acme", "alice", "s1")
    shortterm.append(
        ctx,
        [
            Msg("user", "Summary so far: Alice lives in Lyon.", mark="summary"),
            Msg.assistant("", tool_calls=(ToolCall("c9", "weather", "{}"),)),
            Msg.tool("c9", "rain"),
        ],
    )
    assert run(session_of(shortterm).get_items()) == [
        {"role": "user", "content": "Summary so far: Alice lives in Lyon."},
        {"type": "function_call", "call_id": "c9", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c9", "output": "rain"},
    ]


def test_importing_without_the_sdk_names_the_extra(monkeypatch):
    for name in [n for n in sys.modules if n == "agents" or n.startswith("agents.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the SDK were not installed
    monkeypatch.delitem(sys.modules, "memory_service.integrations.openai_agents")
    with pytest.raises(ImportError, match=r"pip install 'memory-service\[openai-agents\]'"):
        importlib.import_module("memory_service.integrations.openai_agents")


# -- the SDK's Runner --------------------------------------------------------------------------


class ScriptedModel(Model):
    """The SDK's model interface answering from a script; it keeps every input it was sent."""

    def __init__(self, outputs: list[list]) -> None:
        self.outputs = list(outputs)
        self.inputs: list[list] = []

    async def get_response(self, system_instructions, input, *args, **kwargs):
        self.inputs.append(list(input) if not isinstance(input, str) else [input])
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scenario runs without streaming")


def reply(text: str, item_id: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=item_id,
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def test_runner_keeps_history_across_runs(shortterm):
    call = ResponseFunctionToolCall(
        type="function_call", call_id="call_1", name="weather", arguments='{"city": "Lyon"}'
    )
    model = ScriptedModel(
        [[call], [reply("Sunny in Lyon.", "msg_1")], [reply("Still sunny.", "msg_2")]]
    )
    agent = Agent(name="assistant", instructions="Be brief.", model=model, tools=[weather])
    session = session_of(shortterm)

    first = run(Runner.run(agent, "Weather in Lyon?", session=session))
    assert first.final_output == "Sunny in Lyon."
    second = run(Runner.run(agent, "And tomorrow?", session=session))
    assert second.final_output == "Still sunny."

    seen = model.inputs[-1]
    assert [i.get("type", "message") for i in seen] == [
        "message", "function_call", "function_call_output", "message", "message",
    ]  # fmt: skip
    assert seen[0]["content"] == "Weather in Lyon?"
    assert seen[2]["output"] == "sunny in Lyon"
    assert seen[-1]["content"] == "And tomorrow?"
    stored = run(session.get_items())
    assert len(stored) == 6 and stored[:5] == seen
    state = shortterm.get(RuntimeContext("acme", "alice", "s1"))
    assert state.messages[-1].content == "Still sunny."


def test_session_limit_drops_unmatched_history_function_call_output(shortterm):
    history = [
        {"role": "user", "content": "What is the weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        BARE_ANSWER,
    ]
    session = session_of(shortterm)
    run(session.add_items(history))
    assert run(session.get_items(limit=2)) == history[-2:]
    model = ScriptedModel([[reply("Tomorrow is sunny too.", "msg_1")]])
    agent = Agent(name="assistant", model=model)
    config = RunConfig(session_settings=SessionSettings(limit=2))
    run(Runner.run(agent, "What about tomorrow?", session=session, run_config=config))
    assert model.inputs[-1] == [BARE_ANSWER, {"role": "user", "content": "What about tomorrow?"}]


def test_a_run_that_omits_reasoning_ids_keeps_its_history(shortterm):
    thought = ResponseReasoningItem(
        id="rs_1", type="reasoning", summary=[Summary(type="summary_text", text="Weather asked.")]
    )
    model = ScriptedModel([[thought, reply("Sunny.", "msg_1")], [reply("Still sunny.", "msg_2")]])
    agent = Agent(name="assistant", model=model)
    session = session_of(shortterm)
    config = RunConfig(reasoning_item_id_policy="omit")
    run(Runner.run(agent, "Weather?", session=session, run_config=config))
    second = run(Runner.run(agent, "Tomorrow?", session=session, run_config=config))
    assert second.final_output == "Still sunny."
    stored = run(session.get_items())
    (reasoning,) = [i for i in stored if i.get("type") == "reasoning"]
    assert "id" not in reasoning and reasoning["summary"][0]["text"] == "Weather asked."
    assert model.inputs[-1] == stored[:-1]


def test_session_settings_default_and_a_dictionary_is_converted_and_checked(shortterm):
    assert session_of(shortterm).session_settings == SessionSettings()
    limited = session_of(shortterm, session_settings={"limit": 1})
    assert limited.session_settings == SessionSettings(limit=1)
    run(limited.add_items([USER, DEVELOPER]))
    assert run(limited.get_items()) == [DEVELOPER]
    with pytest.raises(TypeError, match="limitt"):
        session_of(shortterm, session_settings={"limitt": 1})


# -- over HTTP -------------------------------------------------------------------------------

KEYS = {"acme": ("acme", "user"), "globex": ("globex", "user")}


def test_over_http_through_the_client(tmp_path, server_process):
    with (
        server_process(tmp_path / "ws", KEYS) as served,
        MemoryClient(served.base_url, served.keys["acme"]) as client,
        MemoryClient(served.base_url, served.keys["globex"]) as other,
    ):
        session = MemoryServiceSession.over_http(client, "alice", "s1")
        stranger = MemoryServiceSession.over_http(other, "alice", "s1")
        assert run(session.get_items()) == []
        run(session.add_items(EVERY_KIND))
        assert run(session.get_items()) == EVERY_KIND
        assert run(session.get_items(limit=2)) == [ANSWER, PARTS]
        assert run(stranger.get_items()) == []
        with pytest.raises(InvalidInputError):
            run(session.add_items(["just text"]))
        assert run(session.pop_item()) == PARTS
        assert run(session.get_items()) == EVERY_KIND[:-1]
        run(session.clear_session())
        assert run(session.get_items()) == []
        assert run(session.pop_item()) is None
