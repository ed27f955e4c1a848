"""The second round of issue 47: evidence that ties a gold to its problem where a name, a template's key, a
plain sum or a rare number is all a lesson gives, and rare words alone tie only what they should."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.helpers.adversarial import ALLOWED_GROWTH, growth, repeated
from tfgrpo.experiences.leakage import LeakageChecker
from tfgrpo.experiences.values import candidates

pytestmark = pytest.mark.timeout(120)


def problem(pid: str, text: str, answer: str) -> SimpleNamespace:
    return SimpleNamespace(id=pid, problem=text, answer=answer)


def ties(checker: LeakageChecker, text: str) -> list[tuple[str, str | None]]:
    return [(f.problem_id, f.tied) for f in checker.check([("L", text)]) if f.kind == "answer"]


POLY = [
    problem(f"poly-{k}", f"Let $f(n) = n^2 + 5n + 3$. Compute $f({k})$.", str(k * k + 5 * k + 3))
    for k in range(15, 31)
]
STAMPS = [
    problem(
        "stamps-bianca",
        "Bianca has 22 stamps and buys 50 more at the fair. How many stamps does Bianca have now?",
        "72",
    ),
    problem(
        "stamps-omar", "Omar has 31 stamps and buys 12 more at the fair. How many stamps does Omar have now?", "43"
    ),
]
WORDS = [
    problem("easy-05", "Tom has 3 apples and buys 4 more. How many apples does Tom have now?", "7"),
    problem("easy-06", "A box holds 10 pencils. Sara takes out 3 pencils. How many pencils are left in the box?", "7"),
    problem("easy-07", "What is 4 times 4?", "16"),
    problem("easy-08", "What is 9 times 3?", "27"),
]


class TestTemplateKey:
    checker = LeakageChecker({"templated": POLY + STAMPS})

    @pytest.mark.parametrize(
        ("text", "pid"),
        [
            ("Plugging in 15 gives 303.", "poly-15"),
            ("When n is 30, the value is 2106/2.", "poly-30"),
            ("When n is 20, the value is 493 + 10.", "poly-20"),
        ],
    )
    def test_the_key_beside_a_one_letter_word_or_none_and_the_gold(self, text, pid):
        found = self.checker.check([("L", text)])
        assert [(f.problem_id, f.tied) for f in found] == [(pid, "distinctive token")]
        assert "the key only it has of the 16 problems of its template" in (found[0].tie_evidence or "")

    def test_another_keys_gold_is_no_leak(self):
        assert [tie for _, tie in ties(self.checker, "Plugging in 16 gives 303.")] == [None]

    def test_a_plain_sum_is_the_number_it_comes_to(self):
        assert ties(self.checker, "Bianca: 62 + 10 stamps in total.") == [("stamps-bianca", "distinctive token")]


class TestSmallGoldsByName:
    checker = LeakageChecker({"easy": WORDS})

    def test_a_name_and_the_gold_beside_the_problems_noun(self):
        found = self.checker.check([("L", "Tom ends up with 7 apples after buying 4 more.")])
        assert [(f.problem_id, f.tied) for f in found] == [("easy-05", "distinctive token")]
        assert found[0].tie_evidence == "the name 'tom', and '7 apples'"

    def test_a_name_alone_or_the_noun_alone_ties_no_small_gold(self):
        assert ties(self.checker, "Tom should count 7 times before answering.") == []
        assert ties(self.checker, "Count the apples: 7 apples is a fine example.") == []

    def test_a_family_that_varies_two_numbers_has_no_key(self):
        """'What is 4 times 4?' and 'What is 9 times 3?' are drill: their numbers name nothing."""
        assert ties(self.checker, "Perfect squares below 100 are 1, 4, 9, 16, 25, 36, 49, 64 and 81.") == [
            ("easy-07", None)
        ]


class TestRareNumbersAndWords:
    checker = LeakageChecker(
        {
            "train": [
                problem(
                    "p-2010",
                    "Find the only positive integer $n$ with $n(S(n) - 1) = 2010$, where $S(n)$ is its digit sum.",
                    "402",
                ),
                problem(
                    "p-tt",
                    "In a table tennis tournament every participant played every other participant exactly once; how many games were played?",
                    "36",
                ),
                problem(
                    "p-bases",
                    "Find the sum of all integer bases $b>9$ for which $17_{b}$ is a divisor of $97_{b}$.",
                    "70",
                ),
                problem("p-100", "How many integers up to 100 are divisible by 2, 3 or 5?", "74"),
                *[
                    problem(f"filler-{k}", f"Compute {k} plus a multiple of seven, in a general setting.", "1")
                    for k in range(40)
                ],
            ]
        }
    )

    def test_a_number_only_one_problem_has_names_it(self):
        assert ties(self.checker, "The only solution of n(S(n) − 1) = 2010 is n = 402.") == [
            ("p-2010", "distinctive token")
        ]

    def test_a_braced_subscript_reads_as_the_plain_one(self):
        assert ties(self.checker, "The integer bases b > 9 in which 17_b divides 97_b sum to 70.") == [
            ("p-bases", "names the problem")
        ]

    def test_a_round_number_names_nothing(self):
        assert ties(self.checker, "Up to 100 there are 74 primes and composites of a kind.") == [("p-100", None)]

    def test_topic_words_with_a_rules_own_numbers_are_a_coincidence(self):
        rule = "In a tournament of 9 players there are 36 games; 10 players play 45."
        assert ties(self.checker, rule) == [("p-tt", None)]
        leak = "In the tournament the games played come to 36."
        assert ties(self.checker, leak) == [("p-tt", "names the problem")]


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("Bianca: 62 + 10 stamps.", ["62", "10", "72"]),
        ("3 * 7 - 1 = 20", ["3", "7", "1", "20", "20"]),
        ("for x^3 + 6 that is -6", ["3", "6", "-6"]),  # a formula's term, not a sum
        ("a 10-5 split", ["10", "5"]),  # a range, not a difference
        ("1 + 2 + 3 + 4 + 5", ["1", "2", "3", "4", "5"]),  # a list, not a worked answer
    ],
)
def test_plain_sums_and_products(text, values):
    assert candidates(text)[0] == values


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("The acute angle is forty-five degrees.", ["45"]),
        ("The coefficient is minus five hundred eighty-eight.", ["-588"]),
        ("Check one case, then two cards.", []),  # lone small numbers stay words
        (
            "The area is 2^3 and the count 2^5 - 1; the code is 3 \\cdot 2^7.",
            ["2", "3", "2", "5", "1", "3", "2", "7", "8", "31", "384"],
        ),
    ],
)
def test_numbers_in_words_and_plain_powers(text, values):
    assert candidates(text)[0] == values


@pytest.mark.timeout(120)
@pytest.mark.parametrize("piece", ["forty one hundred ", "minus ninety-nine ", "2^3 \\cdot ", "7^99999 "])
def test_spelled_numbers_and_powers_are_read_in_linear_time(piece):
    ratio = growth(candidates, lambda size: repeated(piece, size))
    assert ratio <= ALLOWED_GROWTH, f"10x the text cost {ratio:.0f}x the work"
