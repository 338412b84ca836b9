"""The tools through the official TypeScript client: the MCP Inspector's CLI, from npm
(``tests.support.inspector``), over stdio (``memory-service mcp``) and over ``/mcp``.

That client checks a result's ``structuredContent`` against the tool's output schema whenever
it is present, an error result's too, and refuses the whole result when it does not match:
a tool error must reach it as the service's code and message, and every tool's successful
result must pass its check.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory_service.stores.api_keys.files import FilesKeyStore
from tests.support.server import bearer

REPO = Path(__file__).resolve().parents[2]

# (tool, arguments, the error code the client must show, a word its message must contain)
REFUSED = [
    ("memory_search", {"query": "dog", "top_k": "abc"}, "invalid_arguments", "top_k"),
    ("memory_search", {"query": "dog", "top_k": 0}, "invalid_arguments", "top_k"),
    (
        "memory_save",
        {"text": "Alice has a dog", "importance": "high"},
        "invalid_arguments",
        "importance",
    ),
    ("memory_save", {"importance": 3}, "invalid_arguments", "text"),
    ("memory_get", {"id": "no-such-memory"}, "not_found", "no-such-memory"),
]


def _shows(answer, code: str, word: str) -> None:
    """The client printed the tool's error (not a protocol error of its own)."""
    assert "output schema" not in answer.stdout + answer.stderr, answer
    error = answer.tool_error()
    assert error["code"] == code, error
    assert word in error["message"], error


def _stdio(workspace: Path, key: str, *args: str) -> tuple[list[str], list[str]]:
    """The target and the ``-e`` options of ``memory-service mcp`` on ``workspace``."""
    env = {
        "MEMORY_API_KEY": key,
        "MEMORY_WORKSPACE": str(workspace),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    options = [item for name, value in env.items() for item in ("-e", f"{name}={value}")]
    return [sys.executable, "-m", "memory_service.cli", "mcp", *args], options


def test_stdio_tool_errors_reach_the_typescript_client(tmp_path: Path, inspector):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = FilesKeyStore(workspace / "api-keys.json")
    user_key, admin_key = store.add("acme", "user"), store.add("acme", "admin")
    target, env = _stdio(workspace, user_key, "--user", "alice")
    calls = [
        (target, [*env, *inspector.tool_call(tool, **arguments)], code, word)
        for tool, arguments, code, word in REFUSED
    ]
    # an admin key started without --user: a tool that needs the user says so
    admin_target, admin_env = _stdio(workspace, admin_key)
    calls.append(
        (admin_target, [*admin_env, *inspector.tool_call("memory_list")], "no_user", "--user")
    )

    def run(call: tuple[list[str], list[str], str, str]) -> tuple[Any, str, str]:
        target, options, code, word = call
        return inspector.call(target, *options, cwd=REPO), code, word

    with ThreadPoolExecutor(max_workers=3) as pool:  # each call starts its own server
        for answer, code, word in pool.map(run, calls):
            _shows(answer, code, word)


@pytest.fixture(scope="module")
def served(tmp_path_factory, server_process):
    keys = {"acme": ("acme", "user")}
    with server_process(tmp_path_factory.mktemp("inspector") / "ws", keys) as running:
        yield running


def _over_http(inspector, served, *options: str, user: str | None = "alice"):
    headers = ["--header", f"Authorization: Bearer {served.keys['acme']}"]
    if user is not None:
        headers += ["--header", f"X-Memory-User: {user}"]
    return inspector.call([served.base_url + "/mcp"], *headers, *options)


@pytest.mark.parametrize(("tool", "arguments", "code", "word"), REFUSED)
def test_http_tool_errors_reach_the_typescript_client(
    served, inspector, tool, arguments, code, word
):
    _shows(_over_http(inspector, served, *inspector.tool_call(tool, **arguments)), code, word)


def test_http_without_a_user_the_typescript_client_is_told_how(served, inspector):
    answer = _over_http(inspector, served, *inspector.tool_call("memory_list"), user=None)
    _shows(answer, "no_user", "X-Memory-User")


def test_http_every_tool_result_passes_the_typescript_clients_schema_check(served, inspector):
    """Each tool listed, called once with success: the client validated each structured
    result against the tool's output schema before printing it."""
    user = "carol"
    appended = httpx.post(
        f"{served.base_url}/v1/sessions/trip/messages",
        json={"user_id": user, "messages": [{"role": "user", "content": "Book a Lisbon hotel"}]},
        headers=bearer(served.keys["acme"]),
        timeout=60,
    )
    assert appended.status_code == 200, appended.text

    def call(tool: str, **arguments: Any) -> Any:
        return _over_http(inspector, served, *inspector.tool_call(tool, **arguments), user=user)

    listed = _over_http(inspector, served, "--method", "tools/list", user=user)
    assert listed.returncode == 0, listed
    names = {tool["name"] for tool in listed.result["tools"]}
    called: set[str] = set()

    def ok(tool: str, **arguments: Any) -> dict[str, Any]:
        called.add(tool)
        return call(tool, **arguments).structured()

    saved = ok("memory_save", text="Carol takes the night train", kind="preference", tags=["x"])
    fact_id = saved["id"]
    hits = ok("memory_search", query="night train", filter={"kind": ["preference"]})["hits"]
    assert [h["id"] for h in hits] == [fact_id]
    assert ok("memory_search", query="night train", filter={"kind": ["procedure"]}) == {"hits": []}
    assert ok("memory_get", id=fact_id)["text"] == "Carol takes the night train"
    assert ok("memory_update", id=fact_id, importance=8)["importance"] == 8
    assert ok("memory_confirm", id=fact_id)["needs_verification"] is False
    assert [f["id"] for f in ok("memory_list")["items"]] == [fact_id]
    assert [s["session_id"] for s in ok("session_list")["sessions"]] == ["trip"]
    assert ok("session_get", session_id="trip")["message_count"] == 1
    assert ok("session_search", query="Lisbon hotel")["hits"][0]["session_id"] == "trip"
    (ledger,) = (served.workspace / "tenants" / "acme" / "users" / user / "memory").glob("*.md")
    read = call("memory_read", path=f"memory/{ledger.name}")  # text: no output schema
    called.add("memory_read")
    assert read.returncode == 0 and not read.result.get("isError"), read
    assert "Carol takes the night train" in read.result["content"][0]["text"]
    assert ok("memory_delete", id=fact_id) == {"deleted": 1}
    # this server has no LLM: ending a session archives its messages as events
    ended = ok("session_end", session_id="trip")
    assert ended["archive"] == {"recorded": 1, "duplicates": 0, "left_out": 0}
    assert ended["flush"] is None
    keyed = {  # text results: no output schema
        "memory_extract": {"key": "travel.mode", "text": "Carol travels by night train"},
        "memory_recall": {"key": "travel.", "prefix": True},
        "memory_consolidate": {},
        "memory_prune": {},
    }
    for tool, arguments in keyed.items():
        said = call(tool, **arguments)
        called.add(tool)
        assert said.returncode == 0 and not said.result.get("isError"), said
    assert (
        "Carol travels by night train"
        in call("memory_recall", key="travel.mode").result["content"][0]["text"]
    )
    assert called == names
