"""Metric math of tfgrpo.core.metrics against values computed by hand."""

from __future__ import annotations

import math

import pytest

from tfgrpo.core.answers import vote_key
from tfgrpo.core.metrics import (
    aggregate,
    bootstrap_ci,
    ks_for,
    majority_answer,
    mean_at_k,
    pass_at_k,
    summarize,
)


def _row(problem_id, sample, reward, extracted, gold="9", error=None, prompt_tokens=10, completion_tokens=20):
    return {
        "problem_id": problem_id,
        "sample": sample,
        "reward": reward,
        "extracted": extracted,
        "gold": gold,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "error": error,
    }


class TestPassAtK:
    def test_hand_computed_values(self):
        assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
        assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
        assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2)

    def test_no_correct_sample_gives_zero(self):
        assert pass_at_k(8, 0, 1) == 0.0
        assert pass_at_k(8, 0, 8) == 0.0

    def test_all_correct_gives_one(self):
        assert pass_at_k(8, 8, 1) == 1.0
        assert pass_at_k(8, 8, 4) == 1.0

    def test_fewer_wrong_than_k_gives_one(self):
        # n - c < k: any k samples must include a correct one
        assert pass_at_k(5, 3, 3) == 1.0
        assert pass_at_k(32, 1, 32) == 1.0

    def test_k1_is_the_share_correct(self):
        for n in (1, 3, 32):
            for c in range(n + 1):
                assert pass_at_k(n, c, 1) == pytest.approx(c / n)

    def test_matches_the_binomial_formula_and_stays_finite_for_large_n(self):
        for n, c, k in [(32, 5, 4), (32, 10, 16), (100, 7, 64)]:
            expected = 1 - math.comb(n - c, k) / math.comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(expected, rel=1e-12)
        value = pass_at_k(5000, 3, 1024)  # C(5000, 1024) overflows a float; the product does not
        assert 0.0 < value < 1.0 and math.isfinite(value)

    @pytest.mark.parametrize("n, c, k", [(4, 1, 5), (4, 1, 0), (4, 5, 1), (4, -1, 1)])
    def test_invalid_arguments_raise(self, n, c, k):
        with pytest.raises(ValueError):
            pass_at_k(n, c, k)


def test_ks_are_powers_of_two_plus_k():
    assert ks_for(8) == [1, 2, 4, 8]
    assert ks_for(6) == [1, 2, 4, 6]
    assert ks_for(1) == [1]
    assert ks_for(0) == []


def test_mean_at_k_averages_per_problem_shares():
    assert mean_at_k([(4, 2), (2, 0), (8, 8)]) == pytest.approx((0.5 + 0.0 + 1.0) / 3)


class TestMajority:
    @pytest.mark.parametrize(
        "raw, normal",
        [
            ("$\\boxed{027}$.", "27"),
            ("x = 5", "5"),
            ("1,000", "1000"),
            ("\\text{12}", "12"),
            ("3.0", "3"),
            ("  42 ", "42"),
            ("\\frac{1}{2}", "\\frac{1}{2}"),
            ("0.5", "\\frac{1}{2}"),  # equal rationals share a class (the rule tfgrpo.rewards.majority already had)
        ],
    )
    def test_normalize(self, raw, normal):
        assert vote_key(raw) == normal

    def test_plain_majority(self):
        assert majority_answer(["4", "3", "3"]) == ("3", [1, 2])

    def test_tie_goes_to_the_answer_seen_first(self):
        assert majority_answer(["3", "4", "4", "3"])[0] == "3"
        assert majority_answer(["4", "3", "3", "4"])[0] == "4"

    def test_spellings_vote_together(self):
        assert majority_answer(["5", "\\boxed{7}", "7.0", "5.5"])[0] == "7"

    def test_unparsable_answers_never_win_over_a_real_answer(self):
        assert majority_answer([None, None, None, "5"]) == ("5", [3])

    def test_no_answer_at_all(self):
        assert majority_answer([None, None]) == (None, [])


def _two_problem_run():
    # p1: rewards 1,0,1,0 (2/4), answers tie 7 vs 3 → 7 (first seen, correct)
    # p2: rewards 0,None,0,1 + one failed call; answers 1,2,1,9 → 1 wins (wrong)
    return [
        _row("p1", 0, 1.0, "7", gold="7"),
        _row("p1", 1, 0.0, "3", gold="7"),
        _row("p1", 2, 1.0, "7", gold="7"),
        _row("p1", 3, 0.0, "3", gold="7"),
        _row("p2", 3, 1.0, "9"),  # out of order on purpose: sample index decides ties, not file order
        _row("p2", 0, 0.0, "1"),
        _row("p2", 1, None, "2"),
        _row("p2", 2, 0.0, "1"),
        _row("p2", 4, None, None, error="RequestFailedError: 503", prompt_tokens=0, completion_tokens=0),
    ]


def test_summarize_hand_computed():
    metrics = summarize(_two_problem_run(), n_bootstrap=2000)
    assert metrics["mean_at_k"] == pytest.approx((0.5 + 0.25) / 2)
    assert metrics["k"] == 4
    assert metrics["pass_at_k"]["1"] == pytest.approx(0.375)
    assert metrics["pass_at_k"]["2"] == pytest.approx((5 / 6 + 0.5) / 2)
    assert metrics["pass_at_k"]["4"] == pytest.approx(1.0)
    assert set(metrics["pass_at_k"]) == {"1", "2", "4"}
    assert metrics["maj_at_k"] == pytest.approx(0.5)
    assert metrics["num_problems"] == 2
    assert metrics["num_samples"] == 8
    assert metrics["failed_samples"] == 1
    assert metrics["unscored_samples"] == 1
    assert metrics["tokens"]["prompt"] == 80 and metrics["tokens"]["completion"] == 160
    low, high = metrics["ci95"]
    assert 0.25 <= low <= metrics["mean_at_k"] <= high <= 0.5
    by_id = {p["id"]: p for p in metrics["per_problem"]}
    assert by_id["p1"] == {**by_id["p1"], "correct": 2, "n": 4, "mean": 0.5, "maj_answer": "7", "maj_correct": True}
    assert by_id["p2"] == {**by_id["p2"], "correct": 1, "n": 4, "maj_answer": "1", "maj_correct": False, "failed": 1}
    assert [p["id"] for p in metrics["per_problem"]] == ["p1", "p2"]


def test_summarize_is_seeded():
    assert summarize(_two_problem_run(), seed=3)["ci95"] == summarize(_two_problem_run(), seed=3)["ci95"]


def test_answer_checker_decides_majority_correctness():
    rows = [_row("p", 0, 0.0, "1/2", gold="0.5"), _row("p", 1, 0.0, "1/2", gold="0.5")]
    assert summarize(rows)["maj_at_k"] == 0.0
    assert summarize(rows, answer_checker=lambda gold, pred: {gold, pred} == {"0.5", "1/2"})["maj_at_k"] == 1.0


def test_correct_threshold():
    rows = [_row("p", 0, 0.4, "1"), _row("p", 1, 1.1, "9")]
    assert summarize(rows)["mean_at_k"] == 0.5
    assert summarize(rows, correct_threshold=0.3)["mean_at_k"] == 1.0


def test_pass_at_k_uses_the_smallest_sample_count_when_failures_differ():
    rows = [_row("a", i, 1.0, "9") for i in range(4)] + [_row("b", i, 0.0, "1") for i in range(2)]
    metrics = summarize(rows)
    assert set(metrics["pass_at_k"]) == {"1", "2"} and metrics["k"] == 4
    assert metrics["min_samples_per_problem"] == 2


def test_problem_with_only_failed_samples_is_listed_not_scored():
    rows = [_row("a", 0, 1.0, "9"), _row("b", 0, None, None, error="boom")]
    metrics = summarize(rows)
    assert metrics["num_problems"] == 1 and metrics["problems_without_samples"] == ["b"]
    assert metrics["mean_at_k"] == 1.0


def test_all_failed_raises():
    with pytest.raises(ValueError, match="no scored samples"):
        summarize([_row("a", 0, None, None, error="boom")])


def test_bootstrap_ci_properties():
    assert bootstrap_ci([0.5]) == [0.5, 0.5]
    assert bootstrap_ci([1.0, 1.0, 1.0]) == [1.0, 1.0]
    values = [0.0] * 10 + [1.0] * 10
    low, high = bootstrap_ci(values, seed=1)
    assert low < 0.5 < high and 0.2 < low and high < 0.8
    assert bootstrap_ci(values, seed=1) == [low, high]


def test_aggregate_on_a_subset():
    per_problem = [
        {"id": "a", "n": 4, "correct": 4, "maj_correct": True},
        {"id": "b", "n": 4, "correct": 0, "maj_correct": False},
    ]
    summary = aggregate(per_problem[:1])
    assert summary["mean_at_k"] == 1.0 and summary["maj_at_k"] == 1.0 and summary["num_problems"] == 1
    assert aggregate(per_problem)["mean_at_k"] == 0.5
