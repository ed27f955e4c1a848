"""Fuzz: no text makes the leakage guard, the reply parser or answer extraction quadratic (issue 43).

Each scanner is called on long adversarial strings (tests/helpers/adversarial.py) and on a ten-times
longer one: the work may grow about tenfold, never a hundredfold. The ratio is of CPU time, loosely
bounded (35x, where linear is ~10x and the quadratic power pattern was ~100x); no absolute time is
asserted. benchmarks/input_scaling.py prints the times.
"""

from __future__ import annotations

import random
import re
from functools import partial

import pytest

from tests.helpers.adversarial import ALLOWED_GROWTH, PIECES, growth, repeated, seeded_mixture
from tfgrpo.core.datasets import Problem
from tfgrpo.experiences.leakage import LeakageChecker
from tfgrpo.experiences.naming import terms
from tfgrpo.experiences.parse import parse_operations
from tfgrpo.rewards.extraction import extract_with_source


def index_problem(text: str) -> LeakageChecker:
    """The guard's index over one training problem of this text (built for every run, --leakage off too), with
    the words it names problems by (ids, quotes, names and keyed numbers, built on the first check)."""
    checker = LeakageChecker({"train": [Problem(id="p", problem=text, answer="12345")]})
    assert checker.index.sequences
    return checker


CHECKER = index_problem("Find the sum of the digits of 2^{10} written in base 7.")


def screen_lesson(text: str) -> object:
    return CHECKER.check([(None, text)])


SCANNERS = {
    "guard-index": index_problem,
    "guard-check": screen_lesson,
    "parse-operations": parse_operations,
    "extract-answer": extract_with_source,
}
CASES = [(scanner, family) for scanner in SCANNERS for family in [*PIECES, "mixture-1", "mixture-2"]]


def _make(family: str):
    if family.startswith("mixture-"):
        return partial(seeded_mixture, int(family.split("-")[1]))
    return partial(repeated, PIECES[family])


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("scanner", "family"), CASES, ids=[f"{s}-{f}" for s, f in CASES])
def test_work_grows_linearly(scanner: str, family: str) -> None:
    ratio = growth(SCANNERS[scanner], _make(family))
    assert ratio <= ALLOWED_GROWTH, f"{scanner} on {family}: 10x the text cost {ratio:.0f}x the work"


def test_power_terms_are_the_ones_the_old_pattern_found() -> None:
    """The linear pattern names a problem by the same powers as the quadratic one it replaced."""
    quadratic = re.compile(r"(\w+)\^\{?(\w+)\}?")
    rng = random.Random(43)
    for _ in range(5_000):
        text = "".join(rng.choice(["a", "4", "_", "^", "{", "}", " ", "x^2", "n^{4}", "é"]) for _ in range(20))
        compact = text.replace(" ", "")
        want = [m.group(1) + "^" + m.group(2) for m in quadratic.finditer(compact)]
        assert [t for t in terms(text) if "^" in t] == [t for t in want if t], text
    assert {"4c^2", "n^4"} <= index_problem("Let (4c^2) + (n^{4}) = 97; find c.")._refs[0].distinctive
