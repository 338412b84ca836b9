"""``GET /v1/export`` and ``POST /v1/import`` through FastAPI's TestClient, on real services:
the key's tenant only, the CLI's lines, a round trip into a fresh workspace, all or nothing."""

from __future__ import annotations

import json

import pytest

from memory_service.pipeline.transfer import export_records, to_line
from tests.support.api import ACME_ADMIN_KEY, ACME_KEY, GLOBEX_KEY, NDJSON, assert_error, auth


def record(client, user, *texts, api_key=ACME_KEY, **fields):
    body = {"user_id": user, "facts": [{"text": t, **fields} for t in texts]}
    response = client.post("/v1/memories", json=body, headers=auth(api_key))
    assert response.status_code == 200, response.text
    return [r["id"] for r in response.json()["results"]]


def seed(client) -> None:
    record(client, "alice", "Alice lives in Paris", key="user.city")
    record(client, "alice", "Alice moved to Berlin", key="user.city")  # supersedes Paris
    record(client, "alice", "Alice is allergic to peanuts")
    record(client, "bob", "Bob plays the cello")
    record(client, "alice", "Globex Alice likes sushi", api_key=GLOBEX_KEY)


def export(client, key=ACME_KEY, **params):
    return client.get("/v1/export", params=params, headers=auth(key))


def lines_of(response) -> list[dict]:
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines()]


def import_(client, body: str, key=ACME_ADMIN_KEY, headers=NDJSON):
    return client.post("/v1/import", content=body.encode(), headers={**auth(key), **headers})


def listed(client, user, key=ACME_KEY) -> list[dict]:
    params = {"user_id": user, "include_inactive": True}
    return client.get("/v1/memories", params=params, headers=auth(key)).json()["items"]


def test_export_streams_the_tenants_lines_and_never_another_tenants(apps):
    services, client = apps()
    seed(client)
    response = export(client)
    assert response.headers["content-type"].startswith("application/x-ndjson")
    assert response.headers["content-disposition"] == 'attachment; filename="memories-acme.jsonl"'
    records = lines_of(response)
    assert {r["tenant_id"] for r in records} == {"acme"}
    assert sorted((r["user_id"], r["text"]) for r in records) == [
        ("alice", "Alice is allergic to peanuts"),
        ("alice", "Alice lives in Paris"),  # superseded, exported all the same
        ("alice", "Alice moved to Berlin"),
        ("bob", "Bob plays the cello"),
    ]
    # Exactly the lines the CLI writes.
    cli = "".join(to_line(r) for r in export_records(services.longterm, "acme"))
    assert response.text == cli

    globex = lines_of(export(client, key=GLOBEX_KEY))
    assert [(r["tenant_id"], r["user_id"], r["text"]) for r in globex] == [
        ("globex", "alice", "Globex Alice likes sushi")
    ]


def test_export_of_one_user(apps):
    _, client = apps()
    seed(client)
    response = export(client, user_id="bob")
    assert response.headers["content-disposition"].endswith('filename="memories-acme-bob.jsonl"')
    assert [(r["user_id"], r["text"]) for r in lines_of(response)] == [
        ("bob", "Bob plays the cello")
    ]
    assert lines_of(export(client, user_id="nobody")) == []
    assert_error(export(client, user_id="../etc"), 422, "invalid_id")


def test_a_tenant_id_query_parameter_is_refused(apps):
    _, client = apps()
    seed(client)
    response = export(client, tenant_id="globex")
    assert_error(response, 422, "validation_error")
    assert "tenant_id" in response.json()["error"]["message"]
    assert "sushi" not in response.text


def test_round_trip_into_a_fresh_workspace_keeps_ids(apps):
    _, source = apps("a")
    seed(source)
    body = export(source).text
    _, target = apps("b")
    assert listed(target, "alice") == []

    response = import_(target, body)
    assert response.status_code == 200, response.text
    assert response.json() == {
        "lines": 4,
        "created": 4,
        "superseded": 0,
        "duplicate": 0,
        "merged": 0,
    }
    for user in ("alice", "bob"):
        assert listed(target, user) == listed(source, user)  # ids and metadata equal
    search = {"user_id": "alice", "query": "where does Alice live?", "top_k": 1}
    hits = target.post("/v1/memories/search", json=search, headers=auth()).json()["hits"]
    assert [h["text"] for h in hits] == ["Alice moved to Berlin"]
    assert lines_of(export(target, key=GLOBEX_KEY)) == []


def test_importing_twice_only_counts_duplicates(apps):
    _, source = apps("a")
    seed(source)
    body = export(source).text
    _, target = apps("b")
    assert import_(target, body).json()["created"] == 4
    before = export(target).text

    again = import_(target, body, headers={"Content-Type": "text/plain; charset=utf-8"})
    assert again.status_code == 200, again.text
    assert again.json() == {"lines": 4, "created": 0, "superseded": 0, "duplicate": 4, "merged": 0}
    assert export(target).text == before


@pytest.mark.parametrize(
    ("bad_line", "fragment"),
    [
        ("{not json", "not JSON (expected a property name"),
        (json.dumps({"tenant_id": "globex", "user_id": "alice", "text": "x"}), "globex"),
    ],
)
def test_one_bad_line_writes_nothing_and_is_named(apps, bad_line, fragment):
    _, client = apps()
    good = json.dumps({"tenant_id": "acme", "user_id": "alice", "text": "Alice has a cat"})
    body = "\n".join([good, "", bad_line, good.replace("cat", "dog")]) + "\n"
    response = import_(client, body)
    assert_error(response, 422, "bad_lines")
    error = response.json()["error"]
    assert [b["line"] for b in error["bad_lines"]] == [3]
    assert fragment in error["bad_lines"][0]["message"]
    assert "line 3: " in error["message"]
    assert listed(client, "alice") == []
    assert listed(client, "alice", key=GLOBEX_KEY) == []


def test_import_needs_utf8_json_lines(apps):
    _, client = apps()
    good = json.dumps({"tenant_id": "acme", "user_id": "alice", "text": "Alice has a cat"})
    json_type = {"Content-Type": "application/json"}
    assert_error(import_(client, good, headers=json_type), 415, "unsupported_media_type")
    latin1 = (
        good + "\n"
    ).encode() + b'{"tenant_id": "acme", "user_id": "alice", "text": "caf\xe9"}'
    response = client.post("/v1/import", content=latin1, headers={**auth(ACME_ADMIN_KEY), **NDJSON})
    assert_error(response, 422, "bad_lines")
    assert response.json()["error"]["bad_lines"] == [{"line": 2, "message": "not UTF-8"}]
    assert listed(client, "alice") == []


def test_export_and_import_need_a_key(apps):
    _, client = apps()
    assert_error(client.get("/v1/export"), 401, "unauthorized")
    assert_error(client.post("/v1/import", content=b"", headers=NDJSON), 401, "unauthorized")
    assert_error(export(client, key="wrong-key-0123456789"), 401, "unauthorized")


def test_import_has_its_own_body_limit(apps):
    _, client = apps(api={"max_body_bytes": 1024, "max_import_bytes": 64 * 1024})
    lines = [
        json.dumps({"tenant_id": "acme", "user_id": "alice", "text": f"Fact number {i}"})
        for i in range(40)
    ]
    body = "\n".join(lines)
    assert 1024 < len(body) < 64 * 1024
    assert import_(client, body).json()["created"] == 40  # over the global limit: fine here
    too_big = "\n".join(lines * 40)
    assert_error(import_(client, too_big), 413, "payload_too_large")
    facts = {"user_id": "alice", "facts": [{"text": "x" * 1100}]}
    assert_error(client.post("/v1/memories", json=facts, headers=auth()), 413, "payload_too_large")


def test_import_needs_an_admin_key_and_writes_nothing_without_one(apps):
    _, source = apps("a")
    seed(source)
    body = export(source).text
    _, target = apps("b")
    assert_error(import_(target, body, key=ACME_KEY), 403, "forbidden")
    assert listed(target, "alice") == []
