"""Filters, as_of and confidence over HTTP: what a client sends and sees."""

from __future__ import annotations

from datetime import timedelta

import pytest

from memory_service.domain.facts import utcnow
from memory_service.domain.limits import MAX_TAGS
from tests.support.api import ACME_KEY, assert_error, auth, record, search


@pytest.fixture
def client(api_client):
    return api_client


def listed(client, **params):
    response = client.get("/v1/memories", params={"user_id": "alice", **params}, headers=auth())
    assert response.status_code == 200, response.text
    return [f["text"] for f in response.json()["items"]]


def test_search_and_list_take_the_filter(client):
    record(
        client, "alice", "Alice sets the coffee grinder to fine", kind="procedure", tags=["gear"]
    )
    record(client, "alice", "Alice drinks coffee at the corner cafe", tags=["cafe"], importance=3)
    body = {"filter": {"kind": ["procedure"]}}
    hits = search(client, "alice", "coffee", **body).json()["hits"]
    assert [h["text"] for h in hits] == ["Alice sets the coffee grinder to fine"]
    assert hits[0]["confidence"] == 1.0 and hits[0]["valid_to"] is None
    assert listed(client, tags_any="cafe") == ["Alice drinks coffee at the corner cafe"]
    assert listed(client, min_importance=5) == ["Alice sets the coffee grinder to fine"]
    both = listed(client, kind=["procedure", "fact"])
    assert len(both) == 2


def test_as_of_over_http_sees_the_superseded_fact(client):
    record(client, "alice", "Alice lives in Paris", key="city")
    between = utcnow()
    record(client, "alice", "Alice lives in Berlin", key="city")
    then = {"filter": {"as_of": between.isoformat()}}
    hits = search(client, "alice", "where does Alice live", **then).json()["hits"]
    assert [h["text"] for h in hits] == ["Alice lives in Paris"]
    assert hits[0]["valid_to"] is not None
    assert listed(client, as_of=between.isoformat()) == ["Alice lives in Paris"]
    assert listed(client) == ["Alice lives in Berlin"]


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"as_of": (utcnow() + timedelta(days=1)).isoformat()}, "as_of"),
        ({"as_of": "last tuesday"}, "as_of"),
        ({"tags_any": [f"t{i}" for i in range(MAX_TAGS + 1)]}, "tags_any"),
        ({"color": "blue"}, "color"),
        ({"kind": ["opinion"]}, "kind"),
    ],
)
def test_a_bad_filter_is_a_422_naming_the_field(client, fields, fragment):
    record(client, "alice", "Alice drinks coffee")
    response = search(client, "alice", "coffee", filter=fields)
    assert response.status_code == 422, response.text
    assert fragment in response.json()["error"]["message"]
    params = {"user_id": "alice", **fields}
    listing = client.get("/v1/memories", params=params, headers=auth(ACME_KEY))
    assert listing.status_code == 422, listing.text
    assert fragment in listing.json()["error"]["message"]
    assert listed(client) == ["Alice drinks coffee"]  # nothing written, nothing lost


def test_an_unknown_list_parameter_is_refused(client):
    response = client.get("/v1/memories", params={"user_id": "alice", "tag": "x"}, headers=auth())
    assert_error(response, 422, "invalid_filter")
    assert "tag" in response.json()["error"]["message"]
