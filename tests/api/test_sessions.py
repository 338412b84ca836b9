"""The session API through FastAPI's TestClient, with the loopback LLM server as the model."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from memory_service.shortterm.summary import SUMMARY_BLOCKS
from tests.support.api import (
    ACME_KEY,
    GLOBEX_KEY,
    append,
    assert_error,
    auth,
    make_client,
    users,
)
from tests.support.chat_script import TRIP_SUMMARY, Script
from tests.support.llm_server import server_error, text
from tests.support.postgres import PG_DSN


@pytest.fixture
def client(tmp_path, embedder, monkeypatch, llm_server):
    services, test_client = make_client(
        tmp_path,
        embedder,
        monkeypatch,
        llm={
            "base_url": llm_server.base_url,
            "model": "chat-model",
            "memory_model": "small",
            "context_window": 8192,
        },
        shortterm={"tool_result_max_chars": 1000, "tool_result_preview_chars": 100},
    )
    with test_client:
        yield test_client
    services.close()


@pytest.fixture
def no_model_client(tmp_path, embedder, monkeypatch):
    services, test_client = make_client(tmp_path, embedder, monkeypatch)
    with test_client:
        yield test_client
    services.close()


def test_sessions_need_an_api_key(client):
    assert_error(client.get("/v1/sessions/s1", params={"user_id": "alice"}), 401, "unauthorized")
    response = client.post("/v1/sessions/s1/messages", json={"user_id": "alice", "messages": []})
    assert_error(response, 401, "unauthorized")
    response = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=auth("nope" * 5))
    assert_error(response, 401, "unauthorized")


def test_append_then_read_the_state_and_the_context(client):
    conversation = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "Remember: keep it short", "mark": "hint"},
    ]
    response = append(client, "s1", conversation)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["version"] == 1 and body["message_count"] == 6
    assert [m["seq"] for m in body["appended"]] == [0, 1, 2, 3, 4, 5]
    assert body["compaction"]["reason"] == "not_needed"

    state = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=auth()).json()
    assert state["version"] == 1
    assert state["context_window"] == 8192
    assert state["context"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
        {"role": "assistant", "content": "Sunny."},
        {"role": "user", "content": "Remember: keep it short"},
    ]
    assert state["messages"][5]["mark"] == "hint"
    assert state["tool_trail"][0]["name"] == "weather"
    assert state["last_flushed_index"] == -1 and state["next_seq"] == 6


def test_a_session_never_stored_is_404_like_its_delete(client):
    state = client.get("/v1/sessions/fresh", params={"user_id": "alice"}, headers=auth())
    assert_error(state, 404, "not_found")


def test_the_thirtieth_message_triggers_compaction_with_the_memory_model(client, llm_server):
    assert append(client, "s1", users(29)).json()["compaction"]["reason"] == "not_needed"
    # the long-term flush runs first (nothing worth keeping), then the summary
    llm_server.push(text("NO_REPLY"), text(TRIP_SUMMARY, prompt_tokens=500, completion_tokens=80))
    body = append(client, "s1", users(1, start=29)).json()
    assert body["compaction"]["performed"] is True
    assert body["compaction"]["removed"] == 20 and body["compaction"]["kept"] == 10
    assert body["compaction"]["usage"]["total_tokens"] == 580
    assert body["message_count"] == 11
    assert llm_server.requests[-1].model == "small"

    state = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=auth()).json()
    assert state["compaction_count"] == 1
    assert set(state["summary"]) == set(SUMMARY_BLOCKS)
    assert state["messages"][0]["mark"] == "summary"
    assert state["context"][0]["content"].startswith("<conversation_summary")
    assert state["context"][1]["content"] == "message 20"


def test_compact_now_and_a_failing_model(client, llm_server):
    append(client, "s1", users(12))
    llm_server.push(server_error(), server_error())
    response = client.post("/v1/sessions/s1/compact", json={"user_id": "alice"}, headers=auth())
    assert_error(response, 503, "llm_unavailable")
    state = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=auth()).json()
    assert state["message_count"] == 12 and state["version"] == 1  # unchanged

    llm_server.push(text("NO_REPLY"), text(TRIP_SUMMARY))  # the flush, then the summary
    body = {"user_id": "alice", "keep_last": 4, "expected_version": 1}
    response = client.post("/v1/sessions/s1/compact", json=body, headers=auth())
    assert response.status_code == 200, response.text
    assert response.json()["compaction"]["removed"] == 8
    assert response.json()["message_count"] == 5 and response.json()["version"] == 2


def test_without_a_model_append_works_and_compact_says_why_not(no_model_client):
    client = no_model_client
    body = append(client, "s1", users(30)).json()
    assert body["message_count"] == 30
    assert body["compaction"]["performed"] is False
    assert body["compaction"]["reason"] == "no_model"
    assert body["compaction"]["error"]["code"] == "llm_not_configured"
    response = client.post("/v1/sessions/s1/compact", json={"user_id": "alice"}, headers=auth())
    assert_error(response, 503, "llm_not_configured")
    assert "MEMORY_LLM__MODEL" in response.json()["error"]["message"]


def test_a_stale_expected_version_is_409_conflict(client):
    assert append(client, "s1", users(1), expected_version=0).status_code == 200
    assert_error(append(client, "s1", users(1), expected_version=0), 409, "conflict")
    assert append(client, "s1", users(1), expected_version=1).json()["version"] == 2
    response = client.post(
        "/v1/sessions/s1/compact",
        json={"user_id": "alice", "expected_version": 1},
        headers=auth(),
    )
    assert_error(response, 409, "conflict")


def test_tenants_and_users_never_see_each_others_sessions(client):
    append(client, "shared", [{"role": "user", "content": "acme alice secret"}])
    for key, user in ((GLOBEX_KEY, "alice"), (ACME_KEY, "bob")):
        state = client.get("/v1/sessions/shared", params={"user_id": user}, headers=auth(key))
        assert_error(state, 404, "not_found")
        response = client.delete("/v1/sessions/shared", params={"user_id": user}, headers=auth(key))
        assert_error(response, 404, "not_found")
        hits = client.post(
            "/v1/sessions/search", json={"user_id": user, "query": "secret"}, headers=auth(key)
        )
        assert hits.json()["hits"] == []
    state = client.get("/v1/sessions/shared", params={"user_id": "alice"}, headers=auth())
    assert state.json()["messages"][0]["content"] == "acme alice secret"


def test_evicted_tool_results_read_back_through_the_api(client):
    big = "\n".join(f"row {i}" for i in range(1, 400))
    messages = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "q1", "type": "function", "function": {"name": "sql"}}],
        },
        {"role": "tool", "tool_call_id": "q1", "content": big},
    ]
    body = append(client, "s1", messages).json()
    assert body["evicted"] == ["tool-results/s1/q1.txt"]
    assert body["appended"][1]["mark"] == "tool_result"
    params = {"user_id": "alice", "ref": "tool-results/s1/q1.txt", "start_line": 2, "end_line": 3}
    response = client.get("/v1/sessions/s1/tool-results", params=params, headers=auth())
    assert response.json()["text"] == "row 2\nrow 3\n"
    params["ref"] = "../../../../../etc/passwd"
    response = client.get("/v1/sessions/s1/tool-results", params=params, headers=auth())
    assert_error(response, 422, "path_outside_user")
    params["ref"] = "tool-results/s1/q1.txt"
    response = client.get("/v1/sessions/s1/tool-results", params=params, headers=auth(GLOBEX_KEY))
    assert_error(response, 404, "not_found")


def test_list_search_and_delete(client):
    append(client, "trip", [{"role": "user", "content": "Book flights to Lisbon"}])
    append(client, "food", [{"role": "user", "content": "I am allergic to peanuts"}])
    listed = client.get("/v1/sessions", params={"user_id": "alice"}, headers=auth()).json()
    assert sorted(s["session_id"] for s in listed["sessions"]) == ["food", "trip"]

    hits = client.post(
        "/v1/sessions/search", json={"user_id": "alice", "query": "peanut allergy"}, headers=auth()
    ).json()["hits"]
    assert hits[0]["session_id"] == "food"

    response = client.delete("/v1/sessions/food", params={"user_id": "alice"}, headers=auth())
    assert response.json() == {"state": True, "tool_results": 0, "log": False}
    listed = client.get("/v1/sessions", params={"user_id": "alice"}, headers=auth()).json()
    assert [s["session_id"] for s in listed["sessions"]] == ["trip"]
    response = client.delete(
        "/v1/sessions/food", params={"user_id": "alice", "include_log": True}, headers=auth()
    )
    assert response.json() == {"state": False, "tool_results": 0, "log": True}
    assert_error(
        client.delete("/v1/sessions/food", params={"user_id": "alice"}, headers=auth()),
        404,
        "not_found",
    )


@pytest.mark.parametrize(
    "messages",
    [
        [],
        [{"role": "tool", "content": "no call id"}],
        [{"role": "user"}],
        [{"role": "user", "content": "x", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}],
        [{"role": "robot", "content": "x"}],
        [{"role": "user", "content": "x", "mark": "summary"}],
        [{"role": "user", "content": "x", "unknown": 1}],
    ],
)
def test_bad_messages_are_422(client, messages):
    assert_error(append(client, "s1", messages), 422, "validation_error")


def test_bad_ids_are_refused(client):
    assert_error(append(client, "..", users(1)), 404, "not_found")  # no such route
    assert_error(append(client, "bad%20id", users(1)), 422, "invalid_id")
    assert_error(append(client, "s1", users(1), user="../bob"), 422, "invalid_id")


def test_the_api_on_the_postgres_store(tmp_path, embedder, monkeypatch, pg_schema):
    table = f"agent_state_api_test_{uuid.uuid4().hex[:12]}"
    services, test_client = make_client(
        tmp_path,
        embedder,
        monkeypatch,
        shortterm={"backend": "postgres", "postgres_table": table},
        postgres={"dsn": PG_DSN, "schema_name": pg_schema},  # replica state there too
    )
    try:
        with test_client as client:
            assert append(client, "s1", users(2), expected_version=0).json()["version"] == 1
            assert_error(append(client, "s1", users(1), expected_version=0), 409, "conflict")
            globex = client.get(
                "/v1/sessions/s1", params={"user_id": "alice"}, headers=auth(GLOBEX_KEY)
            )
            assert_error(globex, 404, "not_found")
            state = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=auth())
            assert [m["content"] for m in state.json()["messages"]] == ["message 0", "message 1"]
    finally:
        services.close()
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')


# -- ending a session ------------------------------------------------------------------------


def _end(client, session="s1", user="alice", key=ACME_KEY):
    return client.post(f"/v1/sessions/{session}/end", json={"user_id": user}, headers=auth(key))


def test_ending_a_session_flushes_it_then_clears_it(client, llm_server):
    llm_server.responder = Script(flush="- [fact|9|user.allergy] The user is allergic to peanuts.")
    said = [{"role": "user", "content": "I'm allergic to peanuts."}]
    assert append(client, "s1", said).status_code == 200
    ended = _end(client)
    assert ended.status_code == 200, ended.text
    body = ended.json()
    assert body["session_id"] == "s1" and body["state"] is True
    assert body["flush"]["reason"] == "end" and body["flush"]["status"] == "flushed"
    assert [f["text"] for f in body["flush"]["facts"]] == ["The user is allergic to peanuts."]
    assert client.get("/v1/sessions/s1?user_id=alice", headers=auth()).status_code == 404
    search = {"user_id": "alice", "query": "peanut allergy"}
    hits = client.post("/v1/memories/search", json=search, headers=auth()).json()["hits"]
    assert hits[0]["text"] == "The user is allergic to peanuts."
    logged = client.post("/v1/sessions/search", json=search, headers=auth()).json()
    assert logged["hits"], "the session log stays"


@pytest.mark.parametrize("archive", ["no_model", "always"])
def test_with_a_model_the_setting_says_whether_the_archive_runs_beside_the_flush(
    tmp_path, embedder, monkeypatch, llm_server, archive
):
    llm_server.responder = Script(flush="- [fact|8|user.pet] The user has a greyhound, Pixel.")
    services, client = make_client(
        tmp_path,
        embedder,
        monkeypatch,
        llm={"base_url": llm_server.base_url, "model": "chat-model"},
        memory={"session_archive": archive},
    )
    with client:
        assert append(client, "s1", WEATHER_TURNS).status_code == 200
        ended = _end(client)
        assert ended.status_code == 200, ended.text
        body = ended.json()
        assert body["flush"]["status"] == "flushed"
        listed = client.get("/v1/memories", params={"user_id": "alice"}, headers=auth()).json()
        facts = [f["text"] for f in listed["items"] if f["kind"] == "fact"]
        assert facts == ["The user has a greyhound, Pixel."]
        if archive == "always":
            assert body["archive"] == {"recorded": 2, "duplicates": 0, "left_out": 3}
            assert len(_events(client)) == 2
            assert not any("14C" in text for text in _events(client))
        else:
            assert body["archive"] is None and _events(client) == {}
    services.close()


def test_ending_a_session_whose_flush_fails_clears_nothing(client, llm_server):
    llm_server.responder = Script(flush="Sure, nothing to add.")  # neither bullets nor NO_REPLY
    assert (
        append(client, "s1", [{"role": "user", "content": "I'm allergic to peanuts."}]).status_code
        == 200
    )
    assert_error(_end(client), 502, "flush_failed")
    assert client.get("/v1/sessions/s1?user_id=alice", headers=auth()).status_code == 200


WEATHER_TURNS = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "name": "Caroline", "content": "I adopted a greyhound called Pixel today."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "name": "weather", "content": "Paris: 14C, rain"},
    {"role": "assistant", "content": "Congratulations on Pixel! Take a raincoat for walks."},
]


def _events(client, user="alice"):
    """The user's long-term memories of kind ``event``, by text."""
    listed = client.get("/v1/memories", params={"user_id": user}, headers=auth()).json()
    return {f["text"]: f for f in listed["items"] if f["kind"] == "event"}


def test_ending_without_a_model_archives_the_messages_as_events(no_model_client):
    assert append(no_model_client, "s1", WEATHER_TURNS).status_code == 200
    ended = _end(no_model_client)
    assert ended.status_code == 200, ended.text
    body = ended.json()
    assert body["flush"] is None and body["state"] is True
    assert body["archive"] == {"recorded": 2, "duplicates": 0, "left_out": 3}
    assert no_model_client.get("/v1/sessions/s1?user_id=alice", headers=auth()).status_code == 404
    events = _events(no_model_client)
    adopted = "Caroline: I adopted a greyhound called Pixel today."
    reply = "assistant: Congratulations on Pixel! Take a raincoat for walks."
    assert sorted(events) == sorted([adopted, reply])  # no tool result, no system prompt
    assert events[adopted]["source"] == {
        "origin": "session_archive",
        "session_id": "s1",
        "messages": [1],
        "text": None,
    }
    assert events[reply]["source"]["messages"] == [4]
    search = {"user_id": "alice", "query": "what dog did Caroline adopt?"}
    hits = no_model_client.post("/v1/memories/search", json=search, headers=auth()).json()
    assert hits["hits"][0]["text"] == adopted


def test_with_the_memory_hooks_off_the_end_archives_nothing(tmp_path, embedder, monkeypatch):
    services, no_hooks = make_client(
        tmp_path, embedder, monkeypatch, memory={"disable_memory_hooks": True}
    )
    with no_hooks:
        assert append(no_hooks, "s1", WEATHER_TURNS).status_code == 200
        ended = _end(no_hooks)
        assert ended.status_code == 200, ended.text
        assert ended.json()["archive"] is None and ended.json()["flush"]["status"] == "skipped"
        assert _events(no_hooks) == {}
    services.close()


def test_ending_without_a_model_or_a_session(tmp_path, embedder, monkeypatch, client):
    services, no_archive = make_client(
        tmp_path, embedder, monkeypatch, memory={"session_archive": "off"}
    )
    with no_archive:
        assert append(no_archive, "s1", [{"role": "user", "content": "hello"}]).status_code == 200
        assert_error(_end(no_archive), 503, "llm_not_configured")
        assert no_archive.get("/v1/sessions/s1?user_id=alice", headers=auth()).status_code == 200
        assert _events(no_archive) == {}
    services.close()
    assert_error(_end(client, "nope"), 404, "not_found")
    assert append(client, "s2", [{"role": "user", "content": "hello"}]).status_code == 200
    assert_error(_end(client, "s2", user="bob"), 404, "not_found")  # another user's session
    assert_error(_end(client, "s2", key=GLOBEX_KEY), 404, "not_found")  # another tenant's


def test_the_cli_ends_a_session(tmp_path, embedder, monkeypatch, capsys, llm_server):
    from memory_service.cli import main
    from memory_service.config import load_settings
    from memory_service.domain.context import RuntimeContext
    from memory_service.domain.messages import Msg
    from memory_service.services import build_services

    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    ws = tmp_path / "ws"
    services = build_services(load_settings(workspace=ws), embedder=embedder)
    ctx = RuntimeContext("acme", "alice", "s1")
    services.shortterm.append(ctx, [Msg.user("I'm allergic to peanuts.")], compact=False)
    services.close()
    argv = ["end-session", "s1", "--workspace", str(ws), "--tenant", "acme", "--user", "alice"]

    monkeypatch.setenv("MEMORY_MEMORY__SESSION_ARCHIVE", "off")
    assert main(argv) == 2  # no LLM and no archive: the session stays
    monkeypatch.delenv("MEMORY_MEMORY__SESSION_ARCHIVE")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "flushes it to long-term memory first" in err
    assert main([*argv[:2], "--workspace", str(ws), "--tenant", "acme", "--user", "bob"]) == 2
    assert "no session" in capsys.readouterr().err

    llm_server.responder = Script(flush="- [fact|9|user.allergy] The user is allergic to peanuts.")
    monkeypatch.setenv("MEMORY_LLM__BASE_URL", llm_server.base_url)
    monkeypatch.setenv("MEMORY_LLM__MODEL", "chat-model")
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["flush"] == {"status": "flushed", "facts_created": 1} and out["state"] is True
    assert out["archive"] is None  # a model is configured: the flush alone, by default
    assert main(argv) == 2  # ended: nothing left to end


def test_an_archived_turn_reads_as_the_benchmarks_turns_unit():
    """The archive writes a LoCoMo turn, appended as a message named after its speaker, as
    ``bench --unit turns`` records it: that unit's recall figures are the archive's."""
    from memory_service.domain.messages import Msg
    from memory_service.evaluation.datasets.locomo import turn_text
    from memory_service.pipeline.session_archive import archive_facts

    turns = [
        {"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a LGBTQ support group."},
        {"speaker": "Melanie", "dia_id": "D1:2", "text": "That's great, how was it?"},
    ]
    messages = [Msg.user(t["text"], name=t["speaker"], seq=i) for i, t in enumerate(turns, start=1)]
    facts = archive_facts(messages, "session_1")
    assert [f.text for f in facts] == [turn_text(t, "speaker") for t in turns]
    assert [f.source.messages for f in facts] == [(1,), (2,)]
