"""``record --key`` with several texts, and ``export`` of a tenant or user with no facts."""

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


def test_export_of_an_unknown_tenant_is_empty_and_says_where_it_looked(tmp_path, capsys):
    """One behaviour with ``GET /v1/export`` (200, no lines), list and search: a tenant or a
    user with no facts is an empty answer, exit 0; stderr says so (a mistyped --tenant)."""
    ws = str(tmp_path)
    assert main(["record", "--workspace", ws, "--user", "alice", "Alice plays tennis"]) == 0
    capsys.readouterr()
    assert main(["export", "--workspace", ws, "--tenant", "nosuch"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.strip().split("\n")
    assert line.startswith("exported 0 facts of tenant nosuch (none in the long-term backend")
    assert "--tenant defaults to 'default'" in line


def test_export_of_an_unknown_user_is_empty(tmp_path, capsys):
    ws = str(tmp_path)
    assert main(["record", "--workspace", ws, "--user", "alice", "Alice plays tennis"]) == 0
    capsys.readouterr()
    assert main(["export", "--workspace", ws, "--user", "bob"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("exported 0 facts of user bob of tenant default (none")


def test_export_defaults_to_tenant_default(tmp_path, capsys):
    ws = str(tmp_path)
    assert main(["record", "--workspace", ws, "--user", "alice", "Alice plays tennis"]) == 0
    capsys.readouterr()
    assert main(["export", "--workspace", ws]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out.splitlines()[0])["text"] == "Alice plays tennis"
    assert "exported 1 facts of tenant default" in captured.err
    assert main(["export", "--workspace", ws, "--user", "alice"]) == 0
    assert "exported 1 facts of user alice of tenant default\n" in capsys.readouterr().err


def test_list_include_inactive_marks_what_recall_does_not_show(tmp_path, capsys):
    ws = str(tmp_path)
    argv = ["record", "--workspace", ws, "--user", "alice", "--key", "city", "--json"]
    assert main([*argv, "Alice lives in Oslo"]) == 0
    oslo = json.loads(capsys.readouterr().out)[0]["id"]
    assert main([*argv, "Alice lives in Lima"]) == 0
    lima = json.loads(capsys.readouterr().out)[0]["id"]
    assert main(["list", "--workspace", ws, "--user", "alice"]) == 0
    [active] = capsys.readouterr().out.strip().split("\n")
    assert active.endswith("  Alice lives in Lima")  # no mark: it is recalled
    assert main(["list", "--workspace", ws, "--user", "alice", "--include-inactive"]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    by_id = {line.split()[0]: line for line in lines}
    assert by_id[oslo].endswith(f"Alice lives in Oslo  [superseded by {lima}]")
    assert by_id[lima].endswith("  Alice lives in Lima")


def test_search_help_explains_every_option():
    search = build_parser()._subparsers._group_actions[0].choices["search"]
    for action in search._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{action.option_strings[0]} has no help text"
    text = " ".join(search.format_help().split())
    assert "cosine" in text and "1-100" in text and "fused" in text
