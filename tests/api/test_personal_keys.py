"""Personal keys: a key bound to one user reads and writes that user's memory and sessions,
reads the shared scopes the user sees, exports and imports that user's own facts, and nothing
else; any other user named anywhere is a 403 ``forbidden_user`` with nothing written. The
application keys (``user`` in older key files) keep addressing every user of their tenant."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp import Client

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.cli import main
from memory_service.config import load_settings
from memory_service.domain.errors import ConfigurationError
from memory_service.mcp_server.caller import Caller
from memory_service.mcp_server.server import build_server
from memory_service.mcp_server.stdio import authenticate
from memory_service.services import build_services
from memory_service.stores.api_keys.files import FilesKeyStore

APP = "acme-app-0123456789abcdef"
CURATOR = "acme-curator-0123456789abcdef"
ADMIN = "acme-admin-0123456789abcdef"
ALICE = "acme-alice-0123456789abcdef"
GLOBEX_ALICE = "globex-alice-0123456789abcdef"
KEYS = {
    APP: {"tenant": "acme", "role": "user"},  # an older file's name for an application key
    CURATOR: {"tenant": "acme", "role": "curator"},
    ADMIN: {"tenant": "acme", "role": "admin"},
    ALICE: {"tenant": "acme", "role": "personal", "user": "alice"},
    GLOBEX_ALICE: {"tenant": "globex", "user": "alice"},  # a user and no role: personal
}
NDJSON = {"Content-Type": "application/x-ndjson"}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def api(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    with TestClient(create_app(services, ApiKeyRing(KEYS))) as client:
        client.services = services  # type: ignore[attr-defined]
        yield client
    services.close()


def record(client, key, user, *texts, **fields):
    body = {"user_id": user, "facts": [{"text": t, **fields} for t in texts]}
    return client.post("/v1/memories", json=body, headers=auth(key))


def texts(client, user, key=APP, **params) -> list[str]:
    got = client.get("/v1/memories", params={"user_id": user, **params}, headers=auth(key))
    assert got.status_code == 200, got.text
    return sorted(f["text"] for f in got.json()["items"])


def forbidden_user(response) -> None:
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "forbidden_user", response.text


def seeded(api) -> dict[str, str]:
    """Alice's and Bob's facts, a session each, and one tenant fact; the ids by text."""
    ids = {}
    for user, text in (("alice", "Alice keeps bees"), ("bob", "Bob flies gliders")):
        ids[text] = record(api, APP, user, text).json()["results"][0]["id"]
        body = {"user_id": user, "messages": [{"role": "user", "content": f"hi from {user}"}]}
        assert api.post("/v1/sessions/s1/messages", json=body, headers=auth(APP)).status_code == 200
    shared = record(api, CURATOR, "curator", "The office closes at six", scope="tenant")
    assert shared.status_code == 200
    return ids


def test_a_personal_key_works_on_its_own_user_and_reads_the_shared_scopes(api):
    seeded(api)
    assert record(api, ALICE, "alice", "Alice likes rye bread").status_code == 200
    found = api.post(
        "/v1/memories/search",
        json={"user_id": "alice", "query": "bees office bread", "mode": "bm25", "top_k": 10},
        headers=auth(ALICE),
    )
    assert sorted(h["text"] for h in found.json()["hits"]) == [
        "Alice keeps bees",
        "Alice likes rye bread",
        "The office closes at six",
    ]
    session = api.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=auth(ALICE))
    assert session.status_code == 200 and "hi from alice" in session.text
    # the application key of an older file still reaches every user of its tenant
    assert texts(api, "bob") == ["Bob flies gliders"]


def test_every_route_refuses_a_personal_key_another_user_and_writes_nothing(api):
    ids = seeded(api)
    bob_fact = ids["Bob flies gliders"]
    bob = {"user_id": "bob"}
    said = [{"role": "user", "content": "x"}]
    calls = [
        ("POST", "/v1/memories", {"json": {**bob, "facts": [{"text": "Bob hates bees"}]}}),
        ("POST", "/v1/memories/search", {"json": {**bob, "query": "gliders"}}),
        ("GET", "/v1/memories", {"params": bob}),
        ("GET", f"/v1/memories/{bob_fact}", {"params": bob}),
        ("PATCH", f"/v1/memories/{bob_fact}", {"json": {**bob, "importance": 9}}),
        ("DELETE", f"/v1/memories/{bob_fact}", {"params": bob}),
        ("DELETE", "/v1/users/bob/memories", {}),
        ("DELETE", "/v1/users/bob", {}),
        ("GET", "/v1/users/bob/export", {}),
        ("GET", "/v1/export", {"params": bob}),
        ("POST", "/v1/sessions/search", {"json": {**bob, "query": "hi"}}),
        ("GET", "/v1/sessions", {"params": bob}),
        ("GET", "/v1/sessions/s1", {"params": bob}),
        ("POST", "/v1/sessions/s1/messages", {"json": {**bob, "messages": said}}),
        ("POST", "/v1/sessions/s1/compact", {"json": bob}),
        ("GET", "/v1/sessions/s1/tool-results", {"params": {**bob, "ref": "r1"}}),
        ("DELETE", "/v1/sessions/s1", {"params": bob}),
        ("POST", "/v1/sessions/s1/end", {"json": bob}),
        ("POST", "/v1/chat", {"json": {**bob, "session_id": "s1", "message": "hello"}}),
        ("POST", "/v1/maintenance/run", {"json": bob}),
        ("GET", "/v1/usage", {}),
    ]  # fmt: skip
    for method, path, kwargs in calls:
        forbidden_user(api.request(method, path, headers=auth(ALICE), **kwargs))
    # the personal key's own user, on a route only an admin may use, is a plain 403
    erase = api.delete("/v1/users/alice", headers=auth(ALICE))
    assert erase.status_code == 403
    assert texts(api, "bob") == ["Bob flies gliders"]
    got = api.get(f"/v1/memories/{bob_fact}", params=bob, headers=auth(APP)).json()
    assert got["importance"] == 5
    session = api.get("/v1/sessions/s1", params=bob, headers=auth(APP)).json()
    assert [m["content"] for m in session["messages"]] == ["hi from bob"]
    # another tenant's key for a user of the same name sees nothing of acme's alice
    assert texts(api, "alice", key=GLOBEX_ALICE) == []


def test_a_personal_key_may_not_write_shared_memory(api):
    refused = record(api, ALICE, "alice", "Everyone loves Alice", scope="tenant")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert texts(api, "alice", scope="tenant") == []


def test_export_by_owner(api):
    seeded(api)
    lines = api.get("/v1/users/alice/export", headers=auth(ALICE))
    assert lines.status_code == 200
    exported = [json.loads(line) for line in lines.text.splitlines()]
    assert [(r["user_id"], r["text"]) for r in exported] == [("alice", "Alice keeps bees")]
    # the tenant route answers a personal key with its own user too
    own = api.get("/v1/export", headers=auth(ALICE))
    assert [json.loads(line)["text"] for line in own.text.splitlines()] == ["Alice keeps bees"]
    # an application key (as an admin key) exports the whole tenant, shared memory included
    tenant = api.get("/v1/export", headers=auth(APP)).text
    assert all(t in tenant for t in ("Alice keeps bees", "Bob flies gliders", "closes at six"))
    other = api.get("/v1/users/bob/export", headers=auth(APP)).text
    assert "Bob flies gliders" in other and "Alice" not in other


def test_a_personal_import_takes_its_own_lines_and_refuses_anyone_elses(api):
    seeded(api)
    exported = api.get("/v1/export", headers=auth(ADMIN)).text.splitlines()
    mine = [line for line in exported if json.loads(line)["user_id"] == "alice"]
    bobs = [line for line in exported if json.loads(line)["user_id"] == "bob"]
    shared = [line for line in exported if json.loads(line)["user_id"] is None]
    erased = api.delete("/v1/users/alice/memories", headers=auth(ALICE))
    assert erased.status_code == 200 and texts(api, "alice") == []
    globex = json.dumps({**json.loads(mine[0]), "tenant_id": "globex", "id": None})
    for bad in (bobs, shared, [globex]):
        refused = api.post(
            "/v1/import", content="\n".join([*mine, *bad]), headers={**NDJSON, **auth(ALICE)}
        )
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "bad_lines"
        assert refused.json()["error"]["bad_lines"][0]["line"] == len(mine) + 1
        assert texts(api, "alice") == []  # nothing written, not even the good lines
    done = api.post("/v1/import", content="\n".join(mine), headers={**NDJSON, **auth(ALICE)})
    assert done.status_code == 200 and done.json()["created"] == 1
    assert texts(api, "alice") == ["Alice keeps bees"]
    # an application key may still not import (history fields), as before
    assert (
        api.post("/v1/import", content=mine[0], headers={**NDJSON, **auth(APP)}).status_code == 403
    )


def _mcp(services, caller: Caller, tool: str, arguments: dict) -> tuple[bool, str]:
    async def main() -> tuple[bool, str]:
        async with Client(build_server(services, lambda _ctx: caller)) as client:
            result = await client.call_tool(tool, arguments)
        return bool(result.is_error), "".join(getattr(c, "text", "") for c in result.content)

    return anyio.run(main)


def test_mcp_acts_for_the_keys_user_without_a_user_and_refuses_another(api):
    seeded(api)
    ring = ApiKeyRing(KEYS)
    principal = ring.lookup(ALICE)
    stdio = authenticate(ring, ALICE, tenant=None, user=None)  # no --user needed
    assert stdio.user_id == "alice"
    with pytest.raises(ConfigurationError, match="bound to user 'alice'"):
        authenticate(ring, ALICE, tenant=None, user="bob")
    services = api.services
    no_header = Caller(principal, None)  # over HTTP: no X-Memory-User
    failed, said = _mcp(services, no_header, "memory_search", {"query": "bees gliders"})
    assert not failed and "Alice keeps bees" in said and "Bob" not in said
    for caller, arguments in (
        (Caller(principal, "bob"), {"query": "gliders"}),  # the header names bob
        (no_header, {"query": "gliders", "user_id": "bob"}),  # an argument names bob
    ):
        failed, said = _mcp(services, caller, "memory_search", arguments)
        assert failed and json.loads(said)["error"]["code"] == "forbidden_user"
    failed, said = _mcp(services, no_header, "memory_save", {"text": "Alice owns a kayak"})
    assert not failed
    assert texts(api, "alice") == ["Alice keeps bees", "Alice owns a kayak"]
    assert texts(api, "bob") == ["Bob flies gliders"]


def test_keys_add_with_a_user_mints_a_personal_key(tmp_path: Path, capsys):
    workspace = ["--workspace", str(tmp_path)]
    assert main(["keys", "add", "--tenant", "acme", "--user", "alice", *workspace]) == 0
    key = capsys.readouterr().out.strip()
    principal = ApiKeyRing.from_file(tmp_path / "api-keys.json").lookup(key)
    assert (principal.role, principal.user_id) == ("personal", "alice")
    assert main(["keys", "add", "--tenant", "acme", "--role", "user", *workspace]) == 0
    capsys.readouterr()
    assert main(["keys", "list", "--json", *workspace]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["role"], r["user"]) for r in rows] == [("personal", "alice"), ("application", None)]
    before = (tmp_path / "api-keys.json").read_bytes()
    for bad in (["--role", "admin", "--user", "alice"], ["--role", "personal"], ["--user", "../x"]):
        assert main(["keys", "add", "--tenant", "acme", *bad, *workspace]) != 0
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "error" in err
    assert (tmp_path / "api-keys.json").read_bytes() == before


def test_an_older_keys_file_loads_unchanged(tmp_path: Path):
    path = tmp_path / "api-keys.json"
    path.write_text(json.dumps({APP: {"tenant": "acme", "role": "user"}}), encoding="utf-8")
    assert ApiKeyRing.from_file(path).lookup(APP).role == "application"
    store = FilesKeyStore(path)
    store.add("acme", "personal", user="bob")
    kept = json.loads(path.read_text(encoding="utf-8"))
    assert sorted((v["role"], v.get("user")) for v in kept.values()) == [
        ("application", None),
        ("personal", "bob"),
    ]


def test_the_key_table_of_an_older_version_is_migrated_in_place(pg_database):
    """A table made by the first migration, with a row that says ``user``: opening the store
    adds the user column and the personal role, and the old row reads as an application
    key, unchanged on disk."""
    from memory_service.stores.api_keys import digest_of
    from memory_service.stores.api_keys.postgres import MIGRATIONS, STORE_NAME, PostgresKeyStore

    pg_database.ensure_schema(STORE_NAME, MIGRATIONS[:1])
    with pg_database.connection() as conn:
        conn.execute(
            "INSERT INTO api_keys (digest, tenant, role) VALUES (%s, 'acme', 'user')",
            (digest_of(APP),),
        )
    store = PostgresKeyStore(pg_database)
    store.add("acme", user="alice", role="personal")
    ring = ApiKeyRing.from_store(store)
    assert ring.lookup(APP).role == "application" and ring.lookup(APP).user_id is None
    assert [(e.role, e.user) for e in store.entries()] == [
        ("application", None),
        ("personal", "alice"),
    ]
    with pg_database.connection() as conn:
        assert conn.execute("SELECT role FROM api_keys ORDER BY position").fetchall()[0] == (
            "user",
        )


def test_a_personal_key_sees_itself_and_its_own_user_in_the_inspectors_calls(api):
    seeded(api)
    me = api.get("/v1/me", headers=auth(ALICE)).json()
    assert (me["role"], me["user_id"]) == ("personal", "alice")
    assert "list_users" not in me["may"] and "erase_users" not in me["may"]
    assert api.get("/v1/me", headers=auth(APP)).json()["user_id"] is None
    assert "list_users" in api.get("/v1/me", headers=auth(APP)).json()["may"]
    listed = api.get("/v1/users", headers=auth(ALICE)).json()
    assert [u["user_id"] for u in listed["users"]] == ["alice"]  # never bob
    assert listed["tenant_facts"] == 1  # the shared scope alice reads
    every = api.get("/v1/users", headers=auth(APP)).json()
    assert sorted(u["user_id"] for u in every["users"]) == ["alice", "bob"]
