"""``POST /v1/chat`` and ``GET /v1/usage`` through FastAPI's TestClient, the services built from
Settings alone, and the loopback LLM server as the model."""

from __future__ import annotations

import pytest

from memory_service.domain.paths import OwnerPaths
from tests.support.api import ACME_KEY, GLOBEX_KEY, assert_error, auth, make_client
from tests.support.llm_server import server_error, text

PEANUTS = "- [fact|10|user.allergy] The user is allergic to peanuts."


@pytest.fixture
def served(tmp_path, embedder, monkeypatch, llm_server, script):
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
    )
    with test_client:
        yield services, test_client
    services.close()


@pytest.fixture
def client(served):
    return served[1]


@pytest.fixture
def no_model(tmp_path, embedder, monkeypatch):
    services, test_client = make_client(tmp_path, embedder, monkeypatch)
    with test_client:
        yield test_client
    services.close()


def chat(client, message, *, user="alice", session="s1", key=ACME_KEY):
    body = {"user_id": user, "session_id": session, "message": message}
    return client.post("/v1/chat", json=body, headers=auth(key))


def test_a_fact_from_one_session_is_recalled_in_the_next(client, script):
    script.chat(text("Noted!", prompt_tokens=40, completion_tokens=3), text("Try apricots."))
    script.flush(text(PEANUTS, prompt_tokens=90, completion_tokens=12))

    first = chat(client, "I am allergic to peanuts.")

    assert first.status_code == 200, first.text
    body = first.json()
    assert body["reply"] == "Noted!" and body["session_id"] == "s1" and body["version"] >= 1
    memory = body["memory"]
    [fact] = memory["flushed_facts"]
    assert (fact["text"], fact["status"], fact["importance"]) == (
        "The user is allergic to peanuts.",
        "created",
        10,
    )
    assert [f["reason"] for f in memory["flushes"]] == ["post_call"]
    assert memory["compaction"]["performed"] is False and memory["recalled"] == []
    assert body["usage"]["chat"]["total_tokens"] == 43
    assert body["usage"]["flush"]["total_tokens"] == 102
    assert body["usage"]["total"]["total_tokens"] == 145
    assert script.requests["flush"][0].model == "small"
    assert script.requests["chat"][0].model == "chat-model"

    second = chat(client, "Any snack ideas for my hike?", session="s2").json()

    assert second["reply"] == "Try apricots."
    assert fact["id"] in [r["id"] for r in second["memory"]["recalled"]]
    assert "The user is allergic to peanuts." in script.requests["chat"][1].messages[0]["content"]

    usage = client.get("/v1/usage", headers=auth()).json()
    assert usage["tenant_id"] == "acme"
    assert usage["tokens"]["chat"]["calls"] == 2
    assert usage["tokens"]["flush"]["calls"] == 2
    assert usage["counters"]["flush_facts_created"] == 1
    assert usage["total"]["total_tokens"] == sum(
        row["total_tokens"] for row in usage["tokens"].values()
    )


def test_tenants_never_share_memory_or_usage(client, script):
    script.flush(text(PEANUTS))
    assert chat(client, "I am allergic to peanuts.").status_code == 200
    script.queues["flush"].clear()
    other = chat(client, "Any snack ideas?", key=GLOBEX_KEY).json()  # globex's alice
    assert other["memory"]["recalled"] == []
    assert "peanuts" not in script.requests["chat"][-1].messages[0]["content"]
    globex = client.get("/v1/usage", headers=auth(GLOBEX_KEY)).json()
    assert globex["tokens"]["chat"]["calls"] == 1
    assert "flush_facts_created" not in globex["counters"]


def test_a_failing_flush_is_reported_and_the_reply_still_arrives(served, script):
    services, client = served
    script.defaults["flush"] = text("I think the user likes peanuts maybe.")  # malformed
    body = chat(client, "I am allergic to peanuts.").json()
    assert body["reply"] == "OK."
    [flush] = body["memory"]["flushes"]
    assert flush["status"] == "failed" and flush["attempts"] == 2
    assert flush["dead_letter"] == "dead-letters/flush.jsonl"
    paths = OwnerPaths(services.settings.workspace, "acme", "alice")
    assert "I am allergic to peanuts." in paths.dead_letters("flush").read_text()
    counters = client.get("/v1/usage", headers=auth()).json()["counters"]
    assert counters["flush_dead_letters"] == 1 and counters["flush_failures"] == 1

    script.defaults["flush"] = text(PEANUTS)  # healthy again: the next call catches up
    caught_up = chat(client, "Thanks!").json()
    assert [f["text"] for f in caught_up["memory"]["flushed_facts"]] == [
        "The user is allergic to peanuts."
    ]
    assert "I am allergic to peanuts." in script.requests["flush"][-1].messages[-1]["content"]


def test_a_failing_model_is_503_and_the_session_is_unchanged(client, script):
    script.defaults["chat"] = server_error()
    assert_error(chat(client, "hello?"), 503, "llm_unavailable")
    state = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=auth())
    assert_error(state, 404, "not_found")  # nothing was stored


def test_without_a_model_chat_is_503_and_the_rest_keeps_working(no_model):
    response = chat(no_model, "hello")
    assert_error(response, 503, "llm_not_configured")
    assert "MEMORY_LLM__MODEL" in response.json()["error"]["message"]
    recorded = no_model.post(
        "/v1/memories",
        json={"user_id": "alice", "facts": [{"text": "The user is allergic to peanuts."}]},
        headers=auth(),
    )
    assert recorded.status_code == 200
    search = no_model.post(
        "/v1/memories/search", json={"user_id": "alice", "query": "peanuts"}, headers=auth()
    )
    assert search.json()["hits"][0]["text"] == "The user is allergic to peanuts."
    usage = no_model.get("/v1/usage", headers=auth())
    assert usage.status_code == 200 and usage.json()["tokens"] == {}


@pytest.mark.parametrize(
    ("body", "fragment", "code"),
    [
        ({"user_id": "alice", "session_id": "s1", "message": ""}, "message", "validation_error"),
        ({"user_id": "alice", "session_id": "s1"}, "message", "validation_error"),
        ({"user_id": "../bob", "session_id": "s1", "message": "hi"}, "user_id", "invalid_id"),
        ({"user_id": "alice", "session_id": "s/1", "message": "hi"}, "session_id", "invalid_id"),
        ({"user_id": "alice", "message": "hi"}, "session_id", "validation_error"),
        (
            {"user_id": "alice", "session_id": "s1", "message": "hi", "tenant_id": "x"},
            "tenant_id",
            "validation_error",
        ),
        (
            {"user_id": "alice", "session_id": "s1", "message": "x" * 70_000},
            "bytes",
            "message_too_large",
        ),
    ],
)
def test_bad_chat_requests_are_422(client, script, body, fragment, code):
    response = client.post("/v1/chat", json=body, headers=auth())
    assert_error(response, 422, code)  # a malformed id: invalid_id, as in a path
    assert fragment in response.json()["error"]["message"]
    assert script.order == []


def test_chat_and_usage_need_an_api_key(client):
    body = {"user_id": "alice", "session_id": "s1", "message": "hi"}
    assert_error(client.post("/v1/chat", json=body), 401, "unauthorized")
    assert_error(client.get("/v1/usage"), 401, "unauthorized")


def test_openapi_documents_chat_and_usage(client):
    paths = client.get("/openapi.json").json()["paths"]
    assert "post" in paths["/v1/chat"] and "get" in paths["/v1/usage"]


def test_a_nul_in_the_models_reply_is_dropped_not_a_failed_chat(client, script):
    script.chat(text("Noted\x00, no peanuts."))
    script.flush(text("NO_REPLY"))
    said = chat(client, "I am allergic to peanuts.")
    assert said.status_code == 200, said.text
    assert said.json()["reply"] == "Noted, no peanuts."
    state = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=auth(ACME_KEY))
    assert state.status_code == 200 and "\x00" not in state.text
