"""Shared scopes hold no one's words: a fact in an agent's or the tenant's memory keeps no
user's source text (what a user said, by the flush, ``memory_save`` or naming a session),
while a text the curator writes for the shared fact itself is kept; facts stored before the
rule lose such text when the store opens (counted, once)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memory_service.api import create_app
from memory_service.api.keys import ApiKeyRing
from memory_service.config import load_settings
from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.facts import Fact, Source
from memory_service.longterm.files.fact_files import render_fact
from memory_service.services import build_services
from tests.support.backends import LONGTERM_BACKENDS

APP = "acme-app-0123456789abcdef"
CURATOR = "acme-curator-0123456789abcdef"
SAID = "alice whispered her locker code 8812"
SHARED = scope_context("acme", "tenant")
ALICE = RuntimeContext("acme", "alice", "s1")


def _bytes_hold(folder: Path, word: str) -> list[str]:
    return [
        str(p.relative_to(folder))
        for p in sorted(folder.rglob("*"))
        if p.is_file() and word.encode() in p.read_bytes()
    ]


@pytest.mark.parametrize("backend", ["files", "qdrant-edge"])
def test_a_shared_fact_keeps_no_users_words_but_a_curators_own(tmp_path, embedder, backend):
    memory = LONGTERM_BACKENDS[backend](tmp_path, embedder)
    try:
        facts = [
            Fact(
                "Lockers are on floor two", scope="tenant", source=Source("flush", None, (), SAID)
            ),
            Fact("Lockers close at nine", scope="tenant", source=Source(None, "s1", (3,), SAID)),
            Fact("Lockers are blue", scope="tenant", source=Source(text="paint order 7")),
            Fact("Badges open lockers", scope="tenant", source=Source("handbook", text="p. 12")),
            Fact("Alice's locker is 8", source=Source("flush", None, (1,), SAID)),  # her own
        ]
        memory.record(ALICE, facts)
        shared = {f.text: f.source for f in memory.list(SHARED, limit=10).items}
        assert shared["Lockers are on floor two"] == Source("flush")
        assert shared["Lockers close at nine"] == Source(None, "s1", (3,))
        # no session, no pipeline origin: the curator's own words, kept (the request's session
        # is not given to a shared fact's source)
        assert shared["Lockers are blue"] == Source(text="paint order 7")
        assert shared["Badges open lockers"] == Source("handbook", text="p. 12")  # explicit
        [own] = memory.list(ALICE, limit=10).items
        assert own.source.text == SAID  # the user's own memory keeps what she said
        bm25 = memory.retrieve(ALICE, "whispered code 8812", 10, mode="bm25")
        assert [r.fact.text for r in bm25] == ["Alice's locker is 8"]
    finally:
        memory.close()


def test_the_api_drops_a_users_words_from_a_curators_shared_fact(tmp_path, embedder, monkeypatch):
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    services = build_services(load_settings(workspace=tmp_path / "ws"), embedder=embedder)
    ring = ApiKeyRing(
        {
            APP: {"tenant": "acme", "role": "application"},
            CURATOR: {"tenant": "acme", "role": "curator"},
        }
    )
    try:
        with TestClient(create_app(services, ring)) as client:
            said = {"user_id": "alice", "messages": [{"role": "user", "content": SAID}]}
            headers = {"Authorization": f"Bearer {APP}"}
            assert client.post("/v1/sessions/s1/messages", json=said, headers=headers).is_success
            fact = {"text": "Lockers close at nine", "scope": "tenant",
                    "source": {"session_id": "s1", "messages": [0], "text": SAID}}  # fmt: skip
            body = {"user_id": "alice", "session_id": "s1", "facts": [fact]}
            curator = {"Authorization": f"Bearer {CURATOR}"}
            assert client.post("/v1/memories", json=body, headers=curator).is_success
            listed = client.get(
                "/v1/memories", params={"user_id": "bob", "scope": "tenant"}, headers=headers
            )
            [item] = listed.json()["items"]
            assert item["source"]["session_id"] == "s1" and item["source"]["text"] is None
            assert SAID not in client.get("/v1/export", headers=headers).text
    finally:
        services.close()


def _stored_before_the_rule(memory, tmp_path: Path, backend: str, embedder) -> None:
    """Shared facts with a user's words, as an older version stored them."""
    quoted = replace(
        Fact("Lockers close at nine").stamped(SHARED), source=Source("flush", "s1", (1,), SAID)
    )
    own = replace(
        Fact("Badges open lockers").stamped(SHARED), source=Source("handbook", text="p. 12")
    )
    agent = scope_context("acme", "agent", "support")
    by_agent = replace(
        Fact("Support answers by nine").stamped(agent), source=Source("memory_save", text=SAID)
    )
    if backend == "files":
        for ctx, fact in ((SHARED, quoted), (SHARED, own), (agent, by_agent)):
            ledger = memory.paths(ctx).ledger(fact.created_at.date())
            ledger.parent.mkdir(parents=True, exist_ok=True)
            with ledger.open("a", encoding="utf-8") as handle:
                handle.write(render_fact(fact) + "\n")
        return
    from memory_service.longterm.qdrant.payload import payload_of
    from memory_service.longterm.qdrant.points import StoredPoint

    stored = ((SHARED, quoted), (SHARED, own), (agent, by_agent))
    dense = embedder.embed([f.text for _, f in stored])
    points = [
        StoredPoint(
            f.id, payload_of(ctx, f, embedder=embedder.name), dense[i].tolist(), memory._lexical(f)
        )
        for i, (ctx, f) in enumerate(stored)
    ]
    memory.engine.upsert(points)


@pytest.mark.parametrize("backend", ["files", "qdrant-edge"])
def test_opening_the_store_drops_the_users_words_of_older_shared_facts(tmp_path, embedder, backend):
    memory = LONGTERM_BACKENDS[backend](tmp_path, embedder)
    _stored_before_the_rule(memory, tmp_path, backend, embedder)
    memory.close()
    folder = tmp_path / ("workspace" if backend == "files" else "qdrant")
    assert _bytes_hold(folder, "whispered")  # the old facts hold her words

    reopened = LONGTERM_BACKENDS[backend](tmp_path, embedder)
    try:
        assert reopened.shared_words_dropped == 2
        shared = {f.text: f.source for f in reopened.list(SHARED, limit=10).items}
        assert shared == {
            "Lockers close at nine": Source("flush", "s1", (1,)),
            "Badges open lockers": Source("handbook", text="p. 12"),
        }
        agent = scope_context("acme", "agent", "support")
        [by_agent] = reopened.list(agent, limit=10).items
        assert by_agent.source == Source("memory_save")
        assert reopened.retrieve(ALICE, "whispered code 8812", 10, mode="bm25") == []
    finally:
        reopened.close()
    assert _bytes_hold(folder, "whispered") == []  # not in the files, nor Edge's WAL
    again = LONGTERM_BACKENDS[backend](tmp_path, embedder)
    try:
        assert again.shared_words_dropped == 0
    finally:
        again.close()
