"""The MCP server driven by the SDK's own client: over stdio (``memory-service mcp`` as a
subprocess) and over streamable HTTP (``/mcp`` on a real ``serve`` process)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
from mcp.shared.exceptions import MCPError

from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.messages import Msg
from memory_service.services import build_services
from memory_service.stores.api_keys.files import FilesKeyStore
from tests.support.server import clean_env

ALLERGY = "Alice is allergic to peanuts"
CORE_TOOLS = {"memory_search", "memory_get", "memory_save", "memory_delete", "session_search"}

REFUSED_PATH = {"invalid_path", "path_outside_user"}  # tools.paths' codes
Session = Callable[[ClientSession], Awaitable[Any]]


def _stdio(workspace: Path, key: str | None, *args: str) -> StdioServerParameters:
    env = clean_env(workspace)
    if key is not None:
        env["MEMORY_API_KEY"] = key
    return StdioServerParameters(
        command=sys.executable, args=["-m", "memory_service.cli", "mcp", *args], env=env
    )


def over_stdio(params: StdioServerParameters, body: Session) -> Any:
    async def main() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return await body(session)

    return anyio.run(main)


def over_http(url: str, headers: dict[str, str], body: Session, *, modern: bool = False) -> Any:
    """``body`` on a session over streamable HTTP: opened by the ``initialize`` handshake,
    or by ``server/discover`` (the per-request era of the 2026-07-28 protocol)."""

    async def main() -> Any:
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(url, http_client=http) as streams,
            ClientSession(streams[0], streams[1]) as session,
        ):
            await (session.discover() if modern else session.initialize())
            return await body(session)

    return anyio.run(main)


async def _call(session: ClientSession, name: str, **arguments: Any):
    return await session.call_tool(name, arguments)


def _error(result) -> dict[str, str]:
    """A tool error: its one text content is the API's error envelope, and it has no
    structured content (which a client would check against the tool's output schema)."""
    assert result.is_error, result
    assert result.structured_content is None, result
    (content,) = result.content
    error = json.loads(content.text)["error"]
    assert error["message"], error
    return error


def _code(result) -> str:
    return _error(result)["code"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def _key(workspace: Path, tenant: str, role: str = "user") -> str:
    return FilesKeyStore(workspace / "api-keys.json").add(tenant, role)


# -- stdio -----------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_stdio_save_search_get_and_refusals(workspace: Path):
    key = _key(workspace, "acme")

    async def body(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) >= CORE_TOOLS
        # a user key acts for the connection's user: no user (or tenant) argument to steer
        search_props = tools["memory_search"].input_schema["properties"]
        assert "user_id" not in search_props and "tenant_id" not in search_props
        assert search_props["top_k"]["maximum"] == 100  # the API's own limit

        saved = await _call(session, "memory_save", text=ALLERGY, importance=9)
        assert not saved.is_error, saved
        fact_id = saved.structured_content["id"]
        assert saved.structured_content["status"] == "created"

        hits = (await _call(session, "memory_search", query="peanut allergy")).structured_content
        assert hits["hits"][0]["text"] == ALLERGY and hits["hits"][0]["id"] == fact_id

        got = await _call(session, "memory_get", id=fact_id)
        assert got.structured_content["text"] == ALLERGY
        assert got.structured_content["importance"] == 9

        # traversal: a file path outside the user's memory, and a path as a fact id
        escape = await _call(session, "memory_read", path="../../api-keys.json")
        assert escape.is_error and "sha256" not in escape.content[0].text
        assert _code(escape) in REFUSED_PATH
        assert _code(await _call(session, "memory_get", id="../../api-keys.json")) == "not_found"
        absolute = await _call(session, "memory_read", path=str(workspace / "api-keys.json"))
        assert _code(absolute) in REFUSED_PATH

        # wrong argument types and unknown arguments: a tool error the model can read
        wrong = await _call(session, "memory_search", query="peanut", top_k="many")
        assert _code(wrong) == "invalid_arguments" and "top_k" in wrong.content[0].text
        far = await _call(session, "memory_search", query="peanut", threshold=1.5)
        assert _code(far) == "invalid_arguments" and "threshold" in far.content[0].text
        assert _code(await _call(session, "memory_search", query="x", user_id="bob")) == (
            "invalid_arguments"
        )
        # an unknown tool: the protocol's error (-32602), and the server carries on
        with pytest.raises(MCPError) as unknown:
            await _call(session, "memory_format_disk")
        assert unknown.value.code == -32602
        listed = await _call(session, "memory_list")
        assert [f["text"] for f in listed.structured_content["items"]] == [ALLERGY]

        read = await _call(session, "memory_read", path="memory/" + _ledger(workspace))
        assert ALLERGY in read.content[0].text

        updated = await _call(session, "memory_update", id=fact_id, importance=10, tags=["food"])
        assert updated.structured_content["importance"] == 10
        assert updated.structured_content["tags"] == ["food"]
        assert _code(await _call(session, "memory_update", id=fact_id, text="x")) == (
            "invalid_arguments"
        )

        deleted = await _call(session, "memory_delete", id=fact_id)
        assert deleted.structured_content == {"deleted": 1}
        assert _code(await _call(session, "memory_get", id=fact_id)) == "not_found"

    over_stdio(_stdio(workspace, key, "--user", "alice"), body)


KEYED_TOOLS = {"memory_extract", "memory_recall", "memory_consolidate", "memory_prune"}


def _said(result) -> str:
    assert not result.is_error, result
    (content,) = result.content
    return content.text


@pytest.mark.subprocess
def test_stdio_the_keyed_tools_work_on_a_personal_keys_own_memory(workspace: Path):
    """The keyed tools of ``/v1/chat``'s harness, over MCP with the rights ``memory_save``
    has: a personal key's calls read and change its own user's memory, no one else's."""
    key = FilesKeyStore(workspace / "api-keys.json").add("acme", "personal", user="alice")
    bob = _key(workspace, "acme", "admin")

    async def bobs(session: ClientSession) -> None:
        said = await _call(session, "memory_extract", key="user.diet", text="Bob eats fish")
        assert _said(said).startswith("created")

    over_stdio(_stdio(workspace, bob, "--user", "bob"), bobs)

    async def body(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) >= KEYED_TOOLS
        assert "user_id" not in tools["memory_extract"].input_schema["properties"]
        assert not tools["memory_prune"].annotations.read_only_hint

        first = await _call(session, "memory_extract", key="user.diet", text="Alice is vegetarian")
        assert _said(first).startswith("created")
        again = await _call(session, "memory_extract", key="user.diet", text="Alice is vegan")
        assert _said(again).startswith("superseded") and "Alice is vegetarian" in _said(again)
        await _call(session, "memory_extract", key="user.drink.tea", text="Alice likes oolong")
        await _call(session, "memory_extract", key="user.drink.coffee", text="Alice likes mocha")

        recalled = _said(await _call(session, "memory_recall", key="user.", prefix=True))
        assert "3 facts" in recalled and "Bob" not in recalled
        assert "Alice is vegetarian" not in recalled  # superseded
        exact = _said(await _call(session, "memory_recall", key="user.diet"))
        assert "Alice is vegan" in exact and "oolong" not in exact

        merged = await _call(
            session,
            "memory_consolidate",
            keys_to_merge=["user.drink.tea", "user.drink.coffee"],
            new_key="user.drinks",
            text="Alice likes oolong tea and mocha coffee",
        )
        assert _said(merged).startswith("merged 2 fragments")
        drinks = _said(await _call(session, "memory_recall", key="user.drink", prefix=True))
        assert "Alice likes oolong tea and mocha coffee" in drinks and "1 facts" in drinks
        rewritten = _said(await _call(session, "memory_consolidate"))
        assert rewritten.startswith("MEMORY.md rewritten")

        vegan = exact.split("id=")[1].split(",")[0]
        listed = _said(await _call(session, "memory_prune", ids=[vegan]))
        assert listed.startswith("Would prune 1 facts"), listed
        pruned = _said(await _call(session, "memory_prune", ids=[vegan], dry_run=False))
        assert pruned.startswith("Pruned 1 facts")
        gone = _said(await _call(session, "memory_recall", key="user.diet"))
        assert gone.startswith("Nothing is remembered")

        # the key's user only: another one named is refused, and bad arguments say what
        other = await _call(session, "memory_recall", key="user.diet", user_id="bob")
        assert _code(other) == "forbidden_user"
        bad = await _call(session, "memory_extract", key="user.diet", text="x", importance=11)
        assert _code(bad) == "invalid_fact"
        half = await _call(session, "memory_consolidate", new_key="user.x")
        assert _code(half) == "invalid_fact"

    over_stdio(_stdio(workspace, key), body)

    async def bob_again(session: ClientSession) -> None:
        still = _said(await _call(session, "memory_recall", key="user.diet"))
        assert "Bob eats fish" in still and "Alice" not in still

    over_stdio(_stdio(workspace, bob, "--user", "bob"), bob_again)


def _ledger(workspace: Path) -> str:
    (ledger,) = (workspace / "tenants" / "acme" / "users" / "alice" / "memory").glob("*.md")
    return ledger.name


@pytest.mark.subprocess
def test_stdio_another_tenants_memory_is_unreachable(workspace: Path):
    acme, globex = _key(workspace, "acme"), _key(workspace, "globex", "admin")

    async def save(session: ClientSession) -> str:
        return (await _call(session, "memory_save", text=ALLERGY)).structured_content["id"]

    fact_id = over_stdio(_stdio(workspace, acme, "--user", "alice"), save)

    async def look(session: ClientSession) -> None:
        # an admin key of another tenant, naming the same user: still its own tenant only
        hits = await _call(session, "memory_search", query="peanuts", user_id="alice")
        assert hits.structured_content["hits"] == []
        assert _code(await _call(session, "memory_get", id=fact_id, user_id="alice")) == (
            "not_found"
        )
        assert _code(
            await _call(session, "memory_read", path="../../../acme/users/alice/MEMORY.md")
        ) in (REFUSED_PATH)

    over_stdio(_stdio(workspace, globex, "--user", "alice"), look)


@pytest.mark.subprocess
def test_stdio_admin_key_may_name_a_user_of_its_tenant(workspace: Path):
    key = _key(workspace, "acme", "admin")

    async def body(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert "user_id" in tools["memory_save"].input_schema["properties"]
        saved = await _call(session, "memory_save", text="Bob runs marathons", user_id="bob")
        assert not saved.is_error, saved
        mine = await _call(session, "memory_list")
        assert mine.structured_content["items"] == []  # the connection's user: alice
        bobs = await _call(session, "memory_list", user_id="bob")
        assert [f["text"] for f in bobs.structured_content["items"]] == ["Bob runs marathons"]
        assert _code(await _call(session, "memory_list", user_id="../bob")) == "invalid_id"

    over_stdio(_stdio(workspace, key, "--user", "alice"), body)


@pytest.mark.subprocess
def test_stdio_no_model_is_logged_at_warning_as_over_http(workspace: Path, embedder, tmp_path):
    """Ending a session with no model configured and the session archive off is a 503 the
    deployment chose: the stdio server logs it at WARNING, as the HTTP API does, not at
    ERROR."""
    key = _key(workspace, "acme")
    services = build_services(load_settings(workspace=workspace), embedder=embedder)
    try:
        services.shortterm.append(RuntimeContext("acme", "alice", "s1"), [Msg.user("Hi")])
    finally:
        services.close()

    errlog = tmp_path / "stderr.txt"
    with errlog.open("w") as stream:

        async def main() -> None:
            params = _stdio(workspace, key, "--user", "alice")
            params.env["MEMORY_MEMORY__SESSION_ARCHIVE"] = "off"
            async with (
                stdio_client(params, errlog=stream) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                ended = await _call(session, "session_end", session_id="s1")
                assert _code(ended) == "llm_not_configured"

        anyio.run(main)
    said = [line for line in errlog.read_text().splitlines() if "no LLM is configured" in line]
    assert len(said) == 1 and " WARNING " in said[0], errlog.read_text()


@pytest.mark.parametrize(
    ("key", "args", "said"),
    [
        (None, ["--user", "alice"], "no API key: set MEMORY_API_KEY"),
        ("msk_not_a_key_of_this_store", ["--user", "alice"], "unknown API key"),
        ("acme", ["--user", "alice", "--tenant", "globex"], "belongs to tenant 'acme'"),
        ("acme", [], "an application key acts for one user: name it with --user"),
        ("acme", ["--user", "../alice"], "invalid user '../alice'"),
    ],
)
@pytest.mark.subprocess
def test_stdio_refuses_to_start_without_a_good_key(workspace: Path, key, args, said):
    good = _key(workspace, "acme")
    params = _stdio(workspace, good if key == "acme" else key, *args)
    done = subprocess.run(
        [params.command, *params.args],
        env=params.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert errors == [f"memory-service: error: {errors[0].split('error: ', 1)[1]}"]
    assert said in errors[0] and "Traceback" not in done.stderr
    assert done.stdout == ""


# -- streamable HTTP on serve ------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory, server_process):
    keys = {
        "acme": ("acme", "user"),
        "acme_admin": ("acme", "admin"),
        "globex": ("globex", "user"),
    }
    with server_process(tmp_path_factory.mktemp("mcp") / "ws", keys) as running:
        yield running


def _headers(served, name: str, user: str | None = "alice") -> dict[str, str]:
    headers = {"Authorization": f"Bearer {served.keys[name]}"}
    if user is not None:
        headers["X-Memory-User"] = user
    return headers


def test_http_save_search_get_and_tenant_isolation(served):
    url = served.base_url + "/mcp"

    async def as_acme(session: ClientSession) -> str:
        assert {t.name for t in (await session.list_tools()).tools} >= CORE_TOOLS
        saved = await _call(session, "memory_save", text=ALLERGY)
        assert not saved.is_error, saved
        hits = (await _call(session, "memory_search", query="peanuts")).structured_content["hits"]
        assert hits[0]["text"] == ALLERGY
        got = await _call(session, "memory_get", id=saved.structured_content["id"])
        assert got.structured_content["text"] == ALLERGY
        wrong = await _call(session, "memory_search", query=["not", "text"])
        assert _code(wrong) == "invalid_arguments"
        with pytest.raises(MCPError) as unknown:
            await _call(session, "no_such_tool")
        assert unknown.value.code == -32602
        escape = await _call(session, "memory_read", path="../../../api-keys.json")
        assert _code(escape) in REFUSED_PATH
        return saved.structured_content["id"]

    fact_id = over_http(url, _headers(served, "acme"), as_acme)

    async def as_globex(session: ClientSession) -> None:
        # the same user id in another tenant: nothing of acme's is reachable
        hits = await _call(session, "memory_search", query="peanuts")
        assert hits.structured_content["hits"] == []
        assert _code(await _call(session, "memory_get", id=fact_id)) == "not_found"
        assert _code(await _call(session, "memory_delete", id=fact_id)) == "not_found"
        assert (await _call(session, "memory_list")).structured_content["items"] == []

    over_http(url, _headers(served, "globex"), as_globex)

    async def as_acme_admin(session: ClientSession) -> None:
        listed = await _call(session, "memory_list", user_id="alice")
        assert [f["id"] for f in listed.structured_content["items"]] == [fact_id]

    over_http(url, _headers(served, "acme_admin", user=None), as_acme_admin)


def test_http_per_request_era_and_session_ids(served):
    async def body(session: ClientSession) -> None:
        saved = await _call(session, "memory_save", text="Alice sails on weekends")
        assert saved.structured_content["status"] == "created"
        hits = (await _call(session, "memory_search", query="sailing weekends")).structured_content
        assert hits["hits"][0]["text"] == "Alice sails on weekends"
        escape = await _call(session, "session_get", session_id="../../api-keys")
        assert _code(escape) == "invalid_id"
        assert _code(await _call(session, "session_get", session_id="never")) == "not_found"

    over_http(served.base_url + "/mcp", _headers(served, "acme", "alice-modern"), body, modern=True)


def test_http_user_key_without_a_user_is_told_how(served):
    async def body(session: ClientSession) -> None:
        assert _code(await _call(session, "memory_list")) == "no_user"

    over_http(served.base_url + "/mcp", _headers(served, "acme", user=None), body)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer msk_wrong"}])
def test_http_without_a_known_key_is_401_and_serve_carries_on(served, headers):
    import httpx

    answer = httpx.post(
        served.base_url + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**headers, "Accept": "application/json, text/event-stream"},
    )
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthorized"
    with pytest.raises(Exception):  # noqa: B017 - the SDK client's own error for a 401
        over_http(served.base_url + "/mcp", headers, lambda s: s.list_tools())
    assert httpx.get(served.base_url + "/healthz").status_code == 200


@pytest.mark.subprocess
def test_stdio_shared_memory_is_read_by_search_and_get_and_written_over_http_only(
    workspace: Path,
):
    key = _key(workspace, "acme")
    from memory_service.cli import main

    assert (
        main(
            [
                "record",
                "--workspace",
                str(workspace),
                "--tenant",
                "acme",
                "--scope",
                "agent",
                "--agent",
                "support",
                "Refunds go to the billing team",
            ]
        )
        == 0
    )

    async def body(session: ClientSession) -> None:
        shared = await _call(session, "memory_search", query="refunds", agent_id="support")
        assert [(h["text"], h["scope"]) for h in shared.structured_content["hits"]] == [
            ("Refunds go to the billing team", "agent")
        ]
        mine = await _call(session, "memory_search", query="refunds", scopes=["user"])
        assert mine.structured_content["hits"] == []
        # the id a search gave is one memory_get reads, from the same scopes
        (hit,) = shared.structured_content["hits"]
        got = await _call(session, "memory_get", id=hit["id"], agent_id="support")
        assert (got.structured_content["text"], got.structured_content["scope"]) == (
            "Refunds go to the billing team",
            "agent",
        )
        unseen = await _call(session, "memory_get", id=hit["id"])  # not this agent's reader
        assert _code(unseen) == "not_found"
        # a write tool changes the user's own memory: a shared one is refused, and stays
        for tool in ("memory_delete", "memory_confirm", "memory_update"):
            kept = await _call(session, tool, id=hit["id"])
            assert _code(kept) == "not_found" and "curator" in _error(kept)["message"], tool
        again = await _call(session, "memory_search", query="refunds", agent_id="support")
        assert [h["id"] for h in again.structured_content["hits"]] == [hit["id"]]
        refused = await _call(session, "memory_save", text="Lunch is at noon", scope="tenant")
        assert _code(refused) == "invalid_arguments" and "scope" in refused.content[0].text
        listed = await _call(session, "memory_list")
        assert listed.structured_content["items"] == []

    over_stdio(_stdio(workspace, key, "--user", "alice"), body)


def _metrics(served) -> dict[tuple[str, str, str], float]:
    """``memory_http_requests_total`` by (method, route, status)."""
    import httpx

    text = httpx.get(served.base_url + "/metrics", headers=_headers(served, "acme")).text
    counts = {}
    for line in text.splitlines():
        if line.startswith("memory_http_requests_total{"):
            labels, value = line.removeprefix("memory_http_requests_total{").split("} ")
            found = dict(part.split("=", 1) for part in labels.split(","))
            key = tuple(found[k].strip('"') for k in ("method", "route", "status"))
            counts[key] = float(value)
    return counts


MESSAGE = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
BOTH = "application/json, text/event-stream"


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("GET", {"Accept": "text/event-stream"}),  # a client opening its event stream
        ("GET", {}),
        ("DELETE", {}),
        ("PUT", {"Content-Type": "application/json"}),
    ],
)
def test_http_the_stateless_endpoint_takes_post_only(served, method, headers):
    """No session, so no event stream to open: a 405 at once (the protocol's answer, which
    the SDK clients take as "no stream"), never a 200 that then sends nothing."""
    import httpx

    answer = httpx.request(
        method,
        served.base_url + "/mcp",
        headers={**_headers(served, "acme"), **headers},
        timeout=10,
    )
    assert answer.status_code == 405
    assert answer.headers["allow"] == "POST"
    assert answer.json()["error"]["code"] == "method_not_allowed"
    assert "POST" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Host": "evil.example"}, 421, "invalid_host"),
        ({"Host": "evil.example:80"}, 421, "invalid_host"),
        ({"Origin": "http://evil.example"}, 403, "invalid_origin"),
        ({"Content-Type": "text/plain"}, 400, "invalid_content_type"),
    ],
)
def test_http_transport_refusals_are_the_apis_error_body(served, headers, status, code):
    import httpx

    sent = {**_headers(served, "acme"), "Accept": BOTH, "Content-Type": "application/json"}
    answer = httpx.post(
        served.base_url + "/mcp", content=json.dumps(MESSAGE), headers={**sent, **headers}
    )
    assert answer.status_code == status
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert error["code"] == code and error["message"].startswith("Invalid "), error


def test_http_mcp_requests_are_counted_under_their_route_and_log_one_line(served):
    import httpx

    before = _metrics(served)
    sent = {**_headers(served, "acme"), "Accept": BOTH}
    assert httpx.post(served.base_url + "/mcp", json=MESSAGE, headers=sent).status_code == 200
    assert httpx.post(served.base_url + "/mcp", json=MESSAGE, headers={}).status_code == 401
    after = _metrics(served)
    for status in ("200", "401"):
        key = ("POST", "/mcp", status)
        assert after.get(key, 0) == before.get(key, 0) + 1, (key, after)
    assert not [k for k in after if k[1] == "unmatched" and k[0] == "POST"], after
    log = served.output()
    assert '"route": "/mcp"' in log  # the access line, one per request
    assert "Terminating session" not in log
    lines = [line for line in log.splitlines() if '"logger": "mcp.' in line]
    assert not [line for line in lines if '"level": "INFO"' in line], lines
