"""Two ``serve`` replicas on one PostgreSQL, as behind a load balancer (issue: stateless
replicas). Each has a workspace of its own; sessions, logs, dead letters, usage, keys,
maintenance locks and tombstones live in PostgreSQL (``MEMORY_STATE__BACKEND`` auto with the
PostgreSQL session store). Long-term facts across replicas need a Qdrant server, which cannot
run here: each replica keeps its facts in qdrant-client's ``:memory:`` mode, so nothing of
them reaches a disk either (the compose file's shape tests cover the server wiring)."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.chat_script import Script
from tests.support.llm_server import delayed, error, text
from tests.support.postgres import PG_DSN
from tests.support.server import clean_env, free_port, wait_healthy
from tests.support.waiting import wait_for_value

pytestmark = pytest.mark.subprocess  # two `memory-service serve` replicas

MARK = "Zanzibarquux"  # a word no other data holds: the byte scan looks for it
FACT = f"- [fact|8|user.pet] The user has a parrot called {MARK}."


@dataclass
class Replica:
    base_url: str
    workspace: Path
    proc: subprocess.Popen
    banner: str = ""

    def call(self, method: str, path: str, key: str, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.request(method, self.base_url + path, headers=headers, timeout=60, **kwargs)


def replica_env(workspace: Path, schema: str, llm_url: str) -> dict[str, str]:
    return clean_env(
        workspace,
        MEMORY_SHORTTERM__BACKEND="postgres",
        MEMORY_POSTGRES__DSN=PG_DSN,
        MEMORY_POSTGRES__SCHEMA_NAME=schema,
        MEMORY_LONGTERM__BACKEND="qdrant",
        MEMORY_QDRANT__URL=":memory:",
        MEMORY_LLM__BASE_URL=llm_url,
        MEMORY_LLM__MODEL="chat-model",
        MEMORY_LLM__MAX_RETRIES="0",
        MEMORY_LLM__CONTEXT_WINDOW="8192",
        MEMORY_EMBEDDING__THREADS="1",
        MEMORY_STATE__KEYS_REFRESH_S="1",
    )


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memory_service.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


@contextmanager
def replica(env: dict[str, str]) -> Iterator[Replica]:
    port = free_port()
    workspace = Path(env["MEMORY_WORKSPACE"])
    workspace.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memory_service.cli", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    served = Replica(f"http://127.0.0.1:{port}", workspace, proc)
    try:
        served.banner = proc.stdout.readline()
        try:
            wait_healthy(served.base_url, proc)
        except RuntimeError as exc:
            raise AssertionError(f"{exc}: {served.banner}{proc.stdout.read()}") from None
        yield served
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def workspace_bytes(workspace: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(workspace)): path.read_bytes()
        for path in workspace.rglob("*")
        if path.is_file()
    }


@pytest.fixture
def two_replicas(tmp_path, pg_schema, llm_server) -> Iterator[tuple[Replica, Replica, dict, str]]:
    script = Script()
    llm_server.responder = script
    envs = [replica_env(tmp_path / f"ws{i}", pg_schema, llm_server.base_url) for i in (1, 2)]
    added = cli(envs[0], "keys", "add", "--tenant", "acme", "--role", "admin")
    assert added.returncode == 0, added.stderr
    admin = added.stdout.strip()
    with ExitStack() as stack:
        one, two = (stack.enter_context(replica(env)) for env in envs)
        yield one, two, {"envs": envs, "script": script}, admin


def test_a_session_started_on_one_replica_continues_on_the_other(two_replicas):
    one, two, ctx, admin = two_replicas
    ctx["script"].chat(text("Noted."), text("Still noted."))
    body = {"user_id": "alice", "session_id": "s1"}
    first = one.call("POST", "/v1/chat", admin, json={**body, "message": f"My parrot is {MARK}."})
    assert first.status_code == 200, first.text
    second = two.call("POST", "/v1/chat", admin, json={**body, "message": "And my cat is Tom."})
    assert second.status_code == 200, second.text  # no 409: replica 2 saw replica 1's save

    for r in (one, two):  # the start-up line says where the replica's state is
        assert "short-term: postgres | replica state: postgres" in r.banner, r.banner
    states = [r.call("GET", "/v1/sessions/s1?user_id=alice", admin).json() for r in (one, two)]
    assert states[0] == states[1]
    contents = [m["content"] for m in states[1]["messages"]]
    assert contents == [f"My parrot is {MARK}.", "Noted.", "And my cat is Tom.", "Still noted."]

    for r in (one, two):  # the session log, and so session_search, is shared
        found = r.call(
            "POST", "/v1/sessions/search", admin, json={"user_id": "alice", "query": MARK}
        )
        assert found.status_code == 200, found.text
        assert [h["session_id"] for h in found.json()["hits"]] == ["s1"]

    for r in (one, two):
        assert MARK.encode() not in b"".join(workspace_bytes(r.workspace).values())
        assert sorted(workspace_bytes(r.workspace)) == []  # no file of any user, or at all


def test_a_dead_letter_of_one_replica_is_replayed_by_the_other(two_replicas):
    one, two, ctx, admin = two_replicas
    script, envs = ctx["script"], ctx["envs"]
    script.chat(text("Noted."))
    outage = error(400, "scripted outage", type="invalid_request_error")
    script.flush(outage, outage)  # the flush and its retry fail: a dead letter
    said = one.call(
        "POST",
        "/v1/chat",
        admin,
        json={"user_id": "alice", "session_id": "s1", "message": f"My parrot is {MARK}."},
    )
    assert said.status_code == 200, said.text
    assert [f["status"] for f in said.json()["memory"]["flushes"]] == ["failed"]

    listed = cli(envs[1], "maintain", "--replay-dead-letters", "--dry-run", "--tenant", "acme")
    assert listed.returncode == 0, listed.stderr
    assert "alice" in listed.stdout  # replica 2's configuration sees replica 1's letter

    script.flush(text(FACT))
    replayed = cli(envs[1], "maintain", "--replay-dead-letters", "--tenant", "acme")
    assert replayed.returncode == 0, replayed.stderr
    assert script.requests["flush"][-1].prompt_text.count(MARK) >= 1
    again = cli(envs[0], "maintain", "--replay-dead-letters", "--dry-run", "--tenant", "acme")
    assert again.returncode == 0, again.stderr
    assert "alice" not in again.stdout  # replayed once, gone for every replica

    for r in (one, two):
        assert MARK.encode() not in b"".join(workspace_bytes(r.workspace).values())


def test_usage_sums_both_replicas(two_replicas):
    one, two, ctx, admin = two_replicas
    ctx["script"].chat(text("A.", prompt_tokens=11, completion_tokens=2))
    ctx["script"].chat(text("B.", prompt_tokens=13, completion_tokens=3))
    for r, session in ((one, "s1"), (two, "s2")):
        said = r.call(
            "POST",
            "/v1/chat",
            admin,
            json={"user_id": "bob", "session_id": session, "message": "Hi"},
        )
        assert said.status_code == 200, said.text
    reports = [r.call("GET", "/v1/usage", admin).json() for r in (one, two)]
    assert reports[0]["tokens"] == reports[1]["tokens"]
    chat = reports[0]["tokens"]["chat"]
    assert (chat["calls"], chat["prompt_tokens"], chat["completion_tokens"]) == (2, 24, 5)


def test_one_user_maintained_at_once_across_replicas(two_replicas):
    one, two, ctx, admin = two_replicas
    said = one.call(
        "POST", "/v1/memories", admin, json={"user_id": "carol", "facts": [{"text": "Carol skis."}]}
    )
    assert said.status_code == 200, said.text
    # the run that takes the user's lock consolidates with the model, which answers in 3 s:
    # the other replica, asked at the same moment, must find the lock taken
    ctx["script"].chat(delayed(3.0, text("## Facts\n- Carol skis.")))
    results: list[str] = []
    barrier = threading.Barrier(2)

    def maintain(r: Replica) -> None:
        barrier.wait()
        run = r.call("POST", "/v1/maintenance/run", admin, json={"user_id": "carol", "force": True})
        assert run.status_code == 200, run.text
        results.extend(report["status"] for report in run.json()["reports"])

    threads = [threading.Thread(target=maintain, args=(r,)) for r in (one, two)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["busy", "ran"]


def test_a_key_added_or_revoked_by_the_cli_works_on_both_without_a_restart(two_replicas):
    one, two, ctx, _ = two_replicas
    env = ctx["envs"][0]
    added = cli(env, "keys", "add", "--tenant", "globex")
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip()
    for r in (one, two):
        wait_for_value(lambda r=r: r.call("GET", "/v1/usage", key).status_code, 200)
    revoked = cli(env, "keys", "revoke", key)
    assert revoked.returncode == 0, revoked.stderr
    for r in (one, two):
        wait_for_value(lambda r=r: r.call("GET", "/v1/usage", key).status_code, 401)
    for r in (one, two):
        assert not (r.workspace / "api-keys.json").exists()
