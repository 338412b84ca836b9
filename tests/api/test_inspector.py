"""What the inspector page reads, as any API client reads it: who the key is (``GET /v1/me``),
the tenant's users with their fact counts (``GET /v1/users``), a user's MEMORY.md, and the
page itself, served with a Content-Security-Policy that runs no inline script."""

from __future__ import annotations

import re

import pytest

from memory_service.api.deps import role_actions
from memory_service.api.ui import CONTENT_SECURITY_POLICY, asset_bytes
from memory_service.client import MemoryClient
from memory_service.client.errors import PermissionDeniedError
from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.stores.memory_docs import Snapshot
from memory_service.stores.memory_docs.files import documents
from tests.support.api import (
    ACME_ADMIN_KEY,
    ACME_KEY,
    GLOBEX_KEY,
    append,
    assert_error,
    auth,
    record,
)


def test_me_says_the_keys_tenant_role_fingerprint_and_what_it_may_do(api_client):
    user = api_client.get("/v1/me", headers=auth(ACME_KEY)).json()
    admin = api_client.get("/v1/me", headers=auth(ACME_ADMIN_KEY)).json()
    assert (user["tenant_id"], user["role"]) == ("acme", "application")
    assert re.fullmatch(r"[0-9a-f]{12}", user["key_id"]) and user["key_id"] != admin["key_id"]
    assert ACME_KEY not in str(user)
    assert user["may"] == ["read", "write_memory", "list_users"]
    assert {"erase_users", "import", "run_maintenance", "write_shared_memory"} <= set(admin["may"])
    assert_error(api_client.get("/v1/me"), 401, "unauthorized")
    assert_error(api_client.get("/v1/me", headers=auth("nope-" * 5)), 401, "unauthorized")


def test_a_role_the_service_does_not_know_may_do_nothing():
    assert role_actions("curator") == [
        "read",
        "write_memory",
        "list_users",
        "write_shared_memory",
    ]
    assert role_actions("user") == role_actions("application")  # the older name, its alias
    assert role_actions("personal") == ["read", "write_memory"]
    assert role_actions("superuser") == []


def test_users_lists_the_tenants_users_agents_and_shared_facts_with_counts(api_client):
    record(api_client, "alice", "Alice lives in Lisbon", "Alice has a dog")
    record(api_client, "bob", "Bob likes tea")
    append(api_client, "s1", [{"role": "user", "content": "hello"}], user="dora")
    shared = {
        "user_id": "alice",
        "agent_id": "support",
        "facts": [
            {"text": "Refunds take five days", "scope": "agent"},
            {"text": "The office closes at six", "scope": "tenant"},
        ],
    }
    api_client.post("/v1/memories", json=shared, headers=auth(ACME_ADMIN_KEY)).raise_for_status()
    record(api_client, "mallory", "Mallory's secret", api_key=GLOBEX_KEY)

    listed = api_client.get("/v1/users", headers=auth(ACME_KEY)).json()
    assert listed == {
        "users": [
            {"user_id": "alice", "facts": 2},
            {"user_id": "bob", "facts": 1},
            {"user_id": "dora", "facts": 0},  # a session, no facts yet
        ],
        "agents": [{"agent_id": "support", "facts": 1}],
        "tenant_facts": 1,
    }
    other = api_client.get("/v1/users", headers=auth(GLOBEX_KEY)).json()
    assert other["users"] == [{"user_id": "mallory", "facts": 1}] and other["agents"] == []
    assert_error(api_client.get("/v1/users"), 401, "unauthorized")


def test_memory_md_reads_the_owners_document_and_its_snapshots(api_client):
    services = api_client.app.state.services
    docs = documents(services.memory_docs, services.settings.workspace)
    empty = api_client.get("/v1/users/alice/memory-md", headers=auth()).json()
    assert empty == {"name": "MEMORY.md", "text": "", "snapshots": []}
    alice = RuntimeContext("acme", "alice")
    docs.write(alice, "# Alice\n\n- lives in Lisbon\n", check=False)
    first = Snapshot("20260101T000000", "# Alice\n\n- lives in Lisbon\n")
    docs.write(alice, "# Alice\n\n- lives in Porto\n", snapshot=first, check=False)
    docs.write(scope_context("acme", "agent", "support"), "- refunds: 5 days\n", check=False)
    doc = api_client.get("/v1/users/alice/memory-md", headers=auth()).json()
    assert doc["text"] == "# Alice\n\n- lives in Porto\n"
    assert doc["snapshots"] == ["memory/archive/MEMORY.20260101T000000.md"]
    params = {"scope": "agent", "agent_id": "support"}
    agent = api_client.get("/v1/users/alice/memory-md", params=params, headers=auth()).json()
    assert agent["text"] == "- refunds: 5 days\n"
    # another tenant's alice is another user: nothing of acme's shows
    theirs = api_client.get("/v1/users/alice/memory-md", headers=auth(GLOBEX_KEY)).json()
    assert theirs["text"] == ""
    bad = api_client.get("/v1/users/%3Cscript%3E/memory-md", headers=auth())
    assert_error(bad, 422, "invalid_id")


def test_the_page_and_its_assets_forbid_inline_script(api_client):
    page = api_client.get("/ui")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    policy = page.headers["content-security-policy"]
    assert policy == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy and "default-src 'none'" in policy
    html = page.text
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.S)
    assert scripts and all('src="/ui/assets/' in attrs and not body for attrs, body in scripts)
    assert not re.search(r"\son[a-z]+=", html)  # no inline handlers
    assert not re.search(r"\sstyle=", html)
    assert "http://" not in html and "https://" not in html  # nothing from elsewhere
    for name, kind in (("inspector.js", "javascript"), ("inspector.css", "css")):
        asset = api_client.get(f"/ui/assets/{name}")
        assert asset.status_code == 200 and kind in asset.headers["content-type"]
        assert asset.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert asset.content == asset_bytes(name)
    script = asset_bytes("inspector.js").decode()
    assert "innerHTML" not in script and "eval(" not in script
    assert_error(api_client.get("/ui/assets/../app.py"), 404, "not_found")
    assert_error(api_client.get("/ui/assets/secrets.txt"), 404, "not_found")
    paths = api_client.app.openapi()["paths"]
    assert not any(p.startswith("/ui") for p in paths) and "/v1/me" in paths


def test_the_python_client_reads_them_as_the_apis_models(ui_app):
    services, url = ui_app
    with MemoryClient(url, ACME_KEY) as memory:
        memory.record("alice", ["Alice lives in Lisbon"])
        me = memory.me()
        assert (me.tenant_id, me.role, me.user_id) == ("acme", "application", None)
        assert me.may == ["read", "write_memory", "list_users"]
        assert [(u.user_id, u.facts) for u in memory.list_users().users] == [("alice", 1)]
        assert memory.read_memory_md("alice").text == ""
        with pytest.raises(PermissionDeniedError):
            memory.erase_user("alice")
