"""Input rules that hold at every entry point, and the words a refusal is said in:

- one message is at most 1 MiB as a whole (metadata included), not only its content;
- one rule for characters (``memory_service.domain.characters``): NUL in no text field (key and tags
  too), every other character kept, whatever the field and entry point;
- OpenAI content arrays: text parts are joined; a part of another type is refused;
- clear words for NaN, a raw control character in JSON, a body that is not UTF-8, a bad
  setting, an unreachable Qdrant; ``POST /v1/maintenance/run`` without a body is ``{}``.
"""

from __future__ import annotations

import io
import json

import pytest

from memory_service.cli import main
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ConfigurationError, InvalidInputError, MemoryServiceError
from memory_service.domain.facts import Fact, Source
from memory_service.domain.limits import MAX_SESSION_MESSAGE_BYTES
from memory_service.domain.messages import Msg, check_message, content_text
from memory_service.longterm.fusion import validate_query
from memory_service.pipeline.transfer import parse_import
from tests.support.api import ACME_ADMIN_KEY, NDJSON, append, assert_error, auth, record

ALICE = RuntimeContext("acme", "alice", "s1")
JSON = {"Content-Type": "application/json"}


def _stored(client, session: str = "s1"):
    return client.get(f"/v1/sessions/{session}", params={"user_id": "alice"}, headers=auth())


# -- 9. the per-message limit covers the whole message ---------------------------------------


def _metadata_of(total_bytes: int) -> dict[str, str]:
    """Many small keys: about ``total_bytes`` of metadata beside a one-character content."""
    return {f"k{i}": "v" * 40 for i in range(total_bytes // 48)}


def test_a_message_over_the_limit_with_its_metadata_is_refused(api_client):
    big = {"role": "user", "content": "x", "metadata": _metadata_of(MAX_SESSION_MESSAGE_BYTES)}
    response = append(api_client, "s1", [big])
    assert_error(response, 422, "message_too_large")
    assert "metadata" in response.json()["error"]["message"]
    assert _stored(api_client).status_code == 404  # nothing written: no state, no log


def test_a_message_under_the_limit_with_metadata_is_kept(api_client):
    fine = {
        "role": "user",
        "content": "x",
        "metadata": _metadata_of(MAX_SESSION_MESSAGE_BYTES // 2),
    }
    assert append(api_client, "s1", [fine]).status_code == 200


def test_the_session_refuses_a_message_too_large_whatever_the_entry_point(api_client):
    memory = api_client.app.state.services.shortterm
    big = Msg.user("x", metadata=_metadata_of(MAX_SESSION_MESSAGE_BYTES))
    with pytest.raises(InvalidInputError) as refused:
        memory.append(ALICE, [big])
    assert refused.value.code == "message_too_large"
    assert memory.list_sessions(ALICE) == []


# -- one limit, one code: the service's own, whatever the entry point -----------------------

# Each over its limit by a little; ASCII, so a limit in bytes is not met by characters alone.
OVER_A_LIMIT = [
    ("/v1/memories", {"facts": [{"text": "ok", "source": {"text": "w" * 3000}}]}, "invalid_source"),
    (
        "/v1/memories",
        {"facts": [{"text": "ok", "source": {"origin": "o" * 300}}]},
        "invalid_source",
    ),
    ("/v1/memories", {"facts": [{"text": "ok", "source": {"messages": [-1]}}]}, "invalid_source"),
    ("/v1/memories", {"facts": [{"text": "x" * 9000}]}, "fact_too_large"),
    ("/v1/memories/search", {"query": "q" * 5000}, "query_too_large"),
    (
        "/v1/sessions/s1/messages",
        {"messages": [{"role": "user", "content": "x" * (MAX_SESSION_MESSAGE_BYTES + 1)}]},
        "message_too_large",
    ),
]


@pytest.mark.parametrize(("path", "body", "code"), OVER_A_LIMIT)
def test_a_value_over_its_limit_has_the_services_code_over_http(api_client, path, body, code):
    """The code the service itself raises for it (the CLI's line, an import's, MCP's), not
    ``validation_error``; nothing is written."""
    response = api_client.post(path, json={"user_id": "alice", **body}, headers=auth())
    assert_error(response, 422, code)
    listed = api_client.get("/v1/memories", params={"user_id": "alice"}, headers=auth())
    assert listed.json()["items"] == [] and _stored(api_client).status_code == 404


@pytest.mark.parametrize(
    ("refused", "code"),
    [
        (lambda: Fact("ok", source=Source(text="w" * 3000)).validate(), "invalid_source"),
        (lambda: Fact("ok", source=Source(origin="o" * 300)).validate(), "invalid_source"),
        (lambda: Fact("ok", source=Source(messages=(-1,))).validate(), "invalid_source"),
        (lambda: Fact("x" * 9000).validate(), "fact_too_large"),
        (lambda: validate_query("q" * 5000, 5, 0.0), "query_too_large"),
        (
            lambda: check_message(Msg.user("x" * (MAX_SESSION_MESSAGE_BYTES + 1))),
            "message_too_large",
        ),
    ],
)
def test_the_service_raises_the_same_codes(refused, code):
    """What the CLI and the memory tools answer: the service's own checks."""
    with pytest.raises(InvalidInputError) as caught:
        refused()
    assert caught.value.code == code


# -- 11. one rule for characters: NUL in no text field, every other character kept ----------

NUL_FACT_FIELDS = [
    ({"text": "nul \x00 inside"}, "invalid_fact"),
    ({"text": "ok", "key": "user\x00city"}, "invalid_fact"),
    ({"text": "ok", "tags": ["fine", "a\x00"]}, "invalid_fact"),
    ({"text": "ok", "source": {"origin": "crm\x00"}}, "invalid_source"),
    ({"text": "ok", "source": {"text": "said \x00 this"}}, "invalid_source"),
]


@pytest.mark.parametrize(("fields", "code"), NUL_FACT_FIELDS)
def test_nul_in_any_fact_field_is_refused_over_http(api_client, fields, code):
    body = {"user_id": "alice", "facts": [fields]}
    response = api_client.post("/v1/memories", json=body, headers=auth())
    assert_error(response, 422, code)
    assert "NUL" in response.json()["error"]["message"]
    listed = api_client.get("/v1/memories", params={"user_id": "alice"}, headers=auth())
    assert listed.json()["items"] == []


@pytest.mark.parametrize(("fields", "code"), NUL_FACT_FIELDS)
def test_the_same_rule_in_an_import_line(fields, code):
    line = json.dumps({"tenant_id": "acme", "user_id": "alice", **fields})
    good, bad = parse_import([line])
    assert good == [] and len(bad) == 1 and "NUL" in bad[0].message, bad


@pytest.mark.parametrize(
    ("fact", "code"),
    [
        (Fact("nul \x00"), "invalid_fact"),
        (Fact("ok", key="user\x00city"), "invalid_fact"),
        (Fact("ok", tags=("a\x00",)), "invalid_fact"),
        (Fact("ok", source=Source(origin="a\x00b")), "invalid_source"),
    ],
)
def test_the_same_rule_in_the_service_itself(fact, code):
    with pytest.raises(InvalidInputError) as refused:
        fact.validate()
    assert refused.value.code == code


SAID = "line one\nline\ttwo\r \x1b[31mred\x1b[0m \x07 \u2028"


def test_every_other_character_is_kept_in_every_field(api_client):
    """Line breaks, tabs and escape sequences are what was said: kept in a fact's text, key,
    tags and source, and in a message's content and name (the ledgers escape them)."""
    fact = {"text": SAID, "key": SAID, "tags": [SAID], "source": {"origin": SAID, "text": SAID}}
    body = {"user_id": "alice", "facts": [fact]}
    assert api_client.post("/v1/memories", json=body, headers=auth()).status_code == 200
    listed = api_client.get("/v1/memories", params={"user_id": "alice"}, headers=auth()).json()
    [item] = listed["items"]
    assert (item["text"], item["key"], item["tags"]) == (SAID.strip(), SAID, [SAID])
    assert item["source"]["origin"] == SAID and item["source"]["text"] == SAID
    message = {"role": "user", "content": SAID, "name": SAID}
    assert append(api_client, "s1", [message]).status_code == 200
    assert _stored(api_client).json()["messages"][0]["content"] == SAID


@pytest.mark.parametrize(
    ("search", "code"),
    [
        ({"query": "x", "filter": {"key": "a\x00b"}}, "invalid_filter"),
        ({"query": "x", "filter": {"tags_any": ["a\x00"]}}, "invalid_filter"),
        ({"query": "x\x00"}, "invalid_query"),
    ],
)
def test_filters_and_queries_follow_the_rule(api_client, search, code):
    body = {"user_id": "alice", **search}
    response = api_client.post("/v1/memories/search", json=body, headers=auth())
    assert_error(response, 422, code)


def test_a_session_search_query_follows_the_rule(api_client):
    memory = api_client.app.state.services.shortterm
    with pytest.raises(InvalidInputError) as refused:
        memory.search(ALICE, "x\x00")  # PostgreSQL's text could not hold it
    assert refused.value.code == "invalid_query"
    body = {"user_id": "alice", "query": "x\x00"}
    response = api_client.post("/v1/sessions/search", json=body, headers=auth())
    assert response.status_code == 422 and "NUL" in response.json()["error"]["message"]


def test_the_cli_follows_the_rule(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO("a fact with a \x00 in it\n"))
    assert main(["record", "--workspace", str(tmp_path / "ws"), "--user", "alice"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "must not contain NUL" in err[0]
    assert not (tmp_path / "ws").exists()


# -- 14. OpenAI content arrays ---------------------------------------------------------------


def test_text_parts_are_joined(api_client):
    parts = [{"type": "text", "text": "multi"}, {"type": "text", "text": "part"}]
    response = append(api_client, "s1", [{"role": "user", "content": parts}])
    assert response.status_code == 200, response.text
    assert response.json()["appended"][0]["content"] == "multi\npart"
    assert _stored(api_client).json()["messages"][0]["content"] == "multi\npart"


def test_an_assistants_refusal_part_is_its_text(api_client):
    parts = [{"type": "refusal", "refusal": "I cannot help with that."}]
    response = append(api_client, "s1", [{"role": "assistant", "content": parts}])
    assert response.status_code == 200, response.text
    assert response.json()["appended"][0]["content"] == "I cannot help with that."


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-1"}},
        {"type": "text"},
        {"text": "no type"},
        7,
    ],
)
def test_other_parts_are_refused_and_nothing_is_written(api_client, part):
    content = [{"type": "text", "text": "look at this"}, part]
    response = append(api_client, "s1", [{"role": "user", "content": content}])
    assert_error(response, 422, "unsupported_content")
    assert "content" in response.json()["error"]["message"]
    assert _stored(api_client).status_code == 404


def test_msg_from_openai_follows_the_same_rule():
    assert (
        Msg.from_openai({"role": "user", "content": [{"type": "text", "text": "a"}]}).content == "a"
    )
    with pytest.raises(InvalidInputError) as refused:
        content_text([{"type": "image_url", "image_url": {"url": "x"}}])
    assert refused.value.code == "unsupported_content"
    assert "image_url" in refused.value.message


def test_the_openapi_document_shows_content_arrays(api_client):
    schema = api_client.get("/openapi.json").json()
    content = schema["components"]["schemas"]["MessageIn"]["properties"]["content"]
    assert {"string", "array", "null"} <= {option.get("type") for option in content["anyOf"]}


# -- 16. clear words ---------------------------------------------------------------------------


def test_nan_is_not_a_finite_number(api_client):
    body = b'{"user_id": "alice", "query": "x", "threshold": NaN}'
    response = api_client.post("/v1/memories/search", content=body, headers=auth() | JSON)
    assert_error(response, 422, "validation_error")
    assert response.json()["error"]["message"] == "threshold: Input should be a finite number"


def test_nan_from_the_cli_says_what_it_got(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    argv = ["search", "--workspace", str(tmp_path / "ws"), "--user", "a", "--threshold", "nan", "x"]
    assert main(argv) == 2
    assert "threshold must be a number between -1 and 1, not nan" in capsys.readouterr().err


def test_a_raw_control_character_in_json_says_where_and_what(api_client):
    body = b'{"user_id": "alice",\n "query": "tab\there"}'
    response = api_client.post("/v1/memories/search", content=body, headers=auth() | JSON)
    assert_error(response, 422, "validation_error")
    message = response.json()["error"]["message"]
    assert message.startswith(
        "the body is not JSON (a control character inside a string at line 2, column 15)"
    ), message
    assert "\\t" in message


def test_broken_json_says_where(api_client):
    response = api_client.post(
        "/v1/memories/search", content=b'{"user_id": "alice",}', headers=auth() | JSON
    )
    assert_error(response, 422, "validation_error")
    assert "at line 1, column 21" in response.json()["error"]["message"]


def test_a_body_that_is_not_utf8_says_so(api_client):
    body = b'{"user_id": "alice", "query": "caf\xe9"}'
    response = api_client.post("/v1/memories/search", content=body, headers=auth() | JSON)
    assert_error(response, 400, "bad_request")
    message = response.json()["error"]["message"]
    assert "not UTF-8" in message and "0xe9" in message


def test_maintenance_runs_without_a_body(api_client):
    admin = auth(ACME_ADMIN_KEY)
    record(api_client, "alice", "Alice keeps bees")
    bare = api_client.post("/v1/maintenance/run", headers=admin)
    assert bare.status_code == 200, bare.text
    empty = api_client.post("/v1/maintenance/run", json={}, headers=admin)
    assert empty.status_code == 200
    assert [r["user_id"] for r in bare.json()["reports"]] == ["alice"]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("MEMORY_LONGTERM__RETRIEVAL_PRESET", "nope"),
        ("MEMORY_COMPACTION__KEEP_LAST", "500"),
        ("MEMORY_POSTGRES__DSN", None),  # MEMORY_STATE__BACKEND=postgres without it
    ],
)
def test_a_bad_setting_names_its_variable(monkeypatch, tmp_path, variable, value):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    if value is None:
        monkeypatch.setenv("MEMORY_STATE__BACKEND", "postgres")
        monkeypatch.delenv(variable, raising=False)
    else:
        monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as refused:
        load_settings(workspace=tmp_path / "ws")
    assert f"{variable}:" in refused.value.message, refused.value.message


def test_an_unreachable_qdrant_names_its_variable(tmp_path, embedder, monkeypatch):
    from memory_service.services import build_services
    from tests.support.server import free_port

    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    url = f"http://127.0.0.1:{free_port()}"
    settings = load_settings(
        workspace=tmp_path / "ws",
        longterm={"backend": "qdrant"},
        qdrant={"url": url, "timeout_s": 1},
    )
    with pytest.raises(MemoryServiceError) as refused:
        build_services(settings, embedder=embedder).close()
    assert refused.value.message.startswith(f"MEMORY_QDRANT__URL {url!r}:"), refused.value.message


def test_import_of_a_line_with_nan_confidence_says_it(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    line = '{"tenant_id": "default", "user_id": "a", "text": "x", "confidence": NaN}\n'
    monkeypatch.setattr("sys.stdin", io.StringIO(line))
    assert main(["import", "--workspace", str(tmp_path / "ws")]) == 2
    assert "confidence must be a number between 0 and 1, not nan" in capsys.readouterr().err


def test_the_import_route_reads_ndjson(api_client):
    """(The import route reads its body itself: a bad line is a bad line, not invalid_json.)"""
    response = api_client.post(
        "/v1/import", content=b"{not json\n", headers=auth(ACME_ADMIN_KEY) | NDJSON
    )
    assert_error(response, 422, "bad_lines")
