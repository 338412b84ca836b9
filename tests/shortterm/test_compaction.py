"""Compaction against the loopback LLM server: triggers, tail integrity, the five blocks,
failures that change nothing, flush before compact, and the overflow retry."""

from __future__ import annotations

import pytest

from memory_service.config import CompactionSettings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.messages import Msg, ToolCall
from memory_service.llm import ContextOverflowError, LlmBadResponseError, LlmError
from memory_service.shortterm.compaction import (
    ConversationCompactor,
    SlidingWindow,
    build_compactor,
    split_tail,
)
from memory_service.shortterm.compaction_hook import CompactionHook
from memory_service.shortterm.summary import SUMMARY_BLOCKS, parse_summary
from tests.support.chat_script import TRIP_SUMMARY
from tests.support.llm_server import context_overflow, malformed, server_error, text

CTX = RuntimeContext("acme", "alice", "s1")
WINDOW = 8192


def chat(n: int, *, start: int = 0) -> list[Msg]:
    """``n`` alternating user/assistant messages."""
    return [
        Msg.user(f"user message {i}") if i % 2 == 0 else Msg.assistant(f"assistant reply {i}")
        for i in range(start, start + n)
    ]


def tool_round(call_ids: list[str], question: str) -> list[Msg]:
    """A user question, an assistant message calling tools, and one result per call."""
    calls = tuple(ToolCall(cid, "search", f'{{"q": "{cid}"}}') for cid in call_ids)
    return [
        Msg.user(question),
        Msg.assistant(tool_calls=calls),
        *[Msg.tool(cid, f"result for {cid}") for cid in call_ids],
        Msg.assistant(f"answer to {question}"),
    ]


def state_with(messages: list[Msg]) -> AgentState:
    state = AgentState(session_id="s1")
    state.append(*messages)
    return state


@pytest.fixture
def compactor(chat_model) -> ConversationCompactor:
    return ConversationCompactor(chat_model, CompactionSettings(), context_window=WINDOW)


def assert_tool_pairs_intact(messages: list[Msg]) -> None:
    """Every tool result follows the assistant message that called it, and every call has
    all its results."""
    open_calls: set[str] = set()
    for m in messages:
        if m.role == "tool":
            assert m.tool_call_id in open_calls, f"orphaned tool result {m.tool_call_id}"
            open_calls.discard(m.tool_call_id)
        else:
            assert not open_calls, f"calls without results: {open_calls}"
            open_calls = set(m.call_ids)
    assert not open_calls


# -- triggers ------------------------------------------------------------------------------


def test_triggers_at_30_messages(compactor):
    assert compactor.needs_compaction(state_with(chat(29))) is None
    assert compactor.needs_compaction(state_with(chat(30))) == "messages"
    with_system = state_with([Msg.system("You are helpful."), *chat(29)])
    assert compactor.needs_compaction(with_system) is None  # system messages do not count


def test_triggers_at_75_percent_of_the_window(compactor):
    # cl100k_base: "word " is one token each, so 0.75 * 8192 = 6144 tokens is ~6144 words
    below = state_with([Msg.user("word " * 6000), Msg.assistant("ok")])
    above = state_with([Msg.user("word " * 6300), Msg.assistant("ok")])
    assert compactor.needs_compaction(below) is None
    assert compactor.needs_compaction(above) == "tokens"


def test_config_validation_names_the_problem():
    with pytest.raises(ValueError, match="keep_last"):
        CompactionSettings(trigger_messages=10, keep_last=10)


# -- the summary ---------------------------------------------------------------------------


def test_compaction_summarises_the_head_and_keeps_the_last_ten(llm_server, compactor):
    llm_server.push(text(TRIP_SUMMARY, prompt_tokens=900, completion_tokens=120))
    state = state_with([Msg.system("You are a travel agent."), *chat(30)])
    result = compactor.compact(state, reason="messages")

    assert result.performed and result.reason == "messages"
    assert (result.removed, result.kept) == (20, 10)
    assert result.usage.total_tokens == 1020
    assert result.tokens_after < result.tokens_before
    assert [m.role for m in state.messages[:2]] == ["system", "user"]
    summary = state.messages[1]
    assert summary.mark == "summary"
    for block in SUMMARY_BLOCKS:
        assert f"<{block}>" in summary.content and f"</{block}>" in summary.content
    assert "allergic to peanuts" in summary.content
    assert set(state.summary) == set(SUMMARY_BLOCKS)
    assert state.summary["next_steps"] == "Book the hotel near Alfama."
    assert [m.content for m in state.messages[2:]] == [m.content for m in chat(10, start=20)]
    assert [m.seq for m in state.messages[2:]] == list(range(21, 31))  # history order kept
    assert state.compaction_count == 1
    assert summary.metadata["through_seq"] == 20

    prompt = llm_server.requests[-1]
    assert prompt.messages[0]["role"] == "system"
    assert "task_overview" in prompt.messages[0]["content"]
    assert "user message 0" in prompt.prompt_text
    assert "assistant reply 19" in prompt.prompt_text
    assert "user message 20" not in prompt.prompt_text  # the tail is not summarised
    assert "You are a travel agent." not in prompt.messages[1]["content"]


def test_a_second_compaction_merges_the_previous_summary(llm_server, compactor):
    llm_server.push(text(TRIP_SUMMARY), text(TRIP_SUMMARY.replace("Lisbon", "Porto")))
    state = state_with(chat(30))
    compactor.compact(state)
    state.append(*chat(20, start=30))
    compactor.compact(state)
    assert state.compaction_count == 2
    second = llm_server.requests[-1]
    assert "<previous_summary>" in second.prompt_text
    assert "Plan a trip to Lisbon in May." in second.prompt_text
    assert sum(1 for m in state.messages if m.mark == "summary") == 1
    assert "Porto" in state.messages[0].content
    assert len(state.messages) == 11


@pytest.mark.parametrize("keep_last", range(0, 16))
def test_the_tail_never_starts_with_an_orphaned_tool_result(llm_server, chat_model, keep_last):
    llm_server.responder = lambda request: text(TRIP_SUMMARY)
    messages = [
        *chat(4),
        *tool_round(["a1"], "one tool"),
        *tool_round(["b1", "b2", "b3"], "three tools in parallel"),
        *chat(2, start=100),
        *tool_round(["c1", "c2"], "two tools"),
    ]
    compactor = ConversationCompactor(
        chat_model, CompactionSettings(keep_last=max(keep_last, 1)), context_window=WINDOW
    )
    state = state_with(messages)
    result = compactor.compact(state, keep_last=keep_last)
    if result.performed:
        assert state.messages[0].mark == "summary"
        assert state.messages[1:] == [] or state.messages[1].role != "tool"
    assert_tool_pairs_intact([m for m in state.messages if m.mark != "summary"])
    assert result.kept + result.removed == len(messages)


def test_split_tail_moves_back_to_the_call():
    messages = [*chat(2), *tool_round(["x", "y"], "q")]  # u a u A(x,y) t t a
    # keep_last=3 would start the tail at the second tool result: move back to the call
    assert messages[split_tail(messages, 3)].role == "assistant"
    assert messages[split_tail(messages, 3)].call_ids == ("x", "y")
    # nothing but the tool round before the cut: move forward past the results instead
    only_round = tool_round(["x"], "q")[1:]  # A(x) t a
    assert split_tail(only_round, 2) == 2


def test_a_failed_llm_call_leaves_the_state_exactly_as_it_was(llm_server, compactor):
    state = state_with(chat(30))
    state.flags["needs_compaction"] = True
    before = state.to_dict()
    llm_server.push(server_error(), server_error())
    with pytest.raises(LlmError):
        compactor.compact(state)
    assert state.to_dict() == before

    llm_server.push(text("Sure! Here is a summary without any blocks."))
    with pytest.raises(LlmBadResponseError, match="none of the blocks"):
        compactor.compact(state)
    assert state.to_dict() == before

    llm_server.push(malformed(), malformed())
    with pytest.raises(LlmBadResponseError):
        compactor.compact(state)
    assert state.to_dict() == before


def test_missing_blocks_are_recorded_as_none_and_headings_are_accepted():
    partial = parse_summary("<task_overview>T</task_overview><next_steps>N</next_steps>")
    assert partial["task_overview"] == "T" and partial["current_state"] == "(none)"
    headings = parse_summary("## task_overview\nT\n## current_state\nC\n")
    assert headings["current_state"] == "C"


def test_custom_prompt_and_separate_model(llm_server, chat_model):
    config = CompactionSettings(
        model="small-model", summary_prompt="Summarise tersely into the five blocks please."
    )
    llm_server.push(text(TRIP_SUMMARY))
    ConversationCompactor(chat_model, config, context_window=WINDOW).compact(state_with(chat(30)))
    sent = llm_server.requests[-1]
    assert sent.model == "small-model"
    assert sent.messages[0]["content"] == "Summarise tersely into the five blocks please."


def test_a_huge_head_is_trimmed_to_fit_the_window(llm_server, compactor):
    llm_server.push(text(TRIP_SUMMARY))
    state = state_with([Msg.user("z" * 3000 + f" {i}") for i in range(40)])
    compactor.compact(state)
    sent = llm_server.requests[-1].prompt_text
    assert len(sent) / 4 < WINDOW * 0.75
    assert "older messages omitted" in sent
    assert "z 29\n" in sent and "z 0\n" not in sent  # the newest head lines are kept


def test_nothing_to_compact_is_not_an_error(llm_server, compactor):
    state = state_with(chat(5))
    result = compactor.compact(state)
    assert not result.performed and result.reason == "nothing_to_compact"
    assert llm_server.requests == []


# -- the hook: flush first, then compact ----------------------------------------------------


def test_the_flush_callback_runs_before_compaction(llm_server, compactor):
    seen = []

    def flush(state: AgentState, ctx: RuntimeContext, reason: str) -> None:
        seen.append(
            {
                "reason": reason,
                "ctx": ctx,
                "messages": len(state.messages),
                "unflushed": [m.seq for m in state.unflushed()],
                "llm_requests": len(llm_server.requests),
            }
        )
        state.mark_flushed(state.unflushed()[-1].seq)

    llm_server.push(text(TRIP_SUMMARY))
    hook = CompactionHook(compactor, flush=flush)
    state = state_with(chat(30))
    state.mark_flushed(4)
    result = hook.before_reasoning(state, CTX)
    assert seen == [
        {
            "reason": "pre_compaction",
            "ctx": CTX,
            "messages": 30,
            "unflushed": list(range(5, 30)),
            "llm_requests": 0,  # flushed before the summary was asked for
        }
    ]
    assert result.performed and result.flushed
    assert state.last_flushed_index == 29
    assert state.unflushed() == []
    state.append(Msg.user("new"))
    assert [m.content for m in state.unflushed()] == ["new"]


def test_no_trigger_no_flush_no_llm(llm_server, compactor):
    calls = []
    hook = CompactionHook(compactor, flush=lambda *a: calls.append(a))
    result = hook.before_reasoning(state_with(chat(10)), CTX)
    assert result.reason == "not_needed" and not result.performed
    assert calls == [] and llm_server.requests == []


def test_a_failing_flush_is_reported_and_compaction_goes_on(llm_server, compactor):
    def flush(*_):
        raise RuntimeError("ledger disk full")

    llm_server.push(text(TRIP_SUMMARY))
    result = CompactionHook(compactor, flush=flush).before_reasoning(state_with(chat(30)), CTX)
    assert result.performed
    assert not result.flushed
    assert "ledger disk full" in result.flush_error


def test_the_hook_reports_a_failed_compaction_and_keeps_the_state(llm_server, compactor):
    state = state_with(chat(30))
    before = state.to_dict()
    llm_server.push(server_error(), server_error())
    result = CompactionHook(compactor).before_reasoning(state, CTX)
    assert not result.performed and result.reason == "failed"
    assert result.error.code == "llm_unavailable"
    after = state.to_dict()  # the messages are kept; the failure is remembered (the back-off)
    assert after.pop("compaction_backoff")["error_code"] == "llm_unavailable"
    assert before.pop("compaction_backoff") is None
    assert after == before


# -- overflow: compact harder, retry once ----------------------------------------------------


def test_force_compact_and_retry_on_context_overflow(llm_server, chat_model, compactor):
    reasons = []
    hook = CompactionHook(compactor, flush=lambda s, c, reason: reasons.append(reason))
    state = state_with(chat(12))  # below every trigger
    llm_server.push(context_overflow(), text(TRIP_SUMMARY), text("the real answer"))

    reply = hook.force_compact_and_retry(state, CTX, lambda s: chat_model.complete(s.context()))

    assert reply.text == "the real answer"
    assert reasons == ["overflow"]
    assert state.compaction_count == 1
    retried = llm_server.requests[-1].messages
    assert len(retried) == 1 + CompactionSettings().overflow_keep_last  # summary + smaller tail
    assert "<conversation_summary" in retried[0]["content"]


def test_a_second_overflow_is_raised(llm_server, chat_model, compactor):
    hook = CompactionHook(compactor)
    state = state_with(chat(12))
    llm_server.push(context_overflow(), text(TRIP_SUMMARY), context_overflow())
    with pytest.raises(ContextOverflowError):
        hook.force_compact_and_retry(state, CTX, lambda s: chat_model.complete(s.context()))
    assert len(llm_server.requests) == 3


def test_overflow_with_nothing_to_compact_raises_the_overflow(llm_server, chat_model, compactor):
    hook = CompactionHook(compactor)
    state = state_with([Msg.user("one enormous question")])
    llm_server.push(context_overflow())
    with pytest.raises(ContextOverflowError):
        hook.force_compact_and_retry(state, CTX, lambda s: chat_model.complete(s.context()))
    assert len(llm_server.requests) == 1


# -- the sliding window ----------------------------------------------------------------------


def test_sliding_window_keeps_whole_recent_rounds_and_system_messages(llm_server):
    config = CompactionSettings(policy="sliding_window", window_rounds=2)
    window = SlidingWindow(config, context_window=WINDOW)
    messages = [
        Msg.system("rules"),
        *tool_round(["a"], "round 1"),
        *tool_round(["b", "c"], "round 2"),
        *tool_round(["d"], "round 3"),
    ]
    state = state_with(messages)
    assert window.needs_compaction(state) == "rounds"
    result = window.compact(state, reason="rounds")
    assert result.performed
    assert state.messages[0].content == "rules"
    assert state.messages[1].content == "round 2"
    assert [m.content for m in state.messages if m.role == "user"] == ["round 2", "round 3"]
    assert_tool_pairs_intact(state.messages[1:])
    assert window.needs_compaction(state) is None
    assert window.compact(state, aggressive=True).performed
    assert [m.content for m in state.messages if m.role == "user"] == ["round 3"]
    assert llm_server.requests == []  # no LLM involved


def test_build_compactor_follows_the_policy(chat_model):
    assert build_compactor(CompactionSettings(), None, context_window=WINDOW) is None
    assert isinstance(
        build_compactor(CompactionSettings(), chat_model, context_window=WINDOW),
        ConversationCompactor,
    )
    sliding = CompactionSettings(policy="sliding_window")
    assert isinstance(build_compactor(sliding, None, context_window=WINDOW), SlidingWindow)
