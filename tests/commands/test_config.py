"""Settings from env and TOML, errors that name the setting, and the CLI's contract."""

from __future__ import annotations

import json

import pytest

from memory_service.cli import main
from memory_service.config import load_settings
from memory_service.domain.errors import ConfigurationError


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_LONGTERM__BACKEND"):
        monkeypatch.delenv(name, raising=False)


def test_environment_overrides_toml_and_defaults(tmp_path, monkeypatch):
    config = tmp_path / "memory.toml"
    config.write_text(
        'workspace = "/srv/memory"\n[api]\nport = 9000\n[longterm]\nbackend = "files"\n'
    )
    monkeypatch.setenv("MEMORY_CONFIG", str(config))
    monkeypatch.setenv("MEMORY_API__PORT", "9100")
    settings = load_settings()
    assert str(settings.workspace) == "/srv/memory"
    assert settings.api.port == 9100
    assert settings.api.host == "127.0.0.1"


def test_invalid_settings_name_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMORY_LONGTERM__BACKEND", "mongodb")
    with pytest.raises(ConfigurationError, match="MEMORY_LONGTERM__BACKEND"):
        load_settings()
    monkeypatch.delenv("MEMORY_LONGTERM__BACKEND")
    monkeypatch.setenv("MEMORY_API__PORT", "not-a-port")
    with pytest.raises(ConfigurationError, match="MEMORY_API__PORT"):
        load_settings()
    monkeypatch.delenv("MEMORY_API__PORT")
    monkeypatch.setenv("MEMORY_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigurationError, match="MEMORY_CONFIG"):
        load_settings()
    broken = tmp_path / "broken.toml"
    broken.write_text("workspace = [unclosed")
    monkeypatch.setenv("MEMORY_CONFIG", str(broken))
    with pytest.raises(ConfigurationError, match="MEMORY_CONFIG"):
        load_settings()


def test_cli_record_then_search(tmp_path, capsys):
    ws = str(tmp_path / "ws")
    assert (
        main(
            [
                "record",
                "--workspace",
                ws,
                "--user",
                "alice",
                "--key",
                "user.allergy",
                "--importance",
                "9",
                "Alice is allergic to peanuts",
            ]
        )
        == 0
    )
    assert main(["record", "--workspace", ws, "--user", "alice", "Alice plays tennis"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("created ")
    assert main(["search", "--workspace", ws, "--user", "alice", "--json", "peanut allergy"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["text"] == "Alice is allergic to peanuts"
    assert hits[0]["ranks"]["bm25"] == 1
    assert main(["search", "--workspace", ws, "--user", "bob", "peanut"]) == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "--user", "../etc", "q"],
        ["search", "--user", "alice", "--top-k", "0", "q"],
        ["record", "--user", "alice", "--importance", "42", "x"],
        ["record", "--tenant", "bad tenant", "--user", "alice", "x"],
    ],
)
def test_cli_errors_are_one_line_and_non_zero(tmp_path, capsys, argv):
    assert main([*argv, "--workspace", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().split("\n")
    assert len(err) == 1 and err[0].startswith("memory-service: error: ")
    assert not (tmp_path / "tenants").exists()


def test_cli_reports_a_bad_setting(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MEMORY_LONGTERM__BACKEND", "mongodb")
    assert main(["search", "--workspace", str(tmp_path), "--user", "alice", "q"]) == 2
    assert "MEMORY_LONGTERM__BACKEND" in capsys.readouterr().err
