"""One agent call end to end, against the loopback LLM server, the real embedder and the real
long-term backends: what the model is sent, what memory keeps, and in which order."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from memory_service.api.schemas.chat import ChatResponse
from memory_service.config import MemorySettings, Settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, utcnow
from memory_service.domain.messages import Msg
from memory_service.domain.paths import OwnerPaths
from memory_service.harness import OUT_OF_TOOL_CALLS, MemoryHarness
from memory_service.harness.prompt import VERIFY_MARK
from memory_service.llm import LlmNotConfiguredError, LlmUnavailableError
from memory_service.longterm.files.fact_files import render_fact
from memory_service.longterm.protocol import LongTermMemory
from memory_service.pipeline.consolidation import Consolidator
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.services import build_shortterm
from memory_service.shortterm.session import ShortTermMemory
from memory_service.stores.usage.files import FilesUsageStore
from tests.support.backends import LONGTERM_BACKENDS
from tests.support.llm_server import context_overflow, server_error, text, tool_calls

ALICE = RuntimeContext("acme", "alice", "s1")
PEANUTS = "- [fact|10|user.allergy] The user is allergic to peanuts."


@dataclass
class Rig:
    harness: MemoryHarness
    longterm: LongTermMemory
    shortterm: ShortTermMemory
    workspace: Path


@pytest.fixture
def rig(tmp_path, embedder, chat_model):
    opened: list[Rig] = []

    def build(backend: str = "files", memory: MemorySettings | None = None, **settings) -> Rig:
        workspace = tmp_path / "workspace"  # where the files backend keeps its ledgers
        config = memory or MemorySettings()
        full = Settings(workspace=workspace, memory=config, **settings)
        longterm = LONGTERM_BACKENDS[backend](tmp_path, embedder)
        shortterm = build_shortterm(full, chat_model)
        flush = MemoryFlushManager(longterm, chat_model, workspace, config=config)
        shortterm.set_flush(flush)
        harness = MemoryHarness(
            model=chat_model,
            shortterm=shortterm,
            longterm=longterm,
            workspace=workspace,
            config=config,
            flush=flush,
        )
        opened.append(Rig(harness, longterm, shortterm, workspace))
        return opened[-1]

    yield build
    for built in opened:
        built.shortterm.close()
        built.longterm.close()


def system_of(request) -> str:
    return request.messages[0]["content"]


def chat_turns(rig: Rig, ctx: RuntimeContext, count: int) -> None:
    """``count`` earlier messages in the session, stored without compaction."""
    messages = [
        Msg.user(f"earlier question {i}") if i % 2 == 0 else Msg.assistant("ok")
        for i in range(count)
    ]
    rig.shortterm.append(ctx, messages, compact=False)


# -- the seeds' scenario -------------------------------------------------------------------


@pytest.mark.parametrize("consolidate", [False, True], ids=["recalled", "consolidated"])
@pytest.mark.parametrize("backend", sorted(LONGTERM_BACKENDS))
def test_a_fact_told_in_one_session_shapes_the_prompt_of_the_next(
    rig, script, backend, consolidate
):
    built = rig(backend)
    script.chat(text("Noted: no peanuts for you."), text("Try dried apricots and oat bars."))
    script.flush(text(PEANUTS))

    first = built.harness.call(ALICE, "I am allergic to peanuts.")

    assert first.reply == "Noted: no peanuts for you."
    assert [f.text for r in first.flushes for f in r.facts] == ["The user is allergic to peanuts."]
    assert "The user is allergic to peanuts." not in system_of(script.requests["chat"][0])
    if consolidate:
        facts = built.longterm.list(ALICE, include_inactive=True).items
        paths = OwnerPaths.of(built.workspace, ALICE)
        assert Consolidator(model=None).consolidate(paths, facts, utcnow()).written

    second = built.harness.call(ALICE.with_session("s2"), "Can you suggest a snack for my hike?")

    request = script.requests["chat"][1]
    system = system_of(request)
    assert system.count("The user is allergic to peanuts.") == 1
    assert [m["role"] for m in request.messages] == ["system", "user"]  # not session 1's log
    assert request.messages[1]["content"] == "Can you suggest a snack for my hike?"
    assert second.reply == "Try dried apricots and oat bars."
    fact_id = first.flushes[0].facts[0].id
    if consolidate:
        assert "## Long-term memory (MEMORY.md)" in system and "<!--" not in system
        assert second.prompt.memory_md_tokens > 0 and not second.prompt.memory_md_truncated
    else:
        assert "## Recalled memories\n\n- The user is allergic to peanuts." in system
        assert fact_id in [r.id for r in second.prompt.recalled]


# -- the prompt ----------------------------------------------------------------------------


def test_recall_takes_relevant_then_important_facts_once_each(rig, script):
    built = rig()
    texts = [f"The user collects {thing} stamps." for thing in ("French", "Swiss", "Danish")]
    texts += [f"Coffee note {i}: the user likes coffee brewed method {i}." for i in range(8)]
    texts += [f"Important fact {i} about the user's life." for i in range(6)]
    importance = [3, 3, 3] + [4] * 8 + [10, 9, 9, 8, 8, 8]
    built.longterm.record(
        ALICE, [Fact(t, importance=n) for t, n in zip(texts, importance, strict=True)]
    )

    outcome = built.harness.call(ALICE, "How should I brew my coffee?")

    recalled = outcome.prompt.recalled
    relevant = [r for r in recalled if r.via == "relevance"]
    important = [r for r in recalled if r.via == "importance"]
    assert len(relevant) == 6 and len(important) == 5
    assert all("coffee" in r.text.lower() for r in relevant)
    assert sorted(r.importance for r in important) == [8, 8, 9, 9, 10]
    assert len({r.id for r in recalled}) == len(recalled)
    system = system_of(script.requests["chat"][0])
    assert all(f"- {r.text}" in system for r in recalled)
    assert "Swiss stamps" not in system


@pytest.mark.parametrize("backend", sorted(LONGTERM_BACKENDS))
def test_a_fact_that_needs_verification_is_injected_with_a_mark(rig, script, backend):
    built = rig(backend)
    old = utcnow() - timedelta(days=90)  # an event: e^-0.9 = 0.41
    built.longterm.record(
        ALICE,
        [
            Fact("The user moved to Porto", kind="event", importance=9, created_at=old),
            Fact("The user works at the Porto harbour", importance=9),
        ],
    )

    outcome = built.harness.call(ALICE, "What is there to do in Porto?")

    flagged = {r.text: r.needs_verification for r in outcome.prompt.recalled}
    assert flagged == {
        "The user moved to Porto": True,
        "The user works at the Porto harbour": False,
    }
    system = system_of(script.requests["chat"][0])
    assert f"- The user moved to Porto {VERIFY_MARK}" in system
    assert "- The user works at the Porto harbour\n" in system + "\n"
    shown = ChatResponse.model_validate(outcome).model_dump(mode="json")["memory"]["recalled"]
    assert {r["text"]: r["needs_verification"] for r in shown} == flagged


@pytest.mark.parametrize("backend", sorted(LONGTERM_BACKENDS))
def test_recall_merges_the_agents_and_the_tenants_memory_the_users_own_wins(rig, script, backend):
    built = rig(backend)
    bob = RuntimeContext("acme", "bob", "s1", agent_id="support")
    built.longterm.record(
        bob,
        [
            Fact("Replies are written in English", key="lang", importance=9, scope="tenant"),
            Fact("The office closes at six", importance=9, scope="tenant"),
            Fact("Refund requests go to the billing team", importance=9, scope="agent"),
            Fact("Bob's replies are written in Dutch", key="lang", importance=9),
        ],
    )
    built.longterm.record(RuntimeContext("acme", "sam", agent_id="sales"),
                          [Fact("Sales closes deals on Fridays", scope="agent")])  # fmt: skip

    outcome = built.harness.call(bob, "Which language, and where do refunds go?")

    recalled = {r.text for r in outcome.prompt.recalled}
    system = system_of(script.requests["chat"][0])
    assert {"Bob's replies are written in Dutch", "Refund requests go to the billing team",
            "The office closes at six"} <= recalled  # fmt: skip
    assert "English" not in system  # the tenant's value is hidden by Bob's own
    assert "Sales closes deals" not in system  # another agent's memory
    other = built.harness.call(RuntimeContext("acme", "cy", "s1"), "Which language?")
    assert "Replies are written in English" in {r.text for r in other.prompt.recalled}
    assert "Refund requests" not in system_of(script.requests["chat"][1])  # no agent named


def test_memory_md_over_budget_is_cut_with_a_hint(rig, script):
    built = rig(memory=MemorySettings(memory_load_token_budget=120))
    paths = OwnerPaths.of(built.workspace, ALICE)
    paths.root.mkdir(parents=True)
    bullets = [render_fact(Fact(f"Numbered memory {i} of the user.")) for i in range(200)]
    paths.memory_md.write_text("# Long-term memory\n\n" + "\n".join(bullets) + "\n")

    outcome = built.harness.call(ALICE, "hello")

    system = system_of(script.requests["chat"][0])
    assert "Numbered memory 0 of the user." in system
    assert "Numbered memory 199 of the user." not in system
    assert "Use memory_search to look up anything else" in system
    assert outcome.prompt.memory_md_truncated and outcome.prompt.memory_md_tokens <= 120
    assert outcome.prompt.memory_md_total_tokens > 1000
    assert "tools" in script.requests["chat"][0].body


def test_tools_switched_off_are_not_offered_or_hinted(rig, script):
    built = rig(memory=MemorySettings(memory_load_token_budget=10, disable_memory_tools=True))
    paths = OwnerPaths.of(built.workspace, ALICE)
    paths.root.mkdir(parents=True)
    paths.memory_md.write_text("".join(f"- Memory number {i}.\n" for i in range(50)))
    built.harness.call(ALICE, "hello")
    request = script.requests["chat"][0]
    assert "tools" not in request.body
    assert "memory_search" not in system_of(request)
    assert "MEMORY.md is longer than shown here" in system_of(request)


def test_hooks_switched_off_leave_memory_out(rig, script):
    built = rig(memory=MemorySettings(disable_memory_hooks=True))
    built.longterm.record(ALICE, [Fact("The user is allergic to peanuts.", importance=10)])
    paths = OwnerPaths.of(built.workspace, ALICE)
    paths.memory_md.write_text("- The user lives in Porto.\n")
    outcome = built.harness.call(ALICE, "Any snack ideas with peanuts?")
    system = system_of(script.requests["chat"][0])
    assert "peanuts" not in system and "Porto" not in system
    assert outcome.prompt.recalled == [] and outcome.flushes == []
    assert script.requests["flush"] == []
    assert built.shortterm.load(ALICE).last_flushed_index == -1
    assert "tools" not in script.requests["chat"][0].body  # the memory tools go with them
    assert "memory_search" not in system


def test_instructions_can_place_the_memory_where_they_want_it(rig, script):
    instructions = (
        "You are Ada {not a placeholder}.\n<memory>\n{memory_context}\n</memory>\nBe brief."
    )
    built = rig(memory=MemorySettings(instructions=instructions))
    built.longterm.record(ALICE, [Fact("The user is allergic to peanuts.", importance=10)])
    OwnerPaths.of(built.workspace, ALICE).memory_md.write_text("- The user lives in Porto.\n")
    built.harness.call(ALICE, "Any snack ideas with peanuts?")
    system = system_of(script.requests["chat"][0])
    assert system.startswith("You are Ada {not a placeholder}.\n<memory>\n## Long-term memory")
    inside = system.split("<memory>")[1].split("</memory>")[0]
    assert "Porto" in inside and "allergic to peanuts" in inside
    after = system.split("</memory>")[1]
    assert after.startswith("\nBe brief.") and "memory_search" in after  # the tools note
    assert "{memory_context}" not in system


def test_instructions_without_the_placeholder_get_the_memory_after_them(rig, script):
    built = rig(memory=MemorySettings(instructions="You are Ada. Be brief."))
    paths = OwnerPaths.of(built.workspace, ALICE)
    paths.root.mkdir(parents=True)
    paths.memory_md.write_text("- The user lives in Porto.\n")
    built.harness.call(ALICE, "hello")
    system = system_of(script.requests["chat"][0])
    assert system.startswith("You are Ada. Be brief.\n\nTools: memory_search")
    assert system.index("Tools:") < system.index("## Long-term memory (MEMORY.md)")


# -- the model loop ------------------------------------------------------------------------


def test_the_model_can_search_and_save_memory_with_tools(rig, script):
    built = rig()
    built.longterm.record(ALICE, [Fact("The user is allergic to peanuts.", importance=10)])
    script.chat(
        tool_calls(
            ("memory_search", {"query": "peanut"}),
            ("memory_save", {"text": "The user's daughter is Ana.", "importance": 7}),
        ),
        text("You are allergic to peanuts, and I will remember Ana."),
    )
    outcome = built.harness.call(ALICE, "What am I allergic to? Also, my daughter is Ana.")

    assert outcome.reply == "You are allergic to peanuts, and I will remember Ana."
    assert [(t.name, t.ok) for t in outcome.tool_calls] == [
        ("memory_search", True),
        ("memory_save", True),
    ]
    second = script.requests["chat"][1].messages
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool", "tool"]
    assert "Source: memory/" in second[3]["content"]
    assert "allergic to peanuts" in second[3]["content"]
    assert second[4]["content"].startswith("Saved (id=")
    saved = {f.text: f for f in built.longterm.list(ALICE).items}["The user's daughter is Ana."]
    assert (saved.source.origin, saved.source.session_id, saved.source.text) == (
        "memory_save",
        ALICE.session_id,
        "What am I allergic to? Also, my daughter is Ana.",  # the user's message of the turn
    )
    state = built.shortterm.load(ALICE)
    assert [m.role for m in state.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert state.messages[2].name == "memory_search"
    flush_request = script.requests["flush"][0].messages[-1]["content"]
    assert "Source: memory/" not in flush_request  # memory tools' output is not re-flushed
    assert outcome.iterations == 2


def test_the_tool_loop_stops_at_max_iterations(rig, script):
    built = rig(memory=MemorySettings(max_tool_iterations=3))
    script.defaults["chat"] = tool_calls(("memory_search", {"query": "again"}))
    outcome = built.harness.call(ALICE, "loop forever")
    requests = script.requests["chat"]
    assert len(requests) == 3 and outcome.iterations == 3
    assert [r.body.get("tool_choice") for r in requests] == [None, None, "none"]
    assert outcome.reply == OUT_OF_TOOL_CALLS
    state = built.shortterm.load(ALICE)
    assert state.messages[-1].role == "assistant" and not state.messages[-1].tool_calls


def test_a_big_tool_result_is_evicted_when_the_tool_returns(rig, script):
    built = rig(shortterm={"tool_result_max_chars": 256, "tool_result_preview_chars": 64})
    built.longterm.record(
        ALICE, [Fact(f"Peanut fact number {i} about the user.") for i in range(20)]
    )
    script.chat(
        tool_calls(("memory_search", {"query": "peanut"}), ("memory_get", {"path": "x.md"})),
        tool_calls(("memory_search", {"query": "allergy"}, "second")),
        text("done"),
    )
    outcome = built.harness.call(ALICE, "tell me about peanuts")
    # the next rounds were sent the big result's preview, never its whole text
    for request in script.requests["chat"][1:]:
        big = next(m for m in request.messages if m.get("tool_call_id") == "call_0_memory_search")
        assert big["content"].startswith("[tool result stored outside the conversation")
        assert len(big["content"]) < 600
        small = next(m for m in request.messages if m.get("tool_call_id") == "call_1_memory_get")
        assert small["content"].startswith("error")  # a small result stays whole
    # stored once, under the reference the model was shown, with the full text
    refs = [r for r in outcome.evicted if r.endswith("/call_0_memory_search.txt")]
    assert len(refs) == 1 and refs[0] in big["content"]
    assert sorted(outcome.evicted) == sorted(set(outcome.evicted))
    full = built.shortterm.read_tool_result(ALICE, refs[0])
    assert "Peanut fact number" in full and len(full) > 256
    stored = built.shortterm.load(ALICE).messages[2]
    assert stored.mark == "tool_result" and len(stored.content) < 600
    files = list((built.workspace / "tenants/acme/users/alice/tool-results/s1").iterdir())
    assert len(files) == len(outcome.evicted)  # no early copy left behind
    logged = built.shortterm.search(ALICE, "Peanut fact number")
    assert logged, "the session log keeps the full text"


# -- compaction, overflow, failures --------------------------------------------------------


def test_compaction_check_flushes_first_then_compacts_before_reasoning(rig, script):
    built = rig(compaction={"trigger_messages": 6, "keep_last": 2})
    chat_turns(built, ALICE, 6)
    script.flush(text("- The user asks many earlier questions."))

    outcome = built.harness.call(ALICE, "next question")

    assert script.order == ["flush", "summary", "chat", "flush"]
    assert [f.reason for f in outcome.flushes] == ["pre_compaction", "post_call"]
    assert outcome.compaction.performed and outcome.compaction.flushed
    chat_messages = script.requests["chat"][0].messages
    assert chat_messages[1]["content"].startswith("<conversation_summary")
    assert [m["content"] for m in chat_messages[-3:]] == [
        "earlier question 4",
        "ok",
        "next question",
    ]
    state = built.shortterm.load(ALICE)
    assert state.compaction_count == 1 and state.messages[-1].content == "OK."
    assert state.last_flushed_index == state.next_seq - 1
    assert outcome.usage["compaction"].total_tokens > 0


def test_a_call_with_many_tool_rounds_compacts_before_the_round_that_would_not_fit(rig, script):
    built = rig(compaction={"trigger_messages": 8, "keep_last": 2})
    chat_turns(built, ALICE, 4)
    script.chat(
        tool_calls(("memory_search", {"query": "one"}, "r1")),
        tool_calls(("memory_search", {"query": "two"}, "r2")),
        tool_calls(("memory_search", {"query": "three"}, "r3")),
        text("done"),
    )

    outcome = built.harness.call(ALICE, "look it up")

    # 4 + the question + 2 per round: the third round would be sent 9 messages (over 8)
    assert script.order == ["chat", "chat", "flush", "summary", "chat", "chat", "flush"]
    assert not outcome.compaction.performed  # at the start of the call: 4 messages fit
    first, second, third, fourth = script.requests["chat"]
    assert not any("conversation_summary" in (m.get("content") or "") for m in second.messages)
    assert third.messages[1]["content"].startswith("<conversation_summary")
    said = [m.get("content") for m in third.messages]
    assert "earlier question 0" not in said and "earlier question 2" in said  # the tail kept
    # the call's own question and its tool rounds are all still there, in order
    assert [m.get("tool_call_id") for m in third.messages if m["role"] == "tool"] == ["r1", "r2"]
    assert third.messages[-5]["content"] == "look it up"
    assert len(fourth.messages) == len(third.messages) + 2  # no second compaction
    assert [f.reason for f in outcome.flushes] == ["pre_compaction", "post_call"]
    assert not outcome.overflow_retry
    assert outcome.usage["compaction"].total_tokens > 0
    state = built.shortterm.load(ALICE)
    assert state.compaction_count == 1 and state.messages[-1].content == "done"


def test_context_overflow_flushes_compacts_harder_and_retries_once(rig, script):
    built = rig()
    chat_turns(built, ALICE, 8)
    script.chat(context_overflow(), text("Short enough now."))
    script.flush(text(PEANUTS))

    outcome = built.harness.call(ALICE, "I am allergic to peanuts, by the way.")

    assert outcome.reply == "Short enough now." and outcome.overflow_retry
    assert script.order == ["chat", "flush", "summary", "chat", "flush"]
    assert [f.reason for f in outcome.flushes] == ["overflow", "post_call"]
    first, retry = script.requests["chat"]
    assert len(retry.messages) < len(first.messages)
    assert retry.messages[-1]["content"] == "I am allergic to peanuts, by the way."
    state = built.shortterm.load(ALICE)
    assert state.compaction_count == 1
    assert state.messages[-2].content == "I am allergic to peanuts, by the way."
    assert state.last_flushed_index == state.next_seq - 1
    # the user's message reached long-term memory through the post-call flush
    assert (
        "I am allergic to peanuts, by the way."
        in script.requests["flush"][1].messages[-1]["content"]
    )


def test_a_failed_model_call_changes_nothing(rig, script):
    built = rig()
    script.defaults["chat"] = server_error()
    with pytest.raises(LlmUnavailableError):
        built.harness.call(ALICE, "hello?")
    assert built.shortterm.load(ALICE).is_new
    assert script.requests["flush"] == []


def test_without_a_model_the_call_says_so(rig):
    built = rig()
    built.harness.model = None
    with pytest.raises(LlmNotConfiguredError, match="MEMORY_LLM__MODEL"):
        built.harness.call(ALICE, "hello")


def test_tokens_of_chat_and_flush_are_reported_and_recorded(rig, script):
    built = rig()
    script.chat(text("Noted.", prompt_tokens=300, completion_tokens=5))
    script.flush(text(PEANUTS, prompt_tokens=200, completion_tokens=15))
    outcome = built.harness.call(ALICE, "I am allergic to peanuts.")
    assert outcome.usage["chat"].total_tokens == 305
    assert outcome.usage["flush"].total_tokens == 215
    body = ChatResponse.model_validate(outcome).model_dump(mode="json")  # what the API returns
    assert body["usage"]["total"]["total_tokens"] == 520
    report = FilesUsageStore(built.workspace).report("acme")
    assert report["tokens"]["chat"]["total_tokens"] == 305
    assert report["tokens"]["flush"]["total_tokens"] == 215
    assert report["total"]["calls"] == 2
