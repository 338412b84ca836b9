"""BM25 correctness of the Qdrant sparse leg, against ``indexing.bm25`` (rank-bm25) on the same
tokens.

Two measures:
- exact: on a corpus whose mean length is ``AVG_DOC_LEN`` (so rank-bm25's corpus average equals
  the constant the sparse vectors are built with), every query's sparse-leg ranking is identical
  to rank-bm25's, hit for hit, and the scores are equal to 1e-4 relative;
- approximate: on hand-written short facts (mean length far from the constant), the top-5 sets
  overlap by at least 0.8 on average over the queries (overlap@5 = |A ∩ B| / 5) and the top hit
  is the same for at least 90% of the queries.
"""

from __future__ import annotations

import random
from array import array
from datetime import UTC, datetime, timedelta
from statistics import mean

import pytest

from indexing.bm25 import BM25Index
from indexing.lexical import lexical_terms
from indexing.sparse import (
    AVG_DOC_LEN,
    K1,
    B,
    document_vector,
    matched_terms,
    query_vector,
    term_id,
    terms_by_id,
)
from indexing.tokenize import tokenize
from memory_service.domain.context import RuntimeContext
from memory_service.domain.fact_filter import ExpiryPolicy
from memory_service.domain.facts import Fact
from memory_service.longterm.near_duplicates import OFF
from tests.support.backends import LONGTERM_BACKENDS

QDRANT_BACKENDS = ["qdrant-edge", "qdrant-local"]
CTX = RuntimeContext("bm25-tenant", "reader")
T0 = datetime(2024, 1, 1, tzinfo=UTC)

VOCABULARY = [
    "garden",
    "kitchen",
    "violin",
    "marathon",
    "passport",
    "coffee",
    "bicycle",
    "harbor",
    "lantern",
    "meadow",
    "orchard",
    "pottery",
    "quartz",
    "saddle",
    "tundra",
    "umbrella",
    "walnut",
    "yogurt",
    "zephyr",
    "anchor",
    "basil",
    "canyon",
    "dolphin",
    "ember",
    "falcon",
    "glacier",
    "hammock",
    "island",
    "jasmine",
    "kettle",
]

NATURAL_FACTS = [
    "Alice works as a nurse at the city hospital",
    "Alice is allergic to peanuts and shellfish",
    "Alice prefers window seats on long flights",
    "Alice adopted a golden retriever named Biscuit",
    "Biscuit the dog loves long walks in the park",
    "Alice runs a marathon every spring in Boston",
    "Alice drinks green tea every morning before work",
    "Alice's brother Tom lives in Denver with his wife",
    "Tom works as an engineer at a bicycle company",
    "Alice plays the violin in a community orchestra",
    "The orchestra rehearses on Thursday evenings",
    "Alice is learning Spanish for a trip to Madrid",
    "Alice booked a hotel in Madrid near the museum",
    "Alice's favourite food is mushroom risotto",
    "Alice cannot eat peanuts; she carries an epinephrine pen",
    "Alice grows tomatoes and basil in her garden",
    "Alice's garden has a small pond with goldfish",
    "Alice reads mystery novels on the train to work",
    "Alice's hospital shift starts at seven in the morning",
    "Alice wants to visit Japan in the cherry blossom season",
    "Alice keeps her passport in the kitchen drawer",
    "Alice's car is a blue hybrid hatchback",
    "Alice takes her car to the garage every autumn",
    "Alice volunteers at the animal shelter on Sundays",
    "The animal shelter needs blankets for the dogs",
    "Alice's mother calls her every Sunday evening",
    "Alice drinks coffee only on weekends",
    "Alice's favourite park has a lake with ducks",
    "Alice is saving money for a new bicycle",
    "Alice's neighbour plays the piano late at night",
]

NATURAL_QUERIES = [
    "peanuts allergy",
    "where does Tom live",
    "violin orchestra",
    "Madrid trip hotel",
    "dog walks park",
    "morning tea coffee",
    "garden basil tomatoes",
    "hospital shift nurse",
    "car garage",
    "animal shelter dogs Sunday",
    "bicycle",
    "passport kitchen",
    "Japan cherry blossom",
    "marathon spring",
]


def _exact_corpus(seed: int = 7) -> list[str]:
    """Random documents over a skewed vocabulary whose token lengths average AVG_DOC_LEN."""
    rng = random.Random(seed)
    weights = [1.0 / (rank + 1) for rank in range(len(VOCABULARY))]
    lengths = [rng.randint(4, 16) for _ in range(39)]
    lengths.append(int(AVG_DOC_LEN * 40) - sum(lengths))
    assert lengths[-1] >= 1
    docs = [" ".join(rng.choices(VOCABULARY, weights, k=n)) for n in lengths]
    assert mean(len(tokenize(d)) for d in docs) == AVG_DOC_LEN
    return docs


def _record(memory, texts: list[str]) -> list[str]:
    """Record one by one with increasing creation times (the tie order of both sides)."""
    facts = [Fact(text, created_at=T0 + timedelta(minutes=i)) for i, text in enumerate(texts)]
    results = memory.record(CTX, facts)
    assert [r.status for r in results] == ["created"] * len(texts)
    return [r.id for r in results]


@pytest.fixture(params=QDRANT_BACKENDS)
def qdrant_memory(request, tmp_path, embedder):
    memory = LONGTERM_BACKENDS[request.param](tmp_path, embedder)
    memory.expiry = ExpiryPolicy(by_importance=False)  # the facts are dated 2024 on purpose
    memory.near_duplicates = OFF  # random word bags: each must stay a document of its own
    yield memory
    memory.close()


def test_document_weights_are_bm25_term_frequency_saturation():
    tokens = tokenize("violin violin violin orchestra")
    assert tokens == ["violin", "violin", "violin", "orchestra"]
    vector = document_vector(tokens)
    weights = dict(zip(vector.indices, vector.values, strict=True))
    norm = K1 * (1 - B + B * 4 / AVG_DOC_LEN)
    assert weights[term_id("violin")] == pytest.approx(3 * (K1 + 1) / (3 + norm))
    assert weights[term_id("orchestra")] == pytest.approx(1 * (K1 + 1) / (1 + norm))
    assert list(vector.indices) == sorted(vector.indices)
    query = query_vector(tokenize("violin violin lessons"))
    assert dict(zip(query.indices, query.values, strict=True)) == {
        term_id("violin"): 2.0,
        term_id("lesson"): 1.0,
    }


def test_term_ids_are_stable_31_bit_integers():
    # Pinned values: a change here would silently break every stored sparse vector.
    assert term_id("peanut") == 857875950
    assert term_id("花生") == 1744662237
    assert all(0 <= term_id(t) < 2**31 for t in VOCABULARY)
    assert len({term_id(t) for t in VOCABULARY}) == len(VOCABULARY)


def test_a_documents_matched_terms_are_the_same_whatever_holds_its_ids():
    """A hit's matched query terms come from its sparse vector's indices: a set (a scope held
    in memory), an array (Edge's held points) or a list (a server's point). Each form gives
    the same terms, a term id two query terms share gives both, and unknown ids give None."""
    document = document_vector(tokenize("Alice walks her dog to the lake every morning"))
    asked = terms_by_id(tokenize("dog lake cat morning"))
    want = frozenset(tokenize("dog lake morning"))
    forms = (
        set(document.indices),
        frozenset(document.indices),
        array("I", document.indices),
        list(document.indices),
    )
    assert {matched_terms(form, asked) for form in forms} == {want}
    shared = {term_id("dog"): ("dog", "hound")}  # two terms hashed to one id
    assert matched_terms(array("I", document.indices), shared) == {"dog", "hound"}
    assert matched_terms([], asked) == frozenset()
    assert matched_terms(None, asked) is None


def test_sparse_leg_ranks_exactly_like_rank_bm25(qdrant_memory):
    docs = _exact_corpus()
    ids = _record(qdrant_memory, docs)
    # Another tenant's words must not move this user's scores: IDF is per user.
    noise = [f"zephyr anchor quartz note {i}" for i in range(30)]
    qdrant_memory.record(RuntimeContext("other-tenant", "reader"), [Fact(t) for t in noise])
    # the reference indexes what the backend indexes: the text, and its day when date_terms
    # (every document then has DATE_TERMS more terms; the sparse vectors' average counts them)
    with_date = qdrant_memory.retrieval.date_terms
    created = [T0 + timedelta(minutes=i) for i in range(len(docs))]  # as _record stamps them
    reference = BM25Index(
        [lexical_terms(d, t, with_date=with_date) for d, t in zip(docs, created, strict=True)]
    )
    rng = random.Random(11)
    queries = [" ".join(rng.sample(VOCABULARY, rng.randint(1, 3))) for _ in range(12)]
    queries += ["violin violin garden", "zephyr", "anchor anchor anchor quartz"]
    compared = 0
    for query in queries:
        expected = reference.search(tokenize(query), 50)
        got = qdrant_memory.retrieve(CTX, query, top_k=50, mode="bm25")
        assert [r.fact.id for r in got] == [ids[h.index] for h in expected], query
        for recall, hit in zip(got, expected, strict=True):
            assert recall.score == pytest.approx(hit.score, rel=1e-4), query
        compared += len(expected)
    assert compared > 100  # the queries did hit most of the corpus


def test_sparse_leg_agrees_with_rank_bm25_on_short_facts(qdrant_memory):
    lengths = [len(tokenize(t)) for t in NATURAL_FACTS]
    assert mean(lengths) < AVG_DOC_LEN - 3  # far from the constant: agreement is approximate
    ids = _record(qdrant_memory, NATURAL_FACTS)
    reference = BM25Index([tokenize(t) for t in NATURAL_FACTS])
    overlaps, same_top = [], 0
    for query in NATURAL_QUERIES:
        expected = [ids[h.index] for h in reference.search(tokenize(query), 5)]
        got = [r.fact.id for r in qdrant_memory.retrieve(CTX, query, top_k=5, mode="bm25")]
        assert expected, query
        overlaps.append(len(set(expected) & set(got)) / len(expected))
        same_top += got[:1] == expected[:1]
    print(f"overlap@5 {mean(overlaps):.3f}, same top-1 {same_top}/{len(NATURAL_QUERIES)}")
    assert mean(overlaps) >= 0.8, overlaps
    assert same_top >= 0.9 * len(NATURAL_QUERIES), same_top
