"""Z-score fusion, session-neighbour smoothing, date terms and the presets, on invented data.

Pure functions: no model, no backend. The backend-level checks (every backend applies the same
config) are in ``test_retrieval_backends.py``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from indexing.fusion import query_coverage, reciprocal_rank_fusion, zscore_fusion
from indexing.lexical import DATE_TERMS, average_length, date_words, lexical_terms
from indexing.neighbours import smooth_by_session
from indexing.tokenize import tokenize
from memory_service.config.retrieval import PRESETS, RetrievalConfig
from memory_service.longterm.fusion import ByScript, LegHit, fuse_legs

T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


def _z(values: list[float]) -> list[float]:
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return [(v - mean) / sd for v in values]


# -- zscore_fusion ----------------------------------------------------------------------------


def test_zscore_fusion_sums_standardised_scores_over_the_union():
    fused = zscore_fusion(
        {"bm25": [("a", 9.0), ("b", 3.0)], "dense": [("b", 0.8), ("c", 0.6), ("a", 0.2)]},
        floors={"bm25": 0.0},
    )
    bm25 = dict(zip("abc", _z([9.0, 3.0, 0.0]), strict=True))  # c: not matched -> floor 0
    dense = dict(zip("abc", _z([0.2, 0.8, 0.6]), strict=True))
    expected = {i: bm25[i] + dense[i] for i in "abc"}
    assert [c.id for c in fused] == sorted(expected, key=lambda i: -expected[i])
    for c in fused:
        assert c.score == pytest.approx(expected[c.id])
    assert {c.id: c.ranks for c in fused}["c"] == {"bm25": None, "dense": 2}


def test_zscore_fusion_trusts_a_sure_leg_where_rrf_would_not():
    # x is far ahead in BM25 and a hair behind y and w in dense: RRF only sees ranks (dense
    # rank 3 vs 1) and puts y first; z-scores keep the size of each gap, so x wins.
    others = [(f"o{i}", 1.0 - i / 100) for i in range(8)]
    bm25 = [("x", 12.0), ("y", 2.0), ("w", 1.9), *others]
    dense = [("y", 0.80), ("w", 0.795), ("x", 0.79), *[(i, 0.3 + s / 10) for i, s in others]]
    assert (
        reciprocal_rank_fusion({"bm25": [i for i, _ in bm25], "dense": [i for i, _ in dense]})[0].id
        == "y"
    )
    assert zscore_fusion({"bm25": bm25, "dense": dense})[0].id == "x"


def test_zscore_fusion_weights_floors_and_flat_legs():
    legs = {"bm25": [("a", 5.0)], "dense": [("b", 0.9), ("a", 0.1)]}
    # default floor = the leg's lowest score: one BM25 hit is then a flat leg and adds nothing
    assert [c.id for c in zscore_fusion(legs)] == ["b", "a"]
    # the no-match floor (0 for BM25) keeps it: the one lexical hit counts
    with_floor = zscore_fusion(legs, floors={"bm25": 0.0})
    assert [c.id for c in with_floor] == ["a", "b"]
    muted = zscore_fusion(legs, floors={"bm25": 0.0}, weights={"bm25": 0.0, "dense": 1.0})
    assert [c.id for c in muted] == ["b", "a"]
    assert muted[1].ranks == {"bm25": 1, "dense": 2}  # a zero-weight leg still explains
    assert zscore_fusion({"bm25": [], "dense": []}) == []


def test_a_flat_bm25_leg_does_not_reorder_the_dense_ranking():
    # Every memory matched only a word they all contain (the user's name): BM25 scores differ
    # by length norm alone (0.009 vs 0.0116). Standardised without a minimum spread, that noise
    # counts as much as dense's real gap and puts the shortest memory first.
    bm25 = [("short", 0.0116), ("mid", 0.0104), ("gold", 0.0090)]
    dense = [("gold", 0.55), ("short", 0.50), ("mid", 0.45)]
    legs = {"bm25": bm25, "dense": dense}
    assert zscore_fusion(legs, floors={"bm25": 0.0})[0].id == "short"  # the old mechanism
    fused = zscore_fusion(legs, floors={"bm25": 0.0}, min_spreads={"bm25": math.log(2)})
    assert [c.id for c in fused] == ["gold", "short", "mid"]
    # a real lexical match (one rare word, ~3.5) spreads BM25 past ln 2: it counts in full
    real = {"bm25": [("mid", 3.5), ("short", 0.0116), ("gold", 0.009)], "dense": dense}
    floored = zscore_fusion(real, floors={"bm25": 0.0}, min_spreads={"bm25": math.log(2)})
    plain = zscore_fusion(real, floors={"bm25": 0.0})
    assert [(c.id, c.score) for c in floored] == [(c.id, c.score) for c in plain]


def test_the_default_presets_floor_the_bm25_spread_at_ln_2():
    for name in ("hybrid", "rrf", "zscore-plain"):
        assert PRESETS[name].min_spread == {"bm25": pytest.approx(math.log(2)), "dense": 0.0}
    assert RetrievalConfig(min_spread={"dense": 0.01}).min_spread == {"bm25": 0.0, "dense": 0.01}


def test_zscore_fusion_counts_a_repeated_id_once_at_its_best_rank():
    fused = zscore_fusion({"bm25": [("a", 3.0), ("b", 2.0), ("a", 1.0)]})
    assert [c.id for c in fused] == ["a", "b"]
    assert fused[0].ranks == {"bm25": 1}


# -- smooth_by_session ------------------------------------------------------------------------


def _placed(order: str, session: str = "s1") -> dict[str, tuple[str, int]]:
    return {item: (session, position) for position, item in enumerate(order)}


def test_smoothing_lifts_the_neighbours_of_a_strong_hit():
    scores = {"q": 3.0, "ans": 1.0, "far": 1.2, "low": 0.0}
    placements = {**_placed(["q", "ans"]), "far": ("s2", 0), "low": ("s3", 0)}
    out = smooth_by_session(scores, placements, weight=0.5, window=1)
    assert out == {"q": 3.0 + 0.5 * 1.0, "ans": 1.0 + 0.5 * 3.0, "far": 1.2, "low": 0.0}
    assert out["ans"] > out["far"]  # the answer after the question now beats a lone hit


def test_smoothing_window_order_and_sessions():
    scores = {"a": 4.0, "b": 0.0, "c": 0.0, "d": 0.0}
    placements = _placed("dcba")  # positions: d0 c1 b2 a3
    one = smooth_by_session(scores, placements, weight=1.0, window=1)
    assert one == {"a": 4.0, "b": 4.0, "c": 0.0, "d": 0.0}
    two = smooth_by_session(scores, placements, weight=1.0, window=2)
    assert two == {"a": 4.0, "b": 4.0, "c": 4.0, "d": 0.0}
    apart = {**_placed("ab", "s1"), "c": ("s2", 0), "d": (None, 0)}
    none = smooth_by_session(scores, apart, weight=1.0, window=5)
    assert none == {"a": 4.0, "b": 4.0, "c": 0.0, "d": 0.0}  # other session / no session
    off = smooth_by_session({"a": 2.0, "b": -1.0}, _placed("ab"), weight=0.0, window=2)
    assert off == {"a": 3.0, "b": 0.0}  # only the shift to a zero minimum
    assert smooth_by_session({}, {}, weight=1.0, window=1) == {}


# -- date terms -------------------------------------------------------------------------------


def test_date_words_are_the_utc_day_in_english():
    assert date_words(T0) == "8 May 2023"
    late = datetime(2023, 5, 8, 23, 30, tzinfo=timezone(timedelta(hours=-5)))
    assert date_words(late) == "9 May 2023"  # 04:30 UTC the next day
    assert date_words(datetime(2022, 12, 31)) == "31 December 2022"  # naive: as given


def test_the_date_adds_a_fixed_number_of_terms_which_the_length_norm_counts():
    for month in range(1, 13):
        for day in (1, 9, 28):
            when = datetime(2024, month, day, tzinfo=UTC)
            assert len(tokenize(date_words(when))) == DATE_TERMS
    assert average_length(10.0, with_date=True) == 10.0 + DATE_TERMS
    assert average_length(10.0, with_date=False) == 10.0


def test_lexical_terms_add_the_date_only_when_asked():
    assert lexical_terms("Went hiking", T0) == ["went", "hike"]
    assert lexical_terms("Went hiking", T0, with_date=True) == ["went", "hike", "8", "may", "2023"]
    assert lexical_terms("Went hiking", None, with_date=True) == ["went", "hike"]


# -- fuse_legs and the presets ----------------------------------------------------------------


def _legs() -> dict[str, list[LegHit]]:
    return {
        "bm25": [LegHit("a", 6.0, "s1", T0), LegHit("b", 2.0, "s1", T0 + timedelta(seconds=1))],
        "dense": [LegHit("a", 0.7, "s1", T0), LegHit("c", 0.5, "s2", T0)],
    }


def test_rrf_plain_keeps_the_earlier_formula():
    hits = fuse_legs("hybrid", _legs(), PRESETS["rrf-plain"], 5)
    assert [h.id for h in hits] == ["a", "b", "c"]
    assert hits[0].score == pytest.approx(2 / 61)  # rank 1 in both legs, k = 60
    assert hits[0].ranks == {"bm25": 1, "dense": 1}
    assert hits[0].scores == {"bm25": 6.0, "dense": 0.7}


def test_hybrid_preset_is_zscore_with_smoothing_and_dates():
    config = PRESETS["hybrid"]
    assert (config.fusion, config.date_terms) == ("zscore", True)
    assert config.neighbour_weight > 0 and config.neighbour_window >= 1
    # b is weak in both legs but was said right after a (same session); c is alone in s2.
    legs = {
        "bm25": [LegHit("a", 6.0, "s1", T0), LegHit("c", 3.0, "s2", T0)],
        "dense": [
            LegHit("a", 0.7, "s1", T0),
            LegHit("c", 0.55, "s2", T0),
            LegHit("b", 0.5, "s1", T0 + timedelta(seconds=1)),
        ],
    }
    plain = fuse_legs("hybrid", legs, config.with_changes(neighbour_weight=0.0), 5)
    assert [h.id for h in plain] == ["a", "c", "b"]
    hits = fuse_legs("hybrid", legs, config, 5)
    assert [h.id for h in hits] == ["a", "b", "c"]
    assert hits[1].ranks == {"bm25": None, "dense": 3}  # ranks still say where it came from
    # c has no neighbour: its score only moves by the shift that puts the lowest at zero
    low = min(h.score for h in plain)
    assert hits[2].score == pytest.approx(plain[1].score - low)


def test_rrf_preset_is_rrf_with_the_defaults_dates_and_neighbours():
    rrf, hybrid = PRESETS["rrf"], PRESETS["hybrid"]
    assert (rrf.fusion, rrf.rrf_k, rrf.date_terms) == ("rrf", 60.0, True)
    assert rrf.neighbour_window == hybrid.neighbour_window
    assert 0 < rrf.neighbour_weight < hybrid.neighbour_weight  # RRF's flat scores: RESULTS.md
    # b (dense only) and e (BM25 only) tie under plain RRF; b was said right after a, the top
    # hit of both legs, in a's session: rrf's smoothing lifts it, plain RRF keeps first seen.
    legs = {
        "bm25": [LegHit("a", 6.0, "s1", T0), LegHit("e", 3.0, "s2", T0)],
        "dense": [LegHit("a", 0.7, "s1", T0), LegHit("b", 0.5, "s1", T0 + timedelta(seconds=1))],
    }
    assert [h.id for h in fuse_legs("hybrid", legs, PRESETS["rrf-plain"], 5)] == ["a", "e", "b"]
    hits = fuse_legs("hybrid", legs, rrf, 5)
    assert [h.id for h in hits] == ["a", "b", "e"]
    assert hits[1].ranks == {"bm25": None, "dense": 2}


def test_single_leg_modes_are_never_fused_or_smoothed():
    for name in PRESETS:
        hits = fuse_legs("bm25", _legs(), PRESETS[name], 5)
        assert [(h.id, h.score, h.ranks) for h in hits] == [
            ("a", 6.0, {"bm25": 1}),
            ("b", 2.0, {"bm25": 2}),
        ]


def test_a_complete_bm25_list_floors_at_zero_a_cut_one_at_its_last_score():
    # depth(1) = min_candidates: make it 1 so a one-hit BM25 list counts as cut at the depth.
    legs = {
        "bm25": [LegHit("a", 5.0)],
        "dense": [LegHit("b", 0.9), LegHit("a", 0.1)],
    }
    config = RetrievalConfig(fusion="zscore", min_candidates=50)
    assert [h.id for h in fuse_legs("hybrid", legs, config, 2)] == ["a", "b"]
    cut = config.with_changes(min_candidates=1, candidate_multiplier=1)
    assert [h.id for h in fuse_legs("hybrid", legs, cut, 1)] == ["b"]


# -- query coverage ---------------------------------------------------------------------------

TREK = ["bruno", "spend", "last", "trek", "holiday"]  # "Where did Bruno spend the last trekking
# holiday?": "spend", "trek" and "holiday" are in no memory (the answer is a paraphrase)


def test_query_coverage_is_the_share_of_the_questions_idf_mass():
    matched: dict[str, set[str]] = {f"name only {i}": {"bruno"} for i in range(17)}
    matched |= {"incidental": {"bruno", "last"}, "other": {"bruno", "last"}, "all": set(TREK)}
    coverage = query_coverage(TREK, matched, candidates=20)
    assert coverage["all"] == pytest.approx(1.0)
    assert coverage["incidental"] == coverage["other"]
    # the name is in all twenty memories (IDF near 0), "last" in three of them
    assert coverage["name only 0"] < 0.01 < coverage["incidental"] < 0.25
    # a word no memory holds is part of the question nothing explains: it lowers every share
    assert query_coverage(["bruno", "last"], matched, 20)["incidental"] == pytest.approx(1.0)
    assert query_coverage([], matched, 20) == dict.fromkeys(matched, 1.0)


def _trek_legs(matched: bool = True) -> dict[str, list[LegHit]]:
    """The bundled synthetic set's shape: every memory names the user, one shares an incidental
    word with the question (BM25 3.2 against 0.01), dense finds the paraphrased answer."""
    others = [f"m{i}" for i in range(18)]
    names = ["gold", *others]

    def terms(*held: str) -> frozenset[str] | None:
        return frozenset(held) if matched else None

    bm25 = [LegHit("incidental", 3.2, matched=terms("bruno", "last"))] + [
        LegHit(m, 0.012 - 0.0001 * i, matched=terms("bruno")) for i, m in enumerate(names)
    ]
    dense = [LegHit("gold", 0.72), LegHit("incidental", 0.45)] + [
        LegHit(m, 0.40 - 0.01 * i) for i, m in enumerate(others)
    ]
    return {"bm25": bm25, "dense": dense}


def test_an_incidental_word_no_longer_outvotes_the_dense_answer():
    hybrid = PRESETS["hybrid"]
    assert hybrid.lexical_coverage == 0.5
    before = fuse_legs("hybrid", _trek_legs(), hybrid.with_changes(lexical_coverage=0.0), 3)
    assert [h.id for h in before] == ["incidental", "gold", "m0"]  # the old mechanism
    hits = fuse_legs("hybrid", _trek_legs(), hybrid, 3, query_terms=TREK)
    assert [h.id for h in hits] == ["gold", "incidental", "m0"]
    # ranks and scores reported are the legs' own, not the scaled BM25 values
    assert hits[1].ranks == {"bm25": 1, "dense": 2}
    assert hits[1].scores == {"bm25": 3.2, "dense": 0.45}


def test_a_match_of_most_of_the_question_keeps_its_weight():
    # "What did Caroline research?": the answer holds the rare word, dense ranks it third
    terms = ["caroline", "research"]
    bm25 = [LegHit("gold", 6.0, matched=frozenset(terms))] + [
        LegHit(f"m{i}", 0.02, matched=frozenset({"caroline"})) for i in range(10)
    ]
    dense = [LegHit("m0", 0.50), LegHit("m1", 0.48), LegHit("gold", 0.46)] + [
        LegHit(f"m{i}", 0.30) for i in range(2, 10)
    ]
    legs = {"bm25": bm25, "dense": dense}
    assert fuse_legs("hybrid", legs, PRESETS["hybrid"], 3, query_terms=terms)[0].id == "gold"


def test_query_coverage_is_all_or_nothing_and_zscore_only():
    hybrid, off = PRESETS["hybrid"], PRESETS["hybrid"].with_changes(lexical_coverage=0.0)
    plain = [h.id for h in fuse_legs("hybrid", _trek_legs(), off, 5)]
    # a backend that cannot say what its hits matched, or a call without query terms: no scaling
    assert [h.id for h in fuse_legs("hybrid", _trek_legs(False), hybrid, 5, query_terms=TREK)] == (
        plain
    )
    assert [h.id for h in fuse_legs("hybrid", _trek_legs(), hybrid, 5)] == plain
    # RRF ignores it, as it ignores the minimum spread; so does zscore-plain (off)
    for name in ("rrf", "rrf-plain", "zscore-plain"):
        config = PRESETS[name]
        with_terms = fuse_legs("hybrid", _trek_legs(), config, 5, query_terms=TREK)
        assert [h.id for h in with_terms] == [
            h.id for h in fuse_legs("hybrid", _trek_legs(), config, 5)
        ]
    assert PRESETS["zscore-plain"].lexical_coverage == 0.0


def test_config_refuses_nonsense():
    with pytest.raises(ValueError):
        RetrievalConfig(lexical_coverage=-0.5)
    with pytest.raises(ValueError):
        RetrievalConfig(lexical_coverage=float("nan"))
    with pytest.raises(ValueError):
        RetrievalConfig(fusion="borda")
    with pytest.raises(ValueError):
        RetrievalConfig(neighbour_weight=-0.1)
    with pytest.raises(ValueError):
        RetrievalConfig(weights={"bm25": -1.0, "dense": 1.0})
    with pytest.raises(ValueError):
        RetrievalConfig(min_spread={"bm25": -0.5})
    with pytest.raises(ValueError):
        RetrievalConfig(min_spread={"bm25": float("nan")})


# -- fuse_legs against indexing's object-per-candidate forms -----------------------------------


def _reference_fusion(legs, leg_hits, config, top_k, now, query_terms):
    """``fuse_legs`` composed from ``indexing``'s forms the lab uses (``zscore_fusion``,
    ``reciprocal_rank_fusion``, ``smooth_by_session``): what the service must equal."""
    if config.fusion == "rrf":
        order = {leg: [h.id for h in leg_hits[leg]] for leg in legs}
        fused = reciprocal_rank_fusion(order, k=config.rrf_k, weights=config.weights)
    else:
        lexical = leg_hits["bm25"]
        if config.lexical_coverage and query_terms and lexical:
            known = {h.id: h.matched for leg in legs for h in leg_hits[leg]}
            coverage = query_coverage(query_terms, known, len(known))
            scaled = [(h.id, h.score * coverage[h.id] ** config.lexical_coverage) for h in lexical]
        else:
            scaled = [(h.id, h.score) for h in lexical]
        pairs = {"bm25": scaled, "dense": [(h.id, h.score) for h in leg_hits["dense"]]}
        floors = {}
        for leg, hits in pairs.items():
            if hits:
                complete = leg == "bm25" and len(hits) < config.depth(top_k)
                floors[leg] = 0.0 if complete else min(s for _, s in hits)
        fused = zscore_fusion(
            pairs, weights=config.weights, floors=floors, min_spreads=config.min_spread
        )
    first = {}
    for leg in legs:
        for h in leg_hits[leg]:
            first.setdefault(h.id, h)
    placements = {
        i: (h.session_id, (h.created_at, i)) for i, h in first.items() if h.session_id is not None
    }
    smoothed = smooth_by_session(
        {c.id: c.score for c in fused},
        placements,
        weight=config.neighbour_weight,
        window=config.neighbour_window,
    )
    scores = {c.id: smoothed[c.id] for c in fused}
    order = sorted((c.id for c in fused), key=scores.__getitem__, reverse=True)
    if config.recency_half_life_days is not None:
        for i in scores:
            age = max(0.0, (now - first[i].created_at).total_seconds() / 86_400.0)
            scores[i] += config.recency_weight * 0.5 ** (age / config.recency_half_life_days)
        order = sorted(order, key=scores.__getitem__, reverse=True)
    ranks = {c.id: c.ranks for c in fused}
    return [(i, scores[i], ranks[i]) for i in order[:top_k]]


def _random_leg(rng, ids, meta, matched, count: int, scale: float) -> list[LegHit]:
    """``count`` of ``ids`` best first, two of them repeated further down."""
    chosen = rng.sample(ids, min(count, len(ids)))
    chosen += rng.sample(chosen, min(2, len(chosen)))
    scores = sorted((rng.random() * scale for _ in chosen), reverse=True)
    return [LegHit(i, s, *meta[i], matched[i]) for i, s in zip(chosen, scores, strict=True)]


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"fusion": "rrf"},
        {"recency_half_life_days": 30.0},
        {"weights": {"bm25": 0.7, "dense": 1.3}, "min_spread": {}},
        {"neighbour_window": 5, "neighbour_weight": 0.3},
        {"lexical_coverage": 0.0},
    ],
)
def test_fuse_legs_scores_what_indexings_fusion_and_smoothing_score_to_the_bit(changes):
    """The service fuses numbered candidates in flat lists; the lab's forms make an object a
    candidate. Random legs (repeated ids, shared sessions, tied times) must give the same
    ranking, scores and ranks, float for float."""
    import random

    config = PRESETS["hybrid"].with_changes(**changes)
    rng = random.Random(11)
    words = [f"t{i}" for i in range(8)]
    for _ in range(200):
        ids = [f"f{i}" for i in range(rng.randint(1, 90))]
        meta = {
            i: (rng.choice(["s1", "s2", "s3", None]), T0 + timedelta(hours=rng.randint(0, 40)))
            for i in ids
        }
        terms = rng.sample(words, rng.randint(1, 5))
        matched = {i: frozenset(rng.sample(terms, rng.randint(0, len(terms)))) for i in ids}

        leg_hits = {
            "bm25": _random_leg(rng, ids, meta, matched, rng.randint(0, 60), 12.0),
            "dense": _random_leg(rng, ids, meta, matched, 50, 1.0),
        }
        top_k = rng.choice([1, 5, 10])
        now = T0 + timedelta(days=3)
        got = fuse_legs("hybrid", leg_hits, config, top_k, now=now, query_terms=terms)
        want = _reference_fusion(("bm25", "dense"), leg_hits, config, top_k, now, terms)
        assert [(h.id, h.score, h.ranks) for h in got] == want


# -- the lexical leg within the question's script ---------------------------------------------


def _two_scripts(lexical_within: str | None) -> list[str]:
    """An English question: two English memories share incidental words with it, a Chinese
    memory (no word of it, by its script) is the dense leg's clear first."""
    legs = {
        "bm25": [LegHit("en1", 2.0), LegHit("en2", 1.8)],
        "dense": [
            LegHit("zh", 0.86),
            LegHit("en1", 0.80),
            LegHit("en2", 0.79),
            LegHit("en3", 0.78),
            LegHit("en4", 0.77),
        ],
    }
    scripts = ByScript(lambda fid: "cjk" if fid == "zh" else "other", False, 1.0, lexical_within)
    plain = PRESETS["zscore-plain"]
    return [h.id for h in fuse_legs("hybrid", legs, plain, 5, scripts=scripts)]


def test_a_memory_in_another_script_is_not_pushed_down_by_the_lexical_legs_silence():
    assert _two_scripts(None)[0] == "en1"  # counted as a lexical miss, it fell below en1
    ranked = _two_scripts("other")
    assert ranked[0] == "zh"
    assert ranked[1:3] == ["en1", "en2"]  # among the English ones, the lexical leg still counts


def test_the_lexical_leg_within_one_script_changes_nothing_when_every_memory_shares_it():
    legs = {
        "bm25": [LegHit("a", 2.0), LegHit("b", 1.0)],
        "dense": [LegHit("c", 0.9), LegHit("a", 0.7), LegHit("b", 0.6)],
    }
    plain = PRESETS["zscore-plain"]
    within = ByScript(lambda fid: "other", False, 1.0, "other")
    before = fuse_legs("hybrid", legs, plain, 3)
    after = fuse_legs("hybrid", legs, plain, 3, scripts=within)
    assert [(h.id, h.score) for h in after] == [(h.id, h.score) for h in before]
