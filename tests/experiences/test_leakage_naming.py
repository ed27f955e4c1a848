"""A lesson that names a problem (a quote of it, its distinctive token, its id) and states its gold is a leak in
every mode, whatever the size of the problem set; copies are compared with the problem's math removed too (issue 47)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from tests.helpers.leakage_sets import SETS, measure
from tfgrpo.core.datasets import load_dataset_rows
from tfgrpo.experiences.leakage import LeakageChecker

pytestmark = pytest.mark.timeout(120)


def templated() -> list[SimpleNamespace]:
    """20 problems of one template: only the key tells them apart (the gold of key 5 is 196)."""
    return [
        SimpleNamespace(
            id=f"SIM-{k}", problem=f"SIM-{k}: Find the secret number of key {k}.", answer=str((k + 9) ** 2)
        )
        for k in range(1, 21)
    ]


def leaks(checker: LeakageChecker, text: str, sources=None) -> list:
    return [f for f in checker.check([("L", text)], sources) if f.kind == "answer" and f.is_leak]


class TestTemplatedSet:
    checker = LeakageChecker({"sim": templated()})

    @pytest.mark.parametrize("text", ["For key 5 the secret number is 196.", "For key 5 the secret number is 392/2."])
    def test_the_distinctive_token_and_the_gold_are_a_leak(self, text):
        found = leaks(self.checker, text)
        assert [(f.problem_id, f.tied) for f in found] == [("SIM-5", "distinctive token")]
        assert "key 5" in found[0].tie_evidence

    def test_the_id_and_the_gold_are_a_leak(self):
        found = leaks(self.checker, "Remember: SIM-5 comes out at 196.")
        assert [(f.problem_id, f.tied) for f in found] == [("SIM-5", "id")]

    def test_a_quote_and_the_gold_are_a_leak(self):
        found = leaks(self.checker, "In the problem 'the secret number of key 5', the final answer is 196.")
        assert [(f.problem_id, f.tied) for f in found] == [("SIM-5", "quote")]

    def test_another_keys_gold_or_no_key_is_no_leak(self):
        assert leaks(self.checker, "For key 6 the secret number is 196.") == []  # 196 is key 5's gold
        assert leaks(self.checker, "Squares of two-digit numbers, like 196, are worth memorising.") == []
        assert leaks(self.checker, "Check 5 keys before answering.") == []


def strip_math(text: str) -> str:
    return re.sub(r"\$\$?[^$]+?\$\$?|\\\(.+?\\\)|\\\[.+?\\\]", " ", text, flags=re.S)


@pytest.fixture(scope="module")
def dapo():
    return load_dataset_rows("dapo100")


@pytest.fixture(scope="module")
def dapo_checker(dapo):
    return LeakageChecker({"dapo100": dapo})


class TestQuotedOpenings:
    def test_the_smallest_prime_quote_with_its_answer(self, dapo_checker):
        text = (
            "In the problem that begins 'Determine the smallest prime such that ... is divisible by ..., but not', "
            "the final answer is 509."
        )
        found = leaks(dapo_checker, text)
        assert [(f.problem_id, f.tied) for f in found] == [("dapo17k-0009", "quote")]

    def test_eleven_words_of_every_opening_with_math_stripped(self, dapo):
        """Every dapo100 problem with a gold of 10 or more: its first eleven words, math stripped, and its gold.
        Caught in check mode (no provenance) as a leak of that problem, not only as a copy."""
        checker = LeakageChecker({"dapo100": dapo})
        cases = []
        for problem in dapo:
            words = re.findall(r"[\w'-]+", strip_math(problem.problem))
            if len(words) >= 11 and re.fullmatch(r"-?\d+", problem.answer) and abs(int(problem.answer)) >= 10:
                quote = " ".join(words[:11])
                cases.append(
                    (problem.id, f"In the problem that begins '{quote}', the final answer is {problem.answer}.")
                )
        assert len(cases) >= 40
        findings = checker.check(cases)
        caught = {
            f.experience_id for f in findings if f.kind == "answer" and f.is_leak and f.problem_id == f.experience_id
        }
        assert len(caught) / len(cases) >= 0.95, sorted(set(dict(cases)) - caught)


def test_a_latex_problem_copied_without_its_math_is_a_copy():
    problem = SimpleNamespace(
        id="ineq",
        answer="9",
        problem="Let $a$, $b$ and $c$ be positive real numbers such that $a+b+c=1$. Find the minimum value of "
        "$\\frac{1}{a}+\\frac{1}{b}+\\frac{1}{c}$ over all such triples of positive real numbers.",
    )
    checker = LeakageChecker({"train": [problem]})
    lesson = "Let and be positive real numbers such that. Find the minimum value of over all such triples."
    found = checker.check([("L", lesson)])
    assert [(f.kind, f.problem_id) for f in found] == [("copy", "ineq")]
    assert checker.check([("L", "Positive real numbers: find the minimum value with AM-HM.")]) == []


def test_library_check_says_which_evidence_tied_each_finding(tmp_path):
    import json

    from typer.testing import CliRunner

    from tfgrpo.cli.app import app
    from tfgrpo.experiences import Library

    data = tmp_path / "sim.jsonl"
    data.write_text("".join(json.dumps(vars(p)) + "\n" for p in templated()))
    library = tmp_path / "lib.json"
    lessons = [
        "For key 5 the secret number is 392/2.",
        "Remember: SIM-7 comes out at 256.",
        "In the problem 'the secret number of key 3', the final answer is 144.",
        "Squares of two-digit numbers, like 225, are worth memorising.",
    ]
    Library.from_texts(lessons).save(library)
    runner = CliRunner()
    found = runner.invoke(app, ["library", "check", str(library), "--against", str(data), "--json"])
    assert found.exit_code == 1, found.output
    rows = [json.loads(line) for line in found.stdout.splitlines()]
    assert [(r["experience_id"], r["problem_id"], r["tied"], r["tie_evidence"]) for r in rows] == [
        ("G0", "SIM-5", "distinctive token", "'key 5'"),
        ("G1", "SIM-7", "id", "SIM-7"),
        ("G2", "SIM-3", "quote", "the secret number of key 3"),
        ("G3", "SIM-6", None, None),
    ]
    assert rows[0]["evidence"] == "392/2 = gold answer 196 (equivalent expression)"
    table = runner.invoke(app, ["library", "check", str(library), "--against", str(data)], env={"COLUMNS": "400"})
    assert "distinctive token: 'key 5'" in table.stdout and "coincidence (not a leak)" in table.stdout


# (leaks caught, general rules rejected) per set and mode, as docs/trust.md reports them; set A's general rules
# rejected may not exceed those of the guard before issue 47 (2 of 149 in both modes): its precision may not get worse.
DOCUMENTED = {
    "A": {"library check": (109, 0), "learn": (113, 0)},
    "B": {"library check": (116, 1), "learn": (120, 1)},
    "C": {"library check": (54, 0), "learn": (54, 0)},
    "D": {"library check": (82, 1), "learn": (91, 1)},  # held out; its first measurement was 76 and 84
}


@pytest.mark.parametrize("labelled", SETS, ids=[s.name[0] for s in SETS])
def test_labelled_sets_as_documented(labelled):
    _, _, results = measure(labelled)
    for row in results[1:]:
        caught, false = row["leaks caught"][0], row["general rejected"][0]
        least_caught, most_false = DOCUMENTED[labelled.name[0]][row["mode"]]
        assert caught >= least_caught and false <= most_false, (row["mode"], caught, false)
