"""Deletes stick (every read path, MEMORY.md, after a restart) and auth leaks no secret."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext
from memory_service.domain.paths import OwnerPaths
from memory_service.pipeline.transfer import export_records
from memory_service.services import build_services

USER_KEY = "user-key-0123456789abcdef-SECRET"
ADMIN_KEY = "admin-key-0123456789abcdef-SECRET"
ALICE = RuntimeContext("acme", "alice")
FACTS = [
    "Alice is allergic to peanuts",
    "Alice's locker code is 4471",
    "Alice plays the cello on Sundays",
]


def _app(tmp_path, embedder, backend):
    settings = load_settings(workspace=tmp_path / "ws", longterm={"backend": backend})
    services = build_services(settings, embedder=embedder)
    ring = ApiKeyRing(
        {
            USER_KEY: {"tenant": "acme", "role": "user"},
            ADMIN_KEY: {"tenant": "acme", "role": "admin"},
        }
    )
    return services, create_app(services, ring)


def _visible(client, services, text: str) -> list[str]:
    """Every read path that could still show ``text``; the names of those that do."""
    seen = []
    h = {"Authorization": f"Bearer {USER_KEY}"}
    for mode in ("hybrid", "bm25", "dense"):
        body = {"user_id": "alice", "query": text, "top_k": 10, "mode": mode}
        hits = client.post("/v1/memories/search", json=body, headers=h).json()["hits"]
        if any(hit["text"] == text for hit in hits):
            seen.append(f"search:{mode}")
    listed = client.get(
        "/v1/memories", params={"user_id": "alice", "include_inactive": True}, headers=h
    ).json()["items"]
    if any(item["text"] == text for item in listed):
        seen.append("list")
    if any(r["text"] == text for r in export_records(services.longterm, "acme", "alice")):
        seen.append("export")
    memory_md = OwnerPaths.of(services.settings.workspace, ALICE).memory_md
    if memory_md.exists() and text in memory_md.read_text():
        seen.append("MEMORY.md")
    return seen


@pytest.mark.parametrize("backend", ["files", "qdrant"])
def test_deletes_stick_everywhere_and_after_a_restart(tmp_path, embedder, monkeypatch, backend):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services, app = _app(tmp_path, embedder, backend)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    user = {"Authorization": f"Bearer {USER_KEY}"}
    with TestClient(app) as client:
        body = {"user_id": "alice", "facts": [{"text": t, "importance": 8} for t in FACTS]}
        ids = [
            r["id"] for r in client.post("/v1/memories", json=body, headers=user).json()["results"]
        ]
        run = client.post("/v1/maintenance/run", json={"force": True}, headers=admin).json()
        assert run["reports"][0]["counts"]["consolidated"] == 1
        assert _visible(client, services, FACTS[1]) == [
            "search:hybrid",
            "search:bm25",
            "search:dense",
            "list",
            "export",
            "MEMORY.md",
        ]
        gone = client.delete(f"/v1/memories/{ids[1]}", params={"user_id": "alice"}, headers=user)
        assert gone.json() == {"deleted": 1}
        assert _visible(client, services, FACTS[1]) == []
        got = client.get(f"/v1/memories/{ids[1]}", params={"user_id": "alice"}, headers=user)
        assert got.status_code == 404
        client.post("/v1/maintenance/run", json={"force": True}, headers=admin)
        assert _visible(client, services, FACTS[1]) == []
        assert _visible(client, services, FACTS[0])  # the others are untouched
    services.close()

    services, app = _app(tmp_path, embedder, backend)  # a restarted process
    with TestClient(app) as client:
        assert _visible(client, services, FACTS[1]) == []
        receipt = client.delete("/v1/users/alice/memories", headers=user)
        assert receipt.json() == {"deleted": 2}
        for text in FACTS:
            assert _visible(client, services, text) == []
        paths = OwnerPaths.of(services.settings.workspace, ALICE)
        assert not paths.memory_md.exists() and not paths.archive_dir.exists()
    services.close()


def test_no_key_or_secret_in_error_bodies_or_logs(tmp_path, embedder, monkeypatch, caplog):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services, app = _app(tmp_path, embedder, "files")
    caplog.set_level(logging.DEBUG)
    with TestClient(app) as client:
        wrong = USER_KEY.replace("user", "nope")
        responses = [
            client.post(
                "/v1/memories/search",
                json={"user_id": "alice", "query": "x"},
                headers={"Authorization": f"Bearer {wrong}"},
            ),
            client.post(
                "/v1/memories/search",
                json={"user_id": "alice", "query": "x"},
                headers={"X-API-Key": wrong},
            ),
            client.post(
                "/v1/maintenance/run", json={}, headers={"Authorization": f"Bearer {USER_KEY}"}
            ),
            client.post(
                "/v1/memories",
                json={"user_id": "../x", "facts": [{"text": "a"}]},
                headers={"Authorization": f"Bearer {USER_KEY}"},
            ),
        ]
        assert [r.status_code for r in responses] == [401, 401, 403, 422]
        for response in responses:
            assert "SECRET" not in response.text
    assert "SECRET" not in caplog.text
    services.close()
