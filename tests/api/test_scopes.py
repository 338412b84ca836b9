"""Scopes over HTTP: who may write shared memory, what each caller recalls, bad scopes."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.services import build_services

USER_KEY = "acme-user-0123456789abcdef"
CURATOR_KEY = "acme-curator-0123456789abcdef"
ADMIN_KEY = "acme-admin-0123456789abcdef"
GLOBEX_CURATOR = "globex-curator-0123456789abcdef"


@pytest.fixture
def client(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    ring = ApiKeyRing(
        {
            USER_KEY: {"tenant": "acme", "role": "user"},
            CURATOR_KEY: {"tenant": "acme", "role": "curator"},
            ADMIN_KEY: {"tenant": "acme", "role": "admin"},
            GLOBEX_CURATOR: {"tenant": "globex", "role": "curator"},
        }
    )
    with TestClient(create_app(services, ring)) as test_client:
        yield test_client
    services.close()


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def record(client, key, user, facts, **fields):
    body = {"user_id": user, "facts": facts, **fields}
    return client.post("/v1/memories", json=body, headers=auth(key))


def search(client, key, user, query, **fields):
    body = {"user_id": user, "query": query, **fields}
    return client.post("/v1/memories/search", json=body, headers=auth(key))


def hits(response) -> list[tuple[str, str]]:
    assert response.status_code == 200, response.text
    return [(h["text"], h["scope"]) for h in response.json()["hits"]]


def assert_error(response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    return error["message"]


def test_a_user_key_may_not_write_shared_memory_and_nothing_is_written(client):
    for scope, extra in (("tenant", {}), ("agent", {"agent_id": "support"})):
        facts = [{"text": "Alice likes tea"}, {"text": "Lunch is at noon", "scope": scope}]
        message = assert_error(record(client, USER_KEY, "alice", facts, **extra), 403, "forbidden")
        assert scope in message and "curator" in message
    assert search(client, USER_KEY, "alice", "tea lunch").json()["hits"] == []
    listed = client.get(
        "/v1/memories",
        params={"user_id": "alice", "scope": ["user", "tenant"]},
        headers=auth(USER_KEY),
    )
    assert listed.json()["items"] == []


def test_curator_and_admin_write_shared_memory_every_user_recalls_it(client):
    tenant = [{"text": "The office closes at six on Fridays", "scope": "tenant"}]
    assert record(client, CURATOR_KEY, "curator", tenant).status_code == 200
    agent = [{"text": "Refunds over 500 euros need a manager", "scope": "agent"}]
    assert record(client, ADMIN_KEY, "admin", agent, agent_id="support").status_code == 200
    record(client, USER_KEY, "alice", [{"text": "Alice asked about refunds for her office chair"}])

    bob = hits(search(client, USER_KEY, "bob", "office refunds", agent_id="support"))
    assert sorted(bob) == [
        ("Refunds over 500 euros need a manager", "agent"),
        ("The office closes at six on Fridays", "tenant"),
    ]
    no_agent = hits(search(client, USER_KEY, "bob", "office refunds"))
    assert no_agent == [("The office closes at six on Fridays", "tenant")]
    only_user = hits(search(client, USER_KEY, "alice", "office refunds", scopes=["user"]))
    assert only_user == [("Alice asked about refunds for her office chair", "user")]
    # another tenant's curator sees none of it
    assert hits(search(client, GLOBEX_CURATOR, "bob", "office refunds", agent_id="support")) == []


def test_the_users_own_value_wins_on_a_key(client):
    shared = [{"text": "Replies are in English", "key": "lang", "scope": "tenant"}]
    record(client, CURATOR_KEY, "curator", shared)
    record(client, USER_KEY, "alice", [{"text": "Replies to Alice are in Spanish", "key": "lang"}])
    question = "what language are replies in?"
    assert hits(search(client, USER_KEY, "alice", question)) == [
        ("Replies to Alice are in Spanish", "user")
    ]
    assert hits(search(client, USER_KEY, "bob", question)) == [("Replies are in English", "tenant")]


def test_shared_facts_are_listed_got_and_deleted_by_scope(client):
    created = record(client, CURATOR_KEY, "curator", [{"text": "Wifi: guest", "scope": "tenant"}])
    fact_id = created.json()["results"][0]["id"]
    listed = client.get(
        "/v1/memories", params={"user_id": "bob", "scope": "tenant"}, headers=auth(USER_KEY)
    ).json()["items"]
    assert [(f["id"], f["scope"], f["agent_id"]) for f in listed] == [(fact_id, "tenant", None)]
    own = client.get("/v1/memories", params={"user_id": "bob"}, headers=auth(USER_KEY))
    assert own.json()["items"] == []
    got = client.get(
        f"/v1/memories/{fact_id}",
        params={"user_id": "bob", "scope": "tenant"},
        headers=auth(USER_KEY),
    )
    assert got.json()["text"] == "Wifi: guest"
    path = f"/v1/memories/{fact_id}"
    params = {"user_id": "bob", "scope": "tenant"}
    assert_error(client.delete(path, params=params, headers=auth(USER_KEY)), 403, "forbidden")
    gone = client.delete(path, params=params, headers=auth(CURATOR_KEY))
    assert gone.json() == {"deleted": 1}
    assert hits(search(client, USER_KEY, "bob", "wifi")) == []


def test_unknown_scopes_are_422_naming_the_field(client):
    bad = record(client, CURATOR_KEY, "alice", [{"text": "x", "scope": "team"}])
    assert "facts.0.scope" in assert_error(bad, 422, "validation_error")
    message = assert_error(
        search(client, USER_KEY, "alice", "x", scopes=["world"]), 422, "validation_error"
    )
    assert "scopes.0" in message
    listed = client.get(
        "/v1/memories", params={"user_id": "alice", "scope": "world"}, headers=auth(USER_KEY)
    )
    assert "scope" in assert_error(listed, 422, "validation_error")
    agentless = record(client, CURATOR_KEY, "alice", [{"text": "x", "scope": "agent"}])
    assert "agent_id" in assert_error(agentless, 422, "invalid_scope")
    bad_agent = search(client, USER_KEY, "alice", "x", agent_id="../etc")
    assert "agent_id" in assert_error(bad_agent, 422, "invalid_id")
    assert search(client, USER_KEY, "alice", "x", scopes=["agent"]).status_code == 422
