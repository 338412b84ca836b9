"""Replaying failed flushes from the dead-letter file, against the loopback LLM server and the
real files backend: facts recorded and entries cleared, failures kept, malformed lines kept,
lines a flush appends during the replay kept, and the ``maintain --replay-dead-letters`` CLI."""

from __future__ import annotations

import json

import pytest

from memory_service.cli import main
from memory_service.config import MemorySettings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.messages import Msg
from memory_service.domain.paths import OwnerPaths
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.pipeline.replay import replay_dead_letters
from memory_service.stores.usage.files import FilesUsageStore
from tests.support.llm_server import error, text

OWNER = RuntimeContext("acme", "alice")
CTX = OWNER.with_session("s1")
PEANUTS = "- [fact|10|user.allergy] The user is allergic to peanuts."
PEANUTS_TEXT = "The user is allergic to peanuts."


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_LONGTERM__BACKEND"):
        monkeypatch.delenv(name, raising=False)
    for name in ("BASE_URL", "API_KEY", "MODEL", "MEMORY_MODEL"):
        monkeypatch.delenv(f"MEMORY_LLM__{name}", raising=False)


@pytest.fixture
def flush(longterm, chat_model, workspace) -> MemoryFlushManager:
    return MemoryFlushManager(longterm, chat_model, workspace, config=MemorySettings())


@pytest.fixture
def llm_env(monkeypatch, llm_server):
    """The CLI's settings point at the loopback server."""
    monkeypatch.setenv("MEMORY_LLM__BASE_URL", llm_server.base_url)
    monkeypatch.setenv("MEMORY_LLM__API_KEY", "test-key")
    monkeypatch.setenv("MEMORY_LLM__MODEL", "test-model")
    monkeypatch.setenv("MEMORY_LLM__MAX_RETRIES", "0")


def dead_letter_path(workspace):
    return OwnerPaths.of(workspace, OWNER).dead_letters("flush")


def dead_letters(workspace) -> list[dict]:
    path = dead_letter_path(workspace)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def fail_a_flush(flush, script, ctx=CTX, reason="pre_compaction", *said: str) -> AgentState:
    """A flush the model answers with errors (every try): its messages go to a dead letter."""
    script.flush(*[error(400, "scripted outage", type="invalid_request_error")] * 2)
    state = AgentState(session_id=ctx.session_id)
    state.append(*[Msg.user(s) for s in said or ("I am allergic to peanuts.",)])
    state.append(Msg.assistant("Noted."))
    assert flush.flush(state, ctx, reason).status == "failed"
    return state


def replay(workspace, *extra: str) -> list[str]:
    return ["maintain", "--replay-dead-letters", "--workspace", str(workspace), *extra]


# -- replaying -----------------------------------------------------------------------------


def test_a_replayed_dead_letter_records_its_facts_and_leaves_the_file(
    flush, longterm, workspace, script
):
    said = "I am allergic to peanuts.\u2028It is severe."  # a line separator inside a message
    fail_a_flush(flush, script, CTX, "pre_compaction", said)
    [letter] = dead_letters(workspace)
    assert letter["reason"] == "pre_compaction"
    assert "\u2028" in dead_letter_path(workspace).read_text(encoding="utf-8")  # raw, unescaped
    assert longterm.list(OWNER).items == []

    script.flush(text(PEANUTS, prompt_tokens=100, completion_tokens=20))  # healthy again
    report = replay_dead_letters(flush, OWNER)

    assert report.status == "replayed" and report.clean
    assert (report.counts["replayed"], report.counts["failed"], report.counts["facts"]) == (1, 0, 1)
    assert said in script.requests["flush"][-1].prompt_text
    top = longterm.retrieve(OWNER, "peanut allergy", 1)[0]
    assert top.fact.text == PEANUTS_TEXT and top.fact.session_id == "s1"
    assert dead_letters(workspace) == []
    usage = FilesUsageStore(workspace).report("acme")
    assert usage["tokens"]["flush_replay"]["total_tokens"] == 120
    assert usage["counters"]["flush_replay_facts_created"] == 1
    assert usage["counters"]["flush_runs"] == 1  # the failed flush only: a replay is no flush


def test_facts_already_remembered_are_not_recorded_twice(flush, longterm, workspace, script):
    """A post-call entry whose messages a later healthy flush recorded: replayed, no new fact."""
    state = fail_a_flush(flush, script, CTX, "post_call")
    script.flush(text(PEANUTS))
    assert flush.flush(state, CTX, "post_call").status == "flushed"  # the live flush caught up

    script.flush(text(PEANUTS))
    report = replay_dead_letters(flush, OWNER)

    assert report.status == "replayed" and report.counts["facts"] == 0
    assert [f.text for f in longterm.list(OWNER).items] == [PEANUTS_TEXT]
    assert dead_letters(workspace) == []


def test_an_entry_inside_a_larger_one_is_not_sent_again(flush, longterm, workspace, script):
    """While the model is down each post-call flush re-sends everything since the watermark:
    the second entry holds the first one's messages, so one request replays both."""
    state = fail_a_flush(flush, script, CTX, "post_call")
    state.append(Msg.user("I moved to Porto."))
    script.flush(*[error(400, "still down", type="invalid_request_error")] * 2)
    assert flush.flush(state, CTX, "post_call").status == "failed"
    assert len(dead_letters(workspace)) == 2
    sent_before = len(script.requests["flush"])

    script.flush(text(PEANUTS + "\n- The user lives in Porto."))
    report = replay_dead_letters(flush, OWNER)

    assert len(script.requests["flush"]) == sent_before + 1
    assert (report.counts["replayed"], report.counts["covered"]) == (1, 1)
    assert {f.text for f in longterm.list(OWNER).items} == {
        PEANUTS_TEXT,
        "The user lives in Porto.",
    }
    assert dead_letters(workspace) == []


def test_a_replay_that_fails_again_keeps_the_entry(flush, longterm, workspace, script):
    fail_a_flush(flush, script)
    [before] = dead_letters(workspace)
    script.flush(text("Sorry, I cannot help with that."), text("Still no bullets."))

    report = replay_dead_letters(flush, OWNER)

    assert report.status == "failed" and not report.clean
    assert (report.counts["replayed"], report.counts["failed"]) == (0, 1)
    assert "neither Markdown bullets nor NO_REPLY" in report.errors[0]
    [after] = dead_letters(workspace)
    assert after["messages"] == before["messages"] and after["reason"] == "pre_compaction"
    assert after["replay_attempts"] == 1 and "NO_REPLY" in after["last_replay_error"]
    assert longterm.list(OWNER).items == []
    assert FilesUsageStore(workspace).report("acme")["counters"]["flush_replay_failures"] == 1


def test_malformed_lines_are_kept_as_they_are_and_counted(flush, longterm, workspace, script):
    fail_a_flush(flush, script)
    broken = [
        '{"tenant_id": "acme", "user_id": "alice", "messages": [',  # cut short
        json.dumps({"tenant_id": "acme", "user_id": "bob", "messages": [{"role": "user"}]}),
        json.dumps({"tenant_id": "acme", "user_id": "alice", "messages": [{"role": "robot"}]}),
    ]
    path = dead_letter_path(workspace)
    path.write_text(path.read_text(encoding="utf-8") + "\n".join(broken) + "\n", encoding="utf-8")

    script.flush(text(PEANUTS))
    report = replay_dead_letters(flush, OWNER)

    assert (report.counts["replayed"], report.counts["malformed"]) == (1, 3)
    assert report.status == "malformed" and not report.clean
    assert path.read_text(encoding="utf-8") == "\n".join(broken) + "\n"
    assert [f.text for f in longterm.list(OWNER).items] == [PEANUTS_TEXT]


def test_an_entry_a_flush_appends_during_the_replay_is_kept(
    flush, longterm, workspace, script, llm_server
):
    fail_a_flush(flush, script)
    other = OWNER.with_session("s2")
    no_model = MemoryFlushManager(longterm, None, workspace)

    def answer_while_another_flush_fails(request):
        """The replay is waiting on the model: a flush of session s2 fails right now."""
        state = AgentState(session_id="s2")
        state.append(Msg.user("I moved to Porto."))
        assert no_model.flush(state, other, "pre_compaction").status == "failed"
        assert len(dead_letters(workspace)) == 2  # the new entry is in the file
        return text(PEANUTS)

    llm_server.push(answer_while_another_flush_fails)
    report = replay_dead_letters(flush, OWNER)

    assert report.counts["replayed"] == 1 and report.status == "replayed"
    [kept] = dead_letters(workspace)
    assert kept["session_id"] == "s2" and kept["messages"][0]["content"] == "I moved to Porto."
    assert [f.text for f in longterm.list(OWNER).items] == [PEANUTS_TEXT]


# -- the CLI -------------------------------------------------------------------------------


def test_cli_lists_then_replays_dead_letters(flush, longterm, workspace, script, llm_env, capsys):
    fail_a_flush(flush, script)
    fail_a_flush(flush, script, CTX.with_session("s2"), "overflow", "I play the cello.")
    asked = len(script.requests["flush"])

    assert main(replay(workspace, "--dry-run", "--tenant", "acme")) == 0
    assert capsys.readouterr().out.split() == [
        "listed",
        "acme/alice",
        "entries=2",
        "malformed=0",
        "overflow=1",
        "pre_compaction=1",
    ]
    assert len(script.requests["flush"]) == asked  # listing calls no model

    script.flush(text(PEANUTS), text("- [preference|6] The user plays the cello."))
    code = main(replay(workspace, "--tenant", "acme", "--user", "alice", "--json"))

    assert code == 0
    [report] = json.loads(capsys.readouterr().out)
    assert report["status"] == "replayed" and report["counts"]["replayed"] == 2
    assert report["counts"]["failed"] == report["counts"]["malformed"] == 0
    assert dead_letters(workspace) == []
    found = {r.fact.text for r in longterm.retrieve(OWNER, "cello peanuts", 5)}
    assert {PEANUTS_TEXT, "The user plays the cello."} <= found


def test_cli_exits_1_when_an_entry_fails_again(flush, workspace, script, llm_env, capsys):
    fail_a_flush(flush, script)
    script.defaults["flush"] = text("Nothing to add.")  # malformed, every try

    assert main(replay(workspace, "--tenant", "acme", "--user", "alice")) == 1

    out = capsys.readouterr().out
    assert out.startswith("failed") and "replayed=0 failed=1 malformed=0" in out
    assert [letter["replay_attempts"] for letter in dead_letters(workspace)] == [1]


def test_cli_without_a_model_or_with_bad_arguments_exits_2(flush, workspace, script, capsys):
    fail_a_flush(flush, script)
    for argv in (
        replay(workspace),  # no MEMORY_LLM__MODEL in the environment
        replay(workspace, "--user", "alice"),
        replay(workspace, "--force"),
        ["maintain", "--dry-run", "--workspace", str(workspace)],
    ):
        assert main(argv) == 2, argv
        [line] = capsys.readouterr().err.strip().split("\n")
        assert line.startswith("memory-service: error: ")
    assert main(replay(workspace)) == 2
    assert "needs an LLM" in capsys.readouterr().err
    assert len(dead_letters(workspace)) == 1  # untouched
