"""Plain appends never answer 409: concurrent ``POST /v1/sessions/{id}/messages`` without
``expected_version`` all land, on the files store and on PostgreSQL, over real HTTP (a uvicorn
server in this process, many client threads). 409 stays for a client that named a version.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.domain.agent_state import AgentState
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import BackendUnavailableError, ConflictError
from memory_service.domain.messages import Msg
from memory_service.evaluation.http_server import LoopbackServer
from memory_service.services import build_services
from memory_service.shortterm.session import ShortTermMemory
from memory_service.stores.shortterm.session_logs.files import FilesSessionLogStore
from memory_service.stores.shortterm.session_state.files import FilesAgentStateStore
from memory_service.stores.shortterm.tool_results.files import FilesToolResultStore
from tests.support.api import ACME_KEY, KEYS, auth
from tests.support.postgres import PG_DSN

CLIENTS = 30
CTX = RuntimeContext("acme", "alice", "s1")


@pytest.fixture(params=["files", "postgres"])
def server(request, tmp_path: Path, embedder, monkeypatch, pg_schema: str) -> Iterator[str]:
    """The real app behind uvicorn on a loopback port, over the store named by the param."""
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    table = f"agent_state_appends_{uuid.uuid4().hex[:12]}"
    overrides: dict = {}
    if request.param == "postgres":
        overrides = {
            "shortterm": {"backend": "postgres", "postgres_table": table},
            "postgres": {"dsn": PG_DSN, "pool_min": 1, "pool_max": 8, "schema_name": pg_schema},
        }
    settings = load_settings(workspace=tmp_path / "ws", **overrides)
    services = build_services(settings, embedder=embedder)
    try:
        with LoopbackServer(create_app(services, ApiKeyRing(KEYS))) as base_url:
            yield base_url
    finally:
        services.close()
        if request.param == "postgres":
            with psycopg.connect(PG_DSN, autocommit=True) as conn:
                conn.execute(f'DROP TABLE IF EXISTS "{table}"')


def _append_all(base_url: str, bodies: list[dict]) -> list[httpx.Response]:
    """Every body posted at once, one client thread each, released together."""
    start = threading.Barrier(len(bodies))

    def post(body: dict) -> httpx.Response:
        with httpx.Client(base_url=base_url, headers=auth(), timeout=60.0) as http:
            start.wait()
            return http.post("/v1/sessions/s1/messages", json=body)

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, bodies))


def _body(i: int, **fields) -> dict:
    return {"user_id": "alice", "messages": [{"role": "user", "content": f"m{i}"}], **fields}


def test_concurrent_plain_appends_all_land(server):
    responses = _append_all(server, [_body(i) for i in range(CLIENTS)])

    assert [r.status_code for r in responses] == [200] * CLIENTS, [
        r.text for r in responses if r.status_code != 200
    ]
    assert sorted(r.json()["version"] for r in responses) == list(range(1, CLIENTS + 1))
    with httpx.Client(base_url=server, headers=auth(ACME_KEY)) as http:
        state = http.get("/v1/sessions/s1", params={"user_id": "alice"}).json()
    assert state["version"] == CLIENTS
    assert sorted(m["content"] for m in state["messages"]) == sorted(
        f"m{i}" for i in range(CLIENTS)
    )
    assert sorted(m["seq"] for m in state["messages"]) == list(range(CLIENTS))


def test_concurrent_appends_with_a_version_still_conflict(server):
    with httpx.Client(base_url=server, headers=auth()) as http:
        assert http.post("/v1/sessions/s1/messages", json=_body(0)).json()["version"] == 1
    responses = _append_all(server, [_body(i, expected_version=1) for i in range(8)])

    codes = sorted(r.status_code for r in responses)
    assert codes == [200] + [409] * 7, [r.text for r in responses]
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 409} == {"conflict"}


# -- two ShortTermMemory objects on one store: two server processes -------------------------


def _memory(workspace: Path, store: FilesAgentStateStore) -> ShortTermMemory:
    return ShortTermMemory(store, FilesSessionLogStore(workspace), FilesToolResultStore(workspace))


def test_two_processes_appending_to_one_session_both_land(tmp_path: Path):
    """No lock is shared between processes: the append retries on the store's conflict."""
    workspace = tmp_path / "ws"
    first = _memory(workspace, FilesAgentStateStore(workspace))
    second = _memory(workspace, FilesAgentStateStore(workspace))
    jobs = [(first if i % 2 else second, i) for i in range(16)]
    start = threading.Barrier(len(jobs))

    def append(job: tuple[ShortTermMemory, int]) -> int:
        memory, i = job
        start.wait()
        return memory.append(CTX, [Msg.user(f"m{i}")]).state.version

    with ThreadPoolExecutor(len(jobs)) as pool:
        versions = sorted(pool.map(append, jobs))

    assert versions == list(range(1, len(jobs) + 1))
    assert sorted(m.content for m in first.load(CTX).messages) == sorted(
        f"m{i}" for i in range(len(jobs))
    )


class AlwaysStale(FilesAgentStateStore):
    """Another writer wins every time: a save always conflicts."""

    def save(self, state: AgentState, ctx: RuntimeContext) -> None:
        raise ConflictError("changed since it was loaded")


def test_a_plain_append_that_never_wins_is_busy_not_a_conflict(tmp_path: Path):
    """The retries are bounded; running out of them is 503 ``session_busy``, never 409: the
    client asked for no version, so there is nothing for it to reload."""
    workspace = tmp_path / "ws"
    memory = _memory(workspace, AlwaysStale(workspace))
    with pytest.raises(BackendUnavailableError) as raised:
        memory.append(CTX, [Msg.user("hello")])
    assert raised.value.code == "session_busy" and raised.value.http_status == 503
    with pytest.raises(ConflictError):
        memory.append(CTX, [Msg.user("hello")], expected_version=0)
