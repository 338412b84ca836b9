"""Every backend applies the retrieval config the same way: date terms in the lexical leg, and
hybrid = ``fuse_legs`` over the backend's own legs (z-scores, session-neighbour smoothing), with
sessions and times taken from what the caller recorded."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from indexing.tokenize import tokenize
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.domain.facts import Fact
from memory_service.longterm.fusion import LegHit, fuse_legs, matched_terms

ALICE = RuntimeContext("acme", "alice")


@pytest.fixture(autouse=True)
def _no_expiry_by_age(memory):
    """The chats are dated 2023 (LoCoMo's shape): only ``expires_at`` expires them here."""
    memory.expiry = ExpiryPolicy(by_importance=False)


MAY_8 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
JUNE_9 = datetime(2023, 6, 9, 19, 55, tzinfo=UTC)


def _session(session_id: str, start: datetime, lines: list[str]) -> list[Fact]:
    """A conversation as a client records it: one session, one second between messages."""
    return [
        Fact(text, session_id=session_id, created_at=start + timedelta(seconds=i))
        for i, text in enumerate(lines)
    ]


CHAT = _session(
    "s1",
    MAY_8,
    [
        "Alice: I spent the whole weekend researching something big.",
        "Bob: Oh nice, what were you looking into?",
        "Alice: Adoption agencies! I want to give a kid a loving home.",
        "Bob: That is wonderful news.",
    ],
) + _session(
    "s2",
    JUNE_9,
    [
        "Alice: The pottery class was fun, I made a bowl.",
        "Bob: I went hiking in the mountains with my kids.",
        "Alice: Did you see any wildlife on the trail?",
        "Bob: A deer and two hawks.",
    ],
)


def test_the_lexical_leg_indexes_the_day_a_memory_was_made(memory):
    memory.record(ALICE, CHAT)
    hits = memory.retrieve(ALICE, "What happened on 9 June 2023?", 10, mode="bm25")
    assert [h.fact.session_id for h in hits] == ["s2"] * 4 + ["s1"] * 4  # s1 shares "2023"
    may = memory.retrieve(ALICE, "in May", 10, mode="bm25")
    assert [h.fact.session_id for h in may] == ["s1"] * 4


def test_a_new_created_at_moves_the_date_terms_along(memory):
    [recorded] = memory.record(ALICE, [Fact("Alice painted a sunrise", created_at=MAY_8)])
    [fact] = memory.get(ALICE, [recorded.id])
    later = JUNE_9.replace(year=2024)
    assert memory.update(ALICE, [replace(fact, created_at=later)]) == 1
    assert memory.retrieve(ALICE, "8 May 2023", 5, mode="bm25") == []
    assert [h.fact.id for h in memory.retrieve(ALICE, "9 June 2024", 5, mode="bm25")] == [
        recorded.id
    ]


def _as_leg(recalls, leg: str, config, terms) -> list[LegHit]:
    return [
        LegHit(
            r.fact.id,
            r.scores[leg],
            r.fact.session_id,
            r.fact.created_at,
            matched_terms(r.fact, config, terms),
        )
        for r in recalls
    ]


def test_hybrid_is_fuse_legs_over_the_backends_own_legs(memory):
    memory.record(ALICE, CHAT)
    query = "What did Alice research?"
    # With 8 memories every leg list is complete, so the single-leg modes show exactly the
    # candidates hybrid fused.
    terms = tokenize(query)  # with the terms each memory holds, for query coverage
    legs = {
        leg: _as_leg(memory.retrieve(ALICE, query, 50, mode=leg), leg, memory.retrieval, terms)
        for leg in ("bm25", "dense")
    }
    expected = fuse_legs("hybrid", legs, memory.retrieval, 5, query_terms=terms)
    got = memory.retrieve(ALICE, query, 5, mode="hybrid")
    assert [r.fact.id for r in got] == [h.id for h in expected]
    # within 1e-6, not rounded to 6 places: a sum a few ulps apart can round either way
    assert [r.score for r in got] == pytest.approx([h.score for h in expected], abs=1e-6)
    assert [r.ranks for r in got] == [h.ranks for h in expected]
    # the answer ("Adoption agencies!") shares no word with the question but follows the turn
    # that does: smoothing brings it into the top 3
    top3 = [r.fact.text for r in got[:3]]
    assert "Alice: Adoption agencies! I want to give a kid a loving home." in top3


BRUNO = RuntimeContext("acme", "bruno")
# Every memory names the user, as facts about a user do; the question shares only the name.
BRUNO_FACTS = [
    "Bruno is vegan.",
    "Bruno lives in Lisbon.",
    "Bruno plays chess.",
    "Bruno owns a red bicycle.",
    "Bruno takes insulin injections for his diabetes every single morning before breakfast.",
    "Bruno visited his grandmother in the countryside during the long summer holidays last year.",
]


def test_a_name_every_memory_shares_does_not_outvote_the_dense_leg(memory):
    # BM25 ranks these by length alone (the shortest first); dense finds the medicine. Before
    # BM25's minimum spread, hybrid put "Bruno is vegan." first and the answer out of the top 3.
    memory.record(BRUNO, [Fact(text) for text in BRUNO_FACTS])
    question = "Is Bruno on any regular medicine?"
    [bm25_top] = memory.retrieve(BRUNO, question, 1, mode="bm25")
    assert bm25_top.fact.text == "Bruno is vegan."
    answer = BRUNO_FACTS[4]  # the insulin injections
    assert memory.retrieve(BRUNO, question, 1, mode="dense")[0].fact.text == answer
    assert memory.retrieve(BRUNO, question, 3, mode="hybrid")[0].fact.text == answer


# One memory shares a single incidental word with the question ("town"); the answer is a
# paraphrase that only the dense leg finds: query coverage keeps the word from outvoting it.
PARAPHRASED = [
    "Bruno's friend Marco moved to Quito last year.",
    "Bruno listened to a podcast about volcanoes while driving to work.",
    "Bruno loves jazz, above all old Chet Baker records.",
    "Bruno's colleague Pavel works as a pilot at the town hall.",
    "Bruno has lived in Porto since March.",
]


def test_one_incidental_word_does_not_outvote_the_dense_answer(memory):
    memory.record(BRUNO, [Fact(text) for text in BRUNO_FACTS[:4] + PARAPHRASED])
    question = "Which town is Bruno's home these days?"
    [bm25_top] = memory.retrieve(BRUNO, question, 1, mode="bm25")
    assert bm25_top.fact.text == PARAPHRASED[3]  # "town hall"
    answer = BRUNO_FACTS[1]  # "Bruno lives in Lisbon."
    assert memory.retrieve(BRUNO, question, 1, mode="dense")[0].fact.text == answer
    assert memory.retrieve(BRUNO, question, 1, mode="hybrid")[0].fact.text == answer
    # without query coverage the one shared word won (the default before)
    memory.retrieval = memory.retrieval.with_changes(lexical_coverage=0.0)
    assert memory.retrieve(BRUNO, question, 1, mode="hybrid")[0].fact.text == PARAPHRASED[3]


def test_the_lexical_leg_meets_derived_word_forms(memory):
    # Snowball stems "adoption", "adopted" and "adopting" to one term, in every backend (Qdrant's
    # sparse ids are hashed terms of the same tokenizer); the light stemmer kept "adoption".
    memory.record(ALICE, [Fact("Alice adopted a greyhound last spring"), Fact("Alice likes tea")])
    hits = memory.retrieve(ALICE, "adoption", 5, mode="bm25")
    assert [h.fact.text for h in hits] == ["Alice adopted a greyhound last spring"]
