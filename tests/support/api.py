"""The HTTP API suites' keys and request helpers, for FastAPI's TestClient on real services."""

from __future__ import annotations

from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.services import build_services

ACME_KEY = "acme-key-0123456789abcdef"
GLOBEX_KEY = "globex-key-0123456789abcdef"
ACME_ADMIN_KEY = "acme-admin-key-0123456789abcdef"
ALICE_PERSONAL_KEY = "acme-alice-personal-key-0123456789"
KEYS = {
    ACME_KEY: {"tenant": "acme", "role": "user"},
    GLOBEX_KEY: {"tenant": "globex", "role": "user"},
    ACME_ADMIN_KEY: {"tenant": "acme", "role": "admin"},
    ALICE_PERSONAL_KEY: {"tenant": "acme", "role": "personal", "user": "alice"},
}
NDJSON = {"Content-Type": "application/x-ndjson"}


def make_client(tmp_path, embedder, monkeypatch, **overrides):
    """Services on ``tmp_path/ws`` with ``overrides`` as settings, and a TestClient on them
    that knows ``KEYS``; the caller closes both."""
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    settings = load_settings(workspace=tmp_path / "ws", **overrides)
    services = build_services(settings, embedder=embedder)
    return services, TestClient(create_app(services, ApiKeyRing(KEYS)))


def auth(key: str = ACME_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def record(client, user, *texts, api_key=ACME_KEY, **fields):
    body = {"user_id": user, "facts": [{"text": t, **fields} for t in texts]}
    return client.post("/v1/memories", json=body, headers=auth(api_key))


def search(client, user, query, api_key=ACME_KEY, **fields):
    body = {"user_id": user, "query": query, **fields}
    return client.post("/v1/memories/search", json=body, headers=auth(api_key))


def append(client, session, messages, user="alice", key=ACME_KEY, **fields):
    body = {"user_id": user, "messages": messages, **fields}
    return client.post(f"/v1/sessions/{session}/messages", json=body, headers=auth(key))


def users(n: int, start: int = 0) -> list[dict]:
    """``n`` user messages, numbered from ``start``."""
    return [{"role": "user", "content": f"message {i}"} for i in range(start, start + n)]


def assert_error(response, status: int, code: str) -> None:
    """The service's error shape: ``status``, ``code`` and a message in words."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
