"""Writes the third labelled set of the leakage guard: leakage_lessons_c.jsonl (+ leakage_templated_c.jsonl).

    python -m tests.data.leakage_lessons_c

Written after the guard's naming rules were revised on what set B showed (docs/trust.md), and never run through
the guard before its numbers were recorded: the held-out set of that revision. References: aime25, the
quickstart sets easy and easy_train, and one templated family written here (locker combinations). Lessons:
general rules written for this set; leaks written by hand (aime25 problems and the easy word problems named by
their objects or people); leaks made by templates other than set B's from problems drawn with
`random.Random(4747)` (quotes with and without math, ids, the family's keys with exact and equivalent golds).
"""

from __future__ import annotations

import json
import random
import re
from fractions import Fraction
from pathlib import Path

from tests.data.leakage_lessons_b import load, numbers  # set B's readers: one reading for both sets

HERE = Path(__file__).resolve().parent
MATH = re.compile(r"\$\$?[^$]+?\$\$?|\\\(.+?\\\)|\\\[.+?\\\]", re.S)


def lockers() -> list[dict]:
    return [
        {
            "id": f"LCK-{k}",
            "problem": f"LCK-{k}: What is the combination that opens locker {k}?",
            "answer": str(1000 + 13 * k),
        }
        for k in range(1, 16)
    ]


GENERAL = [
    "When a base-b numeral like 17_b must divide another, convert both to base 10 first: 17_b = b + 7.",
    "An 8-digit number using each digit 1 to 8 once: there are 8! = 40320 of them; divisibility by 22 needs both 2 and 11.",
    "A tangential quadrilateral has equal sums of opposite sides; with an inscribed circle of radius r the area is r times the semiperimeter.",
    "Rotating a point by 60 degrees multiplies it by cos 60 + i sin 60; write the rotated curve with that substitution.",
    "A 3 × 9 grid filled Sudoku-style splits into three 3 × 3 blocks; count block by block.",
    "Periodic piecewise functions: reduce x modulo the period, here 4, before solving.",
    "Greedy coin change with 1, 10 and 25 cents fails for 30 cents: three dimes beat a quarter and five pennies.",
    "sin(7π sin 5x) = 0 when sin 5x = k/7 for integers k from -7 to 7.",
    "A regular 24-gon has 24 vertices; perfect matchings by equal chords depend on the step length.",
    "For recursive sequences with x_{k+1} built from x_k and 1/x_k, look for a substitution that makes the recursion linear.",
    "A right triangle with hypotenuse 38 has legs whose squares sum to 1444.",
    "The sum of divisors function is multiplicative, and σ(16) = 31.",
    "Counting ordered triples (a, b, c) with a > b > c >= 1 and a fixed sum: list by the smallest part.",
    "The number of ordered pairs of integers in [-100, 100] is 201^2 = 40401; factor a quadratic form before counting.",
    "Six pairs from twelve letters: 11 · 9 · 7 · 5 · 3 · 1 = 10395 pairings.",
    "For |z - a| = r and the perpendicular bisector of two points, one common solution means the line is tangent to the circle.",
    "A plane x + y + z = c meets the first octant in a triangle; inequalities between coordinates cut it into regions.",
    "Each new chord in a disk adds 1 region plus one region for every chord it crosses inside the disk.",
    "Minimising AX + BX + CX: at the Fermat point the three segments meet at 120 degree angles.",
    "Cubes modulo 9 depend only on the residue modulo 3: they are 0, 1 or 8.",
    "Collinear points with given distances: put them on a number line with the first at 0.",
    "A 2 × 2 grid has 12 unit segments; colouring each red or blue gives 4096 colourings before constraints.",
    "Telescoping products of logarithms: log_k(5^{m}) = m log_k 5, then change of base and cancel.",
    "Midpoints of a triangle's sides form the medial triangle with the same angles as the original.",
    "Internally tangent circles with radii 6 and 15 have centers 9 apart; externally tangent ones are 21 apart.",
    "Choosing 8 of 16 chairs with no three chosen in a row: count binary strings avoiding 111.",
    "An 11-gon has 11 sides and 44 diagonals.",
    "For a rational function, extrema come from the zeros of the derivative's numerator.",
    "Addition word problems: 'gets more' and 'buys more' mean add; 'flew away' and 'takes out' mean subtract.",
    "Equal sharing is division: items shared between friends are divided by the number of friends.",
    "Legs of animals: multiply animals by legs per animal; 3 spiders have 24 legs.",
    "When a bus gains passengers, add them to the number already on board.",
    "Repeated daily actions multiply: 4 drawings a day for 6 days is 24 drawings.",
    "Check subtraction by adding back: 52 - 17 = 35 because 35 + 17 = 52.",
    "Multiplication is repeated addition: 6 times 7 is 6 added seven times, 42.",
    "Division undoes multiplication: 54 divided by 6 is 9 since 6 · 9 = 54.",
    "A combination lock's code is a number: report it without units or words.",
    "When a rule gives each locker's combination from its number, apply the rule to that number, not to its place in a list.",
    "Boxes with equal contents: total = boxes × items per box; 6 boxes of 8 is 48.",
    "2025 = 45^2 is a perfect square and has 15 divisors.",
    "Eight-digit numbers divisible by 11 have alternating digit sums divisible by 11.",
    "The inradius of a tangential trapezoid is half its height; a radius of 3 means height 6.",
    "16 is 2^4 and 81 is 3^4; fourth powers turn up in grid and digit counts alike.",
    "70 = C(8, 4) is the number of ways to choose 4 of 8 items.",
    "Powers of two: 2^9 = 512 and 2^10 = 1024; check binary sizes against them.",
    "588 = 2^2 · 3 · 7^2; factor an area before taking square roots.",
    "The angles of a regular pentagon are 108 degrees each, summing to 540.",
    "Perfect squares below 100 are 1, 4, 9, 16, 25, 36, 49, 64 and 81.",
    "Numbers of the form 1000 + 13k leave remainder k·13 mod 1000; keep the thousands separate when adding.",
    "A three-digit answer such as 104, 240 or 336 is the norm in AIME; pad nothing and report the integer.",
]

WRITTEN_LEAKS = [
    ("aime25:aime2025-I-01", "The integer bases b > 9 in which 17_b divides 97_b sum to 70."),
    (
        "aime25:aime2025-I-03",
        "For the nine baseball players choosing chocolate, vanilla or strawberry cones, N mod 1000 is 16.",
    ),
    (
        "aime25:aime2025-I-05",
        "Of the 40320 eight-digit permutations of 1 to 8, the difference between N and 2025 is 279.",
    ),
    (
        "aime25:aime2025-I-06",
        "The isosceles trapezoid with an inscribed circle of radius 3 and area 72 has r^2 + s^2 = 504.",
    ),
    (
        "aime25:aime2025-I-09",
        "After rotating y = x^2 - 4 by 60 degrees, the fourth-quadrant intersection gives a + b + c = 62.",
    ),
    ("aime25:aime2025-I-13", "Alex's disk cut by 27 line segments has 204 regions in expectation."),
    ("aime25:aime2025-II-02", "The positive n with n + 2 dividing 3(n + 3)(n^2 + 9) sum to 49."),
    (
        "aime25:aime2025-II-06",
        "With omega_1 of radius 6 inside omega_2 of radius 15, the rectangle's area gives m + n = 293.",
    ),
    ("aime25:aime2025-II-08", "Silas's greedy coin algorithm succeeds for 610 values of N between 1 and 1000."),
    ("aime25:aime2025-II-10", "Sixteen chairs, eight people, nobody next to two others: N mod 1000 is 907."),
    (
        "aime25:aime2025-II-14",
        "In the right triangle with BC = 38 and AK = AL = BK = CL = KL = 14, the area's n is 104.",
    ),
    ("aime25:aime2025-II-07", "For the divisors of 2025, the lcm-2025 subset probability is m/n with m + n = 237."),
    ("easy_train:easy-train-05", "Mia ends up with 11 stickers."),
    ("easy_train:easy-train-06", "Leo leaves 5 marbles in the bag."),
    ("easy_train:easy-train-13", "The train with 14 people gets 5 more and then carries 19."),
    ("easy_train:easy-train-19", "Emma's shelf ends with 15 books."),
    ("easy_train:easy-train-20", "Max keeps 9 balloons after 4 fly away."),
    ("easy_train:easy-train-15", "Lily's pictures over the five days total 15."),
    ("easy:easy-05", "Tom ends up with 7 apples after buying 4 more."),
    ("easy_train:easy-train-11", "Each of Sam's 2 friends gets 5 cookies."),
    ("easy_train:easy-train-22", "Four boxes of five toys: the total asked for is 20 toys."),
    ("easy:easy-06", "Sara leaves 7 pencils in the box."),
]


def generated(rng: random.Random, aime: list[dict], family: list[dict]) -> list[dict]:
    leaks: list[dict] = []

    def add(problem: str, kind: str, text: str) -> None:
        leaks.append({"problem": problem, "kind": kind, "text": text, "source": f"generated:{kind}"})

    pool = list(aime)
    rng.shuffle(pool)
    for row in pool[:8]:
        chunks = row["problem"].split()
        cut = rng.randint(7, 10)
        while cut < len(chunks) and " ".join(chunks[:cut]).count("$") % 2:
            cut += 1
        add(f"aime25:{row['id']}", "quote_with_math", f'Q: "{" ".join(chunks[:cut])}" A: {row["answer"]}')
    for row in pool[8:16]:
        quote = " ".join(re.findall(r"[\w'-]+", MATH.sub(" ", row["problem"]))[: rng.randint(7, 11)])
        add(f"aime25:{row['id']}", "quote_stripped", f"Worked before: {quote} (answer {row['answer']}).")
    for row in pool[16:22]:
        add(
            f"aime25:{row['id']}",
            "id",
            rng.choice(["[{i}] {g}", "Answer key: {i} is {g}."]).format(i=row["id"], g=row["answer"]),
        )
    for row in rng.sample(family, 10):
        key, gold = row["id"].split("-")[1], int(row["answer"])
        expression = rng.choice([str(gold), f"{2 * gold}/2", f"$\\frac{{{2 * gold}}}{{2}}$"])
        form = rng.choice(
            ["Locker {k} opens with {e}.", "The combination for locker {k} is {e}.", "LCK-{k}'s combination: {e}."]
        )
        add(f"templated:{row['id']}", "templated_key", form.format(k=key, e=expression))
    return leaks


def main() -> None:
    family = lockers()
    (HERE / "leakage_templated_c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in family))
    sets = {
        "aime25": load("aime25.jsonl"),
        "easy": load("easy_arith.jsonl"),
        "easy_train": load("easy_arith_train.jsonl"),
        "templated": family,
    }
    golds = {f"{s}:{r['id']}": Fraction(r["answer"]) for s, rows in sets.items() for r in rows}
    rng = random.Random(4747)
    rows = [{"text": t, "label": "general", "kind": "rule", "problem": None, "source": "written"} for t in GENERAL]
    rows += [
        {"text": t, "label": "leak", "kind": "answer_with_context", "problem": p, "source": "written"}
        for p, t in WRITTEN_LEAKS
    ]
    rows += [{"label": "leak", **leak} for leak in generated(rng, sets["aime25"], family)]
    rng.shuffle(rows)
    out = []
    for number, row in enumerate(rows, 1):
        values = numbers(row["text"])
        fields = {key: row[key] for key in ("text", "label", "kind", "problem")}
        coincides = sorted(key for key, gold in golds.items() if gold in values)
        out.append({"id": f"C{number:04d}", **fields, "coincides_with": coincides, "source": row["source"]})
    (HERE / "leakage_lessons_c.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out))
    print(
        f"{len(out)} lessons: {sum(r['label'] == 'general' for r in out)} general, {sum(r['label'] == 'leak' for r in out)} leaks"
    )


if __name__ == "__main__":
    main()
