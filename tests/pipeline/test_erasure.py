"""Erasing a user (``DELETE /v1/users/{user}``, ``memory-service erase``): every store, both
backends of each kind, a receipt; another user untouched; a request in flight writes nothing
back. Real parts throughout: the files and Qdrant Edge backends, PostgreSQL, the embedding
model, and the loopback LLM server behind the openai SDK."""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.cli import main
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import UserErasedError
from memory_service.domain.paths import OwnerPaths
from memory_service.services import build_harness, build_services
from tests.support.llm_server import held, text
from tests.support.postgres import PG_DSN

USER_KEY = "acme-user-key-0123456789abcdef"
ADMIN_KEY = "acme-admin-key-0123456789abcdef"
KEYS = {
    USER_KEY: {"tenant": "acme", "role": "user"},
    ADMIN_KEY: {"tenant": "acme", "role": "admin"},
}
USER = {"Authorization": f"Bearer {USER_KEY}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}

# One distinctive word per store, per user: a byte scan tells which store kept something.
MARKS = {
    user: {
        "fact_files": f"{user}-axolotl-Wobbleton",
        "fact_files_later": f"{user}-kayak-Brindlewood",
        "session_files": f"{user}-locker-Xyloquartz",
        "tool_result": f"{user}-ledger-Flumphbridge",
        "chat_postgres": f"{user}-born-Vrindlemoor",
        "flush_qdrant": f"{user}-birthplace-Vrindlemoor",
        "dead_letter": f"{user}-cousin-Prazzlewick",
    }
    for user in ("alice", "bob")
}


def _services(workspace: Path, embedder, **overrides):
    # no access counting: these tests compare a user's reads and files before and after,
    # and a search would otherwise change the user's access counts between the two
    longterm = {"track_access": False, **overrides.pop("longterm", {})}
    settings = load_settings(workspace=workspace, longterm=longterm, **overrides)
    services = build_services(settings, embedder=embedder)
    return services, TestClient(create_app(services, ApiKeyRing(KEYS)))


def _files_era(workspace: Path, embedder, user: str) -> None:
    """The user on the files backend and the files session store (before a switch): facts,
    a vector cache, MEMORY.md and a snapshot of it, a session with a log and a tool result."""
    marks = MARKS[user]
    services, client = _services(
        workspace,
        embedder,
        shortterm={"tool_result_max_chars": 256, "tool_result_preview_chars": 0},
    )
    with client:
        fact = {"user_id": user, "facts": [{"text": f"The user's pet is {marks['fact_files']}"}]}
        assert client.post("/v1/memories", json=fact, headers=USER).status_code == 200
        search = {"user_id": user, "query": "pet", "mode": "dense"}
        assert client.post("/v1/memories/search", json=search, headers=USER).json()["hits"]
        maintain = {"user_id": user, "force": True}
        assert client.post("/v1/maintenance/run", json=maintain, headers=ADMIN).status_code == 200
        later = {"user_id": user, "facts": [{"text": f"The user owns {marks['fact_files_later']}"}]}
        client.post("/v1/memories", json=later, headers=USER)
        client.post("/v1/maintenance/run", json=maintain, headers=ADMIN)  # snapshots MEMORY.md
        conversation = [
            {"role": "user", "content": f"My locker code is {marks['session_files']}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "ledger"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": f"{marks['tool_result']} " * 40},
        ]
        body = {"user_id": user, "messages": conversation}
        appended = client.post("/v1/sessions/s-files/messages", json=body, headers=USER).json()
        assert appended["evicted"], appended
    services.close()


def _qdrant_postgres_era(client, script, user: str) -> None:
    """The same user after the switch to Qdrant Edge and PostgreSQL: a chat whose flush puts
    a fact in Qdrant, and one whose flush fails into a dead letter."""
    marks = MARKS[user]
    script.chat(text("Noted."), text("Noted."))
    script.flush(
        text(f"- [fact|8] The user's birthplace is {marks['flush_qdrant']}."),
        text("I think the user has a cousin, maybe."),  # malformed: a dead letter
        text("I think the user has a cousin, maybe."),
    )
    for message in (f"I was born in {marks['chat_postgres']}", f"Cousin {marks['dead_letter']}"):
        body = {"user_id": user, "session_id": "s-pg", "message": message}
        response = client.post("/v1/chat", json=body, headers=USER)
        assert response.status_code == 200, response.text


def _scan(workspace: Path, words: list[str]) -> dict[str, list[str]]:
    """Word -> the workspace files whose bytes hold it."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in workspace.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for word in words:
            if word.encode() in data:
                found.setdefault(word, []).append(str(path.relative_to(workspace)))
    return found


def _hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def _pg_rows(table: str, user: str) -> list[tuple[str, str]]:
    with psycopg.connect(PG_DSN) as conn:
        rows = conn.execute(
            f"SELECT session_id, state::text FROM {table} WHERE user_id = %s ORDER BY 1", (user,)
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def _pg_text(table: str) -> str:
    with psycopg.connect(PG_DSN) as conn:
        rows = conn.execute(f"SELECT tenant_id, user_id, session_id, state::text FROM {table}")
        return "\n".join(" ".join(r) for r in rows.fetchall())


def _pg_logs_text(schema: str) -> str:
    """Every logged message and evicted tool result in ``schema`` (replica state)."""
    with psycopg.connect(PG_DSN) as conn:
        rows = conn.execute(
            f'SELECT body FROM "{schema}".session_log UNION ALL '
            f'SELECT body FROM "{schema}".tool_results'
        )
        return "\n".join(r[0] for r in rows.fetchall())


def _pg_dead_letters_text(schema: str) -> str:
    """Every flush dead letter in ``schema`` (replica state)."""
    with psycopg.connect(PG_DSN) as conn:
        rows = conn.execute(f'SELECT line FROM "{schema}".memory_dead_letters').fetchall()
        return "\n".join(r[0] for r in rows)


def _read_paths(client, user: str) -> dict[str, object]:
    """What every read path answers for the user."""
    q = {"user_id": user}
    out: dict[str, object] = {
        "sessions": client.get("/v1/sessions", params=q, headers=USER).json()["sessions"],
        "memories": client.get(
            "/v1/memories", params={**q, "include_inactive": True}, headers=USER
        ).json()["items"],
    }
    export = client.get("/v1/export", params=q, headers=ADMIN)
    out["export"] = "" if export.status_code == 404 else export.text.strip()  # no user: 404
    for sid in ("s-files", "s-pg"):
        out[f"session {sid}"] = client.get(
            f"/v1/sessions/{sid}", params=q, headers=USER
        ).status_code
        ref = {"ref": f"tool-results/{sid}/c1.txt", **q}
        tool = client.get(f"/v1/sessions/{sid}/tool-results", params=ref, headers=USER)
        out[f"tool result {sid}"] = tool.status_code
    for word in MARKS[user].values():
        body = {"user_id": user, "query": word, "limit": 10}
        hits = client.post("/v1/sessions/search", json=body, headers=USER).json()["hits"]
        recall = {"user_id": user, "query": word, "top_k": 10}
        memories = client.post("/v1/memories/search", json=recall, headers=USER).json()["hits"]
        if hits or memories:
            out[f"search {word}"] = [h.get("snippet") or h.get("text") for h in hits + memories]
    return out


EMPTY = {
    "sessions": [],
    "memories": [],
    "export": "",
    "session s-files": 404,
    "tool result s-files": 404,
    "session s-pg": 404,
    "tool result s-pg": 404,
}


def test_erase_leaves_nothing_of_the_user_and_every_byte_of_another(
    tmp_path,
    embedder,
    monkeypatch,
    llm_server,
    script,
    pg_table,
    pg_schema,
    caplog,
):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    workspace = tmp_path / "ws"
    for user in ("alice", "bob"):
        _files_era(workspace, embedder, user)
    services, client = _services(
        workspace,
        embedder,
        longterm={"backend": "qdrant"},
        shortterm={"backend": "postgres", "postgres_table": pg_table},
        postgres={"dsn": PG_DSN, "schema_name": pg_schema, "pool_min": 1, "pool_max": 4},
        llm={"base_url": llm_server.base_url, "model": "chat", "context_window": 8192},
    )
    alice_words = list(MARKS["alice"].values())
    state_table = f'"{pg_schema}"."{pg_table}"'  # sessions live beside the replica state
    with client:
        for user in ("alice", "bob"):
            _qdrant_postgres_era(client, script, user)
        alice = OwnerPaths(workspace, "acme", "alice")
        bob = OwnerPaths(workspace, "acme", "bob")
        # the setup put every word somewhere, in every kind of store the test is about
        found = _scan(workspace, alice_words)
        # the files era's session log and tool result moved into PostgreSQL with the rest
        moved = {MARKS["alice"]["tool_result"], MARKS["alice"]["chat_postgres"]}
        in_rows = {MARKS["alice"]["dead_letter"]}  # its log line and its dead letter are rows
        assert set(found) == set(alice_words) - moved - in_rows, found
        assert all(word in _pg_logs_text(pg_schema) for word in moved | in_rows)
        assert MARKS["alice"]["dead_letter"] in _pg_dead_letters_text(pg_schema)
        # the files era's MEMORY.md and snapshot moved into PostgreSQL when the Qdrant era began
        docs = services.memory_docs
        assert docs is not None and docs.count_user(RuntimeContext("acme", "alice")) == 2
        assert not alice.memory_md.exists() and not list(alice.archive_dir.glob("MEMORY.*.md"))
        # with PostgreSQL state the PostgreSQL era's dead letter is a row, not a file
        alice_ctx, bob_ctx = RuntimeContext("acme", "alice"), RuntimeContext("acme", "bob")
        assert services.state.dead_letters.count_user(alice_ctx) == 1
        assert not alice.flush_dead_letters.exists() and alice.vector_caches()
        assert any(f.startswith("qdrant/") for f in found[MARKS["alice"]["flush_qdrant"]])
        assert MARKS["alice"]["chat_postgres"] in _pg_text(state_table)
        assert _read_paths(client, "alice") != EMPTY
        bob_files, bob_rows = _hashes(bob.root), _pg_rows(state_table, "bob")
        bob_reads = _read_paths(client, "bob")

        caplog.set_level(logging.INFO, logger="memory_service.audit")
        response = client.delete("/v1/users/alice", headers=ADMIN)

        assert response.status_code == 200, response.text
        receipt = response.json()
        assert receipt["tenant_id"] == "acme" and receipt["user_id"] == "alice"
        assert receipt["by"].startswith("key:") and ADMIN_KEY not in receipt["by"]
        removed = receipt["removed"]
        assert removed == {
            "memory_md": 0,  # no file left: MEMORY.md and its snapshot moved to PostgreSQL
            "memory_md.postgres": 2,
            "vector_caches": 1,
            "facts.qdrant": 1,
            "facts.files": 2,
            "sessions.postgres": 1,
            "sessions.files": 1,
            "session_logs": 2,  # the files era's (moved) and the PostgreSQL era's
            "tool_results": 1,
            "session_logs.files": 0,
            "tool_results.files": 0,
            "dead_letters": 1,  # the row
            "maintenance": 0,  # no run since the switch: the marker is the files era's
            "dead_letters.files": 0,
            "maintenance.files": 1,
        }, removed
        assert receipt["total"] == sum(removed.values()) and receipt["left_behind"] == 0

        assert _scan(workspace, alice_words) == {}
        assert not alice.root.exists()
        assert _pg_rows(state_table, "alice") == []
        assert not any(word in _pg_text(state_table) for word in alice_words)
        assert not any(word in _pg_logs_text(pg_schema) for word in alice_words)
        assert not any(word in _pg_dead_letters_text(pg_schema) for word in alice_words)
        assert _read_paths(client, "alice") == EMPTY
        assert _hashes(bob.root) == bob_files
        assert _pg_rows(state_table, "bob") == bob_rows
        assert services.state.dead_letters.count_user(alice_ctx) == 0
        assert services.state.dead_letters.count_user(bob_ctx) == 1
        assert _read_paths(client, "bob") == bob_reads

        [line] = [r.getMessage() for r in caplog.records if r.name == "memory_service.audit"]
        assert "user=alice" in line and receipt["by"] in line and "total=13" in line
        assert not any(word in line for word in alice_words)

        again = client.delete("/v1/users/alice", headers=ADMIN)  # nothing left: nothing done
        assert again.status_code == 404 and again.json()["error"]["code"] == "not_found"
        fresh = {"user_id": "alice", "facts": [{"text": "A new start"}]}  # a new request: served
        assert client.post("/v1/memories", json=fresh, headers=USER).status_code == 200
    services.close()


@pytest.fixture
def served(tmp_path, embedder, monkeypatch, llm_server, script):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services, client = _services(
        tmp_path / "ws",
        embedder,
        llm={"base_url": llm_server.base_url, "model": "chat", "context_window": 8192},
    )
    with client:
        yield services, client
    services.close()


def _tree(workspace: Path) -> list[str]:
    return sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*"))


def test_unknown_user_is_404_and_nothing_is_written(served):
    services, client = served
    record = {"user_id": "bob", "facts": [{"text": "Bob exists"}]}
    client.post("/v1/memories", json=record, headers=USER)
    before = _tree(services.settings.workspace)
    response = client.delete("/v1/users/ghost", headers=ADMIN)
    assert response.status_code == 404, response.text
    assert response.json()["error"]["code"] == "not_found" and response.json()["error"]["message"]
    assert _tree(services.settings.workspace) == before


@pytest.mark.parametrize(
    ("key", "user", "status", "code"),
    [
        (USER_KEY, "bob", 403, "forbidden"),
        (ADMIN_KEY, "bad..id", 422, "invalid_id"),
        (ADMIN_KEY, "-bob", 422, "invalid_id"),
        (ADMIN_KEY, "x" * 200, 422, "invalid_id"),
        (None, "bob", 401, "unauthorized"),
    ],
)
def test_bad_erase_requests_change_nothing(served, key, user, status, code):
    services, client = served
    record = {"user_id": "bob", "facts": [{"text": "Bob exists"}]}
    client.post("/v1/memories", json=record, headers=USER)
    before = _hashes(services.settings.workspace)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    response = client.delete(f"/v1/users/{user}", headers=headers)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert _hashes(services.settings.workspace) == before


def test_forget_stays_facts_only(served, script):
    services, client = served
    script.chat(text("Noted."))
    body = {"user_id": "alice", "session_id": "s1", "message": "I live in Quillmarsh"}
    assert client.post("/v1/chat", json=body, headers=USER).status_code == 200
    client.post(
        "/v1/memories", json={"user_id": "alice", "facts": [{"text": "x y z"}]}, headers=USER
    )
    assert client.delete("/v1/users/alice/memories", headers=USER).json() == {"deleted": 1}
    session = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=USER)
    assert session.status_code == 200  # forget is facts only; erase is everything
    assert client.delete("/v1/users/alice", headers=ADMIN).json()["removed"]["sessions.files"] == 1


@pytest.mark.parametrize("late", ["chat", "flush"])
def test_a_call_in_flight_during_an_erase_writes_nothing_back(served, script, late):
    """The model answers after the erase returned (the chat's reply, or the post-call flush's
    facts): the call fails with ``user_erased`` and nothing of the user comes back."""
    services, client = served
    workspace = services.settings.workspace
    word = "Ombrelune-9931"
    client.post("/v1/memories", json={"user_id": "alice", "facts": [{"text": "x"}]}, headers=USER)
    reply = text(f"Noted, {word}.")
    bullet = text(f"- [fact|9] The user lives in {word}.")
    held_reply, release = held(reply if late == "chat" else bullet)
    script.chat(held_reply if late == "chat" else reply)
    script.flush(held_reply if late == "flush" else bullet)
    errors: list[BaseException] = []

    def call() -> None:
        ctx = RuntimeContext("acme", "alice", "s1")
        try:
            build_harness(services).call(ctx, f"I live in {word}")
        except BaseException as exc:  # noqa: BLE001 - the test asserts on it
            errors.append(exc)

    worker = threading.Thread(target=call)
    worker.start()
    script.wait_for(late)  # the call is in flight: the model holds its reply
    receipt = client.delete("/v1/users/alice", headers=ADMIN)
    release.set()  # the model answers only now, after the erase
    assert receipt.status_code == 200, receipt.text
    worker.join(10)

    assert [type(e) for e in errors] == [UserErasedError]
    assert _scan(workspace, [word]) == {}
    assert not OwnerPaths(workspace, "acme", "alice").root.exists()
    assert (
        client.get("/v1/memories", params={"user_id": "alice"}, headers=USER).json()["items"] == []
    )
    state = client.get("/v1/sessions/s1", params={"user_id": "alice"}, headers=USER)
    assert state.status_code == 404
    # a call that begins after the erase is a new user's, and is served
    script.chat(text("Welcome back."))
    body = {"user_id": "alice", "session_id": "s1", "message": "Hello again"}
    assert client.post("/v1/chat", json=body, headers=USER).status_code == 200


def test_cli_erase_prints_one_error_line_or_the_receipt(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    ws = str(tmp_path / "ws")
    assert main(["record", "--workspace", ws, "--tenant", "acme", "--user", "alice", "Gone"]) == 0
    capsys.readouterr()

    assert main(["erase", "--workspace", ws, "--tenant", "acme", "--user", "ghost"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("memory-service: error: no data for user")
    assert main(["erase", "--workspace", ws, "--tenant", "acme", "--user", "a/../b"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid user_id" in err

    argv = ["erase", "--workspace", ws, "--tenant", "acme", "--user", "alice", "--json"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert '"by": "cli"' in out and '"facts.files": 1' in out
    assert not OwnerPaths(Path(ws), "acme", "alice").root.exists()
    assert main(argv) == 2  # nothing left


def test_the_python_client_erases_and_reads_the_receipt(served):
    from memory_service.client import MemoryClient, NotFoundError, PermissionDeniedError

    _, client = served
    client.post("/v1/memories", json={"user_id": "carol", "facts": [{"text": "c"}]}, headers=USER)
    user = MemoryClient("http://testserver", USER_KEY, http_client=client)
    with pytest.raises(PermissionDeniedError):
        user.erase_user("carol")
    with MemoryClient("http://testserver", ADMIN_KEY, http_client=client) as admin:
        receipt = admin.erase_user("carol")
        assert receipt.removed["facts.files"] == 1 and receipt.user_id == "carol"
        with pytest.raises(NotFoundError):
            admin.erase_user("carol")
