"""Isolation, randomised, in CI: 20 tenants x 20 users with the same user ids, the same
session id and the same words; thousands of random reads through every read path; not one
result that belongs to someone else. The 10,000-query run is
``python -m benchmarks.reliability.isolation``.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

from benchmarks.reliability.isolation import run_isolation
from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.services import build_services

ACME = "acme-key-0123456789abcdef"
GLOBEX = "globex-key-0123456789abcdef"
KEYS = {ACME: {"tenant": "acme", "role": "user"}, GLOBEX: {"tenant": "globex", "role": "user"}}


def test_random_reads_across_20_tenants_by_20_users_never_leak(tmp_path, embedder):
    result = run_isolation(
        tmp_path,
        tenants=20,
        users=20,
        facts=2,  # + 2 texts every user has + 1 recorded after MEMORY.md: 2,000 facts
        queries=2000,
        embedder=embedder,
        consolidated_tenants=4,  # MEMORY.md for 80 users: the slowest part of seeding
        chat_share=0.03,
        log=lambda _: 0,
    )

    assert result["facts"] >= 2000
    paths = result["queries_by_path"]
    for path in (
        "search_hybrid", "search_bm25", "search_dense", "list", "get_by_id",
        "tool_memory_search", "tool_memory_get", "tool_session_search", "session_search",
        "session_state", "chat_recall", "chat_prompt", "export",
    ):  # fmt: skip
        assert paths.get(path, 0) > 0, path
        assert result["results_by_path"].get(path, 0) > 0, path  # each path did show results
    assert result["queries"] >= 2000
    assert result["leaks"] == 0, result["leak_samples"]
    assert result["foreign_id_guesses"]["get"] > 100
    assert result["foreign_id_guesses"]["not_404"] == 0


def test_guessing_another_tenants_fact_id_gives_404_not_the_fact(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    acme, globex = {"Authorization": f"Bearer {ACME}"}, {"Authorization": f"Bearer {GLOBEX}"}
    try:
        with TestClient(create_app(services, ApiKeyRing(KEYS))) as client:
            body = {"user_id": "alice", "facts": [{"text": "Alice's PIN is 4321"}]}
            fid = client.post("/v1/memories", json=body, headers=acme).json()["results"][0]["id"]
            url = f"/v1/memories/{fid}"

            for method in ("GET", "DELETE"):  # same user id, other tenant
                got = client.request(method, url, params={"user_id": "alice"}, headers=globex)
                assert got.status_code == 404 and got.json()["error"]["code"] == "not_found"
                assert "4321" not in got.text
            other_user = client.get(url, params={"user_id": "bob"}, headers=acme)
            assert other_user.status_code == 404
            search = {"user_id": "alice", "query": "Alice's PIN is 4321", "mode": "bm25"}
            assert client.post("/v1/memories/search", json=search, headers=globex).json() == {
                "hits": []
            }
            mine = client.get(url, params={"user_id": "alice"}, headers=acme)
            assert mine.status_code == 200 and mine.json()["text"] == "Alice's PIN is 4321"
    finally:
        services.close()
