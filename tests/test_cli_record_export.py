"""``record --key`` with several texts, and ``export`` of a tenant that has no data."""

from __future__ import annotations

import io
import json

import pytest

from memory_service.cli import build_parser, main


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_LONGTERM__BACKEND"):
        monkeypatch.delenv(name, raising=False)


def _one_error_line(err: str) -> str:
    lines = err.strip().split("\n")
    assert len(lines) == 1, err
    assert lines[0].startswith("memory-service: error: ")
    return lines[0]


def test_record_refuses_one_key_for_several_texts(tmp_path, capsys):
    ws = tmp_path / "ws"
    argv = ["record", "--workspace", str(ws), "--user", "alice", "--key", "city"]
    assert main([*argv, "Lives in Oslo", "Lives in Lima"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "--key" in line and "one" in line
    assert not (ws / "tenants").exists()  # nothing written


def test_record_refuses_one_key_for_several_stdin_lines(tmp_path, capsys, monkeypatch):
    ws = tmp_path / "ws"
    monkeypatch.setattr("sys.stdin", io.StringIO("Lives in Oslo\nLives in Lima\n"))
    argv = ["record", "--workspace", str(ws), "--user", "alice", "--key", "city"]
    assert main(argv) == 2
    assert "--key" in _one_error_line(capsys.readouterr().err)
    assert not (ws / "tenants").exists()


def test_record_help_says_key_takes_one_text():
    record = build_parser()._subparsers._group_actions[0].choices["record"]
    assert "one text" in " ".join(record.format_help().split())


def test_record_one_text_with_a_key_still_supersedes(tmp_path, capsys):
    argv = ["record", "--workspace", str(tmp_path), "--user", "alice", "--key", "city", "--json"]
    assert main([*argv, "Lives in Oslo"]) == 0
    first = json.loads(capsys.readouterr().out)[0]
    assert main([*argv, "Lives in Lima"]) == 0
    second = json.loads(capsys.readouterr().out)[0]
    assert first["status"] == "created"
    assert second["status"] == "superseded" and second["id"] != first["id"]


def test_export_of_an_unknown_tenant_says_so_and_fails(tmp_path, capsys):
    ws = str(tmp_path)
    assert main(["record", "--workspace", ws, "--user", "alice", "Alice plays tennis"]) == 0
    capsys.readouterr()
    assert main(["export", "--workspace", ws, "--tenant", "nosuch"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    line = _one_error_line(captured.err)
    assert "nosuch" in line and "no data" in line


def test_export_of_an_unknown_user_says_so_and_fails(tmp_path, capsys):
    ws = str(tmp_path)
    assert main(["record", "--workspace", ws, "--user", "alice", "Alice plays tennis"]) == 0
    capsys.readouterr()
    assert main(["export", "--workspace", ws, "--user", "bob"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "bob" in line and "no data" in line


def test_export_defaults_to_tenant_default(tmp_path, capsys):
    ws = str(tmp_path)
    assert main(["record", "--workspace", ws, "--user", "alice", "Alice plays tennis"]) == 0
    capsys.readouterr()
    assert main(["export", "--workspace", ws]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.splitlines()[0])["text"] == "Alice plays tennis"
    assert "exported 1 facts of tenant default" in captured.err
