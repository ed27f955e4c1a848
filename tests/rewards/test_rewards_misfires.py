"""Each misfire the audit found on the MATH answers (issue 25), as it was reported: the reward must now
give the mathematically right verdict."""

from __future__ import annotations

import pytest

from tfgrpo.core.answers import normalize_answer
from tfgrpo.rewards import MathReward
from tfgrpo.rewards.extraction import extract_answer
from tfgrpo.rewards.math import gold_answer
from tfgrpo.rewards.verifier import Verifier

COLUMN = "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"


@pytest.fixture(scope="module")
def reward():
    with Verifier(timeout_s=5.0) as verifier:
        yield MathReward(verifier=verifier)


def test_a_row_break_is_never_stripped():
    assert normalize_answer(COLUMN) == COLUMN
    assert normalize_answer("\\begin{pmatrix}1\\\\2\\end{pmatrix}") == "\\begin{pmatrix}1\\\\2\\end{pmatrix}"


@pytest.mark.parametrize(
    ("gold", "completion", "value"),
    [
        # column vectors: the same vector without spaces is right, its rows reversed are wrong
        (COLUMN, "\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}", 1.0),
        (COLUMN, "\\boxed{\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}}", 0.0),
        # thousands written with ,\! (41 MATH answers)
        ("11,\\! 111,\\! 111,\\! 100", "\\boxed{11111111100}", 1.0),
        ("10,\\!000", "so the answer is 10000", 1.0),
        # no digit read out of LaTeX structure
        ("9", "so x = \\frac{1}{9}", 0.0),
        ("2", "x = \\sqrt{2}", 0.0),
        ("3", "x^3", 0.0),
        ("\\frac{1}{9}", "so x = \\frac{1}{9}", 1.0),
        # the answer line's first math span, and the value after its last word
        ("5", "The answer is $5$, since $x=3$ gives $8$.", 1.0),
        ("8", "The answer is $5$, since $x=3$ gives $8$.", 0.0),
        ("34", "Final Answer: The largest $n$ is 34.", 1.0),
        # a reference with several boxes is kept whole
        ("\\boxed{1} and \\boxed{-2}", "\\boxed{1, -2}", 1.0),
        ("\\boxed{1} and \\boxed{-2}", "\\boxed{-2}", 0.0),
        # primes, complex i, mixed numbers, degrees inside trig, \mathrm{e}, scientific notation
        ("E'", "\\boxed{E}", 0.0),
        ("E", "\\boxed{E'}", 0.0),
        ("f'(x)", "\\boxed{f'(x)}", 1.0),
        ("-1", "\\boxed{i^2}", 1.0),
        ("1+2i", "\\boxed{i(2-i)}", 1.0),
        ("1+2i", "\\boxed{1-2i}", 0.0),
        ("\\frac{3}{2}", "\\boxed{1 1/2}", 1.0),
        ("1\\frac{1}{2}", "\\boxed{1.5}", 1.0),
        ("\\frac{5}{2}", "\\boxed{1 1/2}", 0.0),
        ("\\sin(90^\\circ - x)", "\\boxed{\\cos x}", 1.0),
        ("\\cos 58^\\circ", "\\boxed{\\cos58^\\circ}", 1.0),
        ("90^\\circ", "\\boxed{90}", 1.0),
        ("1 - \\frac{1}{\\mathrm{e}}", "\\boxed{1 - 1/e}", 1.0),
        ("1 - \\frac{1}{\\mathrm{e}}", "\\boxed{1 + 1/e}", 0.0),
        ("\\frac{1}{432}", "\\boxed{2.3148 \\times 10^{-3}}", 1.0),
        ("2.314814814815 \\times 10^{-3}", "\\boxed{\\frac{1}{432}}", 1.0),
        ("\\frac{1}{432}", "\\boxed{2.4 \\times 10^{-3}}", 0.0),
        # "I hope it is correct." wherever it stands on the line
        ("5", "Final Answer: The final answer is $5$. I hope it is correct. Thanks!", 1.0),
        # found by the property tests: math-verify rounds tiny values to 0, drops bases and misreads \frac\pi4
        ("\\frac{1}{2004!}", "\\boxed{\\frac{1}{2005!}}", 0.0),
        ("1200_7", "\\boxed{1200_8}", 0.0),
        ("1200_7", "\\boxed{1200_{7}}", 1.0),
        ("\\frac \\pi4 + 2 - \\sqrt2", "\\boxed{\\frac \\pi4 + 2 - \\sqrt3}", 0.0),
        ("\\frac \\pi4 + 2 - \\sqrt2", "\\boxed{\\frac{\\pi}{4}+2-\\sqrt{2}}", 1.0),
        # a bare answer is read whole; an answer line after the last box restates the answer
        ("x^2+2x+1", "x^2 + 2*x + 1", 1.0),
        ("0.4", ".4", 1.0),
        ("10455", "... = \\boxed{255} so far.\nFinal Answer: The final answer is $10,455$.", 1.0),
    ],
)
def test_reported_misfires(reward, gold, completion, value):
    (score,) = reward.score([completion], answer=[gold])
    assert score.value == value, score


def test_extraction_never_reads_a_number_inside_latex():
    assert extract_answer("so x = \\frac{1}{9}") == "x = \\frac{1}{9}"
    assert extract_answer("we find that the value is 3^2 here") is None
    assert extract_answer("There are 3 cats and 4 dogs, so 7 animals.") == "7"
    assert extract_answer("The answer is $5$, since $x=3$ gives $8$.") == "5"
    assert extract_answer("Answer: $12$ and $13$") == "12, 13"


def test_a_reference_keeps_all_its_boxes_and_a_worked_solution_its_answer():
    assert gold_answer("\\boxed{1} and \\boxed{-2}") == "1, -2"
    assert gold_answer("so \\boxed{5}; checking, \\boxed{5}") == "5"
    solution = "Adding the two equations gives $2x = 10$, and so we conclude that the value is $x = 5$."
    assert gold_answer(solution) == "x = 5"
    assert gold_answer("x = 5 or x = 7") == "x = 5 or x = 7"  # a short reference is never cut
