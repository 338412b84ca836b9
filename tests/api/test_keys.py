"""API keys without hand-editing JSON: ``memory-service keys add | list | revoke``, a keys file
that holds only SHA-256 digests (plaintext files still read), and a key ring that re-reads the
file when it changes: at most once a second, and at once for a key it does not know yet."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from memory_service.api.keys import ApiKeyRing, load_key_ring
from memory_service.cli import main
from memory_service.config import load_settings
from memory_service.domain.errors import ConfigurationError

LEGACY_KEY = "legacy-plaintext-key-0123456789"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_API_KEYS_FILE"):
        monkeypatch.delenv(name, raising=False)


def keys(ws: Path, *argv: str) -> int:
    return main(["keys", *argv, "--workspace", str(ws)])


def add(ws: Path, capsys, *argv: str) -> str:
    assert keys(ws, "add", *argv) == 0
    out = capsys.readouterr().out.strip().split("\n")
    assert len(out) == 1, out  # the key alone on stdout: scriptable
    return out[0]


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_add_prints_the_key_once_and_stores_only_its_hash(tmp_path, capsys):
    key = add(tmp_path, capsys, "--tenant", "acme")
    admin = add(tmp_path, capsys, "--tenant", "acme", "--role", "admin")
    text = (tmp_path / "api-keys.json").read_text()
    assert key not in text and admin not in text
    entries = json.loads(text)
    assert set(entries) == {f"sha256:{digest(key)}", f"sha256:{digest(admin)}"}
    assert entries[f"sha256:{digest(key)}"]["tenant"] == "acme"
    assert (tmp_path / "api-keys.json").stat().st_mode & 0o777 == 0o600
    ring = ApiKeyRing.from_file(tmp_path / "api-keys.json")
    assert ring.lookup(key).tenant_id == "acme" and ring.lookup(key).role == "application"
    assert ring.lookup(admin).role == "admin"
    assert ring.lookup("msk_" + "x" * 30) is None


def test_list_shows_tenant_role_fingerprint_and_time_never_the_key(tmp_path, capsys):
    key = add(tmp_path, capsys, "--tenant", "acme")
    assert keys(tmp_path, "list") == 0
    out = capsys.readouterr().out
    assert key not in out and digest(key) not in out
    assert digest(key)[:12] in out and "acme" in out and "application" in out
    assert keys(tmp_path, "list", "--json") == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["fingerprint"] == digest(key)[:12]
    assert (listed["tenant"], listed["role"]) == ("acme", "application")
    assert listed["created_at"].startswith("20")
    assert key not in json.dumps(listed)


@pytest.mark.parametrize("by", ["fingerprint", "key"])
def test_revoke_by_fingerprint_or_key(tmp_path, capsys, by):
    key = add(tmp_path, capsys, "--tenant", "acme")
    other = add(tmp_path, capsys, "--tenant", "globex")
    assert keys(tmp_path, "revoke", digest(key)[:12] if by == "fingerprint" else key) == 0
    assert "acme" in capsys.readouterr().out
    ring = ApiKeyRing.from_file(tmp_path / "api-keys.json")
    assert ring.lookup(key) is None and ring.lookup(other).tenant_id == "globex"
    assert keys(tmp_path, "revoke", digest(key)[:12]) == 2  # gone already
    err = capsys.readouterr().err.strip()
    assert err.startswith("memory-service: error: ") and "\n" not in err


def test_revoke_refuses_an_ambiguous_or_too_short_fingerprint(tmp_path, capsys):
    add(tmp_path, capsys, "--tenant", "acme")
    assert keys(tmp_path, "revoke", "") == 2
    assert keys(tmp_path, "revoke", "ab") == 2
    assert "at least" in capsys.readouterr().err


def test_add_refuses_a_bad_tenant_and_writes_nothing(tmp_path, capsys):
    assert keys(tmp_path, "add", "--tenant", "../etc") == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert not (tmp_path / "api-keys.json").exists()


def test_a_plaintext_keys_file_is_still_read_and_hashed_on_the_next_change(tmp_path, capsys):
    path = tmp_path / "api-keys.json"
    path.write_text(json.dumps({LEGACY_KEY: {"tenant": "acme", "role": "admin"}}))
    ring = ApiKeyRing.from_file(path)
    assert ring.lookup(LEGACY_KEY).role == "admin"
    assert keys(tmp_path, "list") == 0
    out = capsys.readouterr().out
    assert LEGACY_KEY not in out and digest(LEGACY_KEY)[:12] in out and "plaintext" in out
    new = add(tmp_path, capsys, "--tenant", "globex")
    text = path.read_text()
    assert LEGACY_KEY not in text  # migrated: stored as its digest from now on
    ring = ApiKeyRing.from_file(path)
    assert ring.lookup(LEGACY_KEY).tenant_id == "acme" and ring.lookup(new).tenant_id == "globex"


def test_migrate_hashes_a_plaintext_file_in_place(tmp_path, capsys):
    path = tmp_path / "api-keys.json"
    path.write_text(json.dumps({LEGACY_KEY: {"tenant": "acme"}}))
    assert keys(tmp_path, "migrate") == 0
    assert "1" in capsys.readouterr().out
    assert LEGACY_KEY not in path.read_text()
    assert ApiKeyRing.from_file(path).lookup(LEGACY_KEY).tenant_id == "acme"


def test_the_ring_rereads_a_changed_file_at_most_once_a_second(tmp_path, capsys):
    path = tmp_path / "api-keys.json"
    first = add(tmp_path, capsys, "--tenant", "acme")
    clock = Clock()
    ring = ApiKeyRing.from_file(path, clock=clock)
    assert ring.lookup(first) is not None
    second = add(tmp_path, capsys, "--tenant", "globex")
    assert keys(tmp_path, "revoke", first) == 0
    clock.now += 0.5
    assert ring.lookup(first) is not None  # a known key: the file is not looked at again yet
    clock.now += 0.6
    assert ring.lookup(first) is None and len(ring) == 1  # a second on: the revocation holds
    assert ring.tenants() == {"globex"} and ring.lookup(second).tenant_id == "globex"


def test_a_key_just_added_works_at_its_first_request(tmp_path, capsys):
    """A script that runs ``KEY=$(memory-service keys add ...)`` and then calls the API with
    it must not get a 401 for the second the ring would otherwise wait (README's scopes
    example does this): an unknown key makes the ring look at the file at once."""
    path = tmp_path / "api-keys.json"
    first = add(tmp_path, capsys, "--tenant", "acme")
    clock = Clock()
    ring = ApiKeyRing.from_file(path, clock=clock)
    assert ring.lookup(first) is not None
    second = add(tmp_path, capsys, "--tenant", "globex", "--role", "curator")
    found = ring.lookup(second)  # no time has passed
    assert (found.tenant_id, found.role) == ("globex", "curator")
    assert ring.lookup("msk_never-issued-0123456789") is None  # unknown stays unknown


def test_known_answers_without_the_file_only_until_a_look_is_due(tmp_path, capsys):
    """``known`` runs on the event loop: it must never stand in for a look at the file that
    is due, so a revoked key is refused after the interval, as ``lookup`` refuses it."""
    path = tmp_path / "api-keys.json"
    first = add(tmp_path, capsys, "--tenant", "acme")
    clock = Clock()
    ring = ApiKeyRing.from_file(path, clock=clock)
    assert ring.known(first).tenant_id == "acme"
    second = add(tmp_path, capsys, "--tenant", "globex")
    assert ring.known(second) is None  # not in the ring yet: lookup looks at the file at once
    assert ring.lookup(second).tenant_id == "globex"
    assert keys(tmp_path, "revoke", first) == 0
    clock.now += 0.5
    assert ring.known(first).tenant_id == "acme"  # within the interval, as lookup says
    clock.now += 0.6
    assert ring.known(first) is None  # a look is due: known does not answer
    assert ring.lookup(first) is None  # and the look finds it revoked
    assert ring.known(second).tenant_id == "globex"


def test_a_broken_edit_keeps_the_previous_keys(tmp_path, capsys, caplog):
    path = tmp_path / "api-keys.json"
    key = add(tmp_path, capsys, "--tenant", "acme")
    clock = Clock()
    ring = ApiKeyRing.from_file(path, clock=clock)
    path.write_text('{"half": ')
    clock.now += 2
    assert ring.lookup(key).tenant_id == "acme"
    assert "keys file" in caplog.text or "MEMORY_API_KEYS_FILE" in caplog.text


def test_a_bad_file_at_start_is_a_configuration_error(tmp_path):
    path = tmp_path / "api-keys.json"
    path.write_text(json.dumps({"short": {"tenant": "acme"}}))
    with pytest.raises(ConfigurationError, match="MEMORY_API_KEYS_FILE"):
        ApiKeyRing.from_file(path)
    path.write_text(json.dumps({"sha256:" + "0" * 63: {"tenant": "acme"}}))
    with pytest.raises(ConfigurationError, match="MEMORY_API_KEYS_FILE"):
        ApiKeyRing.from_file(path)


def test_the_development_key_is_stored_hashed_and_its_path_is_absolute(tmp_path):
    settings = load_settings(workspace=tmp_path / "ws")
    source = load_key_ring(settings)
    assert source.created_dev_key and source.path.is_absolute()
    text = source.path.read_text()
    assert source.created_dev_key not in text and digest(source.created_dev_key) in text
    assert source.ring.lookup(source.created_dev_key).role == "admin"
    again = load_key_ring(settings)
    assert again.created_dev_key is None
    assert again.ring.lookup(source.created_dev_key).tenant_id == "default"


def test_keys_follow_memory_api_keys_file(tmp_path, capsys, monkeypatch):
    path = tmp_path / "elsewhere" / "keys.json"
    monkeypatch.setenv("MEMORY_API_KEYS_FILE", str(path))
    key = add(tmp_path / "ws", capsys, "--tenant", "acme")
    assert ApiKeyRing.from_file(path).lookup(key).tenant_id == "acme"
    assert not (tmp_path / "ws" / "api-keys.json").exists()
