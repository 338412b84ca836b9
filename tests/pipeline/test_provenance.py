"""Provenance end to end: a fact's ``source`` through the API, the CLI, import/export, old
ledgers, and the flush's citations (the loopback LLM server, the real files backend)."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.cli import main
from memory_service.config import MemorySettings, load_settings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, Source, utcnow
from memory_service.domain.messages import Msg
from memory_service.domain.paths import OwnerPaths
from memory_service.pipeline.extraction import Span, parse_flush_reply, split_citation
from memory_service.pipeline.flush import MemoryFlushManager
from memory_service.pipeline.transfer import export_records, import_records, parse_import, to_line
from memory_service.services import build_services
from tests.support.llm_server import text

KEY = "acme-key-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
SOURCE = {
    "origin": "chat",
    "session_id": "s1",
    "messages": [4],
    "text": "I adopted a beagle called Waffles yesterday.",
}


@pytest.fixture
def client(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    ring = ApiKeyRing({KEY: {"tenant": "acme", "role": "user"}})
    with TestClient(create_app(services, ring)) as test_client:
        for user, session in (("alice", "s1"), ("bob", "s-bob")):  # each user's own session
            said = {"user_id": user, "messages": [{"role": "user", "content": "hello"}]}
            appended = test_client.post(
                f"/v1/sessions/{session}/messages", json=said, headers=HEADERS
            )
            assert appended.status_code == 200, appended.text
        yield test_client
    services.close()


def _record(client, source, user="alice", fact_text="Alice has a new pet"):
    body = {"user_id": user, "facts": [{"text": fact_text, "source": source}]}
    return client.post("/v1/memories", json=body, headers=HEADERS)


def _listed(client, user="alice") -> list[dict]:
    page = client.get("/v1/memories", params={"user_id": user}, headers=HEADERS)
    return page.json()["items"]


# -- the API ---------------------------------------------------------------------------------


def test_the_api_returns_the_source_on_get_list_and_every_hit(client):
    recorded = _record(client, SOURCE)
    assert recorded.status_code == 200, recorded.text
    fid = recorded.json()["results"][0]["id"]
    got = client.get(f"/v1/memories/{fid}", params={"user_id": "alice"}, headers=HEADERS)
    assert got.json()["source"] == SOURCE
    assert [f["source"] for f in _listed(client)] == [SOURCE]
    body = {"user_id": "alice", "query": "what is the beagle called?", "top_k": 1}
    hits = client.post("/v1/memories/search", json=body, headers=HEADERS).json()["hits"]
    assert [(h["text"], h["source"], h["session_id"]) for h in hits] == [
        ("Alice has a new pet", SOURCE, None)
    ]
    assert hits[0]["ranks"]["bm25"] == 1  # found by the words of its source


def test_a_plain_string_source_is_still_accepted_as_the_origin(client):
    assert _record(client, "crm").status_code == 200
    assert _listed(client)[0]["source"] == {
        "origin": "crm",
        "session_id": None,
        "messages": [],
        "text": None,
    }


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ({"text": "é" * 1500}, "invalid_source"),  # 3000 bytes in 1500 characters
        ({"text": "w" * 3000}, "invalid_source"),  # over 2 KB in characters too
        ({"text": "nul \x00 inside"}, "invalid_source"),  # any character but NUL
        ({"origin": "a\x00b"}, "invalid_source"),
        ({"session_id": "s-bob"}, "unknown_session"),  # Bob's session, not Alice's
        ({"session_id": "never-was"}, "unknown_session"),
        ({"session_id": "../x"}, "invalid_id"),
        ({"messages": [-1]}, "invalid_source"),
        ({"messages": list(range(300))}, "invalid_source"),
        ({"colour": "blue"}, "validation_error"),
    ],
)
def test_a_bad_source_is_a_422_and_nothing_is_written(client, source, code):
    body = {
        "user_id": "alice",
        "facts": [{"text": "A fine fact"}, {"text": "Alice has a new pet", "source": source}],
    }
    response = client.post("/v1/memories", json=body, headers=HEADERS)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    assert _listed(client) == []


def test_a_source_may_name_the_users_own_session_or_the_requests(client):
    assert _record(client, {"session_id": "s1", "messages": [0]}).status_code == 200
    for source in ({"session_id": "s1"}, {"messages": [0]}):  # named, or the request's
        body = {
            "user_id": "alice",
            "session_id": "s1",
            "facts": [{"text": "Alice likes tea", "source": source}],
        }
        assert client.post("/v1/memories", json=body, headers=HEADERS).status_code == 200
    assert _record(client, {"session_id": "s-bob"}, user="bob").status_code == 200
    assert {f["source"]["session_id"] for f in _listed(client)} == {"s1"}


@pytest.mark.parametrize("source", [{"session_id": "s-new"}, {"messages": [4]}, "chat"])
def test_a_source_of_a_request_session_the_user_does_not_have_is_refused(client, source):
    """One rule whether the source names the session or takes the request's: a session the
    user does not have is 422 ``unknown_session``, and nothing is written."""
    body = {
        "user_id": "alice",
        "session_id": "s-new",
        "facts": [{"text": "A fine fact"}, {"text": "Alice likes tea", "source": source}],
    }
    response = client.post("/v1/memories", json=body, headers=HEADERS)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "unknown_session"
    assert _listed(client) == []


# -- the CLI ---------------------------------------------------------------------------------


def test_the_cli_records_a_source_and_search_shows_it(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    ws = str(tmp_path / "ws")
    argv = ["record", "--workspace", ws, "--user", "alice", "Alice has a new pet"]
    said = "I adopted a beagle called Waffles."
    assert main([*argv, "--source-text", said, "--source-origin", "phone"]) == 0
    capsys.readouterr()
    search = ["search", "--workspace", ws, "--user", "alice", "Waffles", "--json"]
    assert main([*search, "--mode", "bm25"]) == 0
    [hit] = json.loads(capsys.readouterr().out)
    assert hit["text"] == "Alice has a new pet"
    assert hit["source"] == {"origin": "phone", "session_id": None, "messages": [], "text": said}


def test_the_cli_refuses_a_bad_source_with_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    ws = tmp_path / "ws"
    argv = ["record", "--workspace", str(ws), "--user", "alice", "Alice sings"]
    assert main([*argv, "--source-text", "x" * 3000]) != 0
    lines = capsys.readouterr().err.strip().split("\n")
    assert len(lines) == 1 and "source text is over" in lines[0]
    assert main([*argv, "--source-session", "someone-elses"]) != 0
    lines = capsys.readouterr().err.strip().split("\n")
    assert len(lines) == 1 and "not a session of user 'alice'" in lines[0]
    assert not list(ws.rglob("memory/*.md"))  # nothing written


# -- import/export and old files -------------------------------------------------------------


def test_export_and_import_keep_the_source_and_read_old_string_sources(longterm, tmp_path):
    from memory_service.longterm.files.backend import FileSystemLongTermMemory

    alice = RuntimeContext("acme", "alice")
    longterm.record(alice, [Fact("Alice has a new pet", source=Source.coerce(SOURCE))])
    lines = [to_line(r) for r in export_records(longterm, "acme")]
    old = {"tenant_id": "acme", "user_id": "alice", "text": "Alice sings", "source": "chat"}
    lines.append(json.dumps(old))  # an export from before provenance
    good, bad = parse_import(lines)
    assert bad == []
    target = FileSystemLongTermMemory(tmp_path / "target", longterm._embedder)
    try:
        import_records(target, good)
        sources = {f.text: f.source for f in target.list(alice).items}
    finally:
        target.close()
    assert sources == {"Alice has a new pet": Source.coerce(SOURCE), "Alice sings": Source("chat")}


def test_an_old_ledger_with_a_string_source_loads_unchanged(longterm, workspace):
    alice = RuntimeContext("acme", "alice")
    ledger = OwnerPaths.of(workspace, alice).ledger(utcnow().date())
    ledger.parent.mkdir(parents=True)
    ledger.write_text(
        '- Alice likes tea <!-- memory {"importance":6,"source":"flush","session_id":"s1"} -->\n'
        "- Alice rows, written by hand\n"
    )
    facts = {f.text: f for f in longterm.list(alice).items}
    assert facts["Alice likes tea"].source == Source(origin="flush")
    assert (facts["Alice likes tea"].importance, facts["Alice likes tea"].session_id) == (6, "s1")
    assert facts["Alice rows, written by hand"].source is None


# -- the flush: citations --------------------------------------------------------------------

SPAN = Span("s1", {3: "I moved to Porto.", 4: "Sounds lovely!", 5: "I also got a beagle."})


@pytest.mark.parametrize(
    ("bullet", "fact_text", "messages", "source_text"),
    [
        (
            "- [event|6] The user moved to Porto. (#3)",
            "The user moved to Porto.",
            (3,),
            SPAN.said[3],
        ),
        ("- The user has a beagle (#5).", "The user has a beagle.", (5,), SPAN.said[5]),
        (
            "- [fact|7|user.home] The user lives in Porto with a beagle (#3, #5)",
            "The user lives in Porto with a beagle",
            (3, 5),
            "I moved to Porto. I also got a beagle.",
        ),
        ("- The user has a beagle (#5, #99)", "The user has a beagle", (5,), SPAN.said[5]),
        # no valid citation: the whole span, numbers only
        ("- The user moved to Porto.", "The user moved to Porto.", (3, 4, 5), None),
        ("- The user moved to Porto. (#99)", "The user moved to Porto.", (3, 4, 5), None),
        ("- The user moved to Porto (#x).", "The user moved to Porto.", (3, 4, 5), None),
        ("- The user moved to Porto (#)", "The user moved to Porto", (3, 4, 5), None),
        ("- The user moved to Porto (#-3)", "The user moved to Porto", (3, 4, 5), None),
        # not a citation at all: stays text
        ("- The user was born (in 1990)", "The user was born (in 1990)", (3, 4, 5), None),
    ],
)
def test_bullets_cite_their_messages_and_bad_citations_fall_back(
    bullet, fact_text, messages, source_text
):
    [fact] = parse_flush_reply(bullet, SPAN)
    assert fact.text == fact_text
    assert fact.source == Source("flush", "s1", messages, source_text)


def test_a_citation_is_cut_from_the_text_and_its_numbers_read():
    assert split_citation("Likes tea (#1, # 2,#3)") == ("Likes tea", [1, 2, 3])
    assert split_citation("Likes tea (#1).") == ("Likes tea.", [1])
    assert split_citation("Likes (#1) tea") == ("Likes (#1) tea", [])


def test_the_flush_numbers_its_transcript_and_records_the_cited_messages(
    longterm, chat_model, workspace, script
):
    ctx = RuntimeContext("acme", "alice", "s1")
    script.flush(
        text(
            "- [fact|10|user.allergy] The user is allergic to peanuts. (#2)\n"
            "- [preference|6] The user prefers short answers. (#7)\n"  # outside the span
            "- The user lives in Oslo (#0, #banana)"
        )
    )
    state = AgentState(session_id="s1")
    state.append(
        Msg.user("I live in Oslo."),
        Msg.assistant("Nice city."),
        Msg.user("I am allergic to peanuts. Keep answers short."),
        Msg.assistant("Noted!"),
    )
    flush = MemoryFlushManager(longterm, chat_model, workspace, config=MemorySettings())
    assert flush.flush(state, ctx, "post_call").status == "flushed"
    sent = script.requests["flush"][0].messages[-1]["content"]
    assert "#2 [user] I am allergic to peanuts. Keep answers short." in sent
    assert "#3 [assistant] Noted!" in sent
    assert "(#12, #14)" in script.requests["flush"][0].messages[0]["content"]  # the grammar
    sources = {f.text: f.source for f in longterm.list(ctx).items}
    assert sources == {
        "The user is allergic to peanuts.": Source(
            "flush", "s1", (2,), "I am allergic to peanuts. Keep answers short."
        ),
        "The user prefers short answers.": Source("flush", "s1", (0, 1, 2, 3)),
        "The user lives in Oslo": Source("flush", "s1", (0,), "I live in Oslo."),
    }
    hit = longterm.retrieve(ctx, "keep answers short", 1, mode="bm25")[0]
    assert hit.fact.text == "The user is allergic to peanuts."  # its source said so


# -- memory_save: the user's message of the turn ---------------------------------------------


def test_memory_save_records_the_users_message_as_its_source(longterm, workspace):
    from memory_service.domain.messages import MEMORY_SAVE, ToolCall
    from memory_service.tools import MemoryTools

    ctx = RuntimeContext("acme", "alice", "s1")
    tools = MemoryTools(workspace, longterm)
    said = Msg.user("Remember that I\tam vegetarian\x07 now, please.").with_seq(7)
    call = ToolCall("call_1", MEMORY_SAVE, json.dumps({"text": "The user is vegetarian."}))
    outcome = tools.run(ctx, call, said=said)
    assert outcome.ok, outcome.text
    [fact] = longterm.list(ctx).items
    assert fact.source == Source(
        "memory_save", "s1", (7,), "Remember that I am vegetarian now, please."
    )
