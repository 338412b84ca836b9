"""ChatModel through the real openai SDK, over HTTP, against the loopback test server."""

from __future__ import annotations

import json

import pytest

from memory_service.config import LlmSettings
from memory_service.domain.messages import Msg, ToolCall, from_openai, to_openai
from memory_service.llm import (
    ChatModel,
    ContextOverflowError,
    LlmBadResponseError,
    LlmError,
    LlmNotConfiguredError,
    LlmTimeoutError,
    LlmUnavailableError,
    require_model,
)
from tests.support.llm_server import (
    Reply,
    context_overflow,
    delayed,
    error,
    malformed,
    rate_limited,
    server_error,
    text,
    tool_calls,
)
from tests.support.server import free_port

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_text_reply_carries_usage_and_the_request_is_recorded(llm_server, chat_model):
    llm_server.push(text("Hello Alice!", prompt_tokens=42, completion_tokens=5))
    reply = chat_model.complete([Msg.system("Be brief."), Msg.user("Hi, I am Alice")])
    assert reply.text == "Hello Alice!"
    assert reply.message.role == "assistant"
    assert reply.usage.prompt_tokens == 42
    assert reply.usage.completion_tokens == 5
    assert reply.usage.total_tokens == 47
    assert reply.finish_reason == "stop"
    sent = llm_server.requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.model == "test-model"
    assert sent.headers["authorization"] == "Bearer test-key"
    assert sent.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi, I am Alice"},
    ]


def test_tool_calls_round_trip(llm_server, chat_model):
    llm_server.push(tool_calls(("get_weather", {"city": "Paris"}, "call_w1")), text("Sunny."))
    history = [Msg.user("Weather in Paris?")]
    first = chat_model.complete(
        history, tools=[WEATHER_TOOL], tool_choice="auto", temperature=0.0, max_tokens=64
    )
    assert first.finish_reason == "tool_calls"
    assert first.tool_calls == (ToolCall("call_w1", "get_weather", '{"city": "Paris"}'),)
    assert llm_server.requests[0].body["tools"] == [WEATHER_TOOL]
    assert llm_server.requests[0].body["tool_choice"] == "auto"
    assert llm_server.requests[0].body["temperature"] == 0.0
    assert llm_server.requests[0].body["max_tokens"] == 64

    history += [first.message, Msg.tool("call_w1", '{"sky": "clear"}')]
    assert chat_model.complete(history, tools=[WEATHER_TOOL]).text == "Sunny."
    sent = llm_server.requests[1].messages
    assert sent[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_w1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    assert sent[2] == {"role": "tool", "content": '{"sky": "clear"}', "tool_call_id": "call_w1"}


def test_a_server_error_is_retried_once(llm_server, chat_model):
    llm_server.push(server_error(), text("recovered"))
    assert chat_model.complete([Msg.user("x")]).text == "recovered"
    assert len(llm_server.chat_requests) == 2


def test_two_server_errors_make_the_model_unavailable(llm_server, chat_model):
    llm_server.push(server_error(), server_error(), text("too late"))
    with pytest.raises(LlmUnavailableError) as caught:
        chat_model.complete([Msg.user("x")])
    assert caught.value.code == "llm_unavailable"
    assert caught.value.http_status == 503
    assert len(llm_server.chat_requests) == 2  # the first try and exactly one retry
    assert llm_server.pending == 1


def test_rate_limit_is_retried_then_reported(llm_server, chat_model):
    llm_server.push(rate_limited(), rate_limited())
    with pytest.raises(LlmUnavailableError) as caught:
        chat_model.complete([Msg.user("x")])
    assert caught.value.code == "llm_rate_limited"
    assert len(llm_server.chat_requests) == 2


def test_context_length_error_becomes_context_overflow_without_retry(llm_server, chat_model):
    llm_server.push(context_overflow(limit=8192, used=9100), text("unused"))
    with pytest.raises(ContextOverflowError) as caught:
        chat_model.complete([Msg.user("a very long prompt")])
    assert "maximum context length is 8192" in caught.value.message
    assert caught.value.code == "context_overflow"
    assert len(llm_server.chat_requests) == 1


def test_overflow_worded_differently_is_recognised(llm_server, chat_model):
    # vLLM and others answer 400 without OpenAI's code, with a message saying it
    llm_server.push(error(400, "prompt is too long: 9000 tokens > 8192", type="BadRequestError"))
    with pytest.raises(ContextOverflowError):
        chat_model.complete([Msg.user("x")])


def test_other_client_errors_are_not_retried_and_not_overflow(llm_server, chat_model):
    llm_server.push(error(401, "Incorrect API key provided", type="invalid_request_error"))
    with pytest.raises(LlmError) as caught:
        chat_model.complete([Msg.user("x")])
    assert not isinstance(caught.value, ContextOverflowError | LlmUnavailableError)
    assert "Incorrect API key" in caught.value.message
    assert len(llm_server.chat_requests) == 1


def test_malformed_json_is_retried_once_then_reported(llm_server, chat_model):
    llm_server.push(malformed(), text("fine"))
    assert chat_model.complete([Msg.user("x")]).text == "fine"
    llm_server.push(malformed(), malformed())
    with pytest.raises(LlmBadResponseError):
        chat_model.complete([Msg.user("x")])
    assert len(llm_server.chat_requests) == 4


def test_a_reply_without_choices_is_bad(llm_server, chat_model):
    no_choices = Reply(body={"id": "c", "object": "chat.completion", "choices": []})
    llm_server.push(no_choices, text("ok"))
    assert chat_model.complete([Msg.user("x")]).text == "ok"  # retried once
    llm_server.push(no_choices, no_choices)
    with pytest.raises(LlmBadResponseError, match="no choices"):
        chat_model.complete([Msg.user("x")])


@pytest.mark.slow  # waits out a deadline twice
def test_timeout_is_retried_once_then_reported(llm_server):
    model = ChatModel(
        base_url=llm_server.base_url, api_key="k", model="m", timeout_s=0.3, max_retries=1
    )
    try:
        llm_server.push(delayed(3, text("late")), delayed(3, text("late")))
        with pytest.raises(LlmTimeoutError) as caught:
            model.complete([Msg.user("x")])
        assert caught.value.http_status == 504
        assert len(llm_server.chat_requests) == 2
    finally:
        model.close()


def test_unreachable_endpoint_is_unavailable():
    port = free_port()  # closed again: nothing listens there
    model = ChatModel(base_url=f"http://127.0.0.1:{port}/v1", api_key="k", model="m", max_retries=0)
    try:
        with pytest.raises(LlmUnavailableError):
            model.complete([Msg.user("x")])
    finally:
        model.close()


def test_with_model_shares_the_endpoint(llm_server, chat_model):
    small = chat_model.with_model("small-model")
    assert chat_model.with_model(None) is chat_model
    llm_server.push(text("a"))
    small.complete([Msg.user("x")])
    assert llm_server.requests[-1].model == "small-model"
    small.close()  # does not close the shared client
    llm_server.push(text("b"))
    assert chat_model.complete([Msg.user("y")]).text == "b"


def test_settings_without_a_model_give_no_model_and_a_clear_error(llm_server):
    assert ChatModel.from_settings(LlmSettings()) is None
    with pytest.raises(LlmNotConfiguredError) as caught:
        require_model(None, "compaction")
    assert caught.value.http_status == 503
    assert "MEMORY_LLM__MODEL" in caught.value.message
    settings = LlmSettings(base_url=llm_server.base_url, model="big", memory_model="small")
    memory = ChatModel.from_settings(settings, memory=True)
    assert memory is not None and memory.model == "small"
    llm_server.push(text("ok"))
    memory.complete([Msg.user("x")])
    assert llm_server.requests[-1].model == "small"
    memory.close()


def test_messages_convert_to_and_from_openai_dicts():
    raw = [
        {"role": "system", "content": "rules"},
        {
            "role": "user",
            "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "two"}],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "result"},
    ]
    msgs = from_openai(raw)
    assert msgs[1].content == "part one\ntwo"
    assert msgs[2].tool_calls[0].arguments == json.dumps({"a": 1})
    back = to_openai(msgs)
    assert back[0] == {"role": "system", "content": "rules"}
    assert back[2]["content"] is None and back[2]["tool_calls"][0]["id"] == "c1"
    assert back[3] == {"role": "tool", "content": "result", "tool_call_id": "c1"}
    assert Msg.from_dict(msgs[2].to_dict()) == msgs[2]
