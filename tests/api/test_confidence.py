"""Confidence over HTTP: decay by kind, needs_verification, confirm, the memory types as kinds."""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta

import pytest

from memory_service.domain.facts import utcnow
from tests.support.api import ACME_ADMIN_KEY, GLOBEX_KEY, NDJSON, assert_error, auth, record, search


@pytest.fixture
def client(api_client):
    return api_client


def imported(client, *facts: dict) -> None:
    lines = "".join(
        json.dumps({"tenant_id": "acme", "user_id": "alice", **f}) + "\n" for f in facts
    )
    response = client.post("/v1/import", content=lines, headers={**auth(ACME_ADMIN_KEY), **NDJSON})
    assert response.status_code == 200, response.text


def listed(client, user="alice", key=None, **params) -> list[dict]:
    headers = auth() if key is None else auth(key)
    response = client.get("/v1/memories", params={"user_id": user, **params}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["items"]


def confirm(client, memory_id: str, user="alice", key=None, **body):
    headers = auth() if key is None else auth(key)
    path = f"/v1/memories/{memory_id}/confirm"
    return client.post(path, json={"user_id": user, **body}, headers=headers)


def test_an_old_episode_needs_verification_until_it_is_confirmed(client):
    old = (utcnow() - timedelta(days=100)).isoformat()
    imported(
        client,
        {
            "text": "Alice hiked Mount Fuji",
            "kind": "episodic",
            "confidence": 0.9,
            "created_at": old,
        },
        {"text": "Alice hikes with poles", "kind": "semantic", "created_at": old},
    )
    episode, habit = listed(client)
    assert (episode["kind"], habit["kind"]) == ("event", "preference")
    assert episode["needs_verification"] and not habit["needs_verification"]
    assert episode["updated_at"] == episode["created_at"]
    [hit] = search(client, "alice", "Mount Fuji", top_k=1).json()["hits"]
    assert hit["needs_verification"] and hit["confidence"] == pytest.approx(0.9 * math.exp(-1))
    assert [f["text"] for f in listed(client, needs_verification="true")] == [episode["text"]]
    assert [f["text"] for f in listed(client, needs_verification="false")] == [habit["text"]]
    flagged = {"filter": {"needs_verification": True}}
    assert [h["text"] for h in search(client, "alice", "hike", **flagged).json()["hits"]] == [
        episode["text"]
    ]

    before = utcnow()
    response = confirm(client, episode["id"])
    assert response.status_code == 200, response.text
    confirmed = response.json()
    assert not confirmed["needs_verification"] and confirmed["confidence"] == 0.9
    assert datetime.fromisoformat(confirmed["updated_at"]) >= before
    assert confirmed["created_at"] == episode["created_at"]
    [hit] = search(client, "alice", "Mount Fuji", top_k=1).json()["hits"]
    assert not hit["needs_verification"] and hit["confidence"] == pytest.approx(0.9, rel=1e-4)
    assert listed(client, needs_verification="true") == []


def test_confirming_another_users_or_tenants_fact_is_not_found_and_changes_nothing(client):
    fid = record(client, "alice", "Alice keeps a sourdough starter").json()["results"][0]["id"]
    before = listed(client)[0]
    assert_error(confirm(client, fid, user="bob"), 404, "not_found")
    assert_error(confirm(client, fid, key=GLOBEX_KEY), 404, "not_found")
    assert listed(client) == [before]


def test_confirming_a_superseded_fact_is_a_conflict(client):
    old = record(client, "alice", "Alice lives in Porto", key="city").json()["results"][0]["id"]
    record(client, "alice", "Alice lives in Faro", key="city")
    assert_error(confirm(client, old), 409, "not_active")


@pytest.mark.parametrize(
    "fact",
    [
        {"text": "Alice is tall", "confidence": 1.5},
        {"text": "Alice is tall", "confidence": -0.1},
        {"text": "Alice is tall", "kind": "dreamlike"},
    ],
)
def test_a_confidence_out_of_range_or_an_unknown_kind_is_refused_and_nothing_written(client, fact):
    response = client.post(
        "/v1/memories", json={"user_id": "alice", "facts": [fact]}, headers=auth()
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] and response.json()["error"]["message"]
    assert listed(client) == []


def test_the_memory_types_name_kinds_in_records_updates_and_filters(client):
    fid = record(client, "alice", "Alice boards at gate 12", kind="episodic").json()["results"][0][
        "id"
    ]
    assert listed(client, kind="episodic")[0]["kind"] == "event"
    body = {"user_id": "alice", "kind": "procedural"}
    patched = client.patch(f"/v1/memories/{fid}", json=body, headers=auth())
    assert patched.status_code == 200 and patched.json()["kind"] == "procedure"
    response = client.get(
        "/v1/memories", params={"user_id": "alice", "kind": "dreamlike"}, headers=auth()
    )
    assert response.status_code == 422 and response.json()["error"]["code"]
