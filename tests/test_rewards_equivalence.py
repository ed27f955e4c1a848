"""Table-driven answer equivalence and extraction for the math reward, plus hostile inputs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from rewards.extraction import extract_answer
from rewards.math import MathReward, _compare, is_equivalent
from rewards.verifier import Verifier

_spec = importlib.util.spec_from_file_location("reward_cases", Path(__file__).parent / "data" / "reward_cases.py")
cases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cases)


@pytest.fixture(scope="module")
def verifier():
    # A generous deadline for the ordinary table: it must not flake on two loaded cores.
    with Verifier(timeout_s=10.0) as pool:
        yield pool


@pytest.fixture(scope="module")
def strict_verifier():
    with Verifier(timeout_s=1.0) as pool:
        yield pool


@pytest.fixture(scope="module")
def quick_verifier():
    # per-input hostile tests check "bounded and scored 0", so a shorter budget keeps the suite quick
    with Verifier(timeout_s=0.5) as pool:
        yield pool


@pytest.fixture(scope="module")
def table_verdicts(verifier):
    """Every table pair, verified in one parallel batch (what a GRPO step does)."""
    return _compare([(gold, pred) for gold, pred, _, _ in cases.EQUIVALENCE_CASES], verifier)


def test_table_is_large_and_covers_every_family():
    families = {family for *_, family in cases.EQUIVALENCE_CASES}
    assert len(cases.EQUIVALENCE_CASES) >= 150
    assert {"integer", "big-integer", "fraction", "decimal", "radical", "pi", "power", "units", "degrees", "currency",
            "text", "percent", "equation", "tuple", "set", "interval", "matrix", "polynomial"} <= families
    for family in families - {"empty"}:  # every family has positives and negatives
        outcomes = {equal for _, _, equal, fam in cases.EQUIVALENCE_CASES if fam == family}
        assert outcomes == {True, False}, family


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("index", "gold", "pred", "equal", "family"),
    [(i, g, p, e, f) for i, (g, p, e, f) in enumerate(cases.EQUIVALENCE_CASES)],
    ids=[f"{f}-{i}" for i, (_, _, _, f) in enumerate(cases.EQUIVALENCE_CASES)],
)
def test_equivalence_table(table_verdicts, index, gold, pred, equal, family):
    verdict = table_verdicts[index]
    assert not verdict.timed_out, verdict
    assert (verdict.equal is True) is equal, f"{family}: gold={gold[:60]!r} pred={pred[:60]!r} -> {verdict}"


@pytest.mark.timeout(60)
def test_is_equivalent_single_calls_agree_with_the_batch(verifier):
    assert is_equivalent("073", "73", verifier=verifier)
    assert not is_equivalent("5", "500", verifier=verifier)
    assert is_equivalent("(x+1)^2", "x^2+2x+1", verifier=verifier)
    assert not is_equivalent("[1,2)", "[1,2]", verifier=verifier)
    assert not is_equivalent(None, "5", verifier=verifier)
    assert not is_equivalent("5", None, verifier=verifier)
    # a worked solution as gold is reduced to its boxed answer
    assert is_equivalent("so the total is \\boxed{12}", "12", verifier=verifier)


@pytest.mark.parametrize(("completion", "expected"), cases.EXTRACTION_CASES)
def test_extraction_table(completion, expected):
    assert extract_answer(completion) == expected


@pytest.mark.timeout(20)
@pytest.mark.parametrize(("family", "answer"), cases.HOSTILE_ANSWERS, ids=[f for f, _ in cases.HOSTILE_ANSWERS])
def test_hostile_answer_is_scored_zero_within_the_deadline(quick_verifier, family, answer):
    reward = MathReward(verifier=quick_verifier)
    (score,) = reward.score([f"so \\boxed{{{answer}}}"], answer=["1"])
    assert score.value == 0.0, score


@pytest.mark.timeout(60)
def test_hostile_batch_does_not_block_ordinary_answers(quick_verifier):
    hostile = [answer for _, answer in cases.HOSTILE_ANSWERS]
    completions = [f"\\boxed{{{a}}}" for a in hostile] + ["\\boxed{x^2+2x+1}", "\\boxed{\\sqrt{8}}"]
    golds = ["1"] * len(hostile) + ["(x+1)^2", "2\\sqrt{2}"]
    values = MathReward(verifier=quick_verifier)(completions=completions, answer=golds)
    assert values == [0.0] * len(hostile) + [1.0, 1.0]
    # the pool survived the kills: a fresh comparison still works
    assert quick_verifier.check("\\frac{1}{3}", "0.333333").equal is True


@pytest.mark.timeout(30)
@pytest.mark.parametrize(("shape", "completion"), cases.LONG_COMPLETIONS, ids=[s for s, _ in cases.LONG_COMPLETIONS])
def test_200kb_completions_are_scored(quick_verifier, shape, completion):
    assert len(completion) >= 190_000
    (score,) = MathReward(verifier=quick_verifier).score([completion], answer=["7"])
    assert score.value == 0.0


@pytest.mark.timeout(30)
def test_long_completion_with_the_right_last_box_is_correct(strict_verifier):
    completion = "reasoning " * 20_000 + "\\boxed{6} then \\boxed{7}"
    assert MathReward(verifier=strict_verifier)(completions=[completion], answer=["7"]) == [1.0]


def test_huge_integer_answers_stay_exact_without_a_worker():
    # decided in-process (Python's int-string limit never applies: digits are compared as strings)
    big = "7" * 50_000
    assert MathReward(verifier=Verifier(timeout_s=0.001))(completions=[f"\\boxed{{{big}}}", f"\\boxed{{{big}8}}"],
                                                          answer=[big, big]) == [1.0, 0.0]
