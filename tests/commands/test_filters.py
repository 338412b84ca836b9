"""``memory-service search`` and ``list`` with filters: one error line for a bad one."""

from __future__ import annotations

import json

import pytest

from memory_service.cli import main


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_LONGTERM__BACKEND"):
        monkeypatch.delenv(name, raising=False)


def _record(ws: str, *argv: str) -> None:
    assert main(["record", "--workspace", ws, "--user", "alice", *argv]) == 0


def test_search_and_list_filter(tmp_path, capsys):
    ws = str(tmp_path / "ws")
    _record(ws, "--kind", "procedure", "--tag", "gear", "Alice sets the coffee grinder to fine")
    _record(ws, "--importance", "3", "Alice drinks coffee at the corner cafe")
    capsys.readouterr()
    base = ["--workspace", ws, "--user", "alice", "--json"]
    assert main(["search", *base, "coffee", "--kind", "procedure"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert [h["text"] for h in hits] == ["Alice sets the coffee grinder to fine"]
    assert hits[0]["confidence"] == 1.0
    assert main(["list", *base, "--min-importance", "5"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert [f["text"] for f in items] == ["Alice sets the coffee grinder to fine"]
    assert main(["list", *base, "--tag-any", "gear", "--tag-any", "none"]) == 0
    assert len(json.loads(capsys.readouterr().out)["items"]) == 1


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--as-of", "2999-01-01"], "as_of"),
        (["--as-of", "soon"], "as_of"),
        (["--kind", "opinion"], "kind"),
        (["--tag-all", "x" * 65], "tags_all"),
    ],
)
def test_a_bad_filter_is_one_error_line(tmp_path, capsys, argv, fragment):
    ws = str(tmp_path / "ws")
    for command in (["search", "coffee"], ["list"]):
        code = main([command[0], "--workspace", ws, "--user", "alice", *command[1:], *argv])
        assert code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and fragment in err[0]
    assert not (tmp_path / "ws").exists()  # refused before anything was written
