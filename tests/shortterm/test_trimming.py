"""Importance-scored trimming on crafted conversations, with the real embedding model."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_service.config import CompactionSettings, ImportanceWeights, load_settings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.messages import Msg, ToolCall
from memory_service.services import build_services
from memory_service.shortterm.trimming import ImportanceTrimmer, score_messages, units_of

WINDOW = 8192
FLIGHT = "My flight to Lisbon leaves on Friday at 9:40 from gate B12."
SMALL_TALK = [
    "Nice weather today, isn't it?",
    "Sure is, sunny and warm.",
    "I had pancakes for breakfast.",
    "Sounds delicious!",
    "My neighbour painted his fence green.",
    "That must look bright.",
    "I watched a documentary about owls.",
    "Owls are fascinating birds.",
]


def trimmer(embedder, **config) -> ImportanceTrimmer:
    settings = CompactionSettings(policy="importance", **{"trigger_messages": 12, **config})
    return ImportanceTrimmer(embedder, settings, context_window=WINDOW)


def state_of(*messages: Msg) -> AgentState:
    state = AgentState()
    state.append(*messages)
    return state


def contents(state: AgentState) -> list[str]:
    return [m.content for m in state.messages]


def chatter() -> list[Msg]:
    return [
        Msg.user(text) if i % 2 == 0 else Msg.assistant(text) for i, text in enumerate(SMALL_TALK)
    ]


def test_an_old_message_relevant_to_the_current_turn_outlives_newer_small_talk(embedder):
    state = state_of(
        Msg.user(FLIGHT),
        Msg.assistant("Noted, have a good trip."),
        *chatter(),
        Msg.user("Remind me: when does my flight to Lisbon leave?"),
    )
    result = trimmer(embedder, keep_last=4).compact(state)
    assert result.performed and result.removed == len(SMALL_TALK) + 2 - 3
    kept = contents(state)
    assert FLIGHT in kept  # the oldest message, but the one the current turn is about
    assert kept[-1] == "Remind me: when does my flight to Lisbon leave?"
    assert len(kept) == 4


def test_role_weight_alone_keeps_the_users_words(embedder):
    weights = ImportanceWeights(relevance=0, recency=0, role=1)
    state = state_of(*chatter(), Msg.user("And now?"))
    trimmer(embedder, keep_last=5, importance_weights=weights).compact(state)
    roles = [m.role for m in state.messages]
    assert roles == ["user"] * 5  # four older user messages and the latest turn


def test_recency_alone_keeps_the_newest(embedder):
    weights = ImportanceWeights(relevance=0, recency=1, role=0)
    state = state_of(*chatter(), Msg.user("And now?"))
    trimmer(embedder, keep_last=3, importance_weights=weights).compact(state)
    assert contents(state) == [SMALL_TALK[-2], SMALL_TALK[-1], "And now?"]


def test_tool_calls_stay_with_their_results(embedder):
    call = ToolCall("c1", "weather", '{"city": "Lisbon"}')
    calls = Msg.assistant("", tool_calls=(call, ToolCall("c2", "flights", "{}")))
    state = state_of(
        *chatter()[:4],
        Msg.user("What's the weather and my flight in Lisbon?"),
        calls,
        Msg.tool("c1", "Lisbon: 24 C, sunny."),
        Msg.tool("c2", FLIGHT),
        Msg.assistant("Sunny, and you fly Friday."),
        *chatter()[4:],
        Msg.user("Will my Lisbon flight on Friday be sunny?"),
    )
    for keep in (2, 4, 6, 8):
        trimmed = state_of(*state.messages)
        trimmer(embedder, keep_last=keep).compact(trimmed)
        kept = trimmed.messages
        ids = {c.id for m in kept for c in m.tool_calls}
        answered = {m.tool_call_id for m in kept if m.role == "tool"}
        assert answered == ids  # every kept call has all its results, no orphaned result
        assert kept[-1].content == "Will my Lisbon flight on Friday be sunny?"
    assert units_of(state.messages)[5].indexes == [5, 6, 7]


def test_system_prompt_summary_and_latest_turn_are_never_dropped(embedder):
    summary = Msg.user("<conversation_summary>Earlier: trip planning.</conversation_summary>")
    summary = Msg(summary.role, summary.content, mark="summary")
    state = state_of(
        Msg.system("You are a travel assistant."),
        summary,
        *chatter(),
        Msg.user("Book the hotel."),
        Msg.assistant("", tool_calls=(ToolCall("h1", "hotels", "{}"),)),
        Msg.tool("h1", "Hotel Alfama: 2 rooms left."),
    )
    result = trimmer(embedder, keep_last=1, overflow_keep_last=0).compact(
        state, reason="overflow", aggressive=True
    )
    assert result.performed and result.removed == len(SMALL_TALK)
    assert [m.role for m in state.messages] == ["system", "user", "user", "assistant", "tool"]
    assert state.messages[1].mark == "summary"


def test_the_token_budget_is_met(embedder):
    long = [Msg.user(f"Story part {i}: " + "words " * 800) for i in range(8)]  # 806 tokens
    state = state_of(*long, Msg.user("What happened next?"))
    compactor = trimmer(embedder, trigger_messages=100, keep_last=50, trim_token_ratio=0.25)
    assert compactor.needs_compaction(state) == "tokens"
    result = compactor.compact(state, reason="tokens")
    assert result.performed and state.token_estimate <= 0.25 * WINDOW
    assert state.messages[-1].content == "What happened next?"


def test_nothing_to_drop_says_so(embedder):
    state = state_of(Msg.user("hi"), Msg.assistant("hello"), Msg.user("how are you?"))
    result = trimmer(embedder, keep_last=5).compact(state)
    assert not result.performed and result.reason == "nothing_to_compact"
    assert len(state.messages) == 3


@pytest.mark.parametrize("backend", ["files"])
def test_the_policy_is_chosen_by_settings_and_needs_no_llm(tmp_path, embedder, backend):
    settings = load_settings(
        workspace=tmp_path / "ws",
        shortterm={"backend": backend},
        compaction={"policy": "importance", "trigger_messages": 6, "keep_last": 3},
    )
    services = build_services(settings, embedder=embedder)
    try:
        ctx = RuntimeContext("acme", "alice", "s1")
        services.shortterm.append(ctx, [*chatter()[:5], Msg.user(FLIGHT)])
        state = services.shortterm.load(ctx)
        assert state.compaction_count == 1 and len(state.messages) == 3
        assert state.messages[-1].content == FLIGHT
    finally:
        services.close()


# -- the score, computed by hand -------------------------------------------------------------

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def _at(hours_ago: float) -> datetime:
    return NOW - timedelta(hours=hours_ago)


def test_scores_follow_the_articles_formula_by_hand():
    messages = [
        Msg.user("I have a peanut allergy", created_at=_at(0)),  # R 2/3, T 1, Ro 1.0
        Msg.assistant("Noted", created_at=_at(10)),  # R 0, T 1/2, Ro 0.8
        Msg.system("Be kind", created_at=_at(0)),  # R 0, T 1, Ro 0.9
        Msg.tool("c1", "dinner at 8", created_at=_at(20)),  # R 1/3, T 1/3, Ro 0.6
    ]
    weights = ImportanceWeights()
    scores = score_messages(messages, "peanut allergy dinner", None, weights, NOW)
    expected = [
        0.5 * 2 / 3 + 0.3 * 1 + 0.2 * 1.0,
        0.5 * 0 + 0.3 * 0.5 + 0.2 * 0.8,
        0.5 * 0 + 0.3 * 1 + 0.2 * 0.9,
        0.5 * 1 / 3 + 0.3 * (1 / 3) + 0.2 * 0.6,
    ]
    assert scores == pytest.approx(expected)
    assert weights.role_weight("developer") == 0.5


def test_without_a_turn_every_message_is_half_relevant():
    messages = [Msg.user("hello", created_at=_at(0)), Msg.assistant("hi", created_at=_at(0))]
    scores = score_messages(messages, "", None, ImportanceWeights(), NOW)
    assert scores == pytest.approx([0.5 * 0.5 + 0.3 + 0.2 * 1.0, 0.5 * 0.5 + 0.3 + 0.2 * 0.8])


def test_with_the_embedder_relevance_is_the_cosine(embedder):
    messages = [Msg.user(FLIGHT, created_at=_at(0))]
    [score] = score_messages(messages, FLIGHT, embedder, ImportanceWeights(), NOW)
    assert score == pytest.approx(0.5 * 1.0 + 0.3 + 0.2, abs=1e-4)  # the same text: cosine 1


def test_appended_messages_keep_their_time_and_tokens_and_old_states_load():
    state = AgentState()
    [stored] = state.append(Msg.user(" ".join(["word"] * 10)), now=NOW)
    assert stored.created_at == NOW and stored.tokens == 10  # cl100k: one token a word
    old = state.to_dict()
    del old["messages"][0]["created_at"], old["messages"][0]["tokens"]
    loaded = AgentState.from_dict(old)
    assert loaded.messages[0].created_at == state.updated_at  # the state's own save time
    assert loaded.token_estimate == state.token_estimate


def test_what_is_kept_stays_in_conversation_order(embedder):
    old, recent = _at(48), _at(0)
    messages = [
        Msg.user(FLIGHT, created_at=old),  # relevant but old
        *(Msg.user(t, created_at=recent) for t in SMALL_TALK),
        Msg.user("When does my flight to Lisbon leave?", created_at=recent),
    ]
    state = AgentState()
    state.append(*messages, now=NOW)
    compactor = ImportanceTrimmer(
        embedder,
        CompactionSettings(policy="importance", trigger_messages=12, keep_last=4),
        context_window=WINDOW,
        clock=lambda: NOW,
    )
    compactor.compact(state, reason="forced")
    kept = [m.content for m in state.messages]
    assert kept[0] == FLIGHT and kept[-1].startswith("When does my flight")
    assert [m.seq for m in state.messages] == sorted(m.seq for m in state.messages)
