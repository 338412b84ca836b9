"""``memory_service.client`` against a real ``serve`` process (and the loopback LLM server
for chat): typed results, typed errors, retries only where a call may happen twice."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anyio
import httpx
import pytest

from memory_service.api.schemas.chat import ChatResponse
from memory_service.api.schemas.memories import FactIn, FactOut, Hit, SearchResponse
from memory_service.api.schemas.sessions import SessionOut
from memory_service.client import (
    ApiConnectionError,
    ApiError,
    AsyncMemoryClient,
    AuthenticationError,
    InvalidRequestError,
    MemoryClient,
    NotFoundError,
    PermissionDeniedError,
    ServiceUnavailableError,
    calls,
)
from tests.support.chat_script import Script
from tests.support.llm_server import LlmTestServer, text
from tests.support.server import free_port

ALLERGY = "Alice is allergic to peanuts"
KEYS = {"acme": ("acme", "user"), "admin": ("acme", "admin"), "globex": ("globex", "user")}


@pytest.fixture(scope="module")
def script() -> Script:
    return Script(chat="Noted.", flush="NO_REPLY")


@pytest.fixture(scope="module")
def served(tmp_path_factory, script, server_process):
    with LlmTestServer() as llm:
        llm.responder = script
        env = {
            "MEMORY_LLM__BASE_URL": llm.base_url,
            "MEMORY_LLM__MODEL": "chat-model",
            "MEMORY_LLM__CONTEXT_WINDOW": "8192",
        }
        with server_process(tmp_path_factory.mktemp("client") / "ws", KEYS, **env) as running:
            yield running


@pytest.fixture
def client(served) -> Iterator[MemoryClient]:
    with MemoryClient(served.base_url, served.keys["acme"]) as memory:
        yield memory


def test_memories_round_trip_as_the_apis_own_models(client: MemoryClient):
    user = "alice-memories"
    recorded = client.record(user, [ALLERGY, FactIn(text="Alice lives in Lyon", key="city")])
    assert [r.status for r in recorded.results] == ["created", "created"]
    assert client.record(user, [ALLERGY]).results[0].status == "duplicate"

    found = client.search(user, "peanut allergy", top_k=3)
    assert isinstance(found, SearchResponse) and isinstance(found.hits[0], Hit)
    assert found.hits[0].text == ALLERGY and found.hits[0].ranks["bm25"] == 1

    fact_id = recorded.results[0].id
    fact = client.get(user, fact_id)
    assert isinstance(fact, FactOut) and fact.text == ALLERGY and fact.created_at is not None

    first = client.list_memories(user, limit=1)
    assert len(first.items) == 1 and first.next_cursor
    rest = client.list_memories(user, limit=1, cursor=first.next_cursor)
    assert {first.items[0].text, rest.items[0].text} == {ALLERGY, "Alice lives in Lyon"}

    changed = client.update(user, fact_id, importance=10, tags=["health"])
    assert (changed.importance, changed.tags, changed.text) == (10, ["health"], ALLERGY)
    assert client.get(user, fact_id).importance == 10
    kinded = client.update(user, fact_id, kind="preference", clear_expiry=True)
    assert (kinded.kind, kinded.importance, kinded.expires_at) == ("preference", 10, None)
    rewrite = {"user_id": user, "text": "Alice loves peanuts"}  # text never changes
    with pytest.raises(InvalidRequestError) as bad:
        client.send(calls.Call("PATCH", f"/v1/memories/{fact_id}", lambda r: r, json=rewrite))
    assert bad.value.code == "validation_error"
    assert client.get(user, fact_id).text == ALLERGY

    assert client.delete(user, fact_id).deleted == 1
    with pytest.raises(NotFoundError) as missing:
        client.get(user, fact_id)
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    assert client.forget(user).deleted == 1
    assert client.list_memories(user).items == []


def test_errors_carry_the_services_code_and_status(served, client: MemoryClient):
    with pytest.raises(InvalidRequestError) as bad_id:
        client.get("../etc", "00000000-0000-0000-0000-000000000000")
    assert (bad_id.value.status, bad_id.value.code) == (422, "invalid_id")
    with (
        MemoryClient(served.base_url, "msk_not_a_key") as stranger,
        pytest.raises(AuthenticationError) as unknown,
    ):
        stranger.list_memories("alice")
    assert (unknown.value.status, unknown.value.code) == (401, "unauthorized")
    with pytest.raises(PermissionDeniedError) as not_admin:
        client.import_lines([])
    assert not_admin.value.code == "forbidden"
    assert isinstance(not_admin.value, ApiError)


def test_tenants_never_see_each_other(served, client: MemoryClient):
    fact_id = client.record("bob", ["Bob keeps bees"]).results[0].id
    with MemoryClient(served.base_url, served.keys["globex"]) as other:
        assert other.search("bob", "bees").hits == []
        with pytest.raises(NotFoundError):
            other.get("bob", fact_id)
        with pytest.raises(NotFoundError):
            other.update("bob", fact_id, importance=1)
    assert client.get("bob", fact_id).importance == 5


def test_sessions(client: MemoryClient):
    user, session = "carol", "s-1"
    appended = client.append(
        user,
        session,
        [
            {"role": "user", "content": "I bake sourdough every Sunday"},
            {"role": "assistant", "content": "Lovely."},
        ],
        compact=False,
    )
    assert appended.version == 1 and appended.message_count == 2
    state = client.get_session(user, session)
    assert isinstance(state, SessionOut) and state.message_count == 2
    assert [m.content for m in state.messages][0] == "I bake sourdough every Sunday"
    assert [s.session_id for s in client.list_sessions(user).sessions] == [session]
    hits = client.search_sessions(user, "sourdough").hits
    assert hits and hits[0].session_id == session
    assert client.delete_session(user, session, include_log=True).state is True
    with pytest.raises(NotFoundError):
        client.get_session(user, session)


def test_compact_and_maintenance_read_back_typed(served, client: MemoryClient, script: Script):
    user, session = "hank", "s-compact"
    said = [{"role": "user", "content": f"Message {i} about gardening"} for i in range(6)]
    client.append(user, session, said, compact=False)
    compacted = client.compact(user, session, keep_last=2)
    assert compacted.compaction.performed, compacted.compaction
    assert compacted.message_count < 6 and compacted.version > 1
    client.record(user, ["Hank grows tomatoes"])
    script.chat(text("- Hank grows tomatoes"))  # the consolidation's MEMORY.md rewrite
    with MemoryClient(served.base_url, served.keys["admin"]) as admin:
        run = admin.run_maintenance(user, force=True)
    (report,) = run.reports
    assert (report.user_id, report.status) == (user, "ran"), report.error
    assert report.counts


def test_chat_answers_with_what_memory_did(client: MemoryClient, script: Script):
    reply = client.chat("dave", "s-chat", "Hello there")
    assert isinstance(reply, ChatResponse)
    assert reply.reply == "Noted." and reply.session_id == "s-chat" and reply.version >= 1
    assert reply.usage["total"].total_tokens == sum(
        u.total_tokens for k, u in reply.usage.items() if k != "total"
    )
    assert reply.memory.flushed_facts == [] and reply.memory.memory_md.truncated is False


def test_export_then_import_and_usage(served, client: MemoryClient):
    client.record("erin", ["Erin plays the cello", "Erin is vegetarian"])
    lines = client.export("erin")
    assert sorted(line["text"] for line in lines) == ["Erin is vegetarian", "Erin plays the cello"]
    client.forget("erin")
    with MemoryClient(served.base_url, served.keys["admin"]) as admin:
        summary = admin.import_lines(lines)
        assert (summary.lines, summary.created, summary.duplicate) == (2, 2, 0)
        assert admin.import_lines(lines).duplicate == 2
        with pytest.raises(InvalidRequestError) as bad:
            admin.import_lines('{"text": 3}\n')
        assert bad.value.code == "bad_lines" and bad.value.body["bad_lines"]
    assert len(client.list_memories("erin").items) == 2
    report = client.usage()
    assert report.tenant_id == "acme" and report.total.total_tokens >= 0


def test_async_client(served):
    async def main() -> None:
        async with AsyncMemoryClient(served.base_url, served.keys["acme"]) as memory:
            await memory.record("frank", ["Frank is learning Japanese"])
            found = await memory.search("frank", "Japanese")
            assert isinstance(found, SearchResponse)
            assert found.hits[0].text == "Frank is learning Japanese"
            with pytest.raises(NotFoundError):
                await memory.get("frank", "00000000-0000-0000-0000-000000000000")
            assert (await memory.health()).status == "ok"

    anyio.run(main)


def test_the_client_loads_no_server_parts(served):
    """A fresh interpreter: import the client, use it, then look at what got imported."""
    program = f"""
import json, sys
from memory_service.client import MemoryClient

with MemoryClient({served.base_url!r}, {served.keys["acme"]!r}) as memory:
    memory.record("gina", ["Gina collects stamps"])
    assert memory.search("gina", "stamps").hits
    memory.list_memories("gina")
heavy = ("torch", "sentence_transformers", "onnxruntime", "fastapi", "starlette", "mcp")
print(json.dumps([name for name in heavy if name in sys.modules]))
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


# -- retries ----------------------------------------------------------------------------------


class _Flaky(ThreadingHTTPServer):
    """A loopback upstream that answers 503 ``failures`` times, then a health body."""

    def __init__(self, failures: int) -> None:
        self.failures, self.seen = failures, []
        super().__init__(("127.0.0.1", 0), _FlakyHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _FlakyHandler(BaseHTTPRequestHandler):
    server: _Flaky

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self) -> None:
        self.server.seen.append(self.command)
        if len(self.server.seen) <= self.server.failures:
            status, body = 503, {"error": {"code": "unavailable", "message": "busy"}}
        else:
            status, body = 200, {"status": "ok", "backend": "files", "version": "x"}
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = _answer  # noqa: N815


def test_idempotent_calls_are_retried_with_backoff_and_posts_are_not():
    upstream = _Flaky(failures=2)
    try:
        with MemoryClient(upstream.url, "k", max_retries=2, backoff_s=0.01) as memory:
            assert memory.health().status == "ok"
            assert upstream.seen == ["GET", "GET", "GET"]
            upstream.seen.clear()
            with pytest.raises(ServiceUnavailableError) as busy:
                memory.search("alice", "anything")  # a POST: sent once
            assert upstream.seen == ["POST"] and busy.value.code == "unavailable"
    finally:
        upstream.shutdown()
        upstream.server_close()


def test_a_refused_connection_is_retried_then_raised():
    attempts: list[str] = []
    http = httpx.Client(event_hooks={"request": [lambda r: attempts.append(r.method)]})
    closed = f"http://127.0.0.1:{free_port()}"
    with (
        MemoryClient(closed, "k", max_retries=2, backoff_s=0.01, http_client=http) as memory,
        pytest.raises(ApiConnectionError),
    ):
        memory.record("alice", ["nothing was sent, so a POST may be tried again"])
    assert attempts == ["POST", "POST", "POST"]
    http.close()
