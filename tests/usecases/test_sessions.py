"""Short-term memory's query rule holds at every entry point with one code: the session
search of the HTTP API, MCP, the model's ``session_search`` and the library."""

from __future__ import annotations

import pytest

from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.limits import MAX_QUERY_BYTES
from memory_service.domain.messages import Msg
from memory_service.usecases.sessions import SearchSessions

ALICE = RuntimeContext("acme", "alice", "s1")


@pytest.mark.parametrize(
    ("query", "code"),
    [
        pytest.param("q" * (MAX_QUERY_BYTES + 1), "query_too_large", id="over-the-limit"),
        pytest.param("", "invalid_query", id="empty"),
        pytest.param("a \x00 b", "invalid_query", id="nul"),
    ],
)
def test_a_bad_session_query_has_one_code_everywhere(entry, query, code):
    with pytest.raises(InvalidInputError) as refused:
        SearchSessions(ALICE, query)
    assert refused.value.code == code
    over_http = entry.http("POST", "/v1/sessions/search", json={"user_id": "alice", "query": query})
    assert (over_http.status, over_http.code) == (422, code)
    assert entry.mcp("session_search", {"query": query}).code == code
    assert entry.tool(ALICE, "session_search", {"query": query}).code == code
    with pytest.raises(InvalidInputError) as library:
        entry.services.shortterm.search(ALICE, query)
    assert library.value.code == code


def test_a_query_at_the_limit_finds_what_was_said(entry):
    entry.services.shortterm.append(ALICE, [Msg.user("My sister Ana lives in Oslo.")])
    query = "oslo " + "x" * (MAX_QUERY_BYTES - 5)
    response = entry.client.post(
        "/v1/sessions/search",
        json={"user_id": "alice", "query": query},
        headers={"Authorization": "Bearer acme-key-0123456789abcdef"},
    )
    assert response.status_code == 200
    assert [h["session_id"] for h in response.json()["hits"]] == ["s1"]
