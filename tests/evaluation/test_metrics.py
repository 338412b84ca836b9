"""Ranking metrics on hand-made lists with values worked out by hand."""

from __future__ import annotations

import math

import pytest

from memory_service.evaluation import metrics

A_X_B = [{"a"}, {"x"}, {"b"}, set()]
GOLD_AB = {"a", "b"}


def test_recall_counts_gold_ids_in_the_top_k():
    assert metrics.recall_at_k(A_X_B, GOLD_AB, 1) == 0.5
    assert metrics.recall_at_k(A_X_B, GOLD_AB, 2) == 0.5
    assert metrics.recall_at_k(A_X_B, GOLD_AB, 3) == 1.0
    assert metrics.recall_at_k(A_X_B, GOLD_AB, 25) == 1.0  # k past the list's end
    assert metrics.recall_at_k([], GOLD_AB, 5) == 0.0


def test_recall_all_and_any():
    assert metrics.recall_all_at_k(A_X_B, GOLD_AB, 2) == 0.0
    assert metrics.recall_all_at_k(A_X_B, GOLD_AB, 3) == 1.0
    assert metrics.recall_any_at_k(A_X_B, GOLD_AB, 1) == 1.0
    assert metrics.recall_any_at_k([{"x"}, {"y"}], GOLD_AB, 2) == 0.0


def test_a_memory_carrying_two_ids_counts_for_both():
    ranked = [{"a", "b"}, {"x"}]
    assert metrics.recall_at_k(ranked, {"a", "b", "c"}, 1) == pytest.approx(2 / 3)
    assert metrics.recall_all_at_k(ranked, {"a", "b"}, 1) == 1.0


def test_reciprocal_rank_is_one_over_the_first_hit():
    assert metrics.reciprocal_rank(A_X_B, GOLD_AB) == 1.0
    assert metrics.reciprocal_rank([{"x"}, {"y"}, {"a"}], {"a"}) == pytest.approx(1 / 3)
    assert metrics.reciprocal_rank([{"x"}, set()], {"a"}) == 0.0
    assert metrics.first_hit_rank([set(), {"q", "a"}], {"a"}) == 2


def test_ndcg_binary_gains():
    ideal_two = 1.0 + 1.0 / math.log2(3)
    assert metrics.ndcg_at_k(A_X_B, GOLD_AB, 3) == pytest.approx((1.0 + 0.5) / ideal_two)
    assert metrics.ndcg_at_k([{"x"}, {"y"}, {"a"}], {"a"}, 3) == pytest.approx(0.5)
    assert metrics.ndcg_at_k([{"a"}, {"b"}], GOLD_AB, 10) == pytest.approx(1.0)
    assert metrics.ndcg_at_k([{"x"}, {"a"}], {"a"}, 1) == 0.0


def test_ndcg_gives_no_gain_for_a_gold_id_already_seen():
    # the second {"a"} adds nothing: same value as [a, x, b]
    assert metrics.ndcg_at_k([{"a"}, {"a"}, {"b"}], GOLD_AB, 3) == pytest.approx(
        metrics.ndcg_at_k(A_X_B, GOLD_AB, 3)
    )


def test_no_gold_is_an_error_not_a_zero():
    with pytest.raises(ValueError):
        metrics.recall_at_k(A_X_B, set(), 5)
    with pytest.raises(ValueError):
        metrics.ndcg_at_k(A_X_B, set(), 5)


def test_percentile_and_mean():
    assert metrics.percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert metrics.percentile([1.0, 2.0, 3.0, 4.0], 95) == pytest.approx(3.85)
    assert metrics.percentile([], 50) is None
    assert metrics.mean([1.0, 0.0, 0.5]) == pytest.approx(0.5)
    assert metrics.mean([]) is None
