"""The LongTermMemory contract: every backend, the same assertions."""

from __future__ import annotations

import math
import uuid
from dataclasses import replace
from datetime import timedelta

import pytest

from indexing.hashing import content_hash
from memory_service.domain.context import RuntimeContext
from memory_service.domain.errors import InactiveFactError, InvalidInputError
from memory_service.domain.fact_filter import ConfidenceDecay, ExpiryPolicy, FactFilter
from memory_service.domain.facts import DATA_TAIL, FACT_NAMESPACE, Fact, Source, utcnow
from memory_service.domain.limits import MAX_TAG_CHARS, MAX_TAGS
from memory_service.longterm.files.backend import FileSystemLongTermMemory
from memory_service.stores.user_data import ListsUsers

ALICE = RuntimeContext("acme", "alice")
BOB = RuntimeContext("acme", "bob")
OTHER_TENANT_ALICE = RuntimeContext("globex", "alice")

PROFILE = [
    Fact("Alice works as a nurse at the city hospital", key="user.job", kind="fact"),
    Fact("Alice is allergic to peanuts", key="user.allergy", importance=9),
    Fact("Alice prefers window seats on long flights", kind="preference"),
    Fact("Alice adopted a golden retriever named Biscuit in 2021", kind="event"),
    Fact("To reset the router, Alice unplugs it for thirty seconds", kind="procedure"),
]


def texts(recalls) -> list[str]:
    return [r.fact.text for r in recalls]


def test_record_is_idempotent_and_ids_are_derived(memory):
    first = memory.record(ALICE, PROFILE)
    assert [r.status for r in first] == ["created"] * len(PROFILE)
    again = memory.record(ALICE, [Fact("  alice IS allergic   to peanuts ")])
    assert again[0].status == "duplicate"
    assert again[0].id == first[1].id
    expected = uuid.uuid5(FACT_NAMESPACE, f"acme\x1falice\x1f{content_hash(PROFILE[1].text)}")
    assert first[1].id == str(expected)
    assert len(memory.list(ALICE).items) == len(PROFILE)


def test_duplicate_inside_one_batch_is_written_once(memory):
    results = memory.record(ALICE, [Fact("Likes tea"), Fact("likes  TEA")])
    assert [r.status for r in results] == ["created", "duplicate"]
    assert [f.text for f in memory.list(ALICE).items] == ["Likes tea"]


def test_newer_fact_with_same_key_supersedes(memory):
    old = memory.record(ALICE, [Fact("Alice is vegetarian", key="user.diet")])[0]
    new = memory.record(ALICE, [Fact("Alice became vegan last spring", key="user.diet")])[0]
    assert new.status == "superseded"
    assert new.superseded_ids == (old.id,)
    recalled = texts(memory.retrieve(ALICE, "what is Alice's diet, vegetarian or vegan?", 5))
    assert "Alice became vegan last spring" in recalled
    assert "Alice is vegetarian" not in recalled
    active = memory.list(ALICE).items
    assert [f.text for f in active] == ["Alice became vegan last spring"]
    everything = {f.id: f for f in memory.list(ALICE, include_inactive=True).items}
    assert everything[old.id].superseded_by == new.id
    assert everything[old.id].valid_to is not None


def test_recording_a_superseded_fact_again_brings_it_back(memory):
    memory.record(ALICE, [Fact("Lives in Paris", key="user.city")])
    memory.record(ALICE, [Fact("Lives in Berlin", key="user.city")])
    back = memory.record(ALICE, [Fact("Lives in Paris", key="user.city")])[0]
    assert back.status == "superseded"
    assert [f.text for f in memory.list(ALICE).items] == ["Lives in Paris"]


def test_modes_report_their_ranks(memory):
    memory.record(ALICE, PROFILE)
    lexical = memory.retrieve(ALICE, "peanuts", 3, mode="bm25")
    assert texts(lexical)[0] == "Alice is allergic to peanuts"
    assert lexical[0].ranks == {"bm25": 1}
    assert all(r.ranks["bm25"] is not None for r in lexical)

    dense = memory.retrieve(ALICE, "What does she do for a living?", 1, mode="dense")
    assert texts(dense) == ["Alice works as a nurse at the city hospital"]
    assert dense[0].ranks == {"dense": 1}
    assert 0.0 < dense[0].score <= 1.0

    hybrid = memory.retrieve(ALICE, "which food is Alice allergic to?", 5, mode="hybrid")
    assert texts(hybrid)[0] == "Alice is allergic to peanuts"
    assert hybrid[0].ranks == {"bm25": 1, "dense": 1}
    # The fused score is the default preset's (z-score fusion + smoothing; the RRF value 2/61
    # of a both-legs-rank-1 hit is asserted for ``rrf-plain`` in test_retrieval_fusion.py).
    scores = [r.score for r in hybrid]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[1]


def test_a_data_tail_is_kept_but_neither_embedded_nor_indexed(memory):
    tailed = Fact("Alice keeps bees" + DATA_TAIL + '{"zebra": "quantum"}', key="hive")
    memory.record(ALICE, [tailed])
    memory.record(BOB, [Fact("Alice keeps bees", key="hive")])
    assert memory.list(ALICE).items[0].text == tailed.text
    assert memory.retrieve(ALICE, "zebra quantum", 5, mode="bm25") == []
    assert texts(memory.retrieve(ALICE, "bees", 5, mode="bm25")) == [tailed.text]
    (mine,) = memory.retrieve(ALICE, "zebra quantum", 1, mode="dense")
    (plain,) = memory.retrieve(BOB, "zebra quantum", 1, mode="dense")
    assert mine.score == pytest.approx(plain.score, abs=1e-5)


def test_lexical_hits_need_a_shared_term(memory):
    memory.record(ALICE, PROFILE)
    assert memory.retrieve(ALICE, "zebra quantum", 5, mode="bm25") == []


def test_threshold_bounds_the_dense_cosine(memory):
    memory.record(ALICE, PROFILE)
    loose = memory.retrieve(ALICE, "pet dog", 5, threshold=0.0, mode="dense")
    assert loose and all(r.score >= 0.0 for r in loose)
    strict = memory.retrieve(ALICE, "pet dog", 5, threshold=0.95, mode="dense")
    assert strict == []
    best = loose[0].score
    bounded = memory.retrieve(ALICE, "pet dog", 5, threshold=best - 1e-4, mode="dense")
    assert texts(bounded) == [loose[0].fact.text]


def test_hybrid_answers_nothing_when_no_memory_reaches_the_threshold(memory):
    """A shared word is no evidence: under the threshold, the BM25 match alone is not returned."""
    memory.record(ALICE, [Fact("Alice's cat is named Biscuit"), Fact("Alice plays the cello")])
    query = "biscuit recipe with butter and flour"
    assert texts(memory.retrieve(ALICE, query, 5, mode="bm25")) == ["Alice's cat is named Biscuit"]
    closest = memory.retrieve(ALICE, query, 5, threshold=-1.0, mode="dense")[0].score
    assert memory.retrieve(ALICE, query, 5, threshold=closest + 1e-3) == []
    reached = memory.retrieve(ALICE, query, 5, threshold=closest - 1e-3)
    assert "Alice's cat is named Biscuit" in texts(reached)
    assert all(r.scores.get("dense", 1.0) >= closest - 1e-3 for r in reached)


def test_list_pages_through_everything_once(memory):
    memory.record(ALICE, [Fact(f"Alice fact number {i}") for i in range(23)])
    seen, cursor, pages = [], None, 0
    while True:
        page = memory.list(ALICE, limit=10, cursor=cursor)
        seen += [f.id for f in page.items]
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
    assert pages == 3
    assert len(seen) == len(set(seen)) == 23


def test_get_and_delete(memory):
    ids = [r.id for r in memory.record(ALICE, PROFILE)]
    assert [f.text for f in memory.get(ALICE, [ids[1]])] == [PROFILE[1].text]
    assert memory.delete(ALICE, [ids[1], "not-an-id"]) == 1
    assert memory.get(ALICE, [ids[1]]) == []
    assert "Alice is allergic to peanuts" not in texts(memory.retrieve(ALICE, "peanuts", 5))
    assert memory.delete(ALICE, [ids[1]]) == 0
    assert len(memory.list(ALICE).items) == len(PROFILE) - 1


def test_a_candidate_deleted_while_a_recall_reads_it_is_no_error(memory, monkeypatch):
    """Another call deletes a candidate after the engine answered the recall's query and
    before fusion reads the candidate's fact: the recall answers (a backend that reads facts
    with the query may still return the fact it read; one that reads them later leaves it
    out), never an error."""
    ids = {r.id: f.text for r, f in zip(memory.record(ALICE, PROFILE), PROFILE, strict=True)}
    peanuts = next(i for i, text in ids.items() if "peanuts" in text)
    searched = memory._scoped_candidates

    def then_deleted(owners, request):
        found = searched(owners, request)
        assert peanuts in {h.id for hits in found.legs.values() for h in hits}
        assert memory.delete(ALICE, [peanuts]) == 1
        return found

    monkeypatch.setattr(memory, "_scoped_candidates", then_deleted)
    recalled = memory.retrieve(ALICE, "Is Alice allergic to peanuts?", 5)
    assert recalled, "the other candidates still answer"
    assert {r.fact.id for r in recalled} <= set(ids)
    monkeypatch.undo()
    assert peanuts not in {r.fact.id for r in memory.retrieve(ALICE, "peanuts", 5)}


def test_forget_removes_exactly_one_user(memory):
    memory.record(ALICE, PROFILE)
    memory.record(BOB, [Fact("Bob plays the cello")])
    memory.record(OTHER_TENANT_ALICE, [Fact("Globex Alice likes sushi")])
    assert memory.forget(ALICE) == len(PROFILE)
    assert memory.list(ALICE).items == []
    assert memory.retrieve(ALICE, "peanuts nurse", 5) == []
    assert [f.text for f in memory.list(BOB).items] == ["Bob plays the cello"]
    assert [f.text for f in memory.list(OTHER_TENANT_ALICE).items] == ["Globex Alice likes sushi"]
    assert memory.forget(ALICE) == 0


def test_tenants_and_users_never_see_each_other(memory):
    memory.record(ALICE, [Fact("The launch code is alpha")])
    memory.record(BOB, [Fact("The launch code is bravo")])
    memory.record(OTHER_TENANT_ALICE, [Fact("The launch code is charlie")])
    for ctx, mine in ((ALICE, "alpha"), (BOB, "bravo"), (OTHER_TENANT_ALICE, "charlie")):
        for mode in ("hybrid", "bm25", "dense"):
            got = texts(memory.retrieve(ctx, "launch code alpha bravo charlie", 10, mode=mode))
            assert got == [f"The launch code is {mine}"], (ctx, mode)
        assert [f.text for f in memory.list(ctx).items] == [f"The launch code is {mine}"]
    alice_id = memory.list(ALICE).items[0].id
    assert memory.get(BOB, [alice_id]) == []
    assert memory.get(OTHER_TENANT_ALICE, [alice_id]) == []
    assert memory.delete(OTHER_TENANT_ALICE, [alice_id]) == 0
    assert memory.get(ALICE, [alice_id])


def test_cjk_facts_are_found_by_a_word_inside_them(memory):
    memory.record(ALICE, [Fact("用户对花生过敏"), Fact("用户喜欢喝绿茶")])
    got = memory.retrieve(ALICE, "花生", 5, mode="bm25")
    assert texts(got) == ["用户对花生过敏"]


def test_a_word_inside_a_cjk_run_is_a_lexical_hit(memory):
    memory.record(
        ALICE, [Fact("王小明喜欢吃北京烤鸭"), Fact("用户喜欢喝绿茶"), Fact("我家有一只猫")]
    )
    assert texts(memory.retrieve(ALICE, "烤鸭", 5, mode="bm25")) == ["王小明喜欢吃北京烤鸭"]
    # one-character words: 茶 (tea) and 猫 (cat) stand inside their runs
    assert texts(memory.retrieve(ALICE, "茶", 5, mode="bm25")) == ["用户喜欢喝绿茶"]
    assert texts(memory.retrieve(ALICE, "猫", 5, mode="bm25")) == ["我家有一只猫"]


def test_accents_do_not_decide_a_lexical_hit(memory):
    memory.record(ALICE, [Fact("Alice moved to Zürich in 2021"), Fact("Bob lives in Zurich")])
    for query in ("Zurich", "zurich", "ZÜRICH", "Zu\u0308rich"):
        got = memory.retrieve(ALICE, query, 5, mode="bm25")
        assert set(texts(got)) == {"Alice moved to Zürich in 2021", "Bob lives in Zurich"}
    # written with its accent, the query ranks the fact written so first
    got = memory.retrieve(ALICE, "Zürich", 5, mode="bm25")
    assert texts(got)[0] == "Alice moved to Zürich in 2021"
    memory.record(ALICE, [Fact("Lunch at the café by the lake")])
    got = memory.retrieve(ALICE, "cafe", 5, mode="bm25")
    assert texts(got) == ["Lunch at the café by the lake"]


def test_expired_facts_are_not_recalled(memory):
    past = utcnow() - timedelta(days=1)
    memory.record(ALICE, [Fact("Temporary door code 4711", expires_at=past)])
    memory.record(ALICE, [Fact("Permanent door code 1234")])
    assert texts(memory.retrieve(ALICE, "door code", 5)) == ["Permanent door code 1234"]
    assert [f.text for f in memory.list(ALICE).items] == ["Permanent door code 1234"]


def test_a_bad_fact_rejects_the_whole_batch(memory):
    with pytest.raises(InvalidInputError):
        memory.record(ALICE, [Fact("A fine fact"), Fact("   ")])
    with pytest.raises(InvalidInputError):
        memory.record(ALICE, [Fact("Another fine fact"), Fact("x", importance=11)])
    assert memory.list(ALICE).items == []


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"query": ""}, "invalid_query"),
        ({"query": "q", "top_k": 0}, "invalid_top_k"),
        ({"query": "q", "top_k": 101}, "invalid_top_k"),
        ({"query": "q" * 5000}, "query_too_large"),
        ({"query": "q", "mode": "fuzzy"}, "invalid_mode"),
    ],
)
def test_bad_queries_are_refused(memory, kwargs, code):
    kwargs = dict(kwargs)  # the parametrize dict is shared by every backend's run
    query = kwargs.pop("query")
    with pytest.raises(InvalidInputError) as refused:
        memory.retrieve(ALICE, query, **kwargs)
    assert refused.value.code == code


def test_metadata_round_trips(memory):
    fact = Fact(
        "Meeting notes live in the wiki",
        key="work.notes",
        kind="procedure",
        importance=7,
        confidence=0.5,
        tags=("work", "wiki"),
        source="chat",
        session_id="s-1",
    )
    fid = memory.record(ALICE, [fact])[0].id
    stored = memory.get(ALICE, [fid])[0]
    assert (stored.key, stored.kind, stored.importance, stored.confidence) == (
        "work.notes",
        "procedure",
        7,
        0.5,
    )
    assert stored.tags == ("work", "wiki")
    # a string is the origin; a source without a session is the fact's session's
    assert (stored.source, stored.session_id) == (Source("chat", "s-1"), "s-1")
    assert stored.created_at is not None and stored.content_hash == content_hash(fact.text)


def test_a_fact_that_lost_the_race_for_its_key_is_recorded_superseded(memory):
    """A racing writer's older fact: stored, hidden from recall, and the answer says so."""
    now = utcnow()
    newer = memory.record(ALICE, [Fact("Lives in Oslo", key="city", created_at=now)])[0]
    late = Fact("Lives in Lima", key="city", created_at=now - timedelta(minutes=5))
    lost = memory.record(ALICE, [late])[0]
    assert lost.status == "superseded" and lost.superseded_ids == ()
    assert lost.id != newer.id
    stored = memory.get(ALICE, [lost.id])[0]
    assert stored.superseded_by == newer.id and stored.valid_to is not None
    # a search checks for races where other processes write too (files, a Qdrant server);
    # an Edge folder has one writing process, which serialises a user: no race arises there
    if getattr(getattr(memory, "engine", None), "shared", True):
        assert "Lives in Lima" not in texts(memory.retrieve(ALICE, "where does Alice live", 5))
    assert [f.text for f in memory.list(ALICE).items] == ["Lives in Oslo"]


def test_two_open_facts_with_one_key_read_as_the_newest(memory):
    """Two writers that recorded one key at the same moment leave two open facts (here: a
    key given by ``update``, which never supersedes): every read keeps the newest, the older
    reads as closed by it, and maintenance's settling writes that down."""
    now = utcnow()
    lima = memory.record(ALICE, [Fact("Lives in Lima", key="city", created_at=now)])[0].id
    later = Fact("Lives in Oslo", key="draft", created_at=now + timedelta(seconds=1))
    oslo = memory.record(ALICE, [later])[0].id
    memory.update(ALICE, [replace(memory.get(ALICE, [oslo])[0], key="city")])

    # a search checks for races where other processes write too (files, a Qdrant server);
    # an Edge folder has one writing process, which serialises a user: no race arises there
    if getattr(getattr(memory, "engine", None), "shared", True):
        assert "Lives in Lima" not in texts(memory.retrieve(ALICE, "where does Alice live", 5))
    assert [f.text for f in memory.list(ALICE).items] == ["Lives in Oslo"]
    older = memory.get(ALICE, [lima])[0]
    assert (older.superseded_by, older.valid_to) == (oslo, later.created_at)
    stored = {f.id: f.superseded_by for f in memory.list(ALICE, include_inactive=True).items}
    assert stored == {lima: oslo, oslo: None}
    assert memory.count_user(ALICE) == 2  # both stored, superseded included
    memory.settle_stored_facts(ALICE)
    assert [f.text for f in memory.list(ALICE).items] == ["Lives in Oslo"]
    assert memory.get(ALICE, [lima])[0].superseded_by == oslo


def test_the_older_fact_of_one_batch_is_recorded_superseded(memory):
    now = utcnow()
    batch = [
        Fact("Drives a Volvo", key="car", created_at=now),
        Fact("Drives a Fiat", key="car", created_at=now - timedelta(days=1)),
    ]
    results = memory.record(ALICE, batch)
    assert [(r.status, r.superseded_ids) for r in results] == [
        ("created", ()),
        ("superseded", ()),
    ]
    assert [f.text for f in memory.list(ALICE).items] == ["Drives a Volvo"]


def test_an_imported_closed_fact_is_created(memory):
    """A fact that arrives closed (an import of history) was hidden by its sender: created."""
    from dataclasses import replace

    closed = replace(Fact("Lived in Rome", key="city"), superseded_by="x", valid_to=utcnow())
    assert memory.record(ALICE, [closed])[0].status == "created"


def test_update_rewrites_metadata_of_existing_facts_only(memory):
    from dataclasses import replace

    fid = memory.record(ALICE, [Fact("Alice sings in a choir", tags=("music",))])[0].id
    stored = memory.get(ALICE, [fid])[0]
    changed = replace(stored, importance=9, tags=("music", "hobby"))
    stranger = replace(stored, id="00000000-0000-5000-8000-000000000000")
    assert memory.update(ALICE, [changed, stranger]) == 1
    again = memory.get(ALICE, [fid])[0]
    assert (again.importance, again.tags, again.text) == (9, ("music", "hobby"), stored.text)
    assert memory.update(BOB, [changed]) == 0  # another user's fact is not reachable
    closed = replace(again, superseded_by="someone-else", valid_to=utcnow())
    assert memory.update(ALICE, [closed]) == 1
    assert memory.retrieve(ALICE, "choir", 5) == []
    assert memory.list(ALICE).items == []


def test_naive_and_offset_times_are_taken_as_utc(memory):
    from datetime import datetime, timezone

    naive = datetime(2026, 1, 1, 12, 0)
    offset = datetime(2026, 1, 1, 14, 0, tzinfo=timezone(timedelta(hours=5)))  # 09:00 UTC
    # importance 10: never expires by age (these dates are months old)
    memory.record(ALICE, [Fact("Lives in Oslo", key="city", created_at=naive, importance=10)])
    lima = Fact("Lives in Lima", key="city", created_at=offset, importance=10)
    result = memory.record(ALICE, [lima])[0]
    # Lima is older (09:00 UTC < 12:00 UTC): it is recorded already superseded by Oslo,
    # which stays the open fact; the answer says so (superseded, replacing nothing).
    assert (result.status, result.superseded_ids) == ("superseded", ())
    assert [f.text for f in memory.list(ALICE).items] == ["Lives in Oslo"]
    listed = memory.list(ALICE, include_inactive=True).items
    assert [f.text for f in listed] == ["Lives in Lima", "Lives in Oslo"]
    assert all(f.created_at.utcoffset() == timedelta(0) for f in listed)


# -- one input, one error: the same bad input gets the same code from every backend ----------


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"query": "   \n"}, "invalid_query"),
        ({"query": "peanuts", "top_k": "5"}, "invalid_top_k"),
        ({"query": "peanuts", "top_k": 5.0}, "invalid_top_k"),
        ({"query": "peanuts", "threshold": 1.5}, "invalid_threshold"),
        ({"query": "peanuts", "mode": "BM25"}, "invalid_mode"),
        ({"query": "peanuts", "mode": "dense", "top_k": 0}, "invalid_top_k"),
    ],
)
def test_bad_queries_get_one_code_over_stored_facts(memory, kwargs, code):
    memory.record(ALICE, PROFILE)  # a user with facts: no empty-user short cut hides the check
    kwargs = dict(kwargs)
    query = kwargs.pop("query")
    with pytest.raises(InvalidInputError) as refused:
        memory.retrieve(ALICE, query, **kwargs)
    assert refused.value.code == code


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"limit": 0}, "invalid_limit"),
        ({"limit": 1001}, "invalid_limit"),
        ({"limit": "10"}, "invalid_limit"),
        ({"cursor": "not a cursor!"}, "invalid_cursor"),
        ({"cursor": "bm90LWpzb24"}, "invalid_cursor"),  # base64 of text that is not JSON
        ({"cursor": "not a cursor!", "include_inactive": True}, "invalid_cursor"),
    ],
)
def test_bad_pages_get_one_code(memory, kwargs, code):
    memory.record(ALICE, PROFILE)
    for ctx in (BOB, ALICE):  # a user without facts is refused as one with facts
        with pytest.raises(InvalidInputError) as refused:
            memory.list(ctx, **kwargs)
        assert refused.value.code == code


BAD_FACTS = [
    (Fact("   "), "invalid_fact"),
    (Fact("x", importance=0), "invalid_fact"),
    (Fact("x", kind="gossip"), "invalid_fact"),
    (Fact("x", confidence=1.5), "invalid_fact"),
    (Fact("x", key=" "), "invalid_fact"),
    (Fact("x", tags=("",)), "invalid_fact"),
    (Fact("nul \x00 inside"), "invalid_fact"),
    (Fact("x" * 20_000), "fact_too_large"),
    (Fact("x", source=Source(text="y" * 3000)), "invalid_source"),
    (Fact("x", key="user\x00city"), "invalid_fact"),  # NUL in no text field (characters)
    (Fact("x", tags=("a\x00",)), "invalid_fact"),
    (Fact("x", source=Source(text="nul \x00 inside")), "invalid_source"),
    (Fact("x", source=Source(origin="a\x00b")), "invalid_source"),
    (Fact("x", source=Source(session_id="../s")), "invalid_source"),
    (Fact("x", source=Source(messages=(-1,))), "invalid_source"),
]


@pytest.mark.parametrize(("bad", "code"), BAD_FACTS)
def test_an_invalid_fact_gets_one_code_in_record(memory, bad, code):
    with pytest.raises(InvalidInputError) as refused:
        memory.record(ALICE, [Fact("A fine fact"), bad])
    assert refused.value.code == code
    assert memory.list(ALICE, include_inactive=True).items == []


@pytest.mark.parametrize(("bad", "code"), BAD_FACTS)
def test_an_invalid_fact_gets_one_code_in_update(memory, bad, code):
    from dataclasses import replace

    ids = [r.id for r in memory.record(ALICE, [Fact("Alice knits"), Fact("Alice rows")])]
    before = memory.list(ALICE, include_inactive=True).items
    fine = replace(before[0], importance=9)
    broken = replace(bad, id=ids[1])  # a stored fact's id, with bad metadata (or text)
    with pytest.raises(InvalidInputError) as refused:
        memory.update(ALICE, [fine, broken])
    assert refused.value.code == code
    assert memory.list(ALICE, include_inactive=True).items == before  # nothing was written


def test_update_keeps_text_and_id(memory):
    from dataclasses import replace

    fid = memory.record(ALICE, [Fact("Alice sings in a choir")])[0].id
    stored = memory.get(ALICE, [fid])[0]
    assert memory.update(ALICE, [replace(stored, text="Alice plays chess", importance=8)]) == 1
    [again] = memory.list(ALICE).items
    assert (again.id, again.text, again.importance) == (fid, stored.text, 8)
    assert again.content_hash == stored.content_hash


UNKNOWN_IDS = [
    "not-an-id",
    "",
    "00000000-0000-5000-8000-000000000000",
    "00000000-0000-5000-8000-00000000000",  # one digit short
    "00000000000050008000000000000000",  # a UUID, but not in canonical form
]


def test_unknown_ids_are_ignored_alike(memory):
    from dataclasses import replace

    fid = memory.record(ALICE, [Fact("Alice keeps bees")])[0].id
    bob_id = memory.record(BOB, [Fact("Bob keeps goats")])[0].id
    unknown = [*UNKNOWN_IDS, bob_id, fid.upper()]
    assert memory.get(ALICE, unknown) == []
    assert memory.get(ALICE, []) == []
    assert memory.delete(ALICE, unknown) == 0
    assert memory.delete(ALICE, []) == 0
    stored = memory.get(ALICE, [fid])[0]
    strangers = [replace(stored, id=i, importance=2) for i in unknown]
    assert memory.update(ALICE, strangers) == 0
    assert memory.update(ALICE, []) == 0
    assert memory.get(ALICE, [fid, fid, *unknown]) == [stored]  # once, in order
    assert [f.text for f in memory.list(BOB).items] == ["Bob keeps goats"]


def test_a_closed_backend_refuses_every_call(memory):
    """Unless it declares it is usable after close (files: close only drops a cache)."""
    from memory_service.domain.errors import BackendUnavailableError

    fid = memory.record(ALICE, [Fact("Alice keeps bees")])[0].id
    memory.close()
    if memory.usable_after_close:
        assert [f.id for f in memory.list(ALICE).items] == [fid]
        return
    calls = [
        lambda: memory.record(ALICE, [Fact("Alice keeps wasps")]),
        lambda: memory.retrieve(ALICE, "bees", 5),
        lambda: memory.get(ALICE, [fid]),
        lambda: memory.list(ALICE),
        lambda: memory.update(ALICE, [Fact("Alice keeps bees", id=fid, importance=9)]),
        lambda: memory.delete(ALICE, [fid]),
        lambda: memory.forget(ALICE),
    ]
    for call in calls:
        with pytest.raises(BackendUnavailableError) as refused:
            call()
        assert refused.value.code == "backend_unavailable"
    memory.close()  # closing twice is harmless


def test_capabilities_are_declared_not_looked_up(memory):
    from memory_service.longterm.protocol import (
        ArchivesFactFiles,
        LongTermMemory,
        SettlesStoredFacts,
    )

    assert isinstance(memory, LongTermMemory)
    assert isinstance(memory, ListsUsers)  # every backend can list a tenant's users
    memory.record(ALICE, [Fact("Alice keeps bees")])
    memory.record(OTHER_TENANT_ALICE, [Fact("Globex Alice keeps ants")])
    assert memory.users("acme") == ["alice"]
    # every backend writes down what reading resolves (files: its fact files; Qdrant: key races)
    assert isinstance(memory, SettlesStoredFacts)
    assert isinstance(memory, ArchivesFactFiles) == isinstance(memory, FileSystemLongTermMemory)


# -- filters, as_of and read-time expiry ------------------------------------------------------

CAFES = [
    Fact(f"Alice drinks coffee every morning at the cafe on street number {i}", tags=("cafe",))
    for i in range(60)
]
GRINDER = Fact(
    "Alice sets the coffee grinder to fine",
    kind="procedure",
    key="grinder",
    importance=8,
    tags=("kitchen", "gear"),
)


@pytest.mark.parametrize(
    "fact_filter",
    [
        FactFilter(kinds=("procedure",)),
        FactFilter(tags_any=("gear", "nothing")),
        FactFilter(tags_all=("kitchen", "gear")),
        FactFilter(min_importance=8),
        FactFilter(key="grinder"),
        FactFilter(created_before=utcnow() - timedelta(days=1)),
    ],
    ids=["kind", "tags-any", "tags-all", "importance", "key", "created-range"],
)
def test_a_filter_applies_inside_each_leg_before_top_k(memory, fact_filter):
    old = replace(GRINDER, created_at=utcnow() - timedelta(days=2))
    memory.record(ALICE, [old, *CAFES])
    query = "coffee every morning cafe"
    # unfiltered, 60 better matches fill every leg's candidate depth (50): the grinder is out
    for mode in ("bm25", "dense", "hybrid"):
        assert GRINDER.text not in texts(memory.retrieve(ALICE, query, 5, mode=mode))
        got = memory.retrieve(ALICE, query, 5, mode=mode, filter=fact_filter)
        assert texts(got) == [GRINDER.text], mode
    assert [f.text for f in memory.list(ALICE, filter=fact_filter).items] == [GRINDER.text]


def test_tags_all_needs_every_tag_and_filters_combine(memory):
    memory.record(
        ALICE, [GRINDER, Fact("Alice keeps the kettle in the kitchen", tags=("kitchen",))]
    )
    both = memory.list(ALICE, filter=FactFilter(tags_all=("kitchen", "gear"))).items
    assert [f.text for f in both] == [GRINDER.text]
    either = memory.list(ALICE, filter=FactFilter(tags_any=("kitchen",))).items
    assert len(either) == 2
    none = FactFilter(tags_any=("kitchen",), kinds=("event",))
    assert memory.retrieve(ALICE, "kitchen", 5, filter=none) == []


def _city_history(memory):
    """Paris from 20 days ago, Berlin (same key) from 10 days ago, pottery 5 days ago."""
    now = utcnow()
    memory.record(
        ALICE,
        [Fact("Alice lives in Paris", key="city", importance=10, created_at=now - timedelta(20))],
    )
    memory.record(
        ALICE,
        [Fact("Alice lives in Berlin", key="city", importance=10, created_at=now - timedelta(10))],
    )
    memory.record(
        ALICE, [Fact("Alice took up pottery", importance=10, created_at=now - timedelta(5))]
    )
    return now


def test_as_of_returns_what_was_valid_then(memory):
    now = _city_history(memory)
    query = "where does Alice live, and her hobby pottery"
    then = FactFilter(as_of=now - timedelta(days=15))
    assert texts(memory.retrieve(ALICE, query, 5, filter=then)) == ["Alice lives in Paris"]
    assert [f.text for f in memory.list(ALICE, filter=then).items] == ["Alice lives in Paris"]
    later = FactFilter(as_of=now - timedelta(days=7))
    assert texts(memory.retrieve(ALICE, query, 5, filter=later)) == ["Alice lives in Berlin"]
    current = sorted(texts(memory.retrieve(ALICE, query, 5)))
    assert current == ["Alice lives in Berlin", "Alice took up pottery"]
    superseded = memory.retrieve(ALICE, query, 5, filter=then)[0].fact
    assert superseded.superseded_by is not None  # superseded later, returned for then
    before_all = FactFilter(as_of=now - timedelta(days=30))
    assert memory.retrieve(ALICE, query, 5, filter=before_all) == []


def test_as_of_combines_with_metadata_filters(memory):
    now = _city_history(memory)
    then = FactFilter(as_of=now - timedelta(days=3), key="city")
    assert texts(memory.retrieve(ALICE, "Alice", 5, filter=then)) == ["Alice lives in Berlin"]


def test_expiry_by_importance_applies_at_read_time(memory):
    memory.expiry = ExpiryPolicy(by_importance=True)
    now = utcnow()
    memory.record(
        ALICE,
        [
            Fact("Alice's parking spot is B7", importance=3, created_at=now - timedelta(days=8)),
            Fact("Alice's locker is number 12", importance=3, created_at=now - timedelta(days=6)),
            Fact("Alice's desk is by the window", importance=6, created_at=now - timedelta(31)),
            Fact("Alice's blood type is A", importance=10, created_at=now - timedelta(400)),
        ],
    )
    query = "Alice parking spot locker desk blood type"
    alive = ["Alice's blood type is A", "Alice's locker is number 12"]
    assert sorted(texts(memory.retrieve(ALICE, query, 10))) == alive
    assert sorted(f.text for f in memory.list(ALICE).items) == alive
    as_of = FactFilter(as_of=now - timedelta(days=7, hours=12))  # B7 was alive then: still out
    assert "Alice's parking spot is B7" not in texts(
        memory.retrieve(ALICE, query, 10, filter=as_of)
    )
    stored = memory.list(ALICE, include_inactive=True).items  # maintenance still sees them
    assert len(stored) == 4
    assert len(memory.get(ALICE, [f.id for f in stored])) == 4  # get reads by id, as export


def test_facts_are_kept_whatever_their_age_by_default(memory):
    now = utcnow()
    memory.record(
        ALICE,
        [
            Fact("Alice's sister is called Ines", created_at=now - timedelta(days=40)),
            Fact("Alice's first car was a Fiat", importance=1, created_at=now - timedelta(900)),
        ],
    )
    query = "Alice sister first car"
    kept = ["Alice's first car was a Fiat", "Alice's sister is called Ines"]
    assert sorted(texts(memory.retrieve(ALICE, query, 10))) == kept
    assert sorted(f.text for f in memory.list(ALICE).items) == kept


def test_an_own_expires_at_beats_the_importance_ttl(memory):
    memory.expiry = ExpiryPolicy(by_importance=True)
    now = utcnow()
    old = now - timedelta(days=60)
    memory.record(
        ALICE, [Fact("Alice's visa is valid", created_at=old, expires_at=now + timedelta(1))]
    )
    assert texts(memory.retrieve(ALICE, "visa", 5)) == ["Alice's visa is valid"]


def test_confidence_decays_by_kind_from_the_last_update(memory):
    """C0 * exp(-rate * days): an event loses 1 % a day, a fact 0.1 %, a procedure and a
    preference nothing; the stored (initial) confidence is unchanged."""
    now = utcnow()
    then = now - timedelta(days=100)
    memory.record(
        ALICE,
        [
            Fact("Alice went to a jazz concert", kind="event", confidence=0.8, created_at=then),
            Fact("Alice plays jazz piano", kind="fact", created_at=then),
            Fact("To tune the piano Alice calls Ines", kind="procedure", created_at=then),
            Fact("Alice prefers jazz to pop", kind="preference", created_at=then),
        ],
    )
    hits = {r.fact.kind: r for r in memory.retrieve(ALICE, "jazz piano concert pop tune", 10)}
    assert hits["event"].confidence == pytest.approx(0.8 * math.exp(-1.0), rel=1e-4)
    assert hits["fact"].confidence == pytest.approx(math.exp(-0.1), rel=1e-4)
    assert hits["procedure"].confidence == hits["preference"].confidence == 1.0
    assert hits["event"].fact.confidence == 0.8
    assert [k for k, r in hits.items() if r.fact.needs_verification] == ["event"]
    past = memory.retrieve(ALICE, "jazz concert", 10, filter=FactFilter(as_of=then))
    event = next(r for r in past if r.fact.kind == "event")
    assert event.confidence == pytest.approx(0.8)  # aged at the moment asked about
    assert not event.fact.needs_verification
    memory.confidence = ConfidenceDecay(event=0.0)
    assert memory.retrieve(ALICE, "jazz concert", 1)[0].confidence == pytest.approx(0.8)


def test_updated_at_is_stored_and_a_fact_without_one_reads_as_updated_when_created(memory):
    then = utcnow() - timedelta(days=3)
    stored = memory.record(ALICE, [Fact("Alice keeps bees", created_at=then)])[0]
    fact = memory.get(ALICE, [stored.id])[0]
    assert fact.updated_at == fact.created_at == then
    assert memory.list(ALICE).items[0].updated_at == then


def test_needs_verification_is_marked_on_every_read_and_filters_each_leg(memory):
    old = utcnow() - timedelta(days=80)  # an event: e^-0.8 = 0.45
    ids = [
        r.id
        for r in memory.record(
            ALICE,
            [
                Fact("Alice met Ines at the lake", kind="event", created_at=old),
                Fact("Alice met Tom at the lake last week", kind="event"),
            ],
        )
    ]
    assert [f.needs_verification for f in memory.get(ALICE, ids)] == [True, False]
    assert [f.needs_verification for f in memory.list(ALICE).items] == [True, False]
    flagged = FactFilter(needs_verification=True)
    assert texts(memory.retrieve(ALICE, "met at the lake", 1, filter=flagged)) == [
        "Alice met Ines at the lake"
    ]
    fresh = FactFilter(needs_verification=False)
    assert texts(memory.retrieve(ALICE, "Alice met Ines at the lake", 1, filter=fresh)) == [
        "Alice met Tom at the lake last week"
    ]
    assert [f.id for f in memory.list(ALICE, filter=flagged).items] == ids[:1]
    assert [f.id for f in memory.list(ALICE, filter=fresh).items] == ids[1:]
    memory.delete(ALICE, ids[:1])
    assert memory.retrieve(ALICE, "met at the lake", 5, filter=flagged) == []


def test_confirm_lifts_confidence_back_to_its_initial_value(memory):
    old = utcnow() - timedelta(days=200)
    fid = memory.record(
        ALICE, [Fact("Alice ran the Berlin marathon", kind="event", confidence=0.9, created_at=old)]
    )[0].id
    assert memory.retrieve(ALICE, "marathon", 1)[0].fact.needs_verification
    before = utcnow()
    [confirmed] = memory.confirm(ALICE, [fid])
    assert confirmed.updated_at >= before and confirmed.created_at == old
    assert not confirmed.needs_verification
    hit = memory.retrieve(ALICE, "marathon", 1)[0]
    assert hit.confidence == pytest.approx(0.9, rel=1e-4)
    assert hit.fact.updated_at == confirmed.updated_at
    assert memory.get(ALICE, [fid])[0].updated_at == confirmed.updated_at


def test_confirm_finds_no_fact_of_another_user_or_tenant(memory):
    fid = memory.record(ALICE, [Fact("Alice owns a kayak")])[0].id
    assert memory.confirm(BOB, [fid]) == []
    assert memory.confirm(OTHER_TENANT_ALICE, [fid]) == []
    assert memory.confirm(ALICE, ["not-a-fact"]) == []


def test_confirming_a_superseded_fact_is_refused_and_writes_nothing(memory):
    old = memory.record(ALICE, [Fact("Alice lives in Porto", key="user.city")])[0].id
    memory.record(ALICE, [Fact("Alice lives in Faro", key="user.city")])
    before = memory.get(ALICE, [old])[0]
    with pytest.raises(InactiveFactError) as refused:
        memory.confirm(ALICE, [old])
    assert refused.value.code == "not_active"
    assert memory.get(ALICE, [old])[0].updated_at == before.updated_at


def test_recording_the_same_text_again_confirms_it(memory):
    old = utcnow() - timedelta(days=90)
    fact = Fact("Alice visited Kyoto", kind="event", confidence=0.8, created_at=old)
    fid = memory.record(ALICE, [fact])[0].id
    assert memory.get(ALICE, [fid])[0].needs_verification
    again = memory.record(ALICE, [Fact("Alice visited Kyoto", kind="episodic")])[0]
    assert again.status == "duplicate"
    stored = memory.get(ALICE, [fid])[0]
    assert not stored.needs_verification and stored.created_at == old
    assert stored.confidence == 0.8  # its initial value, not the duplicate's
    assert memory.retrieve(ALICE, "Kyoto", 1)[0].confidence == pytest.approx(0.8, rel=1e-4)


def test_a_new_confidence_restarts_the_decay(memory):
    old = utcnow() - timedelta(days=100)
    fid = memory.record(ALICE, [Fact("Alice sang in a choir", kind="event", created_at=old)])[0].id
    stored = memory.get(ALICE, [fid])[0]
    memory.update(ALICE, [replace(stored, importance=7)])
    assert memory.get(ALICE, [fid])[0].needs_verification  # other metadata: no reassessment
    memory.update(ALICE, [replace(stored, confidence=0.9)])
    hit = memory.retrieve(ALICE, "choir", 1)[0]
    assert hit.confidence == pytest.approx(0.9, rel=1e-4) and not hit.fact.needs_verification


def test_the_memory_types_are_aliases_of_the_kinds(memory):
    ids = [
        r.id
        for r in memory.record(
            ALICE,
            [
                Fact("Alice flew to Oslo", kind="episodic"),
                Fact("Alice is left-handed", kind="factual"),
                Fact("To water the ferns Alice uses rain water", kind="procedural"),
                Fact("Alice likes quiet cafes", kind="semantic"),
            ],
        )
    ]
    assert [f.kind for f in memory.get(ALICE, ids)] == ["event", "fact", "procedure", "preference"]
    events = memory.list(ALICE, filter=FactFilter(kinds=("episodic",))).items
    assert [f.id for f in events] == ids[:1]
    with pytest.raises(InvalidInputError) as bad:
        memory.record(ALICE, [Fact("Alice dreams", kind="dreamlike")])
    assert bad.value.code == "invalid_fact" and "episodic (event)" in bad.value.message
    with pytest.raises(InvalidInputError) as bad_filter:
        memory.list(ALICE, filter=FactFilter(kinds=("dreamlike",)))
    assert bad_filter.value.code == "invalid_filter"
    assert len(memory.list(ALICE).items) == 4


def test_recency_prefers_the_newer_of_two_open_facts(memory):
    now = utcnow()
    memory.record(
        ALICE,
        [
            Fact("Alice lives in Berlin", importance=10, created_at=now - timedelta(days=300)),
            Fact("Alice lives in Lisbon now", importance=10, created_at=now - timedelta(days=2)),
        ],
    )
    query = "Alice lives in Berlin"
    assert texts(memory.retrieve(ALICE, query, 1)) == ["Alice lives in Berlin"]
    memory.retrieval = memory.retrieval.with_changes(recency_half_life_days=30, recency_weight=5)
    assert texts(memory.retrieve(ALICE, query, 1)) == ["Alice lives in Lisbon now"]


@pytest.mark.parametrize(
    ("fact_filter", "field"),
    [
        (FactFilter(as_of=utcnow() + timedelta(days=1)), "as_of"),
        (FactFilter(as_of="yesterday"), "as_of"),
        (FactFilter(tags_any=tuple(f"t{i}" for i in range(MAX_TAGS + 1))), "tags_any"),
        (FactFilter(tags_all=("x" * (MAX_TAG_CHARS + 1),)), "tags_all"),
        (FactFilter(kinds=("opinion",)), "kind"),
        (FactFilter(min_importance=11), "min_importance"),
        (FactFilter(created_after=utcnow(), created_before=utcnow() - timedelta(1)), "created"),
    ],
)
def test_a_bad_filter_gets_one_code_naming_the_field(memory, fact_filter, field):
    memory.record(ALICE, [GRINDER])
    for call in (
        lambda: memory.retrieve(ALICE, "coffee", 5, filter=fact_filter),
        lambda: memory.list(ALICE, filter=fact_filter),
    ):
        with pytest.raises(InvalidInputError) as refused:
            call()
        assert refused.value.code == "invalid_filter"
        assert field in str(refused.value)


def test_recall_counts_accesses_in_batches(memory):
    memory.record(ALICE, PROFILE)
    allergy = memory.retrieve(ALICE, "peanuts allergy", 1)[0].fact
    memory.retrieve(ALICE, "peanuts allergy", 1)
    stored = memory._get(ALICE, [allergy.id])[allergy.id]  # the backend, without the log
    assert stored.access_count == 0  # a search is not a write: counted in memory
    seen = memory.get(ALICE, [allergy.id])[0]
    assert seen.access_count == 2 and seen.last_accessed_at is not None
    assert memory.access.flush() == 1  # one batch for the user
    assert memory._get(ALICE, [allergy.id])[allergy.id].access_count == 2
    listed = {f.id: f for f in memory.list(ALICE).items}
    assert listed[allergy.id].access_count == 2  # stored, nothing pending added twice
    assert sum(f.access_count for f in listed.values()) == 2
    memory.retrieve(ALICE, "peanuts allergy", 1)
    seen = memory.get(ALICE, [allergy.id])[0]  # 3, one of them pending
    assert memory.update(ALICE, [replace(seen, importance=10)]) == 1  # as maintenance does
    memory.access.flush()
    assert memory.get(ALICE, [allergy.id])[0].access_count == 3  # not 4: never counted twice
    assert memory.get(BOB, [allergy.id]) == []
    memory.delete(ALICE, [allergy.id])
    memory.access.flush()
    assert memory.get(ALICE, [allergy.id]) == []  # a deleted fact is not written back


def test_a_recalled_shared_fact_counts_its_accesses_for_everyone(memory):
    """A tenant or agent fact recalled by two users is counted on that fact (its owner's
    batch), read back by the shared scope and by each user, never lost at the flush."""
    alice = RuntimeContext("acme", "alice", agent_id="support")
    carol = RuntimeContext("acme", "carol", agent_id="support")
    memory.record(alice, [Fact("The office closes at six on Fridays", scope="tenant")])
    memory.record(alice, [Fact("Refunds take five working days", scope="agent")])
    for user in (alice, carol, alice):
        found = memory.retrieve(user, "when does the office close on Friday", 1)
        assert found[0].fact.scope == "tenant"
    memory.retrieve(carol, "how long does a refund take", 1)
    tenant, agent = alice.in_scope("tenant"), alice.in_scope("agent")
    closing = memory.list(tenant).items[0]
    assert closing.access_count == 3  # pending, before any flush
    assert memory.access.flush() == 2  # one batch per owner: the tenant's, the agent's
    assert memory.list(tenant).items[0].access_count == 3
    assert memory.get(carol.in_scope("tenant"), [closing.id])[0].access_count == 3
    assert memory.list(agent).items[0].access_count == 1
    assert memory.list(alice).items == []  # nothing was counted on the users themselves


# -- provenance: a fact's source --------------------------------------------------------------

PET = Fact(
    "Alice has a new pet",
    source=Source(
        origin="chat",
        session_id="s-7",
        messages=(3, 5),
        text="I adopted a beagle called Waffles yesterday.\nHe loves the park.",
    ),
)


def test_source_round_trips_in_get_list_and_every_hit(memory):
    fid = memory.record(ALICE, [PET])[0].id
    assert memory.get(ALICE, [fid])[0].source == PET.source
    assert [f.source for f in memory.list(ALICE).items] == [PET.source]
    for mode in ("hybrid", "bm25", "dense"):
        hits = memory.retrieve(ALICE, "Alice's new pet", 1, mode=mode)
        assert [h.fact.source for h in hits] == [PET.source]


def test_recall_finds_a_fact_by_its_source_words(memory):
    memory.record(ALICE, [PET, *PROFILE])
    lexical = memory.retrieve(ALICE, "Waffles the beagle", 3, mode="bm25")
    assert texts(lexical) == ["Alice has a new pet"]  # the fact's own text says neither word
    hybrid = {r.fact.text: r for r in memory.retrieve(ALICE, "the beagle called Waffles", 3)}
    assert hybrid["Alice has a new pet"].ranks["bm25"] == 1  # in hybrid too, by its source


def test_dedup_is_by_fact_text_not_by_source(memory):
    first = memory.record(ALICE, [PET])[0]
    other = Fact("alice has a NEW pet", source=Source(text="Something else entirely"))
    again = memory.record(ALICE, [other])[0]
    assert (again.status, again.id) == ("duplicate", first.id)
    assert memory.get(ALICE, [first.id])[0].source == PET.source  # the first source stays
    same_source = memory.record(ALICE, [Fact("Alice walks in the park", source=PET.source)])
    assert same_source[0].status == "created"  # a shared source is not a duplicate


def test_the_same_fact_again_with_a_source_attaches_the_source_it_lacked(memory):
    """A user who records a fact and then records it again with its provenance expects the
    provenance to be kept (Zep links each new episode to the fact it restates): the answer is
    still ``duplicate`` (one fact, same id and text), and the fact now has the source, in
    get, list and recall, its words found by the lexical leg."""
    plain = Fact("Alice has a new pet", key="user.pet", importance=8)
    first = memory.record(ALICE, [plain])[0]
    assert memory.retrieve(ALICE, "Waffles the beagle", 3, mode="bm25") == []
    again = memory.record(ALICE, [replace(PET, session_id="s-7")])[0]
    assert (again.status, again.id, again.superseded_ids) == ("duplicate", first.id, ())
    [stored] = memory.get(ALICE, [first.id])
    assert stored.source == PET.source and stored.session_id == "s-7"
    assert (stored.text, stored.key, stored.importance) == ("Alice has a new pet", "user.pet", 8)
    assert [f.source for f in memory.list(ALICE).items] == [PET.source]
    [hit] = memory.retrieve(ALICE, "Waffles the beagle", 3, mode="bm25")
    assert hit.fact.id == first.id and hit.fact.source == PET.source
    other = Fact("Alice has a new pet", source=Source(text="Something else entirely"))
    assert memory.record(ALICE, [other])[0].status == "duplicate"
    assert memory.get(ALICE, [first.id])[0].source == PET.source  # a source is never replaced


def test_a_source_given_twice_in_one_batch_is_attached_and_closed_facts_keep_theirs(memory):
    results = memory.record(
        ALICE,
        [
            Fact("Alice has a dog", key="user.pet"),
            Fact("Alice has a dog", key="user.pet", source=PET.source),
            Fact("Alice has a cat", key="user.pet"),
        ],
    )
    assert [r.status for r in results] == ["created", "duplicate", "superseded"]
    [dog] = memory.get(ALICE, [results[0].id])
    assert dog.source == PET.source and dog.superseded_by == results[2].id


def test_delete_forget_and_supersede_take_the_source_along(memory):
    keyed = Fact("Alice has a dog", key="user.pet", source=PET.source)
    fid = memory.record(ALICE, [keyed])[0].id
    memory.record(ALICE, [Fact("Alice has a cat", key="user.pet", source=Source(text="A cat!"))])
    assert memory.retrieve(ALICE, "Waffles", 5, mode="bm25") == []  # superseded: not recalled
    memory.record(BOB, [Fact("Bob has a hamster", source=PET.source)])
    memory.record(ALICE, [Fact("Alice likes parks", source=PET.source)])
    [kept] = memory.retrieve(ALICE, "Waffles", 5, mode="bm25")
    assert memory.delete(ALICE, [kept.fact.id, fid]) == 2
    assert memory.retrieve(ALICE, "Waffles", 5, mode="bm25") == []
    assert all(f.source != PET.source for f in memory.list(ALICE, include_inactive=True).items)
    assert len(memory.retrieve(BOB, "Waffles", 5, mode="bm25")) == 1  # Bob's own is untouched
    memory.forget(BOB)
    assert memory.retrieve(BOB, "Waffles", 5, mode="bm25") == []
    assert memory.list(BOB, include_inactive=True).items == []


def test_a_source_given_as_a_string_is_its_origin(memory):
    fid = memory.record(ALICE, [Fact("Alice sings", source="crm")])[0].id
    assert memory.get(ALICE, [fid])[0].source == Source(origin="crm")


def test_a_confidence_weight_prefers_the_surer_of_two_matches(memory):
    memory.record(
        ALICE,
        [Fact("Alice parks on level two", confidence=0.3), Fact("Alice parks on level three")],
    )
    query = "Alice parks on level two"
    assert texts(memory.retrieve(ALICE, query, 1)) == ["Alice parks on level two"]
    memory.retrieval = memory.retrieval.with_changes(confidence_weight=10)
    assert texts(memory.retrieve(ALICE, query, 1)) == ["Alice parks on level three"]


def test_a_fact_past_the_ledger_retention_stays_found(memory, tmp_path):
    """Maintenance a year on: the daily files leave the working set (files: moved to
    ``memory/archive/``), and a fact MEMORY.md's budget left out is still searched, listed
    and fetched by id, on every backend alike."""
    from memory_service.domain.paths import OwnerPaths
    from memory_service.pipeline.consolidation import Consolidator
    from memory_service.pipeline.maintenance import MaintenanceSettings, MemoryMaintenance

    ids = {f.text: r.id for f, r in zip(PROFILE, memory.record(ALICE, PROFILE), strict=True)}
    workspace = getattr(memory, "workspace", tmp_path / "workspace")
    later = utcnow() + timedelta(days=365)
    runner = MemoryMaintenance(
        longterm=memory,
        workspace=workspace,
        consolidator=Consolidator(model=None, max_tokens=40),  # room for one or two facts
        settings=MaintenanceSettings(daily_file_retention_days=90),
        clock=lambda: later,
    )
    report = runner.run_user(ALICE, force=True)
    assert report.status == "ran", report.error
    paths = OwnerPaths.of(workspace, ALICE)
    assert sorted(f.text for f in memory.list(ALICE).items) == sorted(ids)
    held = paths.memory_md.read_text()  # consolidated after the archive: from every fact
    left_out = [f.text for f in PROFILE if f.text not in held]
    assert left_out and len(left_out) < len(PROFILE)  # MEMORY.md holds some, not these
    if isinstance(memory, FileSystemLongTermMemory):
        assert report.counts["ledgers_archived"] == 1
        assert not list(paths.ledger_dir.glob("*.md"))  # out of the working set
        assert len(list(paths.archive_dir.glob("20*.md"))) == 1

    for text in left_out:
        [got] = memory.get(ALICE, [ids[text]])
        assert got.text == text
        assert text in texts(memory.retrieve(ALICE, text, 3))
    memory.close()  # a fresh process reads the same
