"""Tenant and user isolation, on every backend, with random facts that share words and texts.

Several tenants and users get facts drawn from one small vocabulary (so every query matches
somebody else's facts too, and some texts are recorded by several users). No query, in any mode,
may return a fact of another tenant or user; ``get``/``delete`` by another user's id finds
nothing; ``forget`` removes exactly one user's facts.
"""

from __future__ import annotations

import random

from memory_service.domain.context import RuntimeContext, scope_context
from memory_service.domain.facts import Fact

TENANTS = ("acme", "globex", "initech")
USERS = ("alice", "bob", "carol")
WORDS = [
    "peanut",
    "allergy",
    "nurse",
    "hospital",
    "violin",
    "orchestra",
    "garden",
    "basil",
    "marathon",
    "passport",
    "coffee",
    "tea",
    "bicycle",
    "harbor",
    "museum",
    "madrid",
    "tokyo",
    "dog",
    "cat",
    "piano",
]
SHARED_TEXTS = ("Likes green tea in the morning", "Has a dog called Biscuit")


def _population(seed: int) -> dict[RuntimeContext, list[Fact]]:
    rng = random.Random(seed)
    population = {}
    for tenant in TENANTS:
        for user in USERS:
            facts = [Fact(" ".join(rng.sample(WORDS, rng.randint(2, 6)))) for _ in range(6)]
            facts += [Fact(t) for t in SHARED_TEXTS]
            population[RuntimeContext(tenant, user)] = facts
    return population


def _fill(memory, seed: int = 3) -> dict[RuntimeContext, set[str]]:
    owned = {}
    for ctx, facts in _population(seed).items():
        results = memory.record(ctx, facts)
        owned[ctx] = {r.id for r in results}
    return owned


def test_no_query_returns_another_users_fact(memory):
    owned = _fill(memory)
    everyone = set().union(*owned.values())
    assert len(everyone) == sum(len(ids) for ids in owned.values())  # ids differ per user
    rng = random.Random(5)
    queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(4)] + list(SHARED_TEXTS)
    for ctx, mine in owned.items():
        seen: set[str] = set()
        for query in queries:
            for mode in ("hybrid", "bm25", "dense"):
                recalls = memory.retrieve(ctx, query, top_k=100, mode=mode)
                got = {r.fact.id for r in recalls}
                assert got <= mine, (ctx, query, mode)
                seen |= got
        assert seen == mine  # every own fact is reachable, nobody else's
        listed = {f.id for f in memory.list(ctx, limit=1000, include_inactive=True).items}
        assert listed == mine
        others = sorted(everyone - mine)
        assert memory.get(ctx, others) == []
        assert memory.delete(ctx, others) == 0
    for ctx, mine in owned.items():  # the refused deletes removed nothing
        assert {f.id for f in memory.list(ctx, limit=1000).items} == mine


def test_forget_removes_exactly_one_users_facts(memory):
    owned = _fill(memory, seed=9)
    target = RuntimeContext("globex", "bob")
    assert memory.forget(target) == len(owned[target])
    for ctx, mine in owned.items():
        listed = {f.id for f in memory.list(ctx, limit=1000, include_inactive=True).items}
        assert listed == (set() if ctx == target else mine), ctx
    assert memory.retrieve(target, SHARED_TEXTS[0], top_k=10) == []
    same_text_elsewhere = memory.retrieve(RuntimeContext("globex", "alice"), SHARED_TEXTS[0], 10)
    assert SHARED_TEXTS[0] in [r.fact.text for r in same_text_elsewhere]
    assert memory.forget(target) == 0


def test_users_lists_a_tenants_users_only(memory):
    owned = _fill(memory, seed=4)
    memory.forget(RuntimeContext("acme", "carol"))
    assert memory.users("acme") == ["alice", "bob"]
    assert memory.users("globex") == sorted(USERS)
    assert memory.users("nobody-here") == []
    assert owned  # the population was recorded


AGENTS = ("support", "sales")


def _scoped_population(seed: int) -> dict[RuntimeContext, list[Fact]]:
    """Users' facts as above, plus each (tenant, agent)'s and each tenant's shared facts, all
    drawn from the same words, with texts every owner records."""
    rng = random.Random(seed)
    population = _population(seed)
    for tenant in TENANTS:
        owners = [scope_context(tenant, "agent", a) for a in AGENTS]
        for owner in [*owners, scope_context(tenant, "tenant")]:
            facts = [Fact(" ".join(rng.sample(WORDS, rng.randint(2, 6)))) for _ in range(5)]
            population[owner] = facts + [Fact(t) for t in SHARED_TEXTS]
    return population


def test_random_scoped_probes_see_only_their_own_agent_and_tenant_memory(memory):
    owned = {ctx: {r.id for r in memory.record(ctx, facts)} for ctx, facts in
             _scoped_population(11).items()}  # fmt: skip
    everyone = set().union(*owned.values())
    assert len(everyone) == sum(len(ids) for ids in owned.values())  # no id shared by 2 owners
    rng = random.Random(12)
    probes = shown = 0
    for _ in range(120):
        tenant, user = rng.choice(TENANTS), rng.choice(USERS)
        agent = rng.choice((*AGENTS, None))
        named = ["user", "tenant", *(["agent"] if agent else [])]
        scopes = rng.choice([None, rng.sample(named, rng.randint(1, len(named)))])
        ctx = RuntimeContext(tenant, user, agent_id=agent)
        allowed: set[str] = set()
        for scope in scopes or named:
            owner = RuntimeContext(tenant, user) if scope == "user" else None
            allowed |= owned[owner or scope_context(tenant, scope, agent)]
        query = rng.choice([" ".join(rng.sample(WORDS, 3)), *SHARED_TEXTS])
        mode = rng.choice(("hybrid", "bm25", "dense"))
        got = {r.fact.id for r in memory.retrieve(ctx, query, 100, mode=mode, scopes=scopes)}
        assert got <= allowed, (ctx, scopes, query, mode, got - allowed)
        listed = {f.id for f in memory.list(ctx, limit=1000, scopes=scopes or named).items}
        assert listed == allowed, (ctx, scopes)
        probes += 1
        shown += len(got)
    assert probes == 120 and shown > 120 * 5  # the probes did see results
    # a user of one tenant naming another tenant's agent id sees only its own tenant's agent
    ctx = RuntimeContext("acme", "alice", agent_id="support")
    got = {r.fact.id for r in memory.retrieve(ctx, SHARED_TEXTS[0], 100, scopes=["agent"])}
    assert got and got <= owned[scope_context("acme", "agent", "support")]
    # shared facts cannot be read, changed or deleted by id through a user's own scope
    shared = sorted(everyone - set().union(*(v for c, v in owned.items() if c.scope == "user")))
    assert memory.get(ctx, shared) == [] and memory.delete(ctx, shared) == 0
    assert memory.list(scope_context("acme", "tenant"), limit=1000).items
