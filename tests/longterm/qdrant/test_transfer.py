"""Moving facts between backends: files -> Qdrant -> files keeps ids and metadata, importing
twice changes nothing, and a bad file is refused whole, with its bad lines named."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from memory_service.cli import main
from memory_service.config import QdrantSettings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.qdrant.backend import open_qdrant
from memory_service.pipeline.transfer import export_records, import_records, parse_import

ALICE = RuntimeContext("acme", "alice")
BOB = RuntimeContext("acme", "bob")
GLOBEX = RuntimeContext("globex", "alice")
T0 = datetime(2024, 3, 1, 9, 30, 15, 123456, tzinfo=UTC)


def _history(memory) -> None:
    memory.record(
        ALICE,
        [
            Fact(
                "Alice works as a nurse",
                key="user.job",
                kind="fact",
                importance=8,
                confidence=0.75,
                tags=("work", "health"),
                source="chat",
                session_id="s-1",
                created_at=T0,
            ),
            Fact("Alice is vegetarian", key="user.diet", created_at=T0 + timedelta(days=1)),
            Fact("用户对花生过敏", kind="preference", importance=10, created_at=T0),
            Fact("Door code 4711", expires_at=T0 + timedelta(days=2), created_at=T0),
        ],
    )
    memory.record(ALICE, [Fact("Alice became vegan", key="user.diet")])  # supersedes
    memory.record(BOB, [Fact("Bob plays the cello", kind="event")])
    memory.record(GLOBEX, [Fact("Globex Alice likes sushi")])


def _state(memory, ctx) -> dict[str, dict]:
    return {f.id: f.to_dict() for f in memory.list(ctx, include_inactive=True).items}


def _lines(memory, tenant: str) -> list[str]:
    return [json.dumps(r, ensure_ascii=False) for r in export_records(memory, tenant)]


def _import(memory, lines: list[str]):
    parsed, bad = parse_import(lines)
    assert bad == []
    return import_records(memory, parsed)


def test_files_to_qdrant_and_back_keeps_ids_and_metadata(tmp_path, embedder):
    files = FileSystemLongTermMemory(tmp_path / "files", embedder)
    # no access counting: the retrieve below must not change the state compared
    qdrant = open_qdrant(
        QdrantSettings(path=tmp_path / "qdrant"), tmp_path, embedder, track_access=False
    )
    back = FileSystemLongTermMemory(tmp_path / "files-again", embedder)
    try:
        _history(files)
        original = {ctx: _state(files, ctx) for ctx in (ALICE, BOB, GLOBEX)}
        assert len(original[ALICE]) == 5  # the superseded and the expired fact are exported too

        exported = _lines(files, "acme") + _lines(files, "globex")
        statuses = _import(qdrant, exported)
        assert statuses == {"created": 7}
        for ctx, state in original.items():
            assert _state(qdrant, ctx) == state, ctx
        assert [r.fact.text for r in qdrant.retrieve(ALICE, "diet vegan", 1)] == [
            "Alice became vegan"
        ]

        assert _import(qdrant, exported) == {"duplicate": 7}  # idempotent
        for ctx, state in original.items():
            assert _state(qdrant, ctx) == state, ctx

        statuses = _import(back, _lines(qdrant, "acme") + _lines(qdrant, "globex"))
        assert statuses == {"created": 7}
        for ctx, state in original.items():
            assert _state(back, ctx) == state, ctx
        assert [f.text for f in back.list(ALICE).items] == [f.text for f in files.list(ALICE).items]
    finally:
        files.close()
        qdrant.close()
        back.close()


def test_import_refuses_a_file_with_bad_lines_and_writes_nothing(tmp_path, monkeypatch, capsys):
    good = {"tenant_id": "acme", "user_id": "alice", "text": "A fine fact"}
    wrong_id = {**good, "text": "Edited text", "id": "3f1a3b7e-0000-5000-8000-000000000000"}
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps({**good, "user_id": "../etc"}),
        "",
        json.dumps({**good, "importance": 11}),
        json.dumps(wrong_id),
        json.dumps(["a", "list"]),
    ]
    monkeypatch.setenv("MEMORY_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["import"]) == 2
    err = capsys.readouterr().err
    for line_no in (2, 3, 5, 6, 7):
        assert f"line {line_no}: " in err
    assert "line 1:" not in err and "line 4:" not in err
    assert "5 bad lines, nothing imported" in err
    assert not (tmp_path / "ws").exists()


def test_cli_export_then_import_into_qdrant(tmp_path, embedder, monkeypatch, capsys):
    files = FileSystemLongTermMemory(tmp_path / "ws", embedder)
    _history(files)
    expected = _state(files, ALICE)
    files.close()

    monkeypatch.setenv("MEMORY_WORKSPACE", str(tmp_path / "ws"))
    assert main(["export", "--tenant", "acme"]) == 0
    out = capsys.readouterr()
    assert "exported 6 facts of tenant acme" in out.err
    exported = out.out
    assert [json.loads(line)["user_id"] for line in exported.splitlines()].count("bob") == 1

    monkeypatch.setenv("MEMORY_LONGTERM__BACKEND", "qdrant")
    monkeypatch.setenv("MEMORY_QDRANT__PATH", str(tmp_path / "q"))
    for expected_summary in (
        {"lines": 6, "created": 6, "superseded": 0, "duplicate": 0, "merged": 0},
        {"lines": 6, "created": 0, "superseded": 0, "duplicate": 6, "merged": 0},
    ):
        monkeypatch.setattr("sys.stdin", io.StringIO(exported))
        assert main(["import", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == expected_summary

    qdrant = open_qdrant(QdrantSettings(path=tmp_path / "q"), Path(tmp_path), embedder)
    try:
        assert _state(qdrant, ALICE) == expected
        assert qdrant.users("acme") == ["alice", "bob"]
    finally:
        qdrant.close()
