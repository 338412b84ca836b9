"""An import's bad lines say what is wrong with the line, in words: never a Python exception's
name or its message (``JSONDecodeError``, ``ValueError: invalid literal for int()``)."""

from __future__ import annotations

import io
import json
import re

import pytest

from memory_service.cli import main
from memory_service.pipeline.transfer import parse_import
from tests.support.api import ACME_ADMIN_KEY, NDJSON, assert_error, auth

GOOD = {"tenant_id": "acme", "user_id": "alice", "text": "Alice has a cat"}
PYTHON_WORDS = re.compile(r"[A-Z][a-z]+(Error|Exception)|invalid literal|object has no|NoneType")


def _with(**fields) -> str:
    return json.dumps({**GOOD, **fields})


def _without(name: str) -> str:
    return json.dumps({k: v for k, v in GOOD.items() if k != name})


BAD_LINES = [
    ("{not json", "not JSON (expected a property name in double quotes at column 2)"),
    ('{"text": "x",}', "not JSON (expected a property name in double quotes at column 14)"),
    ("nope", "not JSON (expected a value at column 1)"),
    ('{"text": "x"} 7', "not JSON (more after the JSON value at column 15)"),
    ('{"text": "unclosed', "not JSON (a string is not closed at column 10)"),
    ('["a", "list"]', "not a JSON object: each line is one fact, {...}, not a list"),
    ("42", "not a JSON object: each line is one fact, {...}, not a number"),
    (_without("text"), "text is missing"),
    (_with(text=5), "text must be a string"),
    (_without("tenant_id"), "tenant_id is missing"),
    (_with(user_id=None), "user_id is missing"),
    (_with(importance="high"), "importance must be an integer 1-10"),
    (_with(importance=None), "importance must be an integer 1-10"),
    (_with(importance=11), "importance must be an integer 1-10"),
    (_with(confidence="sure"), "confidence must be a number between 0 and 1"),
    (_with(tags="cats"), "tags must be a list of strings"),
    (_with(tags=[1, 2]), "tags must be a list of strings"),
    (_with(key=5), "key must be a string"),
    (_with(kind=["fact"]), "kind must be a string"),
    (
        _with(created_at="yesterday"),
        "created_at must be an ISO-8601 time (2025-01-31T09:30:00Z), not 'yesterday'",
    ),
    (_with(expires_at=12), "expires_at must be an ISO-8601 time (2025-01-31T09:30:00Z), not 12"),
    (
        _with(updated_at="lately"),
        "updated_at must be an ISO-8601 time (2025-01-31T09:30:00Z), not 'lately'",
    ),
    (_with(confidence=1.5), "confidence must be a number between 0 and 1, not 1.5"),
    (
        _with(kind="dreamlike"),
        "kind must be one of fact, preference, event, procedure or an "
        "alias: episodic (event), factual (fact), procedural (procedure), semantic (preference); "
        "not 'dreamlike'",
    ),  # fmt: skip
]


def test_a_line_takes_a_memory_type_as_its_kind_and_keeps_its_update_time():
    updated = "2025-03-01T10:00:00+00:00"
    line = _with(kind="episodic", created_at="2025-01-01T10:00:00Z", updated_at=updated)
    [good], bad = parse_import([line])
    assert bad == []
    assert good.fact.kind == "event" and good.fact.updated_at.isoformat() == updated
    [old], _ = parse_import([_with(created_at="2025-01-01T10:00:00Z")])  # an older export's
    assert old.fact.updated_at == old.fact.created_at


@pytest.mark.parametrize(("line", "message"), BAD_LINES)
def test_a_bad_line_says_what_is_wrong_in_words(line, message):
    good, bad = parse_import([json.dumps(GOOD), line])
    assert len(good) == 1
    assert [(b.line_no, b.message) for b in bad] == [(2, message)]
    assert not PYTHON_WORDS.search(bad[0].message)


def test_the_api_names_the_line_and_the_problem(apps):
    _, client = apps()
    body = "\n".join([json.dumps(GOOD), "", "{not json", _with(importance="high")]) + "\n"
    response = client.post("/v1/import", content=body, headers={**auth(ACME_ADMIN_KEY), **NDJSON})
    assert_error(response, 422, "bad_lines")
    error = response.json()["error"]
    assert error["bad_lines"] == [
        {"line": 3, "message": "not JSON (expected a property name in double quotes at column 2)"},
        {"line": 4, "message": "importance must be an integer 1-10"},
    ]
    assert "line 3: not JSON (" in error["message"]
    assert not PYTHON_WORDS.search(error["message"])


def test_the_cli_names_the_line_and_the_problem(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMORY_WORKSPACE", str(tmp_path / "ws"))
    monkeypatch.setattr("sys.stdin", io.StringIO("nope\n" + _with(tags="cats") + "\n"))
    assert main(["import"]) == 2
    err = capsys.readouterr().err
    assert "line 1: not JSON (expected a value at column 1)" in err
    assert "line 2: tags must be a list of strings" in err
    assert not PYTHON_WORDS.search(err)
