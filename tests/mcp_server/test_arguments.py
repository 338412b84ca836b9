"""Every argument an MCP tool's schema offers reaches the service.

For each tool the server lists (an admin key's, whose tools take every argument a user key's
do and ``user_id``) and each leaf of its input schema (``filter.kind``, ``source.origin``:
the properties of an object argument count one by one), two calls through the SDK's client
that differ only in that argument must differ in what reaches the real services: the
long-term and short-term memory's method calls, recorded on their way in. A tool that calls
neither (``memory_read`` reads the user's files) must answer differently instead. The cases
name a value for every leaf: a property added to a schema without one fails here, so no
argument is advertised and then dropped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from typing import Any

import pytest
from anyio.from_thread import start_blocking_portal
from mcp import Client

from memory_service.api.keys import Principal
from memory_service.domain.context import RuntimeContext
from memory_service.domain.facts import Fact
from memory_service.mcp_server.caller import Caller
from memory_service.mcp_server.server import build_server
from tests.support.api import ACME_KEY, append, auth, search

ADMIN = Principal("acme", "admin", "test")
USER = Principal("acme", "user", "test")
ALICE = RuntimeContext("acme", "alice")
ONE_VALUE = object()  # a leaf whose schema allows one value (``const``): nothing to vary
DELETED = ("Delete me", "And me")


class Recording:
    """The real object, with each method call recorded (name and arguments) before it runs."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        if not callable(value):
            return value

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(f"{name}{args!r}{sorted(kwargs.items())!r}")
            return value(*args, **kwargs)

        return recorded


@dataclasses.dataclass
class Answer:
    calls: list[str]
    is_error: bool
    text: str


class Tools:
    """The MCP server on recorded services, driven by the SDK's in-process client: one client
    session for every call, as an agent keeps one: a session lists the tools and compiles
    their output schemas once (with a new session per call the main test took 7.4 s, with one
    1.0 s; this machine, 2026-12-04). Use it as a context manager."""

    def __init__(self, services: Any, principal: Principal = ADMIN) -> None:
        self.longterm = Recording(services.longterm)
        self.shortterm = Recording(services.shortterm)
        recorded = dataclasses.replace(services, longterm=self.longterm, shortterm=self.shortterm)
        self.server = build_server(recorded, lambda _ctx: Caller(principal, "alice"))
        self._open = contextlib.ExitStack()

    def __enter__(self) -> Tools:
        self._portal = self._open.enter_context(start_blocking_portal())
        self._client = self._open.enter_context(
            self._portal.wrap_async_context_manager(Client(self.server))
        )
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._open.close()

    def run(self, body: Any) -> Any:
        return self._portal.call(body, self._client)

    def text_tools(self) -> set[str]:
        """The tools whose result is text (no output schema)."""

        async def body(client: Client) -> Any:
            return {t.name for t in (await client.list_tools()).tools if t.output_schema is None}

        return self.run(body)

    def schemas(self) -> dict[str, dict[str, Any]]:
        async def body(client: Client) -> Any:
            return {t.name: t.input_schema for t in (await client.list_tools()).tools}

        return self.run(body)

    def call(self, tool: str, arguments: dict[str, Any]) -> Answer:
        self.longterm.calls.clear()
        self.shortterm.calls.clear()

        async def body(client: Client) -> Any:
            return await client.call_tool(tool, arguments)

        result = self.run(body)
        text = "".join(getattr(c, "text", "") for c in result.content)
        return Answer(self.longterm.calls + self.shortterm.calls, bool(result.is_error), text)


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """An argument's own schema: its ``$ref`` followed, the non-null branch of an ``anyOf``."""
    if "$ref" in schema:
        return _resolve(root["$defs"][schema["$ref"].rsplit("/", 1)[1]], root)
    branches = [s for s in schema.get("anyOf", ()) if s.get("type") != "null"]
    return _resolve(branches[0], root) if len(branches) == 1 else schema


def leaves(schema: dict[str, Any]) -> set[str]:
    """The schema's properties, an object property's own properties in its place."""
    found = set()
    for name, prop in schema.get("properties", {}).items():
        inner = _resolve(prop, schema)
        if inner.get("type") == "object" and inner.get("properties"):
            found |= {f"{name}.{sub}" for sub in inner["properties"]}
        else:
            found.add(name)
    return found


def _with(base: dict[str, Any], leaf: str, value: Any) -> dict[str, Any]:
    """``base`` with ``leaf`` (``a`` or ``a.b``) set to ``value``."""
    arguments = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    name, _, sub = leaf.partition(".")
    if sub:
        arguments[name] = {**arguments.get(name, {}), sub: value}
    else:
        arguments[name] = value
    return arguments


def cases(ids: dict[str, str], ledger: str, cursor: str) -> dict[str, tuple[dict, dict]]:
    """Per tool: the arguments every call starts from, and for each schema leaf a value unlike
    that start (a required one replaces it). A leaf given as ``(start, value)`` needs more
    than the tool's start (a source's message numbers need its session)."""
    return {
        "memory_search": (
            {"query": "coffee"},
            {
                "query": "tea",
                "top_k": 2,
                "threshold": 0.1,
                "mode": "bm25",
                "filter.kind": ["procedure"],
                "filter.tags_any": ["drinks"],
                "filter.tags_all": ["drinks"],
                "filter.min_importance": 7,
                "filter.key": "coffee",
                "filter.created_after": "2020-01-01T00:00:00Z",
                "filter.created_before": "2090-01-01T00:00:00Z",
                "filter.as_of": "2021-01-01T00:00:00Z",
                "filter.needs_verification": True,
                "agent_id": "support",
                "scopes": ["user"],
            },
        ),
        "memory_get": ({"id": ids["get"]}, {"id": ids["other"], "agent_id": "support"}),
        "memory_save": (
            {"text": "Alice cycles to work"},
            {
                "text": "Alice walks to work",
                "key": "commute",
                "kind": "event",
                "importance": 8,
                "confidence": 0.5,
                "tags": ["commute"],
                "source.origin": "crm",
                "source.session_id": "trip",
                "source.messages": ({"source": {"session_id": "trip"}}, [0]),
                "source.text": "I cycle to work",
                "expires_at": "2090-01-01T00:00:00Z",
                "scope": ONE_VALUE,
                "session_id": "trip",
            },
        ),
        "memory_update": (
            {"id": ids["get"]},
            {
                "id": ids["other"],
                "kind": "procedure",
                "importance": 9,
                "confidence": 0.25,
                "tags": ["updated"],
                "expires_at": "2091-01-01T00:00:00Z",
            },
        ),
        "memory_confirm": ({"id": ids["get"]}, {"id": ids["other"]}),
        "memory_delete": ({"id": ids["delete_a"]}, {"id": ids["delete_b"]}),
        "memory_list": ({}, {"limit": 1, "cursor": cursor, "include_inactive": True}),
        "memory_read": (
            {"path": f"memory/{ledger}"},
            {"path": "MEMORY.md", "start_line": 2, "end_line": 2},
        ),
        "memory_extract": (
            {"key": "pet", "text": "Alice has a parrot named Kiwi"},
            {"key": "ride", "text": "Alice rides a red scooter", "importance": 8, "kind": "event"},
        ),
        "memory_recall": ({"key": "coffee"}, {"key": "tea", "prefix": True}),
        "memory_consolidate": (
            {"keys_to_merge": ["tea"], "new_key": "tea", "text": "Alice drinks tea daily"},
            {
                "keys_to_merge": ["tea", "juice"],
                "new_key": "hot.drinks",
                "text": "Alice drinks tea twice a day",
            },
        ),
        "memory_prune": (
            {},
            {
                "ids": [ids["delete_a"]],
                "dry_run": ({"ids": [ids["delete_a"]]}, False),
                "max_importance": 5,
            },
        ),
        "session_search": ({"query": "Lisbon"}, {"query": "hotel", "limit": 1}),
        "session_list": ({}, {}),
        "session_get": ({"session_id": "trip"}, {"session_id": "home"}),
        "session_end": ({"session_id": "trip"}, {"session_id": "home"}),
    }


def _differs(a: Answer, b: Answer, text_result: bool = False) -> bool:
    """``b``'s argument made a difference: it reached a service call (``b`` made calls, and
    not ``a``'s), or, where neither called a service or the tool answers in text (whose
    answer has no time in it), ``b`` answered something else."""
    if bool(b.calls) and b.calls != a.calls:
        return True
    if a.calls and not text_result:
        return False
    return not b.is_error and b.text != a.text


@pytest.fixture
def seeded(apps, llm_server):
    """Services with alice's facts (ids by role), sessions ``trip`` and ``home``, her ledger
    and MEMORY.md, and a list cursor; an LLM whose flush finds nothing to keep, so
    ``session_end`` can end a session."""
    from tests.support.chat_script import Script

    llm_server.responder = Script()
    llm = {"base_url": llm_server.base_url, "model": "chat-model", "context_window": 8192}
    services, client = apps("a", llm=llm)
    memory = services.longterm

    texts = ["Alice takes her coffee black", "Alice drinks green tea", *DELETED]
    results = memory.record(ALICE, [Fact(text=t, tags=("drinks",)) for t in texts])
    ids = dict(zip(("get", "other", "delete_a", "delete_b"), (r.id for r in results), strict=True))
    for session, said in (("trip", "Book a hotel in Lisbon"), ("home", "Water the plants")):
        assert append(client, session, [{"role": "user", "content": said}]).status_code == 200
    user_dir = services.settings.workspace / "tenants" / "acme" / "users" / "alice"
    (ledger,) = (user_dir / "memory").glob("*.md")
    memory_md = user_dir / "MEMORY.md"
    if not memory_md.exists():
        memory_md.write_text("# Memory\n\n- Alice takes her coffee black\n", encoding="utf-8")
    cursor = memory.list(ALICE, limit=1).next_cursor
    assert cursor is not None
    return services, ids, ledger.name, cursor


def _restore(services: Any, ids: dict[str, str]) -> None:
    again = services.longterm.record(ALICE, [Fact(text=t, tags=("drinks",)) for t in DELETED])
    assert [r.id for r in again] == [ids["delete_a"], ids["delete_b"]]


def _restore_sessions(services: Any) -> None:
    """Alice's sessions again (``session_end`` clears the one it ends)."""
    from memory_service.domain.messages import Msg

    for session, said in (("trip", "Book a hotel in Lisbon"), ("home", "Water the plants")):
        ctx = RuntimeContext("acme", "alice", session)
        if services.shortterm.load(ctx).is_new:
            services.shortterm.append(ctx, [Msg.user(said)], compact=False)


def _restore_keyed(services: Any) -> None:
    """Alice's facts under ``pet``, ``tea`` and ``juice`` the newest again (an extract or a
    merge supersedes them)."""
    fragments = [
        Fact("Alice has a parrot named Kiwi", key="pet"),
        Fact("Alice brews sencha at noon", key="tea"),
        Fact("Alice squeezes oranges on Sundays", key="juice"),
    ]
    services.longterm.record(ALICE, fragments)


def test_every_argument_of_every_tool_reaches_the_service(seeded):
    services, ids, ledger, cursor = seeded
    with Tools(services) as tools:
        schemas = tools.schemas()
        text_tools = tools.text_tools()
        table = cases(ids, ledger, cursor)
        assert set(schemas) == set(table), "a tool without cases: add it to cases()"
        with Tools(services, USER) as user_tools:
            user_schemas = user_tools.schemas()
        for name, schema in schemas.items():
            assert leaves(user_schemas[name]) | {"user_id"} == leaves(schema)
            start, values = table[name]
            values = {**values, "user_id": "bob"}  # an admin key's: another user of the tenant
            assert set(values) == leaves(schema), f"{name}: cases() must give each schema leaf"
            for leaf, value in values.items():
                if value is ONE_VALUE:  # the schema's promise instead: any other value is refused
                    assert "const" in _resolve(schema["properties"][leaf], schema), (name, leaf)
                    refused = tools.call(name, _with(start, leaf, "something-else"))
                    assert refused.is_error and not refused.calls, (name, leaf, refused.text)
                    continue
                if name in ("memory_delete", "memory_prune"):  # a call may delete: again
                    _restore(services, ids)
                if name in ("memory_extract", "memory_consolidate"):  # keyed facts: again
                    _restore_keyed(services)
                if name == "session_end":  # each call ends a session: they are there again
                    _restore_sessions(services)
                base = dict(start)
                if isinstance(value, tuple):
                    extra, value = value
                    base = {k: v for k, v in {**base, **extra}.items() if v is not None}
                a = tools.call(name, base)
                assert not a.is_error, (name, base, a.text)
                if name not in ("memory_delete", "memory_prune"):  # twice: the same calls
                    assert tools.call(name, base).calls == a.calls, (name, base)
                arguments = _with(base, leaf, value)
                b = tools.call(name, arguments)
                if leaf != "user_id":  # bob has none of alice's facts or sessions
                    assert not b.is_error, (name, arguments, b.text)
                assert _differs(a, b, name in text_tools), (
                    f"{name}: {leaf}={value!r} never reaches the service"
                )


def test_search_filters_over_mcp_as_over_http(apps):
    """The same filters, the same hits: ``memory_search`` as ``POST /v1/memories/search``."""
    services, client = apps("a")
    facts = [
        {"text": "Alice takes her coffee black", "kind": "preference", "tags": ["coffee"]},
        {"text": "Grind the coffee beans before brewing", "kind": "procedure", "importance": 8},
        {"text": "Alice bought a coffee grinder", "kind": "event", "key": "grinder"},
    ]
    body = {"user_id": "alice", "facts": facts}
    assert client.post("/v1/memories", json=body, headers=auth(ACME_KEY)).status_code == 200
    with Tools(services, USER) as tools:
        filters = [
            {"kind": ["procedure"]},
            {"kind": ["preference", "event"]},
            {"tags_any": ["coffee"]},
            {"min_importance": 8},
            {"key": "grinder"},
            {"created_before": "2000-01-01T00:00:00Z"},
        ]
        for fact_filter in filters:
            over_http = search(client, "alice", "coffee", filter=fact_filter, top_k=10)
            assert over_http.status_code == 200, over_http.text
            expected = [h["text"] for h in over_http.json()["hits"]]

            async def body(session: Client, fact_filter=fact_filter) -> Any:
                return await session.call_tool(
                    "memory_search", {"query": "coffee", "filter": fact_filter, "top_k": 10}
                )

            got = tools.run(body)
            assert not got.is_error, got
            assert [h["text"] for h in got.structured_content["hits"]] == expected, fact_filter
            assert len(expected) < len(facts), fact_filter  # each filter leaves something out


def test_a_saved_source_names_only_the_users_own_sessions(apps):
    """As ``POST /v1/memories``: a source naming a session the user does not have is refused
    (``unknown_session``) and nothing is written, be it named or the call's own."""
    services, client = apps("a")
    with Tools(services, USER) as tools:

        async def save(session: Client, **arguments: Any) -> Any:
            return await session.call_tool("memory_save", arguments)

        refused = tools.run(lambda s: save(s, text="Alice flies", source={"session_id": "never"}))
        assert refused.is_error and '"unknown_session"' in refused.content[0].text
        implied = tools.run(
            lambda s: save(s, text="Alice flies", session_id="never", source={"messages": [0]})
        )
        assert implied.is_error and '"unknown_session"' in implied.content[0].text
        assert services.longterm.list(ALICE).items == []
        said = [{"role": "user", "content": "I fly on Monday."}]
        assert append(client, "now", said).status_code == 200
        own = tools.run(
            lambda s: save(s, text="Alice flies", session_id="now", source={"session_id": "now"})
        )
        assert not own.is_error, own
        (fact,) = services.longterm.list(ALICE).items
        assert (fact.session_id, fact.source.session_id) == ("now", "now")


@pytest.mark.parametrize(
    ("tool", "arguments", "code"),
    [
        ("memory_save", {"text": "ok", "source": {"text": "w" * 3000}}, "invalid_source"),
        ("memory_save", {"text": "x" * 9000}, "fact_too_large"),
        ("memory_search", {"query": "q" * 5000}, "query_too_large"),
    ],
)
def test_a_value_over_its_limit_has_the_code_http_and_the_cli_give(apps, tool, arguments, code):
    services, _ = apps("a")
    with Tools(services, USER) as tools:
        refused = tools.call(tool, arguments)
    assert refused.is_error and json.loads(refused.text)["error"]["code"] == code, refused.text
    assert services.longterm.list(ALICE).items == []


def test_session_end_flushes_then_clears_the_session(apps, llm_server):
    from tests.support.chat_script import Script

    llm = {"base_url": llm_server.base_url, "model": "chat-model", "context_window": 8192}
    services, client = apps("end", llm=llm)
    llm_server.responder = Script(flush="- [fact|9|user.allergy] Alice is allergic to peanuts.")
    said = [{"role": "user", "content": "I'm allergic to peanuts."}]
    assert append(client, "trip", said).status_code == 200
    with Tools(services) as tools:
        ended = tools.call("session_end", {"session_id": "trip"})
        assert not ended.is_error, ended.text
        body = json.loads(ended.text)
        assert body["flush"]["status"] == "flushed" and body["state"] is True
        assert services.shortterm.list_sessions(RuntimeContext("acme", "alice")) == []
        [hit] = services.longterm.retrieve(RuntimeContext("acme", "alice"), "peanut allergy", 1)
        assert hit.fact.text == "Alice is allergic to peanuts."
        again = tools.call("session_end", {"session_id": "trip"})
        assert again.is_error and "not_found" in again.text
