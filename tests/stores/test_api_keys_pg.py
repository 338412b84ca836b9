"""API keys in PostgreSQL (``MEMORY_STATE__BACKEND=postgres``): two replicas over their own
workspaces and one schema see a key the CLI adds or revokes within ``keys_refresh_s``,
without a restart, and keep no keys file; an unreachable database at an auth check is a 503.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import KeySource, load_key_ring
from memory_service.cli import main
from memory_service.commands.serving import banner
from memory_service.config import load_settings
from memory_service.domain.errors import ConfigurationError
from memory_service.mcp_server.http import mount_mcp
from memory_service.services import Services, build_services
from tests.support.postgres import PG_DSN
from tests.support.relay import Relay

REFRESH_S = 0.5
LEGACY_KEY = "legacy-plaintext-key-0123456789"


@pytest.fixture(autouse=True)
def _postgres_state(monkeypatch, pg_schema: str) -> None:
    """The settings a replica and the CLI share: keys in the test's own schema."""
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_API_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MEMORY_STATE__BACKEND", "postgres")
    monkeypatch.setenv("MEMORY_POSTGRES__DSN", PG_DSN)
    monkeypatch.setenv("MEMORY_POSTGRES__SCHEMA_NAME", pg_schema)
    monkeypatch.setenv("MEMORY_STATE__KEYS_REFRESH_S", str(REFRESH_S))


class Replica:
    """One ``serve`` in-process: its services, the key source it started with, a client."""

    def __init__(self, services: Services, keys: KeySource, client: TestClient) -> None:
        self.services, self.keys, self.client = services, keys, client

    def status(self, key: str) -> int:
        return self.client.get("/v1/usage", headers=auth(key)).status_code

    def tenant(self, key: str) -> str | None:
        reply = self.client.get("/v1/usage", headers=auth(key))
        return reply.json()["tenant_id"] if reply.status_code == 200 else None


@pytest.fixture
def start(embedder) -> Iterator[Callable[..., Replica]]:
    """Start replicas as ``serve`` does (services, then the keys from their database)."""
    with ExitStack() as stack:

        def start_replica(workspace: Path, *, mcp: bool = False, **overrides) -> Replica:
            settings = load_settings(workspace=workspace, **overrides)
            services = build_services(settings, embedder=embedder)
            stack.callback(services.close)
            keys = load_key_ring(settings, services.database)
            app = create_app(services, keys.ring)
            if mcp:
                mount_mcp(app, services, keys.ring, host="127.0.0.1")
            client = stack.enter_context(TestClient(app))
            return Replica(services, keys, client)

        yield start_replica


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def cli(capsys, *argv: str, workspace: Path) -> tuple[int, str, str]:
    code = main(["keys", *argv, "--workspace", str(workspace)])
    out, err = capsys.readouterr()
    return code, out, err


def add_key(capsys, workspace: Path, tenant: str, role: str = "user") -> str:
    code, out, err = cli(capsys, "add", "--tenant", tenant, "--role", role, workspace=workspace)
    assert code == 0, err
    assert "PostgreSQL" in err and "password" not in err
    [key] = out.split()
    return key


def within(seconds: float, condition: Callable[[], bool]) -> float:
    """How long ``condition`` took to hold; fails the test past ``seconds``."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < seconds, f"not within {seconds}s"
        time.sleep(0.05)
    return time.monotonic() - began


def files_under(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def stored_rows(schema: str) -> list[tuple]:
    with psycopg.connect(PG_DSN) as conn:
        return conn.execute(f'SELECT * FROM "{schema}".api_keys').fetchall()


def test_a_cli_key_works_then_stops_on_every_replica_within_the_refresh(
    tmp_path, capsys, start, pg_schema
):
    one, two = start(tmp_path / "one"), start(tmp_path / "two")
    # the first start minted the development key, the second found the table in use
    assert one.keys.created_dev_key and two.keys.created_dev_key is None
    assert two.status(one.keys.created_dev_key) == 200
    line = banner("http://127.0.0.1:8080", "storage", one.keys)
    assert "API keys: PostgreSQL (" in line and f"schema {pg_schema}" in line
    assert one.keys.created_dev_key in line

    key = add_key(capsys, tmp_path / "cli", "acme")  # the CLI, on its own machine
    for replica in (one, two):
        waited = within(REFRESH_S + 1.5, lambda r=replica: r.status(key) == 200)
        assert waited <= REFRESH_S + 1.5
        assert replica.tenant(key) == "acme"

    code, out, _ = cli(
        capsys, "revoke", hashlib.sha256(key.encode()).hexdigest()[:12], workspace=tmp_path / "cli"
    )
    assert code == 0 and "acme" in out
    for replica in (one, two):
        within(REFRESH_S + 1.5, lambda r=replica: r.status(key) == 401)
        assert replica.client.get("/v1/usage", headers=auth(key)).json()["error"]["code"] == (
            "unauthorized"
        )

    # only digests in the table, no keys file (nor any file) on either replica or the CLI
    rows = stored_rows(pg_schema)
    assert len(rows) == 2 and key not in repr(rows)
    assert hashlib.sha256(key.encode()).digest() in {bytes(r[0]) for r in rows}
    for workspace in ("one", "two", "cli"):
        folder = tmp_path / workspace
        assert not [name for name in files_under(folder) if "key" in name]


def test_a_tenants_key_never_authenticates_another_tenant(tmp_path, capsys, start):
    replica = start(tmp_path / "one")
    acme = add_key(capsys, tmp_path / "cli", "acme")
    globex = add_key(capsys, tmp_path / "cli", "globex", "admin")
    within(REFRESH_S + 1.5, lambda: replica.status(globex) == 200)
    assert (replica.tenant(acme), replica.tenant(globex)) == ("acme", "globex")
    body = {"user_id": "alice", "facts": [{"text": "Alice keeps bees"}]}
    assert replica.client.post("/v1/memories", json=body, headers=auth(acme)).status_code == 200
    seen = {
        name: replica.client.get("/v1/memories", params={"user_id": "alice"}, headers=auth(k))
        for name, k in (("acme", acme), ("globex", globex))
    }
    assert [f["text"] for f in seen["acme"].json()["items"]] == ["Alice keeps bees"]
    assert seen["globex"].json()["items"] == []  # an admin key too: its own tenant only


def test_keys_cli_list_revoke_and_errors_match_the_file_store(tmp_path, capsys):
    ws = tmp_path / "cli"
    key = add_key(capsys, ws, "acme", "curator")
    code, out, _ = cli(capsys, "list", "--json", workspace=ws)
    [listed] = json.loads(out)
    assert listed["fingerprint"] == hashlib.sha256(key.encode()).hexdigest()[:12]
    assert (listed["tenant"], listed["role"], listed["stored"]) == ("acme", "curator", "sha256")
    assert listed["created_at"].startswith("20") and key not in out
    assert cli(capsys, "revoke", "ab", workspace=ws)[0] == 2  # too short
    assert cli(capsys, "add", "--tenant", "../etc", workspace=ws)[0] == 2
    assert cli(capsys, "revoke", key, workspace=ws)[0] == 0
    fingerprint = listed["fingerprint"]
    code, _, err = cli(capsys, "revoke", fingerprint, workspace=ws)  # revoked already
    assert code == 2 and err.startswith("memory-service: error: no key") and err.count("\n") == 1
    assert json.loads(cli(capsys, "list", "--json", workspace=ws)[1]) == []
    assert not ws.exists()  # nothing written beside the CLI either


def test_migrate_imports_the_keys_file_once_and_a_revoked_key_stays_revoked(
    tmp_path, capsys, start, pg_schema
):
    ws = tmp_path / "one"
    ws.mkdir()
    hashed = "msk_" + "h" * 30
    legacy = {
        LEGACY_KEY: {"tenant": "acme", "role": "admin"},
        "sha256:" + hashlib.sha256(hashed.encode()).hexdigest(): {"tenant": "globex"},
    }
    (ws / "api-keys.json").write_text(json.dumps(legacy))
    # an empty table beside a keys file: refused, not replaced by a development key
    with pytest.raises(ConfigurationError, match="keys migrate"):
        start(ws)
    assert stored_rows(pg_schema) == []

    code, out, _ = cli(capsys, "migrate", workspace=ws)
    assert code == 0 and "imported 2 new keys" in out
    assert LEGACY_KEY not in repr(stored_rows(pg_schema))
    assert cli(capsys, "revoke", LEGACY_KEY, workspace=ws)[0] == 0
    code, out, _ = cli(capsys, "migrate", workspace=ws)  # again: nothing new, none revived
    assert code == 0 and "imported 0 new keys" in out

    replica = start(ws)
    assert replica.keys.created_dev_key is None
    assert (replica.status(LEGACY_KEY), replica.tenant(hashed)) == (401, "globex")


def test_migrate_without_a_keys_file_is_an_error_naming_it(tmp_path, capsys):
    code, _, err = cli(capsys, "migrate", workspace=tmp_path / "none")
    assert code == 2 and "no such file" in err and err.count("\n") == 1


def test_replicas_starting_together_mint_one_development_key(tmp_path, pg_schema):
    settings = [load_settings(workspace=tmp_path / f"ws{i}") for i in range(4)]
    from memory_service.stores.build import open_database

    databases = [open_database(s) for s in settings]
    sources: list[KeySource] = []
    threads = [
        threading.Thread(target=lambda s=s, d=d: sources.append(load_key_ring(s, d)))
        for s, d in zip(settings, databases, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for database in databases:
        database.close()
    assert len(sources) == 4
    assert len([s for s in sources if s.created_dev_key]) == 1
    assert len(stored_rows(pg_schema)) == 1
    assert files_under(tmp_path) == []


def test_an_unreachable_database_at_an_auth_check_is_a_503_with_a_code(
    tmp_path, capsys, start, pg_schema
):
    proxy = Relay(("127.0.0.1", int(psycopg.conninfo.conninfo_to_dict(PG_DSN).get("port", 5432))))
    proxy.start()
    try:
        dsn = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
        # a checkout waits up to the connect timeout for a live connection (the pool replaces
        # one the server dropped): 1 s here
        postgres = {"dsn": dsn, "schema_name": pg_schema, "connect_timeout_s": 1}
        replica = start(tmp_path / "one", mcp=True, postgres=postgres)
        key = replica.keys.created_dev_key
        assert key and replica.status(key) == 200
        proxy.cut()
        time.sleep(REFRESH_S + 0.1)  # the next look at the keys must ask PostgreSQL
        began = time.monotonic()
        for _ in range(3):  # the check that failed, then the same answer without waiting
            reply = replica.client.get("/v1/usage", headers=auth(key))
            assert reply.status_code == 503, reply.text
            assert reply.json()["error"]["code"] == "backend_unavailable"
        assert time.monotonic() - began < 5
        mcp = replica.client.post("/mcp", headers=auth(key), json={})
        assert (mcp.status_code, mcp.json()["error"]["code"]) == (503, "backend_unavailable")
        assert replica.client.get("/v1/usage").status_code == 401  # no key: still a 401
        proxy.start()  # back on the same port: keys work again, without a restart
        within(REFRESH_S + 10, lambda: replica.status(key) == 200)
    finally:
        proxy.cut()


def test_a_503_names_the_setting_to_the_caller_and_logs_where_the_database_is(
    tmp_path, start, pg_schema, caplog
):
    """Anyone may send a made-up key: the answer says which setting to look at, never the
    database's user, name, host or port; the log has them for the operator."""
    proxy = Relay(("127.0.0.1", int(psycopg.conninfo.conninfo_to_dict(PG_DSN).get("port", 5432))))
    proxy.start()
    try:
        dsn = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
        replica = start(tmp_path / "one", postgres={"dsn": dsn, "schema_name": pg_schema})
        proxy.cut()
        time.sleep(REFRESH_S + 0.1)  # the next look at the keys must ask PostgreSQL
        with caplog.at_level("WARNING"):
            reply = replica.client.get("/v1/me", headers=auth("msk_bogus_0123456789abcdef"))
        assert reply.status_code == 503, reply.text
        error = reply.json()["error"]
        assert error["code"] == "backend_unavailable" and "MEMORY_POSTGRES__DSN" in error["message"]
        for part in ("user=", "dbname=", "host=", "port=", "127.0.0.1", str(proxy.port)):
            assert part not in reply.text, reply.text
        assert f"port={proxy.port}" in caplog.text, caplog.text
    finally:
        proxy.cut()


def test_keys_cli_with_an_unreachable_database_names_the_dsn_setting(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MEMORY_POSTGRES__DSN", "postgresql://postgres:secret@127.0.0.1:1/test")
    code, out, err = cli(capsys, "add", "--tenant", "acme", workspace=tmp_path / "ws")
    assert code == 2 and out == ""
    assert err.startswith("memory-service: error: MEMORY_POSTGRES__DSN") and err.count("\n") == 1
    assert "secret" not in err and not (tmp_path / "ws").exists()


def test_the_stdio_mcp_checks_its_key_against_postgresql(tmp_path, capsys, pg_database):
    from memory_service.api.keys import postgres_key_ring
    from memory_service.mcp_server.stdio import authenticate

    key = add_key(capsys, tmp_path / "cli", "acme", "admin")
    ring = postgres_key_ring(load_settings(workspace=tmp_path / "ws"), pg_database)
    caller = authenticate(ring, key, tenant="acme", user=None)
    assert caller.principal.tenant_id == "acme"
    with pytest.raises(ConfigurationError, match="unknown API key"):
        authenticate(ring, "msk_" + "n" * 30, tenant=None, user="alice")
    assert files_under(tmp_path) == []
