"""The math reward against cases nobody here wrote.

1. Public answer-equivalence suites (tests/data/answer_equivalence/cases.jsonl, provenance beside it): every
   case agrees with the suite or is classified in classification.jsonl (a documented policy of ours, a
   debatable suite case, a non-default suite option, or a known limitation), and the reward agrees with the
   suites at least as often as math-verify called directly with its defaults.
2. The 5,000 MATH test answers (tests/data/math_test_answers.jsonl): rewritings that keep the value score
   1.0; rewritings that change it (rows or tuple elements swapped, +-1, sign flipped, a digit dropped,
   another base) score 0.0. A wrong answer credited fails the build.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.answer_variants import equivalent_rewritings, math_answers, wrong_rewritings
from tfgrpo.rewards import MathReward
from tfgrpo.rewards.verifier import Verifier

CORPUS = Path(__file__).parents[1] / "data" / "answer_equivalence"
CLASSES = {"policy", "suite debatable", "suite option", "reward wrong (known)"}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def reward():
    # A generous budget: these are honest answers, and a loaded CI machine must not turn one into a timeout.
    with Verifier(timeout_s=5.0) as verifier:
        yield MathReward(verifier=verifier)


@pytest.fixture(scope="module")
def corpus(reward):
    cases = _jsonl(CORPUS / "cases.jsonl")
    scores = reward.score([case["completion"] for case in cases], answer=[case["gold"] for case in cases])
    return [(case, score.value is not None and score.value >= 0.5) for case, score in zip(cases, scores, strict=True)]


def test_corpus_comes_from_public_suites_with_provenance():
    cases = _jsonl(CORPUS / "cases.jsonl")
    assert len(cases) >= 390
    assert len({case["id"] for case in cases}) == len(cases)
    assert {case["suite"] for case in cases} >= {"math-verify", "nemo-skills", "mario-eval", "hendrycks-math", "verl"}
    for case in cases:
        assert case["repo"].count("/") == 1 and len(case["commit"]) == 40 and case["path"] and case["test"]


def test_every_disagreement_is_classified_and_every_classification_is_current(corpus):
    classified = {row["id"]: row for row in _jsonl(CORPUS / "classification.jsonl")}
    disagreeing = {case["id"] for case, ours in corpus if ours != case["expected"]}
    unclassified = sorted(disagreeing - set(classified))
    assert not unclassified, f"disagreements with no classification (fix the reward or classify): {unclassified}"
    stale = sorted(set(classified) - disagreeing)
    assert not stale, f"classified cases that now agree (remove them from classification.jsonl): {stale}"
    for row in classified.values():
        assert row["class"] in CLASSES and len(row["why"]) > 20


def test_agrees_at_least_as_often_as_raw_math_verify(corpus):
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)

    def raw(case: dict) -> bool:
        try:
            return bool(verify(parse(case["gold"]), parse(case["completion"])))
        except Exception:  # noqa: BLE001 -- the library under comparison failing is its "not equal"
            return False

    ours = sum(equal == case["expected"] for case, equal in corpus)
    direct = sum(raw(case) == case["expected"] for case, _ in corpus)
    assert ours >= direct, f"math reward agrees on {ours}/{len(corpus)}, raw math-verify on {direct}"


@pytest.fixture(scope="module")
def math_rewritings():
    answers = math_answers()
    assert len(answers) == 5000
    right = [(row["answer"], kind, text) for row in answers for kind, text in equivalent_rewritings(row["answer"])]
    wrong = [(row["answer"], kind, text) for row in answers for kind, text in wrong_rewritings(row["answer"])]
    return right, wrong


def _failures(reward, rows, wanted: float) -> list[str]:
    scores = reward.score([text for _, _, text in rows], answer=[gold for gold, _, _ in rows])
    return [
        f"{kind}: {gold!r} -> {text!r} scored {score.value}"
        for (gold, kind, text), score in zip(rows, scores, strict=True)
        if score.value != wanted
    ]


@pytest.mark.timeout(600)
def test_math_answers_rewritten_without_changing_the_value_score_one(reward, math_rewritings):
    right, _ = math_rewritings
    kinds = Counter(kind for _, kind, _ in right)
    assert len(right) > 20_000 and {"boxed", "answer line", "spacing removed", "dfrac", "left/right"} <= set(kinds)
    assert kinds["thousands ,\\!"] > 100 and kinds["unit in text"] > 3000
    failures = _failures(reward, right, 1.0)
    assert not failures, f"{len(failures)} equivalent rewritings not credited, e.g. {failures[:5]}"


@pytest.mark.timeout(600)
def test_no_perturbed_wrong_math_answer_gets_credit(reward, math_rewritings):
    _, wrong = math_rewritings
    kinds = Counter(kind for _, kind, _ in wrong)
    assert kinds["rows reversed"] >= 50 and kinds["tuple reversed"] >= 50 and kinds["digit dropped"] >= 1500
    assert kinds["plus one"] >= 3000 and kinds["sign flipped"] >= 3000 and kinds["base changed"] >= 20
    failures = _failures(reward, wrong, 0.0)
    assert not failures, f"{len(failures)} wrong answers scored other than 0.0, e.g. {failures[:5]}"
