"""Near-duplicates merged when they are recorded: every backend, and what a user of the API,
the CLI, import and the memory tools sees."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest

from memory_service.cli import main as cli_main
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.domain.facts import Fact, Phrasing, Source, utcnow
from memory_service.domain.limits import MAX_PHRASINGS
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.longterm.near_duplicates import (
    OFF,
    NearDuplicatePolicy,
    changes_a_value,
    value_words,
)
from memory_service.pipeline.policy import plan_maintenance
from tests.support.api import ACME_ADMIN_KEY, NDJSON, auth, record, search
from tests.support.backends import LONGTERM_BACKENDS

ALICE = RuntimeContext("acme", "alice")
BOB = RuntimeContext("acme", "bob")

# MiniLM cosines (the bundled model): 0.979 and 0.983, above the default 0.9
WENT = "Caroline went to an LGBTQ support group"
ATTENDED = "Caroline attended an LGBTQ support group"
ON_WEEKENDS = "Alice enjoys hiking on weekends"
AT_WEEKENDS = "The user Alice enjoys hiking at weekends"

# above 0.9 too (0.958, 0.933, 0.906), but each changes a value
VALUE_CHANGES = [
    ("Alice has 2 dogs", "Alice has 3 dogs"),
    ("Alice's meeting is on Monday", "Alice's meeting is on Tuesday"),
    ("Alice eats meat", "Alice never eats meat"),
    ("Alice lives in Paris", "Alice lives in Lyon"),
    ("Alice likes jazz", "Alice dislikes jazz"),
    (  # another place, in lower case: the thing a preposition introduces was replaced
        "Alice forgot the umbrella at the town hall on a rainy Wednesday",
        "Alice forgot the umbrella at a bakery on a rainy Wednesday",
    ),
    # the same values in another order give them other roles (0.992, 0.999, 0.987)
    ("Alice owes Bob 20 dollars", "Bob owes Alice 20 dollars"),
    ("Alice moved from Paris to Lyon", "Alice moved from Lyon to Paris"),
    (
        "Caroline expresses appreciation for her friendship with Melanie",
        "Melanie expresses appreciation for her friendship with Caroline",
    ),
]


# -- the rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("old", "new"), VALUE_CHANGES)
def test_a_changed_value_is_seen(old, new):
    assert changes_a_value(old, new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (WENT, ATTENDED),
        (ON_WEEKENDS, AT_WEEKENDS),
        ("User likes hiking", "User loves hiking"),
        ("Melanie plays the guitar", "Melanie plays guitar"),
        ("Melanie painted a sunrise", "Melanie painted a picture of a sunrise"),  # a detail added
    ],
)
def test_a_rewording_changes_no_value(old, new):
    assert not changes_a_value(old, new)


def test_value_words_are_numbers_times_names_and_negations():
    assert value_words("Alice doesn't drink coffee after 5 pm on Fridays") == {
        "alice",
        "not",
        "after",
        "5",
        "fridays",
    }


def test_a_fact_full_of_phrasings_takes_no_more():
    now = utcnow()
    full = Fact(
        WENT, phrasings=tuple(Phrasing(f"said {i}") for i in range(MAX_PHRASINGS)), id="x"
    ).stamped(ALICE, now)
    policy = NearDuplicatePolicy()
    assert not policy.may_merge(full, Fact(ATTENDED).stamped(ALICE, now), now)
    assert policy.may_merge(Fact(WENT).stamped(ALICE, now), Fact(ATTENDED).stamped(ALICE, now), now)


def test_phrasings_travel_in_an_export_line():
    fact = Fact(WENT, phrasings=(Phrasing(ATTENDED, Source("flush", text="I went"), utcnow()),))
    again = Fact.from_dict(json.loads(json.dumps(fact.to_dict())))
    assert again.phrasings == fact.phrasings


# -- every backend ------------------------------------------------------------------------------


def test_a_rewording_is_merged_into_the_fact_it_repeats(memory):
    first = memory.record(ALICE, [Fact(WENT, confidence=0.8)])[0]
    said = Source("chat", session_id="s1", messages=(4,), text="I attended the group on Tuesday")
    merged = memory.record(ALICE, [Fact(ATTENDED, source=said)])[0]

    assert merged.status == "merged"
    assert merged.id == merged.merged_into == first.id
    [stored] = memory.list(ALICE).items
    assert stored.text == WENT
    assert [p.text for p in stored.phrasings] == [ATTENDED]
    assert stored.phrasings[0].source == said
    assert stored.phrasings[0].recorded_at is not None
    assert stored.confidence == 1.0  # the higher of the two
    assert stored.updated_at > stored.created_at  # recording it again confirmed it
    memory.access.flush()
    assert memory.get(ALICE, [first.id])[0].access_count == 1  # a merge is one more access
    # the merged wording is found by its own words, on the fact it joined
    lexical = memory.retrieve(ALICE, "attended", 3, mode="bm25")
    assert [r.fact.id for r in lexical] == [first.id]
    source_words = memory.retrieve(ALICE, "Tuesday", 3, mode="bm25")
    assert [r.fact.id for r in source_words] == [first.id]


def test_recording_the_same_rewording_twice_keeps_it_once(memory):
    memory.record(ALICE, [Fact(ON_WEEKENDS)])
    memory.record(ALICE, [Fact(AT_WEEKENDS)])
    again = memory.record(ALICE, [Fact(AT_WEEKENDS)])[0]
    assert again.status == "merged"
    [stored] = memory.list(ALICE).items
    assert [p.text for p in stored.phrasings] == [AT_WEEKENDS]


@pytest.mark.parametrize(("old", "new"), VALUE_CHANGES)
def test_a_changed_value_is_never_merged(memory, old, new):
    memory.record(ALICE, [Fact(old)])
    assert memory.record(ALICE, [Fact(new)])[0].status == "created"
    assert sorted(f.text for f in memory.list(ALICE).items) == sorted([old, new])


def test_keys_and_kinds_keep_facts_apart(memory):
    memory.record(ALICE, [Fact(WENT, key="group.first")])
    assert memory.record(ALICE, [Fact(ATTENDED, key="group.second")])[0].status == "created"
    memory.record(ALICE, [Fact(ON_WEEKENDS, kind="preference")])
    assert memory.record(ALICE, [Fact(AT_WEEKENDS, kind="event")])[0].status == "created"
    assert len(memory.list(ALICE).items) == 4


def test_merges_stay_inside_one_owner_and_scope(memory):
    memory.record(ALICE, [Fact(WENT)])
    assert memory.record(BOB, [Fact(ATTENDED)])[0].status == "created"
    shared = Fact(ATTENDED, scope="agent", agent_id="helper")
    assert memory.record(ALICE, [shared])[0].status == "created"
    assert [p.text for p in memory.list(ALICE).items[0].phrasings] == []
    assert [f.text for f in memory.list(BOB).items] == [ATTENDED]
    # inside the agent's memory its own wordings merge (Edge answers it from memory)
    again = memory.record(ALICE, [Fact(WENT, scope="agent", agent_id="helper")])[0]
    assert again.status == "merged"
    helper = RuntimeContext("acme", "alice", agent_id="helper")
    [agent_fact] = memory.list(helper, scopes=["agent"]).items
    assert [p.text for p in agent_fact.phrasings] == [WENT]


def test_near_duplicates_in_one_batch_become_one_fact(memory):
    results = memory.record(ALICE, [Fact(WENT), Fact(ATTENDED), Fact("Alice has 2 dogs")])
    assert [r.status for r in results] == ["created", "merged", "created"]
    assert results[1].merged_into == results[0].id
    by_text = {f.text: f for f in memory.list(ALICE).items}
    assert sorted(by_text) == ["Alice has 2 dogs", WENT]
    assert [p.text for p in by_text[WENT].phrasings] == [ATTENDED]


def test_an_inactive_fact_takes_no_merge(memory):
    past = utcnow() - timedelta(days=1)
    memory.record(ALICE, [Fact(WENT, expires_at=past + timedelta(hours=1))])
    assert memory.record(ALICE, [Fact(ATTENDED)])[0].status == "created"


def test_an_update_keeps_the_phrasings(memory):
    first = memory.record(ALICE, [Fact(WENT)])[0]
    memory.record(ALICE, [Fact(ATTENDED)])
    [stored] = memory.get(ALICE, [first.id])
    memory.update(ALICE, [Fact(WENT, tags=("groups",), id=first.id)])
    [updated] = memory.get(ALICE, [first.id])
    assert updated.tags == ("groups",)
    assert updated.phrasings == stored.phrasings


@pytest.mark.parametrize("backend", ["files", "qdrant-edge"])
def test_phrasings_survive_a_restart(tmp_path, embedder, backend):
    first = LONGTERM_BACKENDS[backend](tmp_path, embedder)
    try:
        fid = first.record(ALICE, [Fact(WENT)])[0].id
        first.record(ALICE, [Fact(ATTENDED)])
    finally:
        first.close()
    again = LONGTERM_BACKENDS[backend](tmp_path, embedder)
    try:
        [stored] = again.get(ALICE, [fid])
        assert [p.text for p in stored.phrasings] == [ATTENDED]
        assert [r.fact.id for r in again.retrieve(ALICE, "attended", 3, mode="bm25")] == [fid]
    finally:
        again.close()


def test_the_policy_off_stores_each_wording(tmp_path, embedder):
    memory = FileSystemLongTermMemory(tmp_path / "ws", embedder, near_duplicates=OFF)
    memory.record(ALICE, [Fact(WENT)])
    assert memory.record(ALICE, [Fact(ATTENDED)])[0].status == "created"
    assert len(memory.list(ALICE).items) == 2


def test_a_merge_leaves_every_ledger_line_as_it_was(tmp_path, embedder):
    memory = FileSystemLongTermMemory(tmp_path / "ws", embedder)
    memory.record(ALICE, [Fact(WENT), Fact("Alice has 2 dogs")])
    ledgers = sorted((tmp_path / "ws").rglob("memory/*.md"))
    before = {
        p: [hashlib.sha256(line).hexdigest() for line in p.read_bytes().splitlines()]
        for p in ledgers
    }
    assert memory.record(ALICE, [Fact(ATTENDED)])[0].status == "merged"
    for path, hashes in before.items():
        now = [hashlib.sha256(line).hexdigest() for line in path.read_bytes().splitlines()]
        assert now[: len(hashes)] == hashes
    journal = next((tmp_path / "ws").rglob("decisions/journal.md")).read_text()
    assert ATTENDED in journal  # the merge is a decision beside the ledgers


# -- what a user of the service sees ------------------------------------------------------------


def test_the_api_says_merged_and_shows_the_phrasing(api_client):
    first = record(api_client, "alice", WENT).json()["results"][0]
    answer = record(api_client, "alice", ATTENDED)
    assert answer.status_code == 200, answer.text
    [result] = answer.json()["results"]
    assert result["status"] == "merged"
    assert result["merged_into"] == result["id"] == first["id"]
    got = api_client.get(f"/v1/memories/{first['id']}", params={"user_id": "alice"}, headers=auth())
    assert [p["text"] for p in got.json()["phrasings"]] == [ATTENDED]
    hits = search(api_client, "alice", "who attended the support group?").json()["hits"]
    assert hits[0]["id"] == first["id"]
    assert [p["text"] for p in hits[0]["phrasings"]] == [ATTENDED]


def test_an_import_counts_its_merges(api_client):
    lines = "".join(
        json.dumps({"tenant_id": "acme", "user_id": "alice", "text": t}) + "\n"
        for t in (WENT, ATTENDED, "Alice has 2 dogs")
    )
    answer = api_client.post(
        "/v1/import", content=lines, headers={**auth(ACME_ADMIN_KEY), **NDJSON}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"lines": 3, "created": 2, "superseded": 0, "duplicate": 0, "merged": 1}


def test_maintenance_keeps_the_older_wording_of_a_near_duplicate_it_merges():
    now = utcnow()
    older = Fact("Lunch is at noon", created_at=now - timedelta(days=1)).stamped(ALICE, now)
    newer = Fact("Lunch is at noon.", created_at=now).stamped(ALICE, now)
    plan = plan_maintenance([older, newer], now, expiry=ExpiryPolicy(), near_duplicate_distance=3)
    assert plan.delete == {older.id}
    assert [p.text for p in plan.update[newer.id].phrasings] == ["Lunch is at noon"]
    assert plan.update[newer.id].phrasings[0].recorded_at == older.created_at


def test_a_batch_never_fills_a_fact_past_its_phrasings(memory):
    first = memory.record(ALICE, [Fact(WENT)])[0]
    wordings = [Fact(f"{ATTENDED} {'!' * i}".strip()) for i in range(MAX_PHRASINGS + 2)]
    results = memory.record(ALICE, wordings)
    assert first.id in {r.merged_into for r in results if r.status == "merged"}
    assert "created" in {r.status for r in results}  # once it was full
    [stored] = memory.get(ALICE, [first.id])
    assert len(stored.phrasings) == MAX_PHRASINGS
    listed = memory.list(ALICE).items
    kept = {f.text for f in listed} | {p.text for f in listed for p in f.phrasings}
    assert {f.text for f in wordings} <= kept  # every wording is a fact or a phrasing


def test_the_cli_says_merged_and_names_the_fact(tmp_path, capsys, monkeypatch):
    for name in ("MEMORY_CONFIG", "MEMORY_WORKSPACE", "MEMORY_LONGTERM__BACKEND"):
        monkeypatch.delenv(name, raising=False)
    argv = ["record", "--workspace", str(tmp_path), "--user", "alice"]
    assert cli_main([*argv, "--json", WENT]) == 0
    [first] = json.loads(capsys.readouterr().out)
    assert cli_main([*argv, "--json", ATTENDED]) == 0
    [again] = json.loads(capsys.readouterr().out)
    assert (again["status"], again["merged_into"], again["id"]) == (
        "merged",
        first["id"],
        first["id"],
    )
    assert cli_main([*argv, "The user Caroline attended an LGBTQ support group"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"merged     {first['id']}") and "near-duplicate" in line


def test_memory_save_says_the_wording_is_kept(longterm, workspace):
    from memory_service.domain.messages import MEMORY_SAVE, ToolCall
    from memory_service.tools import MemoryTools

    tools = MemoryTools(workspace, longterm)
    for text in (WENT, ATTENDED):
        call = ToolCall("call_1", MEMORY_SAVE, json.dumps({"text": text}))
        outcome = tools.run(ALICE, call)
        assert outcome.ok, outcome.text
    assert "Already remembered in other words" in outcome.text
    [fact] = longterm.list(ALICE).items
    assert [p.text for p in fact.phrasings] == [ATTENDED]
    assert fact.phrasings[0].source.origin == "memory_save"


def test_a_flush_merges_what_it_extracted_again_in_other_words(
    longterm, chat_model, workspace, script
):
    from memory_service.config import MemorySettings
    from memory_service.domain.agent_state import AgentState
    from memory_service.domain.messages import Msg
    from memory_service.pipeline.flush import MemoryFlushManager
    from tests.support.llm_server import text

    ctx = RuntimeContext("acme", "alice", "s1")
    flusher = MemoryFlushManager(longterm, chat_model, workspace, config=MemorySettings())
    state = AgentState(session_id="s1")
    state.append(Msg.user("I went to an LGBTQ support group."), Msg.assistant("Great!"))
    script.flush(text(f"- {WENT}"))
    assert flusher.flush(state, ctx, "post_call").facts_created == 1
    state.append(Msg.user("Yes, I attended the group again."), Msg.assistant("Nice."))
    script.flush(text(f"- {ATTENDED}"))
    result = flusher.flush(state, ctx, "post_call")
    assert [f.status for f in result.facts] == ["merged"]
    assert result.facts_created == 0
    [fact] = longterm.list(ctx).items
    assert [p.text for p in fact.phrasings] == [ATTENDED]
    assert fact.phrasings[0].source.origin == "flush"


@pytest.mark.parametrize("backend", ["files", "qdrant-edge"])
def test_deleting_a_merged_fact_leaves_no_byte_of_its_wordings(tmp_path, embedder, backend):
    memory = LONGTERM_BACKENDS[backend](tmp_path, embedder)
    try:
        fid = memory.record(ALICE, [Fact(WENT)])[0].id
        said = Source("chat", text="Zanzibarian marmalade evening at the group")
        memory.record(ALICE, [Fact(ATTENDED, source=said)])
        assert memory.delete(ALICE, [fid]) == 1
    finally:
        memory.close()
    for needle in (b"attended", b"Zanzibarian"):
        held = [p for p in tmp_path.rglob("*") if p.is_file() and needle in p.read_bytes()]
        assert held == [], needle
