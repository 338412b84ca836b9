"""The HTTP API through FastAPI's TestClient: auth, validation, isolation, limits."""

from __future__ import annotations

import pytest

from tests.support.api import (
    ACME_KEY,
    GLOBEX_KEY,
    assert_error,
    auth,
    record,
    search,
)


@pytest.fixture
def client(api_client):
    return api_client


def test_health_needs_no_key(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json()["status"] == "ok"
    assert response.json()["backend"] == "files"


def test_missing_or_unknown_key_is_401(client):
    body = {"user_id": "alice", "query": "tea"}
    assert_error(client.post("/v1/memories/search", json=body), 401, "unauthorized")
    assert_error(
        client.post("/v1/memories/search", json=body, headers=auth("wrong-key-0123456789")),
        401,
        "unauthorized",
    )
    ok = client.post("/v1/memories/search", json=body, headers={"X-API-Key": ACME_KEY})
    assert ok.status_code == 200


def test_record_then_search_shows_ranks_per_retriever(client):
    response = record(client, "alice", "Alice is allergic to peanuts", "Alice works as a nurse")
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["created", "created"]
    again = record(client, "alice", "alice is allergic to PEANUTS").json()["results"]
    assert again[0] == {
        "id": results[0]["id"],
        "status": "duplicate",
        "superseded_ids": [],
        "merged_into": None,
        "redacted": {},
    }

    hits = search(client, "alice", "what is she allergic to?").json()["hits"]
    assert hits[0]["text"] == "Alice is allergic to peanuts"
    assert hits[0]["ranks"] == {"bm25": 1, "dense": 1}
    assert hits[0]["id"] == results[0]["id"]
    assert set(hits[0]) >= {
        "id",
        "text",
        "score",
        "ranks",
        "key",
        "kind",
        "importance",
        "created_at",
    }
    dense_only = search(client, "alice", "job", mode="dense", top_k=1).json()["hits"]
    assert dense_only[0]["ranks"] == {"bm25": None, "dense": 1}


def test_supersession_over_http(client):
    first = record(client, "alice", "Alice lives in Paris", key="user.city").json()["results"][0]
    second = record(client, "alice", "Alice moved to Berlin", key="user.city").json()["results"][0]
    assert second["status"] == "superseded" and second["superseded_ids"] == [first["id"]]
    texts = [h["text"] for h in search(client, "alice", "where does Alice live").json()["hits"]]
    assert texts == ["Alice moved to Berlin"]
    old = client.get(f"/v1/memories/{first['id']}", params={"user_id": "alice"}, headers=auth())
    assert old.status_code == 200 and old.json()["superseded_by"] == second["id"]


def test_list_get_delete_and_forget(client):
    ids = [
        r["id"] for r in record(client, "alice", *[f"fact {i}" for i in range(5)]).json()["results"]
    ]
    page = client.get("/v1/memories", params={"user_id": "alice", "limit": 2}, headers=auth())
    assert page.status_code == 200
    assert len(page.json()["items"]) == 2 and page.json()["next_cursor"]
    got = client.get(f"/v1/memories/{ids[0]}", params={"user_id": "alice"}, headers=auth())
    assert got.json()["text"] == "fact 0"
    gone = client.delete(f"/v1/memories/{ids[0]}", params={"user_id": "alice"}, headers=auth())
    assert gone.json() == {"deleted": 1}
    assert_error(
        client.get(f"/v1/memories/{ids[0]}", params={"user_id": "alice"}, headers=auth()),
        404,
        "not_found",
    )
    assert_error(
        client.delete(f"/v1/memories/{ids[0]}", params={"user_id": "alice"}, headers=auth()),
        404,
        "not_found",
    )
    receipt = client.delete("/v1/users/alice/memories", headers=auth())
    assert receipt.json() == {"deleted": 4}
    empty = client.get("/v1/memories", params={"user_id": "alice"}, headers=auth()).json()
    assert empty == {"items": [], "next_cursor": None}


def test_tenants_never_see_each_other(client):
    acme_id = record(client, "alice", "Secret project is called Falcon").json()["results"][0]["id"]
    record(client, "alice", "Secret project is called Heron", api_key=GLOBEX_KEY)
    record(client, "bob", "Secret project is called Osprey")
    for mode in ("hybrid", "bm25", "dense"):
        globex = search(client, "alice", "secret project Falcon", api_key=GLOBEX_KEY, mode=mode)
        assert [h["text"] for h in globex.json()["hits"]] == ["Secret project is called Heron"]
        bob = search(client, "bob", "secret project Falcon", mode=mode)
        assert [h["text"] for h in bob.json()["hits"]] == ["Secret project is called Osprey"]
    # Guessing another tenant's fact id gives 404, not the fact; deleting it does nothing.
    params = {"user_id": "alice"}
    assert_error(
        client.get(f"/v1/memories/{acme_id}", params=params, headers=auth(GLOBEX_KEY)),
        404,
        "not_found",
    )
    assert_error(
        client.delete(f"/v1/memories/{acme_id}", params=params, headers=auth(GLOBEX_KEY)),
        404,
        "not_found",
    )
    assert client.delete("/v1/users/alice/memories", headers=auth(GLOBEX_KEY)).json() == {
        "deleted": 1
    }
    assert client.get(f"/v1/memories/{acme_id}", params=params, headers=auth()).status_code == 200


def test_tenant_in_the_body_is_refused(client):
    body = {"user_id": "alice", "tenant_id": "globex", "facts": [{"text": "x"}]}
    assert_error(client.post("/v1/memories", json=body, headers=auth()), 422, "validation_error")


@pytest.mark.parametrize(
    ("body", "fragment", "code"),
    [
        ({"user_id": "alice", "facts": []}, "facts", "validation_error"),
        ({"user_id": "alice", "facts": [{"text": ""}]}, "text", "validation_error"),
        ({"user_id": "alice", "facts": [{"text": "é" * 4097}]}, "8192 bytes", "fact_too_large"),
        ({"user_id": "alice", "facts": [{"text": "x"}] * 1001}, "facts", "validation_error"),
        (
            {"user_id": "alice", "facts": [{"text": "x", "importance": 11}]},
            "importance",
            "validation_error",
        ),
        (
            {"user_id": "alice", "facts": [{"text": "x", "kind": "rumour"}]},
            "kind",
            "validation_error",
        ),
        ({"user_id": "../etc", "facts": [{"text": "x"}]}, "user_id", "invalid_id"),
        ({"user_id": "a" * 200, "facts": [{"text": "x"}]}, "user_id", "invalid_id"),
        ({"facts": [{"text": "x"}]}, "user_id", "validation_error"),
    ],
)
def test_bad_records_are_422_and_write_nothing(client, body, fragment, code):
    response = client.post("/v1/memories", json=body, headers=auth())
    assert_error(response, 422, code)  # a malformed id: invalid_id, as in a path
    assert fragment in response.json()["error"]["message"]
    listed = client.get("/v1/memories", params={"user_id": "alice"}, headers=auth()).json()
    assert listed["items"] == []


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"query": ""}, "invalid_query"),
        ({"query": "q" * 4097}, "query_too_large"),
        ({"query": "q", "top_k": 0}, "validation_error"),
        ({"query": "q", "top_k": 101}, "validation_error"),
        ({"query": "q", "mode": "fuzzy"}, "validation_error"),
        ({"query": "q", "threshold": 2}, "validation_error"),
    ],
)
def test_bad_searches_are_422(client, fields, code):
    response = client.post(
        "/v1/memories/search", json={"user_id": "alice", **fields}, headers=auth()
    )
    assert_error(response, 422, code)


def test_malformed_json_and_bad_ids_in_query_strings(client):
    response = client.post(
        "/v1/memories", content=b"{not json", headers={**auth(), "Content-Type": "application/json"}
    )
    assert_error(response, 422, "validation_error")
    assert_error(
        client.get("/v1/memories", params={"user_id": "a/../b"}, headers=auth()), 422, "invalid_id"
    )
    assert_error(client.delete("/v1/users/bad..id/memories", headers=auth()), 422, "invalid_id")
    # An encoded slash never reaches a handler: the path does not match any route.
    assert client.delete("/v1/users/..%2Fx/memories", headers=auth()).status_code == 404
    assert_error(
        client.get("/v1/memories", params={"user_id": "alice", "cursor": "!!"}, headers=auth()),
        422,
        "invalid_cursor",
    )


def test_oversized_bodies_are_refused_before_reading(client):
    big = b'{"user_id": "alice", "facts": [' + b'{"text": "x"},' * 200_000 + b'{"text": "y"}]}'
    assert_error(
        client.post(
            "/v1/memories", content=big, headers={**auth(), "Content-Type": "application/json"}
        ),
        413,
        "payload_too_large",
    )


def test_openapi_documents_the_api(client):
    spec = client.get("/openapi.json").json()
    assert {
        "/v1/memories",
        "/v1/memories/search",
        "/v1/memories/{memory_id}",
        "/v1/users/{user_id}/memories",
    } <= set(spec["paths"])
    assert client.get("/docs").status_code == 200
