"""The keyed memory tools (memory_extract, memory_recall, memory_consolidate, memory_prune),
called by the chat model through the harness: the real composition root, the files backend,
the real embedder and the openai SDK against the loopback server."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, utcnow
from memory_service.domain.limits import MAX_FACT_TEXT_BYTES, MAX_QUERY_BYTES
from memory_service.domain.paths import OwnerPaths
from memory_service.pipeline.consolidation import DEFAULT_CONSOLIDATION_PROMPT
from memory_service.services import build_harness, build_services
from tests.support.chat_script import Script
from tests.support.llm_server import RecordedRequest, Reply, text, tool_calls

ALICE = RuntimeContext("acme", "alice", "s1")
CONSOLIDATION_MARK = DEFAULT_CONSOLIDATION_PROMPT.splitlines()[0]


class Rig:
    """Services + a harness; ``ask(call, args)`` makes the model call one tool, then answer."""

    def __init__(self, services, script: Script) -> None:
        self.services = services
        self.script = script
        self.consolidation_reply = text("# Memory\n\n- The user is vegan.\n")

    def ask(self, tool: str, arguments: dict, ctx: RuntimeContext = ALICE):
        self.script.chat(tool_calls((tool, arguments)), text("Done."))
        outcome = build_harness(self.services).call(ctx, f"please use {tool}")
        [result] = outcome.tool_calls
        return result

    def respond(self, request: RecordedRequest) -> Reply:
        system = next((m.get("content") or "" for m in request.messages), "")
        if CONSOLIDATION_MARK in system:
            return self.consolidation_reply
        return self.script(request)


@pytest.fixture
def rig(tmp_path, embedder, llm_server, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    settings = load_settings(
        workspace=tmp_path / "ws",
        llm={"base_url": llm_server.base_url, "model": "chat-model", "context_window": 8192},
        memory={"flush_trigger": "never"},
    )
    services = build_services(settings, embedder=embedder)
    built = Rig(services, Script())
    llm_server.responder = built.respond
    yield built
    services.close()


def test_the_new_tools_are_offered_to_the_chat_model(rig):
    rig.script.chat(text("Hi."))
    build_harness(rig.services).call(ALICE, "hello")
    offered = {t["function"]["name"] for t in rig.script.requests["chat"][0].body["tools"]}
    assert {"memory_extract", "memory_recall", "memory_consolidate", "memory_prune"} <= offered
    system = rig.script.requests["chat"][0].messages[0]["content"]
    assert "memory_extract" in system and "memory_prune" in system  # and the prompt says so


def test_memory_extract_compares_with_the_same_key(rig):
    args = {"key": "user.diet", "text": "The user is vegetarian.", "importance": 7}
    first = rig.ask("memory_extract", args)
    assert first.ok and first.text.startswith("created")
    again = rig.ask("memory_extract", args)
    assert again.ok and again.text.startswith("unchanged")
    changed = rig.ask("memory_extract", {"key": "user.diet", "text": "The user is vegan."})
    assert changed.ok and changed.text.startswith("superseded")
    assert "The user is vegetarian." in changed.text  # the old text is shown
    # the model saw the comparison as the tool's result
    tool_message = rig.script.requests["chat"][-1].messages[-1]
    assert tool_message["role"] == "tool" and "The user is vegetarian." in tool_message["content"]
    active = rig.services.longterm.list(ALICE).items
    assert [f.text for f in active if f.key == "user.diet"] == ["The user is vegan."]


def test_memory_recall_by_key_and_by_prefix(rig):
    rig.services.longterm.record(
        ALICE,
        [
            Fact(text="The user is vegan.", key="user.diet"),
            Fact(text="The user lives in Oslo.", key="user.home"),
            Fact(text="The project is due in May.", key="project.deadline"),
            Fact(text="The user likes jazz."),
        ],
    )
    exact = rig.ask("memory_recall", {"key": "user.diet"})
    assert exact.ok and "The user is vegan." in exact.text and "Oslo" not in exact.text
    prefix = rig.ask("memory_recall", {"key": "user.", "prefix": True})
    assert "The user is vegan." in prefix.text and "The user lives in Oslo." in prefix.text
    assert "May" not in prefix.text and "jazz" not in prefix.text
    none = rig.ask("memory_recall", {"key": "pet.name"})
    assert none.ok and none.text.startswith("Nothing is remembered")


def test_memory_search_star_lists_what_is_remembered(rig):
    rig.services.longterm.record(
        ALICE,
        [
            Fact(text="The user likes jazz.", importance=3),
            Fact(text="The user is allergic to peanuts.", importance=10),
        ],
    )
    listed = rig.ask("memory_search", {"query": "*"})
    lines = listed.text.splitlines()
    assert lines[0].startswith("2 facts remembered")
    assert "allergic to peanuts" in lines[1] and "jazz" in lines[2]  # most important first


def test_memory_consolidate_rewrites_memory_md_now_and_a_bad_reply_is_the_tools_error(rig):
    rig.services.longterm.record(ALICE, [Fact(text="The user is vegan.")])
    done = rig.ask("memory_consolidate", {})
    memory_md = OwnerPaths.of(rig.services.settings.workspace, ALICE).memory_md
    assert done.ok and done.text.startswith("MEMORY.md rewritten (llm)")
    assert "The user is vegan." in memory_md.read_text()
    rig.services.longterm.record(ALICE, [Fact(text="The user plays chess on Sundays.")])
    rig.consolidation_reply = text("no bullets at all")
    failed = rig.ask("memory_consolidate", {})  # raised nothing out of the harness
    assert not failed.ok and failed.text.startswith("error (llm_bad_response)")
    assert "chess" not in memory_md.read_text()


def test_memory_prune_is_a_dry_run_unless_told_otherwise(rig):
    now = utcnow()
    rig.services.longterm.record(
        ALICE,
        [
            Fact(text="The user has a dentist appointment today.", expires_at=now + timedelta(0)),
            Fact(text="The user once saw a red bicycle.", importance=2),
            Fact(text="The user is allergic to peanuts.", importance=10),
        ],
    )
    dry = rig.ask("memory_prune", {"max_importance": 3})
    assert dry.ok and dry.text.startswith("Would prune 2 facts")
    assert "[expired] The user has a dentist" in dry.text
    assert "[low_importance] The user once saw a red bicycle." in dry.text
    everything = rig.services.longterm.list(ALICE, include_inactive=True).items
    assert len(everything) == 3  # nothing deleted
    done = rig.ask("memory_prune", {"max_importance": 3, "dry_run": False})
    assert done.ok and done.text.startswith("Pruned 2 facts")
    left = rig.services.longterm.list(ALICE, include_inactive=True).items
    assert [f.text for f in left] == ["The user is allergic to peanuts."]


def test_memory_consolidate_merges_fragments_into_one_lasting_insight(rig):
    rig.services.longterm.record(
        ALICE,
        [
            Fact(text="The user runs on Mondays.", key="user.running", importance=3),
            Fact(text="The user runs on Thursdays.", key="user.running.thursday", importance=3),
            Fact(text="The user likes jazz.", key="user.music"),
        ],
    )
    merge = {
        "keys_to_merge": ["user.running", "user.running.thursday"],
        "new_key": "user.running",
        "text": "The user runs every Monday and Thursday.",
    }
    done = rig.ask("memory_consolidate", merge)
    assert done.ok and done.text.startswith("merged 2 fragments into one insight"), done.text
    active = {f.key: f for f in rig.services.longterm.list(ALICE).items}
    assert sorted(active) == ["user.music", "user.running"]
    insight = active["user.running"]
    assert insight.text == "The user runs every Monday and Thursday." and insight.importance == 10
    history = rig.services.longterm.list(ALICE, include_inactive=True).items
    merged = [f for f in history if f.key and f.key.startswith("user.running") and f != insight]
    assert {f.superseded_by for f in merged} == {insight.id}
    missing = rig.ask("memory_consolidate", {**merge, "keys_to_merge": ["pet.name"]})
    assert not missing.ok and "nothing is remembered under pet.name" in missing.text
    partial = rig.ask("memory_consolidate", {"new_key": "user.running"})
    assert not partial.ok and "together" in partial.text


def test_memory_prune_deletes_the_entries_it_is_told(rig):
    rig.services.longterm.record(
        ALICE,
        [Fact(text="The user lives in Oslo."), Fact(text="The user lives in Bergen.")],
    )
    wrong = next(f for f in rig.services.longterm.list(ALICE).items if "Oslo" in f.text)
    dry = rig.ask("memory_prune", {"ids": [wrong.id, "nope"]})
    assert dry.ok and dry.text.startswith("Would prune 1 facts") and "not found: nope" in dry.text
    assert len(rig.services.longterm.list(ALICE).items) == 2
    done = rig.ask("memory_prune", {"ids": [wrong.id], "dry_run": False})
    assert done.ok and done.text.startswith("Pruned 1 facts")
    assert [f.text for f in rig.services.longterm.list(ALICE).items] == [
        "The user lives in Bergen."
    ]


def test_memory_extract_hints_at_a_near_key_and_at_fragments(rig):
    rig.services.longterm.record(ALICE, [Fact(text="The user is vegan.", key="user.diet")])
    near = rig.ask("memory_extract", {"key": "user.diets", "text": "The user eats no honey."})
    assert near.ok and "hint: 'user.diet' is nearly the same key" in near.text
    rig.services.longterm.record(
        ALICE,
        [Fact(text=f"The user drank tea at cafe {n}.", importance=2) for n in range(7)],
    )
    dense = rig.ask("memory_extract", {"key": "user.tea", "text": "The user drinks tea."})
    assert "low-importance fragments answer this" in dense.text
    plain = rig.ask("memory_extract", {"key": "user.city", "text": "The user lives in Oslo."})
    assert "hint" not in plain.text


def test_the_list_view_shows_each_key_and_a_summary(rig):
    long = "The user is planning a trip through " + ", ".join(f"city {n}" for n in range(40))
    rig.services.longterm.record(ALICE, [Fact(text=long, key="user.trip")])
    listed = rig.ask("memory_search", {"query": "*"})
    line = listed.text.splitlines()[1]
    assert "|user.trip]" in line and "…" in line
    shown = line.split("] ", 1)[1].split(" (id=")[0]
    assert len(shown) <= 80 and long.startswith(shown.rstrip("…"))


def test_memory_extract_keeps_a_fact_longer_than_a_query(rig):
    """A fact may hold twice the bytes a query may: the hints' recall of it must not refuse
    what the record already kept."""
    long_text = "The user keeps a reading list: " + "a novel about the sea, " * 250
    assert MAX_QUERY_BYTES < len(long_text.encode()) <= MAX_FACT_TEXT_BYTES
    result = rig.ask("memory_extract", {"key": "user.reading", "text": long_text})
    assert result.ok and result.text.startswith("created"), result.text
    active = rig.services.longterm.list(ALICE).items
    assert [f.key for f in active] == ["user.reading"]


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [
        ("memory_prune", {"max_importance": 11}, "invalid_input"),
        ("memory_prune", {"dry_run": "maybe"}, "invalid_input"),
        ("memory_extract", {"key": "user.diet", "text": "x", "importance": 0}, "invalid_fact"),
        ("memory_extract", {"key": "", "text": "The user is vegan."}, "invalid_fact"),
        ("memory_extract", {"key": "k.k", "text": "The user.", "kind": "gossip"}, "invalid_fact"),
        ("memory_recall", {"key": "x" * 300}, "invalid_fact"),
        ("memory_recall", {}, "invalid_arguments"),
        ("memory_consolidate", {"now": True}, "invalid_arguments"),
    ],
)
def test_arguments_out_of_range_are_the_tools_error_result(rig, tool, arguments, code):
    result = rig.ask(tool, arguments)
    assert not result.ok and result.error_code == code
    assert result.text.startswith(f"error ({code})")
    assert rig.services.longterm.list(ALICE, include_inactive=True).items == []
