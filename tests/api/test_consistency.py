"""One mistake, one answer, on every route: a JSON body sent without saying it is JSON (415),
a malformed id wherever it is (``invalid_id``), a session that was never stored (404), a tool
result reference from another session, and NUL in a session message (refused as in facts).
"""

from __future__ import annotations

import json

import pytest
from fastapi.routing import APIRoute

from memory_service.api.app import ROUTERS
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.messages import Msg, ToolCall
from tests.support.api import (
    ACME_ADMIN_KEY,
    GLOBEX_KEY,
    append,
    assert_error,
    auth,
    make_client,
    users,
)


@pytest.fixture
def client(tmp_path, embedder, monkeypatch):
    """No model: every check here comes before one would be called."""
    services, test_client = make_client(
        tmp_path,
        embedder,
        monkeypatch,
        shortterm={"tool_result_max_chars": 1000, "tool_result_preview_chars": 100},
    )
    with test_client:
        yield test_client
    services.close()


# -- 5. a JSON body needs a JSON Content-Type ------------------------------------------------

JSON_ROUTES = {  # path -> a body the route would accept
    "/v1/memories": {"user_id": "alice", "facts": [{"text": "Alice has a cat"}]},
    "/v1/memories/search": {"user_id": "alice", "query": "cat"},
    "/v1/sessions/search": {"user_id": "alice", "query": "cat"},
    "/v1/sessions/{session_id}/messages": {"user_id": "alice", "messages": users(1)},
    "/v1/sessions/{session_id}/compact": {"user_id": "alice"},
    "/v1/sessions/{session_id}/end": {"user_id": "alice"},
    "/v1/chat": {"user_id": "alice", "session_id": "s1", "message": "hi"},
    "/v1/maintenance/run": {"user_id": "alice"},
    "/v1/memories/{memory_id}": {"user_id": "alice", "importance": 7},
    "/v1/memories/{memory_id}/confirm": {"user_id": "alice"},
}
METHODS = {"/v1/memories/{memory_id}": "PATCH"}  # the rest are POST
SOME_FACT_ID = "00000000-0000-0000-0000-000000000000"


def _send(client, path: str, **kwargs):
    url = path.format(session_id="s1", memory_id=SOME_FACT_ID)
    return client.request(METHODS.get(path, "POST"), url, **kwargs)


def test_every_json_route_is_listed_here():
    """A new route with a JSON body joins JSON_ROUTES, so the checks below cover it."""
    routes = [r for router in ROUTERS for r in router.routes if isinstance(r, APIRoute)]
    assert {r.path for r in routes if r.body_field} == set(JSON_ROUTES)


@pytest.mark.parametrize("path", sorted(JSON_ROUTES))
@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_json_body_without_a_json_content_type_is_415(client, path, content_type):
    headers = auth(ACME_ADMIN_KEY) | ({"Content-Type": content_type} if content_type else {})
    body = json.dumps(JSON_ROUTES[path]).encode()
    response = _send(client, path, content=body, headers=headers)
    assert_error(response, 415, "unsupported_media_type")
    assert "application/json" in response.json()["error"]["message"]


def test_json_with_a_charset_or_a_json_suffix_is_fine(client):
    body = json.dumps(JSON_ROUTES["/v1/memories"]).encode()
    for content_type in ("application/json; charset=utf-8", "application/vnd.api+json"):
        headers = {**auth(), "Content-Type": content_type}
        response = client.post("/v1/memories", content=body, headers=headers)
        assert response.status_code == 200, (content_type, response.text)


def test_a_missing_body_is_still_a_validation_error(client):
    assert_error(client.post("/v1/memories", headers=auth()), 422, "validation_error")


# -- 6. a malformed id is invalid_id, in a path, a query or a body ---------------------------

BAD_IDS = ["../bob", "a" * 200, "bad id", ""]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_bad_user_id_is_invalid_id_in_every_body(client, bad):
    for path, body in JSON_ROUTES.items():
        response = _send(client, path, json={**body, "user_id": bad}, headers=auth(ACME_ADMIN_KEY))
        assert_error(response, 422, "invalid_id")
        assert "user_id" in response.json()["error"]["message"], path


@pytest.mark.parametrize("bad", BAD_IDS)
def test_a_bad_user_id_is_invalid_id_in_every_query(client, bad):
    gets = {
        "/v1/memories": {},
        "/v1/memories/00000000-0000-5000-8000-000000000000": {},
        "/v1/export": {},
        "/v1/sessions": {},
        "/v1/sessions/s1": {},
        "/v1/sessions/s1/tool-results": {"ref": "tool-results/s1/x.txt"},
    }
    for path, params in gets.items():
        response = client.get(path, params={"user_id": bad, **params}, headers=auth())
        assert_error(response, 422, "invalid_id")
    for path in ["/v1/memories/00000000-0000-5000-8000-000000000000", "/v1/sessions/s1"]:
        assert_error(
            client.delete(path, params={"user_id": bad}, headers=auth()), 422, "invalid_id"
        )


def test_a_bad_id_in_a_path_is_invalid_id(client):
    assert_error(client.delete("/v1/users/bad..id/memories", headers=auth()), 422, "invalid_id")
    long_session = "s" * 200
    assert_error(append(client, long_session, users(1)), 422, "invalid_id")
    for method in ("GET", "DELETE"):
        response = client.request(
            method, f"/v1/sessions/{long_session}", params={"user_id": "alice"}, headers=auth()
        )
        assert_error(response, 422, "invalid_id")
    chat = {"user_id": "alice", "session_id": "s/1", "message": "hi"}
    assert_error(client.post("/v1/chat", json=chat, headers=auth()), 422, "invalid_id")


def test_other_mistakes_stay_validation_errors(client):
    """Only ids get invalid_id: a missing user_id, a stray tenant_id or two different
    mistakes in one body are validation errors, listed in ``details``."""
    assert_error(
        client.get("/v1/export", params={"tenant_id": "x"}, headers=auth()), 422, "validation_error"
    )
    no_user = client.post("/v1/memories", json={"facts": [{"text": "x"}]}, headers=auth())
    assert_error(no_user, 422, "validation_error")
    both = client.post("/v1/memories", json={"user_id": "../x", "facts": []}, headers=auth())
    assert_error(both, 422, "validation_error")
    assert {d["code"] for d in both.json()["error"]["details"]} == {
        "invalid_id",
        "validation_error",
    }


# -- 8. a session that was never stored is 404 for GET, DELETE and its tool results ---------


def test_an_unknown_session_is_404_everywhere(client):
    params = {"user_id": "alice"}
    assert_error(client.get("/v1/sessions/nosuch", params=params, headers=auth()), 404, "not_found")
    assert_error(
        client.delete("/v1/sessions/nosuch", params=params, headers=auth()), 404, "not_found"
    )
    ref = {**params, "ref": "tool-results/nosuch/call1.txt"}
    got = client.get("/v1/sessions/nosuch/tool-results", params=ref, headers=auth())
    assert_error(got, 404, "not_found")


def test_a_session_is_there_from_its_first_append_until_it_is_deleted(client):
    params = {"user_id": "alice"}
    assert append(client, "s1", users(1)).status_code == 200
    assert client.get("/v1/sessions/s1", params=params, headers=auth()).json()["version"] == 1
    other_tenant = client.get("/v1/sessions/s1", params=params, headers=auth(GLOBEX_KEY))
    assert_error(other_tenant, 404, "not_found")
    assert client.delete("/v1/sessions/s1", params=params, headers=auth()).status_code == 200
    assert_error(client.get("/v1/sessions/s1", params=params, headers=auth()), 404, "not_found")


# -- 9. a tool result reference is valid in its own session only -----------------------------


def _evict(client, session: str) -> str:
    messages = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call1", "function": {"name": "t", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "call1", "content": f"{session} secret\n" * 200},
    ]
    [ref] = append(client, session, messages).json()["evicted"]
    return ref


def test_a_tool_result_is_read_through_its_own_session_only(client):
    ref_a = _evict(client, "A")
    ref_b = _evict(client, "B")
    url = "/v1/sessions/{}/tool-results"
    own = client.get(url.format("B"), params={"user_id": "alice", "ref": ref_b}, headers=auth())
    assert own.status_code == 200 and "B secret" in own.json()["text"]
    for session, ref in (("A", ref_b), ("B", ref_a)):
        got = client.get(
            url.format(session), params={"user_id": "alice", "ref": ref}, headers=auth()
        )
        assert_error(got, 422, "path_outside_session")
        assert "secret" not in got.text


def test_the_evictor_refuses_another_sessions_reference(client):
    ref_b = _evict(client, "B")
    memory = client.app.state.services.shortterm
    with pytest.raises(InvalidInputError) as raised:
        memory.read_tool_result(RuntimeContext("acme", "alice", "A"), ref_b)
    assert raised.value.code == "path_outside_session"
    assert "B secret" in memory.read_tool_result(RuntimeContext("acme", "alice", "B"), ref_b)


# -- 10a. NUL in a session message is refused as it is in a fact ------------------------------

NUL_MESSAGES = [
    [{"role": "user", "content": "a\x00b"}],
    [{"role": "user", "content": "hi", "name": "a\x00"}],
    [{"role": "tool", "tool_call_id": "c\x001", "content": "x"}],
    [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "function": {"name": "t", "arguments": '{"a": "\x00"}'}}],
        }
    ],
    [{"role": "user", "content": "hi", "metadata": {"note": "a\x00"}}],
]


def _fact_code(client) -> str:
    body = {"user_id": "alice", "facts": [{"text": "nul \x00 inside"}]}
    response = client.post("/v1/memories", json=body, headers=auth())
    assert response.status_code == 422, response.text
    return response.json()["error"]["code"]


@pytest.mark.parametrize("messages", NUL_MESSAGES)
def test_nul_in_a_session_message_is_refused_with_the_facts_code(client, messages):
    code = _fact_code(client)
    response = append(client, "s1", messages)
    assert_error(response, 422, code)
    assert "NUL" in response.json()["error"]["message"]
    got = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=auth())
    assert got.status_code == 404  # nothing was stored


def test_nul_in_a_chat_message_is_refused_before_any_model(client):
    body = {"user_id": "alice", "session_id": "s1", "message": "hi\x00"}
    assert_error(client.post("/v1/chat", json=body, headers=auth()), 422, _fact_code(client))


@pytest.mark.parametrize(
    "make",
    [
        lambda: Msg.user("a\x00b"),
        lambda: Msg.user("hi", name="a\x00"),
        lambda: Msg.tool("c\x001", "x"),
        lambda: Msg.assistant(tool_calls=(ToolCall("c1", "t", '{"a": "\x00"}'),)),
        lambda: Msg.user("hi", metadata={"note": ["a\x00"]}),
    ],
)
def test_msg_refuses_nul_wherever_it_is_built(client, make):
    with pytest.raises(InvalidInputError) as raised:
        make()
    assert raised.value.code == _fact_code(client)
