"""``record --scope`` and ``search --agent/--scope`` on a workspace: shared memory from the CLI."""

from __future__ import annotations

import json

import pytest

from memory_service.cli import main


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_LONGTERM__BACKEND"):
        monkeypatch.delenv(name, raising=False)


def _search(ws, capsys, *extra):
    assert main(["search", "--workspace", str(ws), "--json", *extra]) == 0
    return [(h["text"], h["scope"]) for h in json.loads(capsys.readouterr().out)]


def test_shared_facts_from_the_cli_are_recalled_by_every_user(tmp_path, capsys):
    ws = tmp_path / "ws"
    base = ["record", "--workspace", str(ws)]
    assert main([*base, "--scope", "tenant", "The office closes at six"]) == 0
    assert main([*base, "--scope", "agent", "--agent", "support", "Refunds need a manager"]) == 0
    assert main([*base, "--user", "alice", "Alice's office is on floor two"]) == 0
    capsys.readouterr()
    assert (ws / "tenants/default/shared/memory").is_dir()
    assert (ws / "tenants/default/agents/support/memory").is_dir()

    bob = _search(ws, capsys, "--user", "bob", "--agent", "support", "office refunds")
    assert sorted(bob) == [
        ("Refunds need a manager", "agent"),
        ("The office closes at six", "tenant"),
    ]
    alice = _search(ws, capsys, "--user", "alice", "--scope", "user", "office refunds")
    assert alice == [("Alice's office is on floor two", "user")]


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["record", "--scope", "agent", "x"], "agent_id"),
        (["record", "x"], "--user"),
        (["search", "--user", "bob", "--scope", "agent", "x"], "agent_id"),
        (["search", "--user", "bob", "--agent", "../x", "x"], "agent_id"),
    ],
)
def test_bad_scope_arguments_are_one_error_line_and_write_nothing(tmp_path, capsys, argv, needle):
    ws = tmp_path / "ws"
    assert main([argv[0], "--workspace", str(ws), *argv[1:]]) == 2
    lines = capsys.readouterr().err.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith("memory-service: error: ")
    assert needle in lines[0]
    assert not (ws / "tenants").exists()
