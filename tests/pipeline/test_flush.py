"""The flush against the loopback LLM server and the real files backend: facts out of
conversations, the watermark, NO_REPLY, retries and dead letters, the trigger, the three paths."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from memory_service.config import CompactionSettings, FlushTrigger, MemorySettings, Settings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, Source, utcnow
from memory_service.domain.messages import Msg, ToolCall
from memory_service.domain.paths import OwnerPaths
from memory_service.llm import ChatModel, ContextOverflowError, LlmBadResponseError
from memory_service.longterm.files.fact_files import render_fact
from memory_service.pipeline.extraction import parse_flush_reply
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.services import build_shortterm
from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore
from memory_service.stores.usage.files import FilesUsageStore
from tests.support.llm_server import error, malformed, text

CTX = RuntimeContext("acme", "alice", "s1")
PEANUTS = "- [fact|10|user.allergy] The user is allergic to peanuts."


def manager(longterm, model, workspace, clock=utcnow, **config) -> MemoryFlushManager:
    return MemoryFlushManager(
        longterm, model, workspace, config=MemorySettings(**config), clock=clock
    )


def state_with(*messages: Msg) -> AgentState:
    state = AgentState(session_id=CTX.session_id)
    state.append(*messages)
    return state


def flush_prompt(request) -> str:
    return request.messages[-1]["content"]


def dead_letters(workspace, ctx=CTX) -> list[dict]:
    path = OwnerPaths.of(workspace, ctx).dead_letters("flush")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- parsing -------------------------------------------------------------------------------


def test_bullets_with_annotations_become_facts():
    facts = parse_flush_reply(
        "Here is what is worth keeping:\n"
        "- [fact|10|user.allergy] The user is allergic to peanuts.\n"
        "* [8|preference] **Prefers** window seats.\n"
        "1. [user.city|event|4] The user moved to Porto in May 2025.\n"
        "- [Important] Bracket that is not an annotation stays text.\n"
        '- Plain bullet <!-- memory {"importance": 3} -->\n'
    )
    assert [(f.text, f.kind, f.importance, f.key) for f in facts] == [
        ("The user is allergic to peanuts.", "fact", 10, "user.allergy"),
        ("Prefers window seats.", "preference", 8, None),
        ("The user moved to Porto in May 2025.", "event", 4, "user.city"),
        ("[Important] Bracket that is not an annotation stays text.", "fact", 5, None),
        ("Plain bullet", "fact", 5, None),
    ]
    assert {f.source for f in facts} == {Source("flush")}  # no span: origin only


@pytest.mark.parametrize("reply", ["NO_REPLY", " `NO_REPLY` ", "NO_REPLY.", "```\nNO_REPLY\n```"])
def test_no_reply_means_no_facts(reply):
    assert parse_flush_reply(reply) == []


@pytest.mark.parametrize("reply", ["", "Sure! The user likes tea.", '{"facts": []}'])
def test_replies_without_bullets_or_no_reply_are_malformed(reply):
    with pytest.raises(LlmBadResponseError, match="neither Markdown bullets nor NO_REPLY"):
        parse_flush_reply(reply)


def test_a_blank_reply_is_nothing_to_record_only_for_a_prompt_without_no_reply():
    assert parse_flush_reply("  \n", empty_is_nothing=True) == []
    with pytest.raises(LlmBadResponseError):
        parse_flush_reply("Sure! The user likes tea.", empty_is_nothing=True)


def test_a_custom_prompt_without_no_reply_records_nothing_on_an_empty_reply(
    longterm, chat_model, workspace, llm_server
):
    llm_server.push(text(""))
    state = state_with(Msg.user("Hello there"), Msg.assistant("Hi!"))
    custom = "Extract the durable facts of this conversation as Markdown bullets."
    result = manager(longterm, chat_model, workspace, flush_prompt=custom).flush(
        state, CTX, "post_call"
    )
    assert result.status == "no_reply" and result.facts == []  # as if it had said NO_REPLY
    assert state.last_flushed_index == 1  # nothing to keep, and nothing owed
    assert dead_letters(workspace) == []
    assert llm_server.requests[0].messages[0]["content"] == custom


def test_extracted_facts_are_less_sure_than_recorded_ones_unless_the_model_says():
    facts = parse_flush_reply(
        "- [fact|7] The user is a nurse.\n"
        "- [preference|0.9|6] The user prefers tea.\n"
        "- [0.72|episodic] The user went to Rome.\n"
        "- [event|0.99] The user ran a marathon.\n"
        "- [fact|.3] The user may like chess.\n"
        "- No annotation at all.\n"
    )
    assert [(f.kind, f.confidence) for f in facts] == [
        ("fact", 0.8),
        ("preference", 0.9),
        ("event", 0.72),
        ("event", 0.9),  # kept within 0.7-0.9
        ("fact", 0.7),
        ("fact", 0.8),
    ]


def test_importance_is_clamped_and_oversized_bullets_are_refused():
    facts = parse_flush_reply(f"- [fact|99] Loud.\n- {'x' * 9000}\n- ok fact")
    assert [(f.text, f.importance) for f in facts] == [("Loud.", 10), ("ok fact", 5)]


# -- flushing ------------------------------------------------------------------------------


def test_flush_records_facts_in_the_daily_ledger_and_moves_the_watermark(
    longterm, chat_model, workspace, script
):
    script.flush(text(PEANUTS + "\n- [preference|6] The user prefers short answers."))
    state = state_with(
        Msg.user("I am allergic to peanuts. Keep answers short."), Msg.assistant("Noted!")
    )
    result = manager(longterm, chat_model, workspace).flush(state, CTX, "post_call")

    assert result.status == "flushed"
    assert [(f.text, f.status) for f in result.facts] == [
        ("The user is allergic to peanuts.", "created"),
        ("The user prefers short answers.", "created"),
    ]
    assert state.last_flushed_index == 1 == result.through_seq
    ledger = OwnerPaths.of(workspace, CTX).ledger(utcnow().date()).read_text()
    assert "The user is allergic to peanuts." in ledger
    assert '"key":"user.allergy"' in ledger and '"source":{"origin":"flush"' in ledger
    sent = flush_prompt(script.requests["flush"][0])
    assert "[user] I am allergic to peanuts. Keep answers short." in sent
    assert "[assistant] Noted!" in sent
    top = longterm.retrieve(CTX, "peanut allergy", 1)[0]
    assert top.fact.text == "The user is allergic to peanuts." and top.fact.importance == 10
    assert top.fact.session_id == "s1"
    assert top.fact.confidence == 0.8 and '"confidence":0.8' in ledger


def test_only_messages_not_yet_flushed_are_sent(longterm, chat_model, workspace, script):
    flush = manager(longterm, chat_model, workspace)
    state = state_with(Msg.user("first thing said"), Msg.assistant("first answer"))
    flush.flush(state, CTX, "post_call")
    state.append(Msg.user("second thing said"))
    flush.flush(state, CTX, "post_call")
    first, second = (flush_prompt(r) for r in script.requests["flush"])
    assert "first thing said" in first and "second thing said" not in first
    assert "second thing said" in second and "first thing said" not in second
    assert state.last_flushed_index == 2
    flush.flush(state, CTX, "post_call")  # nothing new: no request at all
    assert len(script.requests["flush"]) == 2


def test_memory_md_is_read_only_context_and_its_facts_are_not_repeated(
    longterm, chat_model, workspace, script
):
    paths = OwnerPaths.of(workspace, CTX)
    paths.root.mkdir(parents=True)
    lisbon = render_fact(Fact("The user lives in Lisbon.", importance=7))
    paths.memory_md.write_text(f"# Long-term memory\n\n## Facts\n\n{lisbon}\n")
    script.flush(
        text(
            "- The user lives in Lisbon.\n- The user adopted a cat named Miso.\n"
            "- the user adopted a cat named  Miso."
        )
    )
    result = manager(longterm, chat_model, workspace).flush(
        state_with(Msg.user("My cat Miso says hi from Lisbon")), CTX, "post_call"
    )
    assert [f.text for f in result.facts] == ["The user adopted a cat named Miso."]
    sent = flush_prompt(script.requests["flush"][0])
    assert '<memory_md read_only="true">' in sent and "The user lives in Lisbon." in sent
    assert "<!--" not in sent  # metadata comments are not shown to the model


def test_no_reply_records_nothing_and_moves_the_watermark(longterm, chat_model, workspace, script):
    state = state_with(Msg.user("hi there"), Msg.assistant("Hello! How can I help?"))
    result = manager(longterm, chat_model, workspace).flush(state, CTX, "post_call")
    assert result.status == "no_reply" and result.facts == []
    assert state.last_flushed_index == 1
    assert longterm.list(CTX).items == []
    assert dead_letters(workspace) == []


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda: text("I could not find anything specific."), id="prose"),
        pytest.param(malformed, id="broken-json"),
        pytest.param(lambda: error(400, "bad request", type="invalid_request_error"), id="400"),
    ],
)
def test_a_failing_flush_is_retried_then_dead_lettered_and_the_next_one_catches_up(
    longterm, chat_model, workspace, script, bad
):
    script.flush(*[bad() for _ in range(4)])  # enough for every retry layer
    state = state_with(Msg.user("I am allergic to peanuts."), Msg.assistant("Noted."))
    flush = manager(longterm, chat_model, workspace)

    failed = flush.flush(state, CTX, "post_call")

    assert failed.status == "failed" and failed.attempts == 2 and failed.error
    assert len(script.requests["flush"]) >= 2  # retried
    assert state.last_flushed_index == -1  # the watermark did not move
    assert longterm.list(CTX).items == []
    [letter] = dead_letters(workspace)
    assert failed.dead_letter == "dead-letters/flush.jsonl"
    assert letter["session_id"] == "s1" and letter["reason"] == "post_call"
    assert (letter["from_seq"], letter["through_seq"], letter["attempts"]) == (0, 1, 2)
    assert letter["messages"][0]["content"] == "I am allergic to peanuts."
    counters = FilesUsageStore(workspace).report("acme")["counters"]
    assert counters["flush_failures"] == 1 and counters["flush_dead_letters"] == 1

    script.queues["flush"].clear()
    script.flush(text(PEANUTS + "\n- The user lives in Porto."))
    state.append(Msg.user("Also, I moved to Porto."))
    caught_up = flush.flush(state, CTX, "post_call")

    assert caught_up.status == "flushed"
    sent = flush_prompt(script.requests["flush"][-1])
    assert "allergic to peanuts" in sent and "moved to Porto" in sent
    assert state.last_flushed_index == 2
    assert {f.text for f in longterm.list(CTX).items} == {
        "The user is allergic to peanuts.",
        "The user lives in Porto.",
    }


def test_long_conversations_flush_in_batches_and_keep_partial_progress(
    longterm, llm_server, workspace, script
):
    small = ChatModel(base_url=llm_server.base_url, api_key="k", model="small", context_window=1024)
    script.flush(text("- The user owns a red bicycle."))
    script.defaults["flush"] = text("no bullets here")  # every later batch fails
    state = state_with(*(Msg.user(f"story {i}: " + "blah " * 320) for i in range(3)))
    try:
        result = manager(longterm, small, workspace).flush(state, CTX, "pre_compaction")
    finally:
        small.close()
    assert len(script.requests["flush"]) == 3  # batch 1, then batch 2 twice
    assert result.status == "failed"
    assert [f.text for f in result.facts] == ["The user owns a red bicycle."]
    assert state.last_flushed_index == 0
    [letter] = dead_letters(workspace)
    assert (letter["from_seq"], letter["through_seq"]) == (1, 2)
    assert letter["reason"] == "pre_compaction"


def test_transcript_leaves_out_instructions_and_memory_tool_output(
    longterm, chat_model, workspace, script
):
    state = state_with(
        Msg.system("SYSTEM-INSTRUCTIONS"),
        Msg.user("what do you know about me?"),
        Msg.assistant(tool_calls=(ToolCall("c1", "memory_search", '{"query": "me"}'),)),
        Msg.tool("c1", "Source: MEMORY.md#3: OLD-FACT", name="memory_search"),
        Msg.assistant(tool_calls=(ToolCall("c2", "weather", "{}"),)),
        Msg.tool("c2", "sunny " * 400, name="weather"),
        Msg.assistant("You like sunny days."),
    )
    manager(longterm, chat_model, workspace).flush(state, CTX, "post_call")
    sent = flush_prompt(script.requests["flush"][0])
    assert "SYSTEM-INSTRUCTIONS" not in sent and "OLD-FACT" not in sent
    assert "characters cut" in sent  # transient tool output: a glimpse only
    assert "You like sunny days." in sent
    assert state.last_flushed_index == 6


def test_nothing_to_extract_moves_the_watermark_without_a_request(
    longterm, chat_model, workspace, script
):
    state = state_with(Msg.system("be nice"), Msg.user("hint", mark="hint"))
    result = manager(longterm, chat_model, workspace).flush(state, CTX, "post_call")
    assert result.status == "nothing_to_flush" and state.last_flushed_index == 1
    assert script.requests["flush"] == []


def test_disabled_hooks_and_missing_model(longterm, chat_model, workspace, script):
    state = state_with(Msg.user("I am allergic to peanuts."))
    off = manager(longterm, chat_model, workspace, disable_memory_hooks=True)
    assert off.flush(state, CTX, "pre_compaction").status == "skipped"
    no_model = manager(longterm, None, workspace)
    skipped = no_model.flush(state, CTX, "post_call")
    assert (skipped.status, skipped.detail, dead_letters(workspace)) == ("skipped", "no_model", [])
    # before compaction the messages are about to leave the state: kept as a dead letter
    kept = no_model.flush(state, CTX, "pre_compaction")
    assert kept.status == "failed" and "no LLM" in kept.error
    assert dead_letters(workspace)[0]["messages"][0]["content"] == "I am allergic to peanuts."
    assert state.last_flushed_index == -1 and script.requests["flush"] == []


def test_usage_of_every_flush_is_recorded_per_tenant(longterm, chat_model, workspace, script):
    flush = manager(longterm, chat_model, workspace)
    script.flush(text(PEANUTS, prompt_tokens=100, completion_tokens=20))
    flush.flush(state_with(Msg.user("I am allergic to peanuts.")), CTX, "post_call")
    other = RuntimeContext("globex", "alice", "s1")
    flush.flush(state_with(Msg.user("hello")), other, "post_call")
    acme = FilesUsageStore(workspace).report("acme")
    assert acme["tokens"]["flush"] == {
        "calls": 1,
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "total_tokens": 120,
    }
    assert acme["counters"]["flush_runs"] == 1 and acme["counters"]["flush_facts_created"] == 1
    globex = FilesUsageStore(workspace).report("globex")
    assert globex["tokens"]["flush"]["total_tokens"] == 18  # the default scripted usage
    assert "flush_facts_created" not in globex["counters"]


# -- the trigger and the three paths -------------------------------------------------------


def test_throttled_trigger_survives_a_restart(longterm, chat_model, workspace, script):
    now = [datetime(2025, 5, 1, 12, 0, tzinfo=UTC)]
    trigger = FlushTrigger.throttled(10)

    def turn(store, flush, said):
        state = store.load(CTX)
        state.append(Msg.user(said), Msg.assistant("ok"))
        result = flush.after_call(state, CTX)
        store.save(state, CTX)
        return result

    store = FilesAgentStateStore(workspace)
    flush = manager(longterm, chat_model, workspace, lambda: now[0], flush_trigger=trigger)
    assert turn(store, flush, "I am vegetarian").status == "no_reply"
    now[0] += timedelta(minutes=4)
    assert turn(store, flush, "I live in Porto").detail == "trigger"

    store.close()  # a restart: new store, new manager, same files
    store = FilesAgentStateStore(workspace)
    flush = manager(longterm, chat_model, workspace, lambda: now[0], flush_trigger=trigger)
    now[0] += timedelta(minutes=4)
    assert turn(store, flush, "I have two kids").detail == "trigger"
    assert len(script.requests["flush"]) == 1

    now[0] += timedelta(minutes=3)  # 11 minutes after the last flush
    assert turn(store, flush, "I play the cello").status == "no_reply"
    sent = flush_prompt(script.requests["flush"][-1])
    assert all(s in sent for s in ("Porto", "two kids", "cello"))
    assert "vegetarian" not in sent
    assert store.load(CTX).last_flushed_index == 7
    store.close()


def test_never_governs_only_the_post_call_path(longterm, chat_model, workspace, script):
    settings = Settings(
        workspace=workspace, compaction=CompactionSettings(trigger_messages=6, keep_last=2)
    )
    shortterm = build_shortterm(settings, chat_model)
    flush = manager(longterm, chat_model, workspace, flush_trigger=FlushTrigger.never())
    shortterm.set_flush(flush)
    script.flush(text(PEANUTS))
    try:
        state = shortterm.load(CTX)
        state.append(Msg.user("I am allergic to peanuts."))
        assert flush.after_call(state, CTX).detail == "trigger"
        assert script.requests["flush"] == []

        with flush.collecting() as flushes:
            messages = [Msg.user("I am allergic to peanuts.")]
            messages += [Msg.assistant("ok") if i % 2 else Msg.user(f"m{i}") for i in range(5)]
            appended = shortterm.append(CTX, messages)
    finally:
        shortterm.close()
    assert script.order == ["flush", "summary"]  # flush first, then compact
    assert [f.reason for f in flushes] == ["pre_compaction"]
    assert appended.compaction.performed and appended.compaction.flushed
    assert appended.state.last_flushed_index == 5
    assert [f.text for f in longterm.list(CTX).items] == ["The user is allergic to peanuts."]


def test_overflow_flushes_before_compacting_harder(longterm, chat_model, workspace, script):
    settings = Settings(workspace=workspace)
    shortterm = build_shortterm(settings, chat_model)
    flush = manager(longterm, chat_model, workspace)
    shortterm.set_flush(flush)
    state = state_with(
        Msg.user("I am allergic to peanuts."),
        *[Msg.assistant("ok") if i % 2 else Msg.user(f"m{i}") for i in range(7)],
    )
    calls = []

    def call(current: AgentState) -> str:
        calls.append(len(current.messages))
        if len(calls) == 1:
            raise ContextOverflowError("too long")
        return "answered"

    script.flush(text(PEANUTS))
    with flush.collecting() as flushes:
        assert shortterm.hook.force_compact_and_retry(state, CTX, call) == "answered"
    shortterm.close()
    assert [f.reason for f in flushes] == ["overflow"] and flushes[0].status == "flushed"
    assert script.order == ["flush", "summary"]
    assert calls[1] < calls[0] and state.last_flushed_index == 7


def test_a_failed_flush_before_compaction_is_reported_and_kept(
    longterm, chat_model, workspace, script
):
    settings = Settings(
        workspace=workspace, compaction=CompactionSettings(trigger_messages=4, keep_last=2)
    )
    shortterm = build_shortterm(settings, chat_model)
    shortterm.set_flush(manager(longterm, chat_model, workspace))
    script.defaults["flush"] = text("Nothing to add, really.")  # malformed, every time
    try:
        messages = [Msg.user("I am allergic to peanuts."), Msg.assistant("ok")] * 2
        appended = shortterm.append(CTX, messages)
    finally:
        shortterm.close()
    compaction = appended.compaction
    assert compaction.performed  # a failed flush does not block the conversation
    assert not compaction.flushed and "dead-letters/flush.jsonl" in compaction.flush_error
    assert appended.state.last_flushed_index == -1
    [letter] = dead_letters(workspace)
    assert letter["reason"] == "pre_compaction" and len(letter["messages"]) == 4
