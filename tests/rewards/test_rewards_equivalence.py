"""Table-driven answer equivalence and extraction for the math reward, plus hostile inputs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tfgrpo.rewards.extraction import extract_answer
from tfgrpo.rewards.math import MathReward, _compare, is_equivalent
from tfgrpo.rewards.verifier import Verifier

_spec = importlib.util.spec_from_file_location("reward_cases", Path(__file__).parents[1] / "data" / "reward_cases.py")
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


# Per hostile input, against `quick_verifier` (0.5 s CPU budget, 1.5 s wall backstop; measured 0.7-0.9 s
# per timed-out input on a busy 2-core machine). A deadline regressed to math-verify's own 5 s costs
# 5.1-6 s per such input, so it fails this bound; 2.5 s above the backstop absorbs a loaded CI machine.
# func_only: the pool's startup (a cold zygote imports sympy) is in the fixture, outside the bound.
HOSTILE_BOUND_S = 4.0


@pytest.fixture(scope="module")
def quick_verifier():
    # per-input hostile tests check "bounded and scored 0", so a shorter budget keeps the suite quick
    with Verifier(timeout_s=0.5) as pool:
        assert pool.check("1", "1").equal is True  # start the zygote and a worker here, not in a bounded test
        yield pool


@pytest.fixture(scope="module")
def table_verdicts(verifier):
    """Every table pair, verified in one parallel batch (what a GRPO step does)."""
    return _compare([(gold, pred) for gold, pred, _, _ in cases.EQUIVALENCE_CASES], verifier)


def test_table_is_large_and_covers_every_family():
    families = {family for *_, family in cases.EQUIVALENCE_CASES}
    assert len(cases.EQUIVALENCE_CASES) >= 150
    assert {
        "integer",
        "big-integer",
        "fraction",
        "decimal",
        "radical",
        "pi",
        "power",
        "units",
        "degrees",
        "currency",
        "text",
        "percent",
        "equation",
        "tuple",
        "set",
        "interval",
        "matrix",
        "polynomial",
    } <= families
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


@pytest.mark.timeout(HOSTILE_BOUND_S, func_only=True)
@pytest.mark.parametrize(
    ("index", "answer"),
    list(enumerate(a for _, a in cases.HOSTILE_ANSWERS)),
    ids=[f"{f}-{i}" for i, (f, _) in enumerate(cases.HOSTILE_ANSWERS)],
)
def test_hostile_answer_is_scored_zero_within_the_deadline_without_blocking_others(quick_verifier, index, answer):
    # One hostile answer per test (so the bound is per input), batched with an ordinary one: the batch
    # is still scored, and the pool survives the kill. Ordinary pairs differ per test (no cache hits)
    # and cost milliseconds, far inside the 0.5 s budget even on a crowded machine.
    reward = MathReward(verifier=quick_verifier)
    completions = [f"so \\boxed{{{answer}}}", f"\\boxed{{{(2 * index + 3) / 2}}}"]
    scores = reward.score(completions, answer=["1", f"\\frac{{{2 * index + 3}}}{{2}}"])
    assert [score.value for score in scores] == [0.0, 1.0], scores
    assert quick_verifier.check(f"\\frac{{1}}{{{index + 3}}}", f"{1 / (index + 3):.6f}").equal is True


@pytest.mark.timeout(HOSTILE_BOUND_S, func_only=True)
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
    assert MathReward(verifier=Verifier(timeout_s=0.001))(
        completions=[f"\\boxed{{{big}}}", f"\\boxed{{{big}8}}"], answer=[big, big]
    ) == [1.0, 0.0]
