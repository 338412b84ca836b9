"""Isolation, randomised, in CI: 20 tenants x 20 users with the same user ids, the same
session id and the same words; thousands of random reads through every read path; not one
result that belongs to someone else. The 10,000-query run is
``python -m tests.support.reliability.isolation``.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.services import build_services
from tests.support.reliability.isolation import run_isolation

ACME = "acme-key-0123456789abcdef"
GLOBEX = "globex-key-0123456789abcdef"
KEYS = {ACME: {"tenant": "acme", "role": "user"}, GLOBEX: {"tenant": "globex", "role": "user"}}


@pytest.mark.slow
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


@pytest.mark.slow
def test_random_scoped_reads_over_http_never_leak_across_tenants_agents_users(
    tmp_path, embedder, monkeypatch
):
    """3 tenants x 2 agents x 3 users, every owner with the same texts plus its own marker;
    curators write the shared memory, user keys make 300 random reads: each sees its own,
    its agent's and its tenant's facts, nothing else."""
    import random

    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    tenants, agents, users = ("acme", "globex", "initech"), ("support", "sales"), ("al", "bo", "cy")
    keys = {f"{t}-user-0123456789abcdef": {"tenant": t, "role": "user"} for t in tenants}
    keys |= {f"{t}-curator-0123456789abcdef": {"tenant": t, "role": "curator"} for t in tenants}
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)

    def auth(tenant: str, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {tenant}-{role}-0123456789abcdef"}

    owner_of: dict[str, tuple] = {}  # marker text -> its owner
    try:
        with TestClient(create_app(services, ApiKeyRing(keys))) as client:
            for t in tenants:
                owners = [("user", u, None) for u in users] + [("agent", None, a) for a in agents]
                for scope, user, agent in [*owners, ("tenant", None, None)]:
                    marker = f"note {t} {scope} {user or agent or 'all'} parking badge lunch"
                    facts = [{"text": marker, "scope": scope}, {"text": "lunch is at noon",
                                                                 "scope": scope}]  # fmt: skip
                    body = {"user_id": user or "curator", "agent_id": agent, "facts": facts}
                    role = "user" if scope == "user" else "curator"
                    assert (
                        client.post("/v1/memories", json=body, headers=auth(t, role)).status_code
                        == 200
                    )
                    owner_of[marker] = (t, scope, user or agent)  # tenant: (t, "tenant", None)
            rng = random.Random(17)
            leaks, seen = [], 0
            for _ in range(300):
                t, user = rng.choice(tenants), rng.choice(users)
                agent = rng.choice((*agents, None))
                named = ["user", "tenant", *(["agent"] if agent else [])]
                scopes = rng.choice([None, rng.sample(named, rng.randint(1, len(named)))])
                allowed = {(t, "user", user), (t, "tenant", "all")}
                allowed = {o for o in allowed if o[1] in (scopes or named)}
                if agent and "agent" in (scopes or named):
                    allowed.add((t, "agent", agent))
                body = {"user_id": user, "query": rng.choice(["parking badge", "lunch note"]),
                        "top_k": 50, "mode": rng.choice(["hybrid", "bm25", "dense"])}  # fmt: skip
                body |= {"agent_id": agent} if agent else {}
                body |= {"scopes": scopes} if scopes else {}
                hits = client.post("/v1/memories/search", json=body, headers=auth(t, "user"))
                assert hits.status_code == 200, hits.text
                listed = client.get(
                    "/v1/memories",
                    params={"user_id": user, "scope": scopes or named}
                    | ({"agent_id": agent} if agent else {}),
                    headers=auth(t, "user"),
                )
                assert listed.status_code == 200, listed.text
                for via, found in (
                    ("search", hits.json()["hits"]),
                    ("list", listed.json()["items"]),
                ):
                    for item in found:
                        seen += 1
                        owner = owner_of.get(item["text"])
                        if owner is None:  # the text every owner has: its scope must be asked
                            ok = item["scope"] in (scopes or named)
                        else:
                            ok = (owner[0], owner[1], owner[2] or "all") in allowed
                        if not ok:
                            leaks.append((via, t, user, agent, scopes, item["text"]))
            assert seen > 300
            assert leaks == []
    finally:
        services.close()
