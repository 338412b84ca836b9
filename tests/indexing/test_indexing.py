"""indexing/: tokens, hashes, BM25, fusion, embedding cache."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from indexing.bm25 import BM25Index
from indexing.embeddings import CachedEmbedder
from indexing.fusion import reciprocal_rank_fusion
from indexing.hashing import content_hash, hamming_distance, simhash
from indexing.padding import padding_plan
from indexing.sparse import document_vector, term_id
from indexing.tokenize import (
    _TOKEN_RE,
    document_length,
    fold,
    normalize,
    query_terms,
    stem,
    tokenize,
)


def test_tokenize_folds_case_width_and_stems():
    assert tokenize("The CATS were Running") == ["cat", "run"]
    assert tokenize("ＡＢＣ") == ["abc"]  # NFKC folds full-width letters
    assert tokenize("Alice's dogs") == tokenize("alice dog") == ["alic", "dog"]  # Snowball
    assert tokenize("meeting on 2023-05-01") == ["meet", "2023", "05", "01"]


def test_stemming_is_english_snowball():
    assert stem("stories") == stem("story")
    assert stem("stopped") == stem("stopping") == stem("stop") == "stop"
    # derivations meet, which the hand-written light stemmer missed (adoption stayed adoption)
    assert stem("adoption") == stem("adopted") == stem("adopting") == "adopt"
    assert stem("glass") == "glass"
    assert stem("bus") == "bus"
    assert stem("red") == "red"
    assert stem("Bruno's".casefold()) == "bruno"
    assert stem("naïve") == "naïve"  # not ASCII: left alone
    assert stem("o'neill") == "o'neill"  # an inner apostrophe: left alone


def test_stemming_from_many_threads_agrees():
    from concurrent.futures import ThreadPoolExecutor

    words = ["adoption", "running", "stories", "happily", "connected", "generously"] * 200
    expected = [stem(w) for w in words]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: [stem(w) for w in words], range(16)))
    assert all(r == expected for r in results)


def test_cjk_runs_become_characters_and_bigrams():
    assert tokenize("北京烤鸭") == ["北", "北京", "京", "京烤", "烤", "烤鸭", "鸭"]
    assert tokenize("花") == ["花"]
    assert tokenize("I like 花生 a lot") == ["like", "花", "花生", "生", "lot"]
    # a word inside a run: every term of the word is one of the run's
    assert set(tokenize("烤鸭")) <= set(tokenize("王小明喜欢吃北京烤鸭"))
    assert set(tokenize("茶")) <= set(tokenize("我喜欢喝茶"))  # a one-character word
    assert set(tokenize("서울")) <= set(tokenize("서울에서 살아요"))  # Korean: noun + particle


def test_a_kana_is_indexed_in_its_pairs_only():
    # a kana alone is a particle or an ending (の, が, ます): not a term, as a stop word is not
    assert tokenize("猫が好き") == ["猫", "猫が", "が好", "好", "好き"]
    assert set(tokenize("猫")) <= set(tokenize("猫が好き"))  # a one-kanji word is found
    assert tokenize("ラーメン") == ["ラー", "ーメ", "メン"]
    assert tokenize("の") == ["の"]  # a run of one is its own term


def test_cjk_runs_are_cut_by_script_not_by_a_list_of_blocks():
    # 々 (Han's iteration mark), ー and the kana stay in the run; 、。「」 end it
    assert "人々" in tokenize("人々が好き")
    assert "ラー" in tokenize("ラーメン")
    assert tokenize("東京、「大阪」") == ["東", "東京", "京", "大", "大阪", "阪"]
    assert "𠮷野" in tokenize("𠮷野家で食べる")  # CJK extension B
    assert tokenize("ｶﾀｶﾅ") == tokenize("カタカナ")  # half-width kana, through NFKC


def test_a_chinese_question_loses_its_question_words_as_an_english_one_does():
    # what/where/is/have are English stop words; 什么/哪里/是/有 their Chinese counterparts
    assert query_terms("他怕什么？") == ["他", "他怕", "怕", "怕什"]
    assert query_terms("What is he afraid of?") == tokenize("What is he afraid of?") == ["afraid"]
    assert "哪里" not in query_terms("他的老家是哪里？")
    assert "老家" in query_terms("他的老家是哪里？")
    assert query_terms("王小明有没有孩子吗") == [
        *("王", "王小", "小", "小明", "明", "明有"),
        *("有孩", "孩", "孩子", "子", "子吗"),
    ]
    # a memory keeps every term: only the question's side is cut
    assert "什么" in tokenize("他什么都吃")


def test_accents_fold_and_the_word_as_written_is_kept():
    assert tokenize("Zürich") == ["zurich", "zürich"]
    assert set(tokenize("Zurich")) <= set(tokenize("Zürich"))
    assert tokenize("cafés") == ["cafe", "cafés"]  # folded first, so Snowball sees "cafes"
    assert set(tokenize("cafe")) <= set(tokenize("café"))
    assert tokenize("Łódź Øresund") == ["lodz", "łódź", "oresund", "øresund"]
    assert tokenize("Tiếng Việt") == ["tieng", "tiếng", "viet", "việt"]
    assert tokenize("ΕΛΛΗΝΙΚΆ") == ["ελληνικα", "ελληνικά"]
    # decomposed input folds alike, and a mark NFKC cannot compose stays in its word
    assert tokenize("Zu\u0308rich") == tokenize("Zürich")
    assert tokenize("q\u0303uick") == ["quick", "q\u0303uick"]
    # the English stop list applies to words as written: pinyin "hé" is no "he"
    assert tokenize("he hé") == ["he", "hé"]


def test_a_stacked_term_adds_no_length():
    assert document_length(tokenize("北京烤鸭")) == 3  # as long as its bigrams
    assert document_length(tokenize("猫が好き")) == 3
    assert document_length(tokenize("花")) == 1
    assert document_length(tokenize("北京。京。京都")) == 3  # the lone 京 is a run of its own
    assert document_length(tokenize("Zürich café")) == 2
    assert document_length(tokenize("Alice likes tea")) == 3


_MIXED = st.text(alphabet="北京烤鸭花生のが好きラーメン서울에 abcz'éüøı\u0301、。", max_size=40)


@settings(max_examples=300, deadline=None)
@given(_MIXED)
def test_every_text_is_as_long_as_version_1_counted_it(text):
    """Version 1: a word one position, a CJK run its bigrams (a run of one: one)."""
    expected = 0
    for match in _TOKEN_RE.finditer(normalize(text)):
        run = match.group("cjk")
        expected += max(len(run) - 1, 1) if run else 1
    assert document_length(tokenize(text, stop_words=None)) == expected


def test_an_accent_does_not_make_a_memory_longer_to_either_index():
    plain, accented = tokenize("Alice moved to Zurich"), tokenize("Alice moved to Zürich")
    index = BM25Index([plain, accented])
    scores = index.scores(tokenize("Zurich"))
    assert scores[0] == pytest.approx(scores[1]) and scores[0] > 0
    weights = [
        dict(zip(v.indices, v.values, strict=True)) for v in map(document_vector, (plain, accented))
    ]
    assert weights[0][term_id("zurich")] == pytest.approx(weights[1][term_id("zurich")])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_ascii_text_takes_a_shortcut_to_the_same_terms(text):
    # "。" ends any word and is no term: the text then goes the general (Unicode) way
    assert tokenize(text) == tokenize(text + "。")


def test_a_mark_without_a_letter_is_no_word():
    assert tokenize("great 👍️ job") == ["great", "job"]  # U+FE0F after the emoji


def test_other_scripts_keep_their_marks_inside_words():
    assert tokenize("हिन्दी भाषा") == ["हिन्दी", "भाषा"]  # vowel signs and virama are letters' parts
    assert tokenize("كِتَابٌ") == ["كِتَابٌ"]
    assert fold("привёт") == "привёт"  # Cyrillic: ё and й are letters, not accents
    assert fold("zürich") == "zurich"


def test_content_hash_ignores_case_width_and_whitespace():
    assert content_hash("Likes  tea\n") == content_hash("likes tea")
    assert content_hash("ＬＩＫＥＳ tea") == content_hash("likes tea")
    assert content_hash("likes tea") != content_hash("likes coffee")


def test_simhash_separates_near_duplicates_from_different_facts():
    a = simhash("The user lives in Berlin and works as a software engineer at a startup")
    b = simhash("The user lives in Berlin and works as a software engineer at a start-up")
    c = simhash("Grandma's apple pie recipe needs two cups of sugar and cinnamon")
    assert hamming_distance(a, b) < hamming_distance(a, c)
    assert hamming_distance(a, b) <= 12
    assert hamming_distance(a, c) >= 16
    assert simhash("") == 0


def test_bm25_ranks_by_term_rarity_and_needs_a_shared_term():
    docs = [
        tokenize("Alice is allergic to peanuts"),
        tokenize("Alice likes peanut butter and jam"),
        tokenize("Bob plays the cello"),
    ]
    index = BM25Index(docs)
    hits = index.search(tokenize("allergic peanuts"), 10)
    assert [h.index for h in hits] == [0, 1]
    assert hits[0].score > hits[1].score > 0
    assert index.search(tokenize("violin"), 10) == []


def test_bm25_scores_are_positive_on_a_tiny_corpus():
    # rank-bm25's own Okapi IDF is zero here (term in 1 of 2 docs): every score would be 0.
    index = BM25Index([tokenize("likes tea"), tokenize("likes coffee")])
    hits = index.search(tokenize("tea"), 5)
    assert [h.index for h in hits] == [0] and hits[0].score > 0


def test_bm25_score_row_agrees_with_search_and_is_zero_where_nothing_matches():
    index = BM25Index([tokenize("likes tea"), tokenize("Bob plays cello"), tokenize("tea time")])
    row = index.scores(tokenize("tea"))
    hits = {h.index: h.score for h in index.search(tokenize("tea"), 5)}
    assert row.shape == (3,) and row[1] == 0.0
    assert row[0] == pytest.approx(hits[0]) and row[2] == pytest.approx(hits[2])
    assert not index.scores([]).any()


def test_bm25_scores_are_rank_bm25s_own_bit_for_bit():
    """The index skips query terms no document holds and computes the length norm once;
    the scores must still be exactly what rank-bm25's own ``get_scores`` gives."""
    import random

    from rank_bm25 import BM25Okapi

    from indexing.bm25 import _LuceneIdfBM25

    class Reference(_LuceneIdfBM25):
        get_scores = BM25Okapi.get_scores

    rng = random.Random(3)
    words = [f"w{i}" for i in range(300)]
    for _ in range(100):
        docs = [[rng.choice(words) for _ in range(rng.randint(1, 30))] for _ in range(50)]
        query = [rng.choice([*words, "absent", "unseen"]) for _ in range(rng.randint(1, 8))]
        ours, theirs = _LuceneIdfBM25(docs), Reference(docs)
        for _ in range(2):  # the second call reuses the cached norm
            assert np.array_equal(ours.get_scores(query), theirs.get_scores(query))


def test_bm25_matched_terms_are_the_query_terms_a_document_holds():
    index = BM25Index([["alice", "paint"], ["bob", "hike"], []])
    assert index.matched(0, ["alice", "hike", "alice"]) == frozenset({"alice"})
    assert index.matched(1, ["alice", "hike"]) == frozenset({"hike"})
    assert index.matched(2, ["alice"]) == frozenset()


def test_bm25_matched_each_equals_matched_of_each_document_in_term_order():
    """Every candidate's matched terms at once (masks over the terms' postings) must be the
    per-document answer, set for set, built in the query's order (query coverage sums over
    the set: another insertion order could change a score's last bit), with or without the
    mask's term limit."""
    import random

    rng = random.Random(5)
    words = [f"w{i}" for i in range(80)]
    asked_words = [f"w{i}" for i in range(200)]
    for query_size in (1, 6, 150):  # ~100 distinct terms: past the mask, one at a time
        for _ in range(40):
            docs = [[rng.choice(words) for _ in range(rng.randint(0, 25))] for _ in range(60)]
            index = BM25Index(docs)
            query = [rng.choice(asked_words) for _ in range(query_size)]
            asked = rng.sample(range(60), rng.randint(0, 60))
            each = index.matched_each(asked, query)
            expected = [index.matched(i, query) for i in asked]
            assert each == expected
            assert [list(s) for s in each] == [list(s) for s in expected]


def test_rrf_keeps_each_legs_rank_and_applies_weights():
    fused = reciprocal_rank_fusion({"bm25": ["a", "b"], "dense": ["b", "c"]}, k=60)
    assert [c.id for c in fused] == ["b", "a", "c"]
    assert fused[0].ranks == {"bm25": 2, "dense": 1}
    assert fused[1].ranks == {"bm25": 1, "dense": None}
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)
    weighted = reciprocal_rank_fusion(
        {"bm25": ["a", "b"], "dense": ["b", "c"]}, k=60, weights={"bm25": 1.0, "dense": 0.0}
    )
    assert [c.id for c in weighted] == ["a", "b", "c"]
    assert weighted[2].ranks == {"bm25": None, "dense": 2}  # a zero-weight leg still explains
    with pytest.raises(ValueError):
        reciprocal_rank_fusion({"bm25": ["a"]}, k=0)


def test_embeddings_are_normalised_and_cached_by_content(embedder):
    vectors = embedder.embed(["Alice likes tea", "Bob plays the cello"])
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    cached = CachedEmbedder(embedder)
    cached.embed(["Alice likes tea", "alice LIKES tea"])
    assert cached.misses == 1
    cached.embed(["Alice likes tea", "Carol likes coffee"])
    assert cached.misses == 2
    similar, different = (
        float(v @ vectors[0]) for v in embedder.embed(["Alice enjoys tea", "cello lessons"])
    )
    assert similar > different


def _plan_cost(lengths: list[int], runs: list[tuple[int, int]], overhead: int) -> int:
    return sum(overhead + (stop - start) * lengths[start] for start, stop in runs)


def _cheapest(lengths: list[int], max_batch: int, overhead: int) -> int:
    """Every way to cut ``lengths`` into runs, tried: the reference for the plan."""
    if not lengths:
        return 0
    return min(
        overhead + size * lengths[0] + _cheapest(lengths[size:], max_batch, overhead)
        for size in range(1, min(max_batch, len(lengths)) + 1)
    )


@pytest.mark.parametrize("overhead", [0, 8, 32, 1000])
def test_the_padding_plan_is_the_cheapest_cut_and_covers_every_text(overhead):
    rng = np.random.default_rng(overhead)
    for _ in range(30):
        lengths = sorted(rng.integers(2, 40, size=int(rng.integers(0, 12))).tolist(), reverse=True)
        runs = padding_plan(lengths, 4, overhead)
        assert [i for start, stop in runs for i in range(start, stop)] == list(range(len(lengths)))
        assert all(1 <= stop - start <= 4 for start, stop in runs)
        assert _plan_cost(lengths, runs, overhead) == _cheapest(lengths, 4, overhead)


def test_the_padding_plan_cuts_where_lengths_differ_and_refuses_unsorted_input():
    assert padding_plan([30, 30, 8, 8], 64, overhead=4) == [(0, 2), (2, 4)]
    assert padding_plan([30, 29, 8, 8], 64, overhead=1000) == [(0, 4)]  # a run costs more
    assert padding_plan([5] * 5, 2) == [(0, 1), (1, 3), (3, 5)]
    assert padding_plan([], 8) == []
    with pytest.raises(ValueError):
        padding_plan([3, 9], 8)
    with pytest.raises(ValueError):
        padding_plan([3], 0)
