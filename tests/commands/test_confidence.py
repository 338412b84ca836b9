"""``memory-service record --confidence``, ``list --needs-verification`` and ``confirm``."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from memory_service.cli import main
from memory_service.domain.facts import utcnow


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_LONGTERM__BACKEND"):
        monkeypatch.delenv(name, raising=False)


def listed(capsys, ws: str, *argv: str) -> list[dict]:
    capsys.readouterr()
    assert main(["list", "--workspace", ws, "--user", "alice", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)["items"]


def test_an_old_episode_is_marked_filtered_and_confirmed(tmp_path, capsys):
    ws = str(tmp_path / "ws")
    old = (utcnow() - timedelta(days=120)).isoformat()
    lines = tmp_path / "facts.jsonl"
    line = {"tenant_id": "default", "user_id": "alice", "kind": "episodic", "created_at": old}
    lines.write_text(json.dumps({**line, "text": "Alice sailed to Corsica"}) + "\n")
    assert main(["import", "--workspace", ws, str(lines)]) == 0
    assert main(["record", "--workspace", ws, "--user", "alice", "Alice owns a dinghy"]) == 0
    [episode] = listed(capsys, ws, "--needs-verification")
    assert episode["kind"] == "event" and episode["needs_verification"] is True
    assert [f["text"] for f in listed(capsys, ws, "--no-needs-verification")] == [
        "Alice owns a dinghy"
    ]
    assert main(["list", "--workspace", ws, "--user", "alice"]) == 0
    assert "Alice sailed to Corsica  [needs verification]" in capsys.readouterr().out

    assert main(["confirm", "--workspace", ws, "--user", "alice", episode["id"]]) == 0
    assert f"confirmed  {episode['id']}" in capsys.readouterr().out
    assert listed(capsys, ws, "--needs-verification") == []


def test_confirm_of_another_users_fact_is_one_error_line(tmp_path, capsys):
    ws = str(tmp_path / "ws")
    assert main(["record", "--workspace", ws, "--user", "alice", "--json", "Alice rows"]) == 0
    fid = json.loads(capsys.readouterr().out)[0]["id"]
    assert main(["confirm", "--workspace", ws, "--user", "bob", fid]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no memory" in err[0]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--confidence", "1.5"], "confidence"),
        (["--kind", "dreamlike"], "kind"),
    ],
)
def test_a_bad_confidence_or_kind_is_one_error_line_and_nothing_is_written(
    tmp_path, capsys, argv, fragment
):
    ws = str(tmp_path / "ws")
    assert main(["record", "--workspace", ws, "--user", "alice", *argv, "Alice is tall"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0]
    assert listed(capsys, ws) == []


def test_record_takes_a_confidence_and_a_memory_type(tmp_path, capsys):
    ws = str(tmp_path / "ws")
    argv = ["--kind", "procedural", "--confidence", "0.9", "To sail, Alice checks the wind"]
    assert main(["record", "--workspace", ws, "--user", "alice", *argv]) == 0
    [fact] = listed(capsys, ws, "--kind", "procedural")
    assert (fact["kind"], fact["confidence"]) == ("procedure", 0.9)
