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


@pytest.mark.slow  # 400 random probes
def test_random_probes_with_personal_keys_never_reach_another_user(tmp_path, embedder, monkeypatch):
    """3 tenants x 4 users with the same user ids, each with a personal key; 400 random probes
    of a random path for a random user of the key's tenant: the key's own user answers with
    that user's facts and the tenant's shared ones only, any other is a 403 forbidden_user,
    and a refused write leaves the stores as they were."""
    import json
    import random

    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    tenants, users = ("acme", "globex", "initech"), ("al", "bo", "cy", "di")
    keys = {
        f"{t}-{u}-personal-0123456789": {"tenant": t, "user": u} for t in tenants for u in users
    }
    keys |= {f"{t}-curator-0123456789abcdef": {"tenant": t, "role": "curator"} for t in tenants}
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)

    def auth(tenant: str, who: str) -> dict[str, str]:
        tail = "curator-0123456789abcdef" if who == "curator" else f"{who}-personal-0123456789"
        return {"Authorization": f"Bearer {tenant}-{tail}"}

    owner_of: dict[str, tuple[str, str]] = {}  # text -> (tenant, user or "shared")
    ids: dict[tuple[str, str], str] = {}
    try:
        with TestClient(create_app(services, ApiKeyRing(keys))) as client:
            for t in tenants:
                for u in users:
                    text = f"{t} {u} keeps the parking badge"
                    body = {"user_id": u, "facts": [{"text": text}]}
                    got = client.post("/v1/memories", json=body, headers=auth(t, u))
                    ids[(t, u)] = got.json()["results"][0]["id"]
                    owner_of[text] = (t, u)
                    said = {"user_id": u, "messages": [{"role": "user", "content": text}]}
                    client.post("/v1/sessions/s1/messages", json=said, headers=auth(t, u))
                shared = f"{t} shared parking badge rules"
                body = {"user_id": "curator", "facts": [{"text": shared, "scope": "tenant"}]}
                client.post("/v1/memories", json=body, headers=auth(t, "curator"))
                owner_of[shared] = (t, "shared")

            def texts_of(path: str, response) -> list[str]:
                if path in ("export_user", "export"):
                    return [json.loads(line)["text"] for line in response.text.splitlines()]
                if path == "session":
                    return [m["content"] for m in response.json()["messages"]]
                data = response.json()
                if path == "get":
                    return [data["text"]]
                return [h["text"] for h in data.get("hits", data.get("items", []))]

            rng = random.Random(29)
            leaks, refused, answered = [], 0, 0
            paths = ("search", "list", "get", "session", "export_user", "export", "record")
            for _ in range(400):
                t, u, v = rng.choice(tenants), rng.choice(users), rng.choice(users)
                path = rng.choice(paths)
                headers = auth(t, u)
                if path == "search":
                    body = {"user_id": v, "query": "parking badge", "top_k": 50}
                    got = client.post("/v1/memories/search", json=body, headers=headers)
                elif path == "list":
                    scope = ["user", "tenant"]
                    params = {"user_id": v, "scope": scope}
                    got = client.get("/v1/memories", params=params, headers=headers)
                elif path == "get":
                    params = {"user_id": v}
                    got = client.get(f"/v1/memories/{ids[(t, v)]}", params=params, headers=headers)
                elif path == "session":
                    got = client.get("/v1/sessions/s1", params={"user_id": v}, headers=headers)
                elif path == "export_user":
                    got = client.get(f"/v1/users/{v}/export", headers=headers)
                elif path == "export":
                    got = client.get("/v1/export", params={"user_id": v}, headers=headers)
                else:
                    body = {"user_id": v, "facts": [{"text": f"{t} {v} was probed"}]}
                    got = client.post("/v1/memories", json=body, headers=headers)
                if v != u:
                    ok = got.status_code == 403 and got.json()["error"]["code"] == "forbidden_user"
                    refused += ok
                    if not ok:
                        leaks.append((path, t, u, v, got.status_code, got.text[:200]))
                    continue
                assert got.status_code == 200, (path, got.text)
                if path == "record":
                    continue
                for text in texts_of(path, got):
                    answered += 1
                    owner = owner_of.get(text, (t, u) if f"{t} {u} " in text else None)
                    if owner not in ((t, u), (t, "shared")):
                        leaks.append((path, t, u, v, text))
            assert leaks == []
            assert refused > 250 and answered > 50
            for t in tenants:  # a refused write wrote nothing: only the owner's own probes
                for u in users:
                    listed = client.get("/v1/memories", params={"user_id": u}, headers=auth(t, u))
                    for item in listed.json()["items"]:
                        assert item["text"].startswith(f"{t} {u} "), item["text"]
    finally:
        services.close()
