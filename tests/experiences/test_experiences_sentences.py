"""A lesson is a sentence: what SmolLM2 and a token limit produced in real runs is a failed reply, not a lesson."""

from __future__ import annotations

import pytest

from tests.experiences.test_trust_leakage import run_learn
from tests.helpers.learn_world import World
from tfgrpo.experiences import AddOp, Library, apply_operations
from tfgrpo.experiences.model import sentence_problem


@pytest.mark.parametrize(
    "text",
    [
        "1.1.2.0.1.1.1.1.1",  # the quickstart's "lessons" before this rule
        "The correct process is to multiply the",  # cut by the token limit (a real vLLM run)
        "<text of the new lesson>",  # the prompt's placeholder, proposed by SmolLM2
        "Use <the lesson text here>.",
        "Carry.",
        "12 + 13 = 25, 14 + 15 = 29.",
    ],
)
def test_not_a_lesson(text):
    assert sentence_problem(text) is not None


@pytest.mark.parametrize(
    "text",
    [
        "Check carries.",
        "When a congruence is taken modulo 1000, split it into mod 8 and mod 125.",
        "Remember that $\\binom{n}{k} = \\binom{n}{n-k}$.",
        "Is the answer an integer? Check the problem's constraints!",
    ],
)
def test_a_lesson(text):
    assert sentence_problem(text) is None


def test_apply_rejects_non_sentences_only_when_asked():
    ops = [AddOp(experience="1.1.2.0.1"), AddOp(experience="Check the carry when adding.")]
    strict = apply_operations(Library(), ops, require_sentence=True)
    assert [e.text for e in strict.library] == ["Check the carry when adding."]
    assert strict.rejected[0].reason == "not a sentence: fewer than 2 words"
    assert len(apply_operations(Library(), ops).library) == 2  # a library file's own apply keeps its old rules


def test_learn_rejects_lessons_that_are_not_sentences(tmp_path):
    result = run_learn(tmp_path, World(lesson="{a}.{b}.{sum}.1.1.1"), [(17, 25), (30, 41)], leakage="off")
    assert len(result.library) == 0 and result.metrics["totals"]["ops_rejected"] == 2
    kept = run_learn(tmp_path / "ok", World(), [(17, 25), (30, 41)])  # "When adding A and B, check the carry."
    assert len(kept.library) == 2
