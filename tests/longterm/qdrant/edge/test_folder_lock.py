"""One process owns a Qdrant Edge folder: a CLI command run while ``serve`` owns it refuses
before touching a file, says what to do, and leaves the server writable. And a backend
failure never shows the server's file system paths to an API client."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from qdrant_client import QdrantClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import QdrantSettings, load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import BackendUnavailableError
from memory_service.domain.facts import Fact
from memory_service.longterm.qdrant.backend import QdrantLongTermMemory, open_qdrant
from memory_service.longterm.qdrant.client_engine import ClientEngine
from memory_service.services import build_services
from tests.support.server import ServerProcess, bearer, write_keys

REPO = Path(__file__).resolve().parents[4]
KEY = "acme-key-0123456789abcdef"

# Every command that opens the long-term store, as a user types it beside a running server.
CLI_COMMANDS = (
    ["search", "--user", "alice", "peanut allergy"],
    ["record", "--user", "alice", "Alice moved to Lisbon"],
    ["maintain", "--force"],
    ["export"],
)


def _snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Size and SHA-256 of every file under ``folder``."""
    return {
        str(path.relative_to(folder)): (path.stat().st_size, _sha256(path))
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cli(workspace: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMORY_")}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        MEMORY_WORKSPACE=str(workspace),
        MEMORY_LONGTERM__BACKEND="qdrant",
        MEMORY_EMBEDDING__THREADS="1",
    )
    return subprocess.run(
        [sys.executable, "-m", "memory_service.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("memory-service: error:")]


@pytest.mark.subprocess
def test_cli_beside_a_live_edge_server_refuses_and_changes_nothing(tmp_path: Path):
    workspace = tmp_path / "ws"
    keys = write_keys(workspace / "api-keys.json", {"acme": "user"})
    headers = bearer(keys["acme"])
    server = ServerProcess(workspace, workspace / "api-keys.json", backend="qdrant").start()
    try:
        base = server.base_url
        fact = {"user_id": "alice", "facts": [{"text": "Alice is allergic to peanuts"}]}
        assert httpx.post(f"{base}/v1/memories", json=fact, headers=headers).status_code == 200
        folder = workspace / "qdrant" / "memories"
        before = _snapshot(folder)
        assert before  # the server wrote its shard

        for args in CLI_COMMANDS:
            done = _cli(workspace, args)
            assert done.returncode != 0, (args, done.stdout, done.stderr)
            lines = _error_lines(done.stderr)
            assert len(lines) == 1, (args, done.stderr)  # one line that says what to do
            line = lines[0]
            assert "in use by another process" in line, line
            assert f"pid {server.proc.pid}" in line and "serve" in line, line
            assert "HTTP API" in line, line
            assert "Traceback" not in done.stderr, done.stderr
            assert _snapshot(folder) == before, args  # refused before touching any file

        later = {"user_id": "alice", "facts": [{"text": "Alice plays the cello"}]}
        written = httpx.post(f"{base}/v1/memories", json=later, headers=headers)
        assert written.status_code == 200, written.text
        found = httpx.post(
            f"{base}/v1/memories/search",
            json={"user_id": "alice", "query": "cello"},
            headers=headers,
        )
        assert found.status_code == 200, found.text
        assert found.json()["hits"][0]["text"] == "Alice plays the cello"
    finally:
        server.stop()
    # The server's clean stop released the folder: the CLI now opens it.
    done = _cli(workspace, ["search", "--tenant", "acme", "--user", "alice", "cello"])
    assert done.returncode == 0, done.stderr
    assert "Alice plays the cello" in done.stdout


def test_the_lock_file_beside_the_folder_names_its_owner_until_close(tmp_path, embedder):
    memory = open_qdrant(QdrantSettings(path=tmp_path / "qdrant"), tmp_path, embedder)
    lock = tmp_path / "qdrant" / "memories.lock"
    try:
        owner = json.loads(lock.read_text(encoding="utf-8"))
        assert owner["pid"] == os.getpid()
        assert not (tmp_path / "qdrant" / "memories" / "memories.lock").exists()  # not Edge's
    finally:
        memory.close()
    assert lock.read_text(encoding="utf-8") == ""  # released: no owner named any more


class _FailingShard:
    """An Edge shard whose writes fail the way a damaged shard does: naming its files."""

    def __init__(self, shard, folder: Path) -> None:
        self._shard, self._folder = shard, folder

    def update(self, _operation) -> None:
        journal = self._folder / "segments/1/vector_storage-bm25/store/tracker_journal.dat"
        raise Exception(f"Tracker journal {journal} is shorter than expected")  # noqa: TRY002

    def __getattr__(self, name: str):
        return getattr(self._shard, name)


@pytest.fixture
def edge_client(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    settings = load_settings(workspace=tmp_path / "ws", longterm={"backend": "qdrant"})
    services = build_services(settings, embedder=embedder)
    ring = ApiKeyRing({KEY: {"tenant": "acme", "role": "user"}})
    try:
        with TestClient(create_app(services, ring)) as client:
            yield client, services
    finally:
        services.close()


def test_a_503_body_names_no_server_path(edge_client, tmp_path):
    client, services = edge_client
    engine = services.longterm.engine
    engine._shard = _FailingShard(engine._shard, engine.folder)
    body = {"user_id": "alice", "facts": [{"text": "Alice is allergic to peanuts"}]}
    response = client.post("/v1/memories", json=body, headers={"X-API-Key": KEY})
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "backend_unavailable"
    assert str(tmp_path) not in response.text and "tracker_journal" not in response.text
    assert "/" not in error["message"], error["message"]
    assert "memories" in error["message"]  # the collection, by name
    engine._shard = engine._shard._shard


def test_a_qdrant_server_failure_names_no_path_or_url(embedder):
    client = QdrantClient(location=":memory:")
    engine = ClientEngine.attach(
        client, "memories", embedder.dimension, description="qdrant (http://10.0.0.7:6333)"
    )
    memory = QdrantLongTermMemory(engine, embedder)

    def broken(*_args, **_kwargs):
        raise RuntimeError("Service internal error: /qdrant/storage/collections/memories: EIO")

    client.upsert = broken
    with pytest.raises(BackendUnavailableError) as caught:
        memory.record(RuntimeContext("acme", "alice"), [Fact("Alice is allergic to peanuts")])
    message = caught.value.message
    assert "/qdrant/storage" not in message and "10.0.0.7" not in message, message
    assert "memories" in message
    memory.close()


def test_a_cli_error_is_one_line_even_when_its_cause_has_several(monkeypatch, capsys):
    from memory_service import cli
    from memory_service.commands import memories

    def fails(_args):
        raise BackendUnavailableError("Qdrant failed:\n  first cause\n  second cause")

    monkeypatch.setattr(memories, "run_search", fails)
    assert cli.main(["search", "--user", "alice", "anything"]) == 2
    err = capsys.readouterr().err
    assert err == "memory-service: error: Qdrant failed: first cause second cause\n"
