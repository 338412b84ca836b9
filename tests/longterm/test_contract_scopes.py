"""Scopes in the LongTermMemory contract: user, agent and tenant memory, every backend."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.errors import InvalidInputError
from memory_service.domain.facts import Fact, utcnow
from memory_service.longterm.protocol import ListsAgents
from memory_service.stores.user_data import ListsUsers

ALICE = RuntimeContext("acme", "alice", agent_id="support")
BOB = RuntimeContext("acme", "bob", agent_id="support")
CAROL_SALES = RuntimeContext("acme", "carol", agent_id="sales")
GLOBEX_ALICE = RuntimeContext("globex", "alice", agent_id="support")


def texts(recalls) -> list[str]:
    return [r.fact.text for r in recalls]


def test_tenant_and_agent_facts_are_shared_user_facts_are_not(memory):
    memory.record(ALICE, [Fact("The office closes at six on Fridays", scope="tenant")])
    memory.record(ALICE, [Fact("Refunds over 500 euros need a manager", scope="agent")])
    memory.record(ALICE, [Fact("Alice keeps her receipts in a blue folder")])

    bob = texts(memory.retrieve(BOB, "office refunds receipts folder", 10))
    assert "The office closes at six on Fridays" in bob
    assert "Refunds over 500 euros need a manager" in bob
    assert "Alice keeps her receipts in a blue folder" not in bob

    carol = texts(memory.retrieve(CAROL_SALES, "office refunds receipts folder", 10))
    assert carol == ["The office closes at six on Fridays"]  # another agent: tenant only

    assert memory.retrieve(GLOBEX_ALICE, "office refunds receipts folder", 10) == []


def test_a_shared_scope_read_while_empty_is_read_again_once_written(memory):
    """A backend may skip a shared scope it has seen empty (Qdrant Edge remembers it until
    the next write): every kind of write must make the next recall see the scope again."""
    memory.record(ALICE, [Fact("Alice waters the office plants on Mondays")])
    assert texts(memory.retrieve(ALICE, "office plants", 5)) == [
        "Alice waters the office plants on Mondays"
    ]  # the tenant's and the agent's memory are empty here, and read as such
    [shared] = memory.record(ALICE, [Fact("The office plants are ferns", scope="tenant")])
    assert "The office plants are ferns" in texts(memory.retrieve(BOB, "office plants", 5))
    assert memory.delete(scope_context("acme", "tenant"), [shared.id]) == 1
    assert texts(memory.retrieve(BOB, "office plants", 5)) == []
    memory.record(BOB, [Fact("Plants in the office need little light", scope="agent")])
    assert texts(memory.retrieve(ALICE, "office plants", 5, scopes=["agent"])) == [
        "Plants in the office need little light"
    ]


def test_each_hit_says_its_scope(memory):
    memory.record(ALICE, [Fact("Tickets are answered within a day", scope="tenant")])
    memory.record(ALICE, [Fact("Escalate tickets about invoices", scope="agent")])
    memory.record(ALICE, [Fact("Alice files tickets in the morning")])
    scopes = {
        r.fact.text: (r.fact.scope, r.fact.agent_id)
        for r in memory.retrieve(ALICE, "tickets", 10, mode="bm25")
    }
    assert scopes == {
        "Tickets are answered within a day": ("tenant", None),
        "Escalate tickets about invoices": ("agent", "support"),
        "Alice files tickets in the morning": ("user", None),
    }


def test_narrower_scope_wins_on_the_same_key_and_the_wider_fact_stays(memory):
    memory.record(ALICE, [Fact("Replies are written in English", key="lang", scope="tenant")])
    memory.record(ALICE, [Fact("Replies are written in French", key="lang", scope="agent")])
    memory.record(ALICE, [Fact("Replies to Alice are written in German", key="lang")])

    question = "which language are replies written in?"
    assert texts(memory.retrieve(ALICE, question, 5)) == ["Replies to Alice are written in German"]
    assert texts(memory.retrieve(BOB, question, 5)) == ["Replies are written in French"]
    assert texts(memory.retrieve(CAROL_SALES, question, 5)) == ["Replies are written in English"]
    # hidden, not deleted: naming only the tenant scope shows its fact
    only_tenant = memory.retrieve(ALICE, question, 5, scopes=["tenant"])
    assert texts(only_tenant) == ["Replies are written in English"]
    # and the user's fact does not hide a scope the call did not name above it
    assert texts(memory.retrieve(ALICE, question, 5, scopes=["agent", "tenant"])) == [
        "Replies are written in French"
    ]


def test_an_expired_narrower_fact_hides_nothing(memory):
    past = utcnow() - timedelta(days=1)
    memory.record(ALICE, [Fact("Support hours are nine to five", key="hours", scope="tenant")])
    memory.record(ALICE, [Fact("Alice's support hours are eight to four", key="hours")])
    memory.update(
        ALICE,
        [replace_expiry(f, past) for f in memory.list(ALICE).items],
    )
    assert texts(memory.retrieve(ALICE, "support hours", 5)) == ["Support hours are nine to five"]


def replace_expiry(fact: Fact, when) -> Fact:
    return replace(fact, expires_at=when)


def test_same_text_in_two_scopes_is_two_facts(memory):
    text = "The wifi password is on the fridge"
    user = memory.record(ALICE, [Fact(text)])[0]
    tenant = memory.record(ALICE, [Fact(text, scope="tenant")])[0]
    agent = memory.record(ALICE, [Fact(text, scope="agent")])[0]
    assert tenant.status == agent.status == "created"
    assert len({user.id, tenant.id, agent.id}) == 3
    assert memory.record(BOB, [Fact(text, scope="tenant")])[0].status == "duplicate"
    ids = [r.fact.id for r in memory.retrieve(ALICE, "wifi password", 5)]
    assert sorted(ids) == sorted([user.id, agent.id, tenant.id])


def test_list_reads_the_named_scopes(memory):
    memory.record(ALICE, [Fact("Alice likes tea")])
    memory.record(ALICE, [Fact("The kitchen has tea", scope="tenant")])
    memory.record(ALICE, [Fact("Support offers tea", scope="agent")])
    assert [f.text for f in memory.list(ALICE).items] == ["Alice likes tea"]
    listed = memory.list(BOB, scopes=["user", "agent", "tenant"]).items
    assert sorted(f.text for f in listed) == ["Support offers tea", "The kitchen has tea"]
    first = memory.list(ALICE, scopes=["user", "agent", "tenant"], limit=2)
    rest = memory.list(ALICE, scopes=["user", "agent", "tenant"], cursor=first.next_cursor)
    assert len(first.items) + len(rest.items) == 3


def test_one_record_call_writes_several_scopes_in_order(memory):
    results = memory.record(
        ALICE,
        [
            Fact("Alice's desk is by the window"),
            Fact("Parking is free after six", scope="tenant"),
            Fact("Alice's badge is number 42"),
        ],
    )
    assert [r.status for r in results] == ["created"] * 3
    got = {f.id: f.scope for f in memory.get(ALICE, [r.id for r in results])}
    assert got == {results[0].id: "user", results[2].id: "user"}  # get reads ctx's scope
    tenant = scope_context("acme", "tenant")
    assert [f.id for f in memory.get(tenant, [results[1].id])] == [results[1].id]


def test_forget_of_a_user_leaves_shared_memory(memory):
    memory.record(ALICE, [Fact("Alice's cat is Tom"), Fact("Lunch is at noon", scope="tenant")])
    assert memory.forget(ALICE) == 1
    assert texts(memory.retrieve(BOB, "lunch", 5)) == ["Lunch is at noon"]
    assert memory.forget(scope_context("acme", "tenant")) == 1
    assert memory.retrieve(BOB, "lunch", 5) == []


def test_scopes_are_enumerated_apart_from_users(memory):
    memory.record(ALICE, [Fact("Alice's cat is Tom")])
    memory.record(ALICE, [Fact("Support closes at five", scope="agent")])
    memory.record(CAROL_SALES, [Fact("Sales closes at six", scope="agent")])
    if isinstance(memory, ListsUsers):
        assert memory.users("acme") == ["alice"]
    assert isinstance(memory, ListsAgents)
    assert memory.agents("acme") == ["sales", "support"]
    assert memory.agents("globex") == []


def test_bad_scopes_are_refused_before_anything_is_written(memory):
    with pytest.raises(InvalidInputError, match="scope"):
        memory.record(ALICE, [Fact("Fine"), Fact("Nope", scope="team")])
    with pytest.raises(InvalidInputError, match="agent_id"):
        memory.record(RuntimeContext("acme", "dave"), [Fact("Agentless", scope="agent")])
    assert memory.list(ALICE, scopes=["user", "agent", "tenant"]).items == []
    with pytest.raises(InvalidInputError, match="scope"):
        memory.retrieve(ALICE, "anything", scopes=["everyone"])
    with pytest.raises(InvalidInputError, match="at least one"):
        memory.retrieve(ALICE, "anything", scopes=[])
    with pytest.raises(InvalidInputError, match="agent_id"):
        memory.retrieve(RuntimeContext("acme", "dave"), "anything", scopes=["agent"])


def test_export_and_import_carry_every_scope(memory, tmp_path, embedder):
    import json

    from memory_service.longterm.files.backend import FileSystemLongTermMemory
    from memory_service.pipeline.transfer import export_records, import_records, parse_import

    memory.record(ALICE, [Fact("Alice's cat is Tom")])
    memory.record(ALICE, [Fact("Support closes at five", key="hours", scope="agent")])
    memory.record(ALICE, [Fact("Lunch is at noon", scope="tenant")])
    lines = [json.dumps(r) for r in export_records(memory, "acme")]
    owners = sorted((r["scope"], r["user_id"], r["agent_id"]) for r in map(json.loads, lines))
    assert owners == [("agent", None, "support"), ("tenant", None, None), ("user", "alice", None)]

    fresh = FileSystemLongTermMemory(tmp_path / "fresh", embedder)
    parsed, bad = parse_import(lines)
    assert bad == []
    assert dict(import_records(fresh, parsed)) == {"created": 3}
    assert dict(import_records(fresh, parse_import(lines)[0])) == {"duplicate": 3}
    before = sorted((r.fact.id, r.fact.scope) for r in memory.retrieve(BOB, "support lunch", 5))
    after = sorted((r.fact.id, r.fact.scope) for r in fresh.retrieve(BOB, "support lunch", 5))
    assert after == before and len(after) == 2


def test_import_refuses_a_bad_scope_line(memory):
    from memory_service.pipeline.transfer import parse_import

    good = '{"tenant_id": "acme", "text": "Lunch is at noon", "scope": "tenant"}'
    lines = [
        good,
        '{"tenant_id": "acme", "text": "x", "scope": "planet"}',
        '{"tenant_id": "acme", "text": "x", "scope": "agent"}',
        '{"tenant_id": "acme", "text": "x"}',
    ]
    parsed, bad = parse_import(lines)
    assert [p.ctx.scope for p in parsed] == ["tenant"]
    assert [b.line_no for b in bad] == [2, 3, 4]
    assert "scope" in bad[0].message and "agent_id" in bad[1].message
    assert "user_id" in bad[2].message


class _Counting:
    """The real embedder, counting the query texts it embeds."""

    def __init__(self, inner, query: str) -> None:
        self._inner, self._query, self.query_embeds = inner, query, 0
        self.name, self.dimension = inner.name, inner.dimension

    def embed(self, texts):
        return self._inner.embed(texts)

    def embed_query(self, texts):
        self.query_embeds += list(texts) == [self._query]
        return self._inner.embed_query(texts)


@pytest.mark.parametrize("backend", ["files", "qdrant-edge"])
def test_a_query_over_three_scopes_is_embedded_once(backend, tmp_path, embedder):
    from tests.support.backends import LONGTERM_BACKENDS

    query = "where do refunds go?"
    counting = _Counting(embedder, query)
    memory = LONGTERM_BACKENDS[backend](tmp_path, counting)
    try:
        memory.record(ALICE, [Fact("Alice wants refunds by bank transfer")])
        memory.record(ALICE, [Fact("Refunds go to billing", scope="agent")])
        memory.record(ALICE, [Fact("Refunds take a week", scope="tenant")])
        assert len(memory.retrieve(ALICE, query, 5, mode="dense")) == 3
        assert len(memory.retrieve(ALICE, query, 5, mode="hybrid")) == 3
        assert counting.query_embeds == 2  # once per call, not once per scope
    finally:
        memory.close()


def test_a_key_changed_after_a_recall_is_what_the_next_recall_reads(memory):
    """Keys are read again after every write: an update that moves the user's fact off the
    tenant's key shows the tenant's fact at once, and moving it back hides it again."""
    memory.record(ALICE, [Fact("Support hours are nine to five", key="hours", scope="tenant")])
    memory.record(ALICE, [Fact("Alice's support hours are eight to four", key="hours")])
    question = "support hours"
    own = "Alice's support hours are eight to four"
    assert texts(memory.retrieve(ALICE, question, 5)) == [own]
    (fact,) = [f for f in memory.list(ALICE).items if f.text == own]
    assert memory.update(ALICE, [replace(fact, key="hours.alice")]) == 1
    assert sorted(texts(memory.retrieve(ALICE, question, 5))) == [
        own,
        "Support hours are nine to five",
    ]
    assert memory.update(ALICE, [replace(fact, key="hours")]) == 1
    assert texts(memory.retrieve(ALICE, question, 5)) == [own]
