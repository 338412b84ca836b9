"""Every time a caller can send, at every entry point, fuzzed (hypothesis): out of range once
in UTC (``0001-01-01T00:00:00+14:00``), extreme offsets, the edges of years 1 and 9999, and
malformed values. None may answer 500 or print a traceback: an HTTP route answers 422 naming
the field, a CLI command one error line and exit 2, an MCP tool its error result with a code,
a memory tool an error text for the model; a refused write writes nothing.

The entry points are read from the code (``HTTP_TIMES`` is checked against the request
schemas), so a time field added later without a case here fails ``test_every_time_field``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from pydantic import BaseModel

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing, Principal
from memory_service.api.schemas import memories as memory_schemas
from memory_service.cli import main
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact, InvalidTimeError
from memory_service.domain.messages import ToolCall
from memory_service.mcp_server.caller import Caller
from memory_service.mcp_server.server import build_server
from memory_service.services import build_services
from memory_service.tools.memory_tools import MemoryTools
from tests.support.api import ACME_ADMIN_KEY, KEYS, NDJSON, auth

EXAMPLES = 15  # per entry point and field: ~25 of them, the whole file in a few seconds
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,  # the same examples every run: a failure here is never a fluke
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# -- the values ------------------------------------------------------------------------------

MAX_OFFSET = timedelta(hours=24) - timedelta(microseconds=1)  # what ``timezone`` allows
offsets = st.one_of(
    st.sampled_from([timedelta(hours=14), timedelta(hours=-14), MAX_OFFSET, -MAX_OFFSET]),
    st.timedeltas(min_value=-MAX_OFFSET, max_value=MAX_OFFSET),
).map(timezone)
zones = st.one_of(st.none(), st.just(UTC), offsets, st.timezones())
near_edges = st.one_of(
    st.datetimes(max_value=datetime(1, 1, 2), timezones=zones),
    st.datetimes(min_value=datetime(9999, 12, 30), timezones=zones),
)
as_text = st.sampled_from([datetime.isoformat, lambda d: d.isoformat().replace("+00:00", "Z")])
iso_times = st.builds(
    lambda d, f: f(d), st.one_of(near_edges, st.datetimes(timezones=zones)), as_text
)
malformed = st.one_of(
    st.sampled_from(
        [
            "0001-01-01T00:00:00+14:00",
            "9999-12-31T23:59:59-14:00",
            "0001-01-01T00:00:00+23:59:59.999999",
            "9999-12-31T23:59:59.999999-23:59",
            "0000-01-01T00:00:00Z",
            "10000-01-01T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "2024-01-01T24:00:01Z",
            "2024-01-01T00:00:00+24:00",
            "2024-01-01T00:00:00+99:99",
            "yesterday",
            "",
            " ",
            "2024-01-01\x00",
            "\ud800",
        ]
    ),
    st.text(max_size=30),
)
TEXT_TIMES = st.one_of(iso_times, malformed)
JSON_TIMES = st.one_of(
    TEXT_TIMES,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


def _utc(value: Any) -> datetime | None:
    """``value`` as a UTC time if it is one (the oracle, by the standard library alone)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def accepted(value: Any) -> bool:
    """Whether ``value`` is a time: an ISO-8601 text that UTC can hold."""
    return _utc(value) is not None


def in_future(value: Any) -> bool:
    return accepted(value) and _utc(value) > datetime.now(UTC)


# -- the service, once for the module ---------------------------------------------------------

ADMIN = Principal(tenant_id="acme", role="admin", key_id="admin")
USER = RuntimeContext("acme", "alice")


class Served:
    def __init__(self, services, client: TestClient, mcp, portal, fact_id: str) -> None:
        self.services, self.client, self.mcp, self.portal = services, client, mcp, portal
        self.fact_id = fact_id

    def stored(self) -> list[tuple[str, Any, Any]]:
        """What the user has: a refused write must leave it as it was."""
        page = self.services.longterm.list(USER, limit=1000, include_inactive=True)
        return sorted((f.id, f.expires_at, f.created_at) for f in page.items)

    def call_tool(self, name: str, arguments: dict[str, Any]):
        return self.portal.call(self.mcp.call_tool, name, arguments)


@pytest.fixture(scope="module")
def served(tmp_path_factory, embedder) -> Iterator[Served]:
    with pytest.MonkeyPatch.context() as patch, ExitStack() as stack:
        patch.delenv("MEMORY_CONFIG", raising=False)
        workspace = tmp_path_factory.mktemp("times") / "ws"
        services = build_services(load_settings(workspace=workspace), embedder=embedder)
        stack.callback(services.close)
        client = stack.enter_context(TestClient(create_app(services, ApiKeyRing(KEYS))))
        portal = stack.enter_context(start_blocking_portal())
        server = build_server(services, lambda _ctx: Caller(ADMIN, "alice"))
        mcp = stack.enter_context(portal.wrap_async_context_manager(Client(server)))
        fact_id = services.longterm.record(USER, [Fact("Alice keeps bees")])[0].id
        yield Served(services, client, mcp, portal, fact_id)


# -- HTTP -------------------------------------------------------------------------------------

FILTER_TIMES = ("created_after", "created_before", "as_of")
HTTP_TIMES = {  # request model: its time fields (a body's, a query's)
    "FactIn": ("expires_at",),
    "UpdateRequest": ("expires_at",),
    "FilterIn": FILTER_TIMES,
}


def _time_fields(model: type[BaseModel]) -> tuple[str, ...]:
    schema = model.model_json_schema()["properties"]
    return tuple(
        name
        for name, prop in schema.items()
        if "date-time" in json.dumps(prop) and "$ref" not in json.dumps(prop)
    )


def test_every_time_field_of_the_requests_is_fuzzed_here():
    """A request model with a time field this file does not fuzz fails here."""
    found = {
        name: fields
        for name, model in vars(memory_schemas).items()
        if isinstance(model, type) and issubclass(model, BaseModel)
        if name.endswith(("In", "Request")) and (fields := _time_fields(model))
    }
    assert found == HTTP_TIMES


def _assert_refused(response, field: str, *codes: str) -> None:
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] in codes, error
    assert field.rsplit(".", 1)[-1] in error["message"], error  # "facts.0.expires_at"


def _check(response, value: Any, field: str, *codes: str, future_refused: bool = False) -> None:
    assert response.status_code < 500, response.text
    if accepted(value) and not (future_refused and in_future(value)):
        assert response.status_code == 200, (value, response.text)
    else:
        _assert_refused(response, field, *codes)


@FUZZ
@given(value=JSON_TIMES)
def test_record_expires_at(served, value):
    before = served.stored()
    body = {"user_id": "alice", "facts": [{"text": "Alice keeps bees", "expires_at": value}]}
    response = served.client.post("/v1/memories", json=body, headers=auth(ACME_ADMIN_KEY))
    _check(response, value, "facts.0.expires_at", "invalid_time", "validation_error")
    if response.status_code != 200:
        assert served.stored() == before


@FUZZ
@given(value=JSON_TIMES)
def test_update_expires_at(served, value):
    before = served.stored()
    response = served.client.patch(
        f"/v1/memories/{served.fact_id}",
        json={"user_id": "alice", "expires_at": value},
        headers=auth(ACME_ADMIN_KEY),
    )
    _check(response, value, "expires_at", "invalid_time", "validation_error")
    if response.status_code != 200:
        assert served.stored() == before


@pytest.mark.parametrize("field", FILTER_TIMES)
def test_search_filter_times(served, field):
    @FUZZ
    @given(value=JSON_TIMES)
    def run(value):
        body = {"user_id": "alice", "query": "bees", "filter": {field: value}}
        response = served.client.post(
            "/v1/memories/search", json=body, headers=auth(ACME_ADMIN_KEY)
        )
        codes = ("invalid_filter", "validation_error")
        _check(response, value, f"filter.{field}", *codes, future_refused=field == "as_of")

    run()


@pytest.mark.parametrize("field", FILTER_TIMES)
def test_list_filter_times(served, field):
    @FUZZ
    @given(value=TEXT_TIMES.filter(lambda v: "\x00" not in v))  # no NUL in a URL
    def run(value):
        response = served.client.get(
            "/v1/memories",
            params={"user_id": "alice", field: value},
            headers=auth(ACME_ADMIN_KEY),
        )
        codes = ("invalid_filter", "validation_error")
        _check(response, value, field, *codes, future_refused=field == "as_of")

    run()


IMPORT_TIMES = ("created_at", "expires_at", "valid_to", "last_accessed_at")


@pytest.mark.parametrize("field", IMPORT_TIMES)
def test_import_line_times(served, field):
    @FUZZ
    @given(value=JSON_TIMES)
    def run(value):
        before = served.stored()
        line = {"tenant_id": "acme", "user_id": "alice", "text": "Alice keeps bees"}
        response = served.client.post(
            "/v1/import",
            content=json.dumps({**line, field: value}) + "\n",
            headers={**auth(ACME_ADMIN_KEY), **NDJSON},
        )
        assert response.status_code < 500, response.text
        if not accepted(value) and value not in (None, ""):
            _assert_refused(response, field, "bad_lines")
            assert served.stored() == before

    run()


# -- a creation time in the future ------------------------------------------------------------

FAR_FUTURE = "2999-01-01T00:00:00Z"


def _soon(minutes: float) -> str:
    return (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat()


@pytest.mark.parametrize("field", ["created_at", "updated_at"])
def test_an_import_line_from_the_future_is_refused_naming_the_field(served, field):
    """A fact created in 2999 would never be in an ``as_of`` answer: refused beyond a small
    clock skew (a minute ahead is a clock's, an hour is not)."""
    before = served.stored()
    line = {"tenant_id": "acme", "user_id": "alice", "text": "Alice keeps bees"}
    for value in (FAR_FUTURE, _soon(60)):
        response = served.client.post(
            "/v1/import",
            content=json.dumps({**line, field: value}) + "\n",
            headers={**auth(ACME_ADMIN_KEY), **NDJSON},
        )
        _assert_refused(response, field, "bad_lines")
        assert "future" in response.json()["error"]["bad_lines"][0]["message"]
        assert served.stored() == before
    skewed = {**line, "text": "Alice keeps wasps", field: _soon(1)}
    response = served.client.post(
        "/v1/import", content=json.dumps(skewed) + "\n", headers={**auth(ACME_ADMIN_KEY), **NDJSON}
    )
    assert response.status_code == 200, response.text


def test_a_fact_recorded_from_the_future_is_refused_with_invalid_time(served):
    """Recording (the in-process API, the memory tools' and the flush's way in) refuses it as
    import does: ``invalid_time`` naming ``created_at``, nothing written."""
    before = served.stored()
    with pytest.raises(InvalidTimeError) as refused:
        served.services.longterm.record(
            USER, [Fact("Alice keeps moths"), Fact("Alice keeps bats", created_at=FAR_FUTURE)]
        )
    assert refused.value.code == "invalid_time" and refused.value.field == "created_at"
    assert served.stored() == before


def test_the_cli_import_refuses_a_line_from_the_future(cli_workspace, capsys, monkeypatch):
    import io

    line = {"tenant_id": "default", "user_id": "alice", "text": "Alice keeps bats"}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**line, "created_at": FAR_FUTURE})))
    code = main(["import", "--workspace", cli_workspace])
    captured = capsys.readouterr()
    assert code == 2 and "line 1: created_at" in captured.err and "future" in captured.err


# -- MCP --------------------------------------------------------------------------------------


def _tool_error(result) -> tuple[str, str]:
    """The code and message of an error result, read from its text: the error envelope
    (``{"error": {"code", "message"}}``) or the older ``error (code): message``."""
    assert result.is_error, result
    text = result.content[0].text
    if text.startswith("{"):
        error = json.loads(text)["error"]
        code, message = error["code"], error["message"]
    else:
        assert text.startswith("error ("), text
        code, message = text.removeprefix("error (").split("): ", 1)
    assert code != "internal_error", text
    return code, message


@FUZZ
@given(value=JSON_TIMES)
def test_mcp_memory_save_expires_at(served, value):
    before = served.stored()
    result = served.call_tool("memory_save", {"text": "Alice keeps bees", "expires_at": value})
    if accepted(value):
        assert not result.is_error, result
    else:
        code, text = _tool_error(result)
        assert code in ("invalid_time", "invalid_arguments") and "expires_at" in text
        assert served.stored() == before


@FUZZ
@given(value=JSON_TIMES)
def test_mcp_memory_update_expires_at(served, value):
    before = served.stored()
    result = served.call_tool("memory_update", {"id": served.fact_id, "expires_at": value})
    if accepted(value):
        assert not result.is_error, result
    else:
        code, text = _tool_error(result)
        assert code in ("invalid_time", "invalid_arguments") and "expires_at" in text
        assert served.stored() == before


@pytest.mark.parametrize("field", FILTER_TIMES)
def test_mcp_memory_search_filter_times(served, field):
    @FUZZ
    @given(value=JSON_TIMES)
    def run(value):
        result = served.call_tool("memory_search", {"query": "bees", "filter": {field: value}})
        if accepted(value) and not (field == "as_of" and in_future(value)):
            assert not result.is_error, result
        elif not accepted(value):
            code, text = _tool_error(result)
            assert code in ("invalid_filter", "invalid_arguments") and field in text
        elif result.is_error:  # a future as_of: refused once the filter reaches the service
            assert _tool_error(result)[0] == "invalid_filter"

    run()


# -- the memory tools a model calls (POST /v1/chat) -------------------------------------------


@FUZZ
@given(value=JSON_TIMES)
def test_memory_tool_search_as_of(served, value):
    tools = MemoryTools(served.services.settings.workspace, served.services.longterm)
    arguments = json.dumps({"query": "bees", "as_of": value})
    outcome = tools.run(USER, ToolCall("call_1", "memory_search", arguments))
    if accepted(value) and not in_future(value):
        assert outcome.ok, outcome
    else:
        assert not outcome.ok, outcome  # "as_of must be a string": the tools' type errors
        assert outcome.error_code in ("invalid_filter", "invalid_input"), outcome
        assert "as_of" in outcome.text, outcome


# -- the CLI ----------------------------------------------------------------------------------

CLI_OPTIONS = ("--created-after", "--created-before", "--as-of")


@pytest.fixture
def cli_workspace(tmp_path, embedder, monkeypatch) -> str:
    """A workspace for the CLI, whose commands build their services on the shared embedder
    (not a model load per example)."""
    from memory_service.services import container

    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_LONGTERM__BACKEND"):
        monkeypatch.delenv(name, raising=False)
    build = container.build_services
    monkeypatch.setattr(container, "build_services", lambda s, **kw: build(s, embedder=embedder))
    ws = str(tmp_path / "ws")
    assert main(["record", "--workspace", ws, "--user", "alice", "Alice keeps bees"]) == 0
    return ws


def _one_error_line(capsys, code: int, field: str) -> None:
    captured = capsys.readouterr()
    assert code == 2, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memory-service: error: "), captured.err
    assert field in lines[0] and "Traceback" not in captured.err


@pytest.mark.parametrize("command", ["search", "list"])
@pytest.mark.parametrize("option", CLI_OPTIONS)
def test_cli_filter_times(cli_workspace, capsys, command, option):
    field = option.removeprefix("--").replace("-", "_")
    query = ["bees"] if command == "search" else []

    @FUZZ
    @given(value=TEXT_TIMES.filter(lambda v: "\x00" not in v))  # argv cannot hold NUL
    def run(value):
        argv = [command, "--workspace", cli_workspace, "--user", "alice", *query]
        code = main([*argv, f"{option}={value}"])
        if accepted(value) and not (field == "as_of" and in_future(value)):
            assert code == 0, capsys.readouterr()
            capsys.readouterr()
        else:
            _one_error_line(capsys, code, field)

    run()


@pytest.mark.parametrize("field", IMPORT_TIMES)
def test_cli_import_line_times(cli_workspace, capsys, monkeypatch, field):
    import io

    @FUZZ
    @given(value=JSON_TIMES)
    def run(value):
        line = {"tenant_id": "default", "user_id": "alice", "text": "Alice keeps bees"}
        monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**line, field: value}) + "\n"))
        code = main(["import", "--workspace", cli_workspace])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err
        if accepted(value) or value in (None, ""):
            assert code == 0, captured
        else:
            assert code == 2, captured
            assert f"line 1: {field}" in captured.err

    run()


# -- every backend at the edges of time ---------------------------------------------------------

FIRST = datetime(1, 1, 1, tzinfo=UTC)
LAST = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def test_every_backend_stores_and_filters_the_edges_of_time(memory):
    """Times a caller may send, at the very edges UTC can hold: stored, listed, recalled and
    filtered by each backend, never an overflow (an importance TTL past 9999: never expires)."""
    from memory_service.domain.fact_filter import FactFilter

    alice = RuntimeContext("acme", "alice")
    memory.record(
        alice,
        [
            Fact("Alice keeps bees until the end of time", expires_at=LAST),
            Fact("Alice kept bees at the dawn of time", created_at=FIRST, importance=10),
        ],
    )
    with pytest.raises(InvalidTimeError):  # created in the future: no backend stores it
        memory.record(alice, [Fact("Alice will keep bees in the last year", created_at=LAST)])
    assert len(memory.list(alice).items) == 2
    for narrowed in (
        FactFilter(as_of=FIRST),
        FactFilter(created_after=FIRST),
        FactFilter(created_before=LAST),
        FactFilter(created_after=FIRST, created_before=LAST, as_of=datetime.now(UTC)),
    ):
        memory.retrieve(alice, "bees", 5, -1.0, filter=narrowed)
        memory.list(alice, filter=narrowed)
    [dawn] = memory.retrieve(alice, "dawn", 1, -1.0, filter=FactFilter(as_of=FIRST))
    assert dawn.fact.created_at == FIRST
