"""Long-term memory's rules hold at every entry point with one code: the HTTP API, MCP, the
model's memory tools, the CLI (its line says the same message) and the library itself. The
use cases (``memory_service.usecases.memories``) are where each rule is kept; nothing is
written by a refused request."""

from __future__ import annotations

import pytest

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import ForbiddenError, InvalidInputError
from memory_service.domain.facts import Fact, Source
from memory_service.domain.limits import MAX_QUERY_BYTES
from memory_service.usecases.memories import RecordFacts, SearchFacts
from memory_service.usecases.rights import MODEL, OPERATOR, Writer

ALICE = RuntimeContext("acme", "alice", "s1")
CLI_ALICE = RuntimeContext("default", "alice")
OVER = "q" * (MAX_QUERY_BYTES + 1)  # ASCII: over in bytes as in characters

BAD_QUERIES = [
    pytest.param(OVER, "query_too_large", id="over-the-limit"),
    pytest.param("é" * (MAX_QUERY_BYTES // 2 + 1), "query_too_large", id="over-in-bytes-only"),
    pytest.param("", "invalid_query", id="empty"),
    pytest.param("a \x00 b", "invalid_query", id="nul"),
]


def _nothing_stored(entry) -> None:
    for ctx in (RuntimeContext("acme", "alice"), CLI_ALICE):
        assert entry.services.longterm.list(ctx).items == []


@pytest.mark.parametrize(("query", "code"), BAD_QUERIES)
def test_a_bad_recall_query_has_one_code_everywhere(entry, capsys, query, code):
    with pytest.raises(InvalidInputError) as refused:  # the rule, once
        SearchFacts(CLI_ALICE, query)
    assert refused.value.code == code
    body = {"user_id": "alice", "query": query}
    over_http = entry.http("POST", "/v1/memories/search", json=body)
    assert (over_http.status, over_http.code) == (422, code)
    assert entry.mcp("memory_search", {"query": query}).code == code
    assert entry.tool(ALICE, "memory_search", {"query": query}).code == code
    assert entry.cli(capsys, "search", "--user", "alice", query).message == refused.value.message
    with pytest.raises(InvalidInputError) as library:  # a library caller's own guard
        entry.services.longterm.retrieve(ALICE, query)
    assert library.value.code == code


def test_a_query_at_the_limit_is_searched_everywhere(entry):
    at_limit = "q" * MAX_QUERY_BYTES
    response = entry.client.post(
        "/v1/memories/search",
        json={"user_id": "alice", "query": at_limit},
        headers={"Authorization": "Bearer acme-key-0123456789abcdef"},
    )
    assert response.status_code == 200 and response.json() == {"hits": []}
    said = entry.tools.memory_search(ALICE, at_limit)
    assert said.startswith("No memory matches")


def test_a_source_session_not_the_users_is_unknown_session_everywhere(entry, capsys):
    fact = {"text": "Alice keeps bees", "source": {"session_id": "not-hers"}}
    over_http = entry.http("POST", "/v1/memories", json={"user_id": "alice", "facts": [fact]})
    assert (over_http.status, over_http.code) == (422, "unknown_session")
    assert entry.mcp("memory_save", fact).code == "unknown_session"
    said = entry.cli(capsys, "record", "--user", "alice", "--source-session", "not-hers", "x")
    assert said.message == "source session_id 'not-hers' is not a session of user 'alice'"
    _nothing_stored(entry)


def test_the_session_a_tool_call_is_made_in_is_the_users_own(entry):
    """The model's memory_save names the session it is called in: the user's, even before
    its first message is stored; the use case takes it as such (``in_session``)."""
    said = entry.tools.memory_save(ALICE, "Alice keeps bees")
    assert said.startswith("Saved (id=")
    [fact] = entry.services.longterm.list(ALICE).items
    assert fact.source == Source("memory_save", "s1")


def test_writing_shared_memory_without_the_right_is_forbidden_everywhere(entry):
    facts = [{"text": "Refunds need a manager", "scope": "tenant"}]
    over_http = entry.http("POST", "/v1/memories", json={"user_id": "alice", "facts": facts})
    assert (over_http.status, over_http.code) == (403, "forbidden")
    assert "this key's role: application" in over_http.message
    for method, path, kwargs in [
        ("DELETE", "/v1/memories/x", {"params": {"user_id": "alice", "scope": "tenant"}}),
        ("POST", "/v1/memories/x/confirm", {"json": {"user_id": "alice", "scope": "tenant"}}),
    ]:
        refused = entry.http(method, path, **kwargs)
        assert (refused.status, refused.code) == (403, "forbidden"), path
    # MCP's tools and the model's memory tools write as the model, which has no such right
    tenant = RuntimeContext("acme", "alice", scope="tenant")
    with pytest.raises(ForbiddenError) as refused:
        RecordFacts(tenant, (Fact("Refunds need a manager"),), MODEL)
    assert refused.value.code == "forbidden" and "a model's memory tool" in refused.value.message
    RecordFacts(tenant, (Fact("Refunds need a manager"),), Writer.of_role("curator"))
    RecordFacts(tenant, (Fact("Refunds need a manager"),), OPERATOR)  # the CLI's
    _nothing_stored(entry)
    assert entry.services.longterm.list(tenant).items == []


def test_a_fact_that_is_not_there_is_not_found_everywhere(entry, capsys):
    missing = "0b5f3c1e-0000-4000-8000-000000000000"
    for method, path, kwargs in [
        ("GET", f"/v1/memories/{missing}", {"params": {"user_id": "alice"}}),
        ("DELETE", f"/v1/memories/{missing}", {"params": {"user_id": "alice"}}),
        ("PATCH", f"/v1/memories/{missing}", {"json": {"user_id": "alice", "importance": 3}}),
        ("POST", f"/v1/memories/{missing}/confirm", {"json": {"user_id": "alice"}}),
    ]:
        refused = entry.http(method, path, **kwargs)
        assert (refused.status, refused.code) == (404, "not_found"), path
    for tool, arguments in [
        ("memory_get", {"id": missing}),
        ("memory_delete", {"id": missing}),
        ("memory_update", {"id": missing, "importance": 3}),
        ("memory_confirm", {"id": missing}),
    ]:
        assert entry.mcp(tool, arguments).code == "not_found", tool
    said = entry.cli(capsys, "confirm", "--user", "alice", missing)
    assert said.message == f"no memory {missing!r} for this user"


def test_a_null_that_may_not_be_is_one_code_over_http_and_mcp(entry):
    fact = Fact("Alice keeps bees")
    [result] = entry.services.longterm.record(RuntimeContext("acme", "alice"), [fact])
    body = {"user_id": "alice", "importance": None}
    over_http = entry.http("PATCH", f"/v1/memories/{result.id}", json=body)
    assert (over_http.status, over_http.code) == (422, "validation_error")
    over_mcp = entry.mcp("memory_update", {"id": result.id, "importance": None})
    assert over_mcp.code == "validation_error"
    assert over_mcp.message == over_http.message == "importance cannot be null"
