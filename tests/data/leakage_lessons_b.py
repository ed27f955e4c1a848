"""Writes the second labelled set of the leakage guard: leakage_lessons_b.jsonl (+ leakage_templated.jsonl).

    python tests/data/leakage_lessons_b.py

A different source from leakage_lessons.jsonl (lessons about dapo100 / aime24 / aime25): its references are the
bundled amc23 and math_l5_train200 and three templated families written here (leakage_templated.jsonl), and
its lessons are

- general rules written for this set (tips and facts with numbers that equal golds of those problems, phrases
  many problems use, the templated families' own words), label `general`;
- leaks written by hand (a problem's objects and its answer in other words), label `leak`;
- leaks made by the templates below from problems drawn with `random.Random(47)`: openings quoted with the
  math stripped, with the math kept, with "..." where the math was; ids; copies with the math dropped;
  templated problems named by their key, some with the gold as an equivalent expression.

Nothing here was chosen by running the guard: the guard's parameters are chosen on leakage_lessons.jsonl, and
this set is held out (docs/trust.md).
"""

from __future__ import annotations

import json
import random
import re
from fractions import Fraction
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "tfgrpo" / "core" / "data"
MATH = re.compile(r"\$\$?[^$]+?\$\$?|\\\(.+?\\\)|\\\[.+?\\\]", re.S)
NAMES = "Priya Tomasz Ingrid Kwame Mateo Yusuf Aiko Svetlana Ravi Olumide Bianca Hamid Leilani Dmitri Nadia Oskar Wanjiru Felipe Astrid Kenji".split()


def templated() -> list[dict]:
    """Three families: a vault code (the key varies), a polynomial in LaTeX (the argument varies), a name."""
    rows = [
        {"id": f"VAULT-{k}", "problem": f"VAULT-{k}: Find the access code of vault {k}.", "answer": str(100 + 7 * k)}
        for k in range(1, 21)
    ]
    rows += [
        {
            "id": f"poly-{k}",
            "problem": f"Let $f(n) = n^2 + 5n + 3$. Compute $f({k})$.",
            "answer": str(k * k + 5 * k + 3),
        }
        for k in range(11, 31)
    ]
    rows += [
        {
            "id": f"stamps-{name.lower()}",
            "problem": f"{name} has {12 + i} stamps and buys {20 + 3 * i} more at the fair. How many stamps does "
            f"{name} have now?",
            "answer": str(32 + 4 * i),
        }
        for i, name in enumerate(NAMES)
    ]
    return rows


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


GENERAL = [
    "When two people travel toward each other, add their speeds: at 18 and 12 miles per hour they close 30 miles each hour.",
    "The acute angle between lines of slopes m1 and m2 has tangent |m1 - m2| / |1 + m1 m2|; a tangent of 1 means 45 degrees.",
    "Alternating sums of cubes pair up: (2k)^3 - (2k - 1)^3 = 12k^2 - 6k + 1, so sum the quadratic instead of the cubes.",
    "In a round robin of n players there are C(n, 2) games; 9 players play 36 games.",
    "A number whose square is less than 2023 is at most 44, since 45^2 = 2025.",
    "The number of digits of a positive integer N is floor(log10 N) + 1; 10^17 has 18 digits.",
    "To count divisors, factor first: 144 = 2^4 · 3^2 has 15 divisors.",
    "The perimeter of a rectangle with sides 12 and 13 is 50; do not confuse perimeter with area.",
    "Prices cut by 20% and then taxed at 7.5% multiply to 0.8 · 1.075 = 0.86 of the original.",
    "The Frobenius number of two coprime coin values a and b is ab - a - b; for 6 and 11 it is 49.",
    "A 3-4-5 triangle has circumradius 5/2, half its hypotenuse; every right triangle's circumcenter is the midpoint of the hypotenuse.",
    "Strips of paint cover width times length: convert millimetres and metres to one unit before multiplying.",
    "On a 3 × 3 grid a domino can sit in 12 positions; count horizontal and vertical placements separately.",
    "The product of the roots of a monic polynomial of degree n is (-1)^n times its constant term; for x^3 + 6 that is -6.",
    "Logarithm identities: log_a b · log_b c = log_a c; change every log to one base before equating.",
    "A subset of {0, 1, ..., 12} is determined by choosing elements; there are 2^13 = 8192 subsets.",
    "Absolute value regions like |x| + |y| <= 1 are squares rotated 45 degrees with area 2.",
    "When a mean rises by 1 after one more score, the new score exceeds the old mean by the new count.",
    "Pouring equal amounts from full glasses: the transfer from each is the difference from the common level divided by the number of glasses.",
    "Circles tangent to both axes have centers on y = x; a circle of radius 10 tangent to the x-axis has center height 10.",
    "An isosceles trapezoid's area is the average of its bases times its height; maximize it with calculus on one variable.",
    "For |z| = 1, the conjugate of z is 1/z; that turns z^5 = conj(z) into z^6 = 1 with 6 roots plus z = 0.",
    "A box with edges a, b, c has 12 edges of total length 4(a + b + c) and a space diagonal of sqrt(a^2 + b^2 + c^2).",
    "Arithmetic progressions with a 120 degree angle: use the law of cosines c^2 = a^2 + b^2 + ab.",
    "n dice give at most 6^n ordered outcomes, but products repeat; count distinct products through exponents of 2, 3 and 5.",
    "lcm(a, b) · gcd(a, b) = a · b for positive integers; with gcd 5 and product 900 the lcm is 180.",
    "The ratio of the areas of two circles is the square of the ratio of their radii; radii 5 and 13 give 25/169.",
    "To count integers n for which a square root is real, solve the inequality for the radicand and mind where the denominator vanishes.",
    "Digits of a date: a year, a month and a day give 8 digits; count each digit's occurrences with parity arguments.",
    "Probability that a running total hits a target: complementary counting with states is faster than listing 1296 sequences.",
    "The sum of the interior angles of a heptagon is 900 degrees.",
    "When pricing p gives revenue p(130 - 5p), the maximum is at p = 13 by symmetry of the parabola.",
    "The inverse of 3 modulo 7 is 5, since 3 · 5 = 15 = 2 · 7 + 1; find inverses with the extended Euclidean algorithm.",
    "The tangent of 45 degrees is 1, and tan(180° - x) = -tan x, so symmetric tangent sums often collapse.",
    "Distance between (2, n) and (-1, 1) is 5 exactly when (n - 1)^2 = 16; solve the circle equation, not a guess.",
    "Scaling a circle's diameter by 2 multiplies its area by 4; batter for a 12-inch griddle is four times that for a 6-inch one.",
    "floor(r) + r = 15.5 forces the fractional part to be 0.5; split r into its integer and fractional parts.",
    "gcd and lcm of polynomial expressions: gcd(x + 3, x(x + 3)) = x + 3; substitute small positive x to test.",
    "Convert from base 6 by Horner's rule: multiply by 6 and add the next digit; the last step gives the base-10 value.",
    "Products like f(1^2) f(2^2) ... telescope when f(m) = m^2 + m + 1, because f(k^2) = f(k) f(-k).",
    "The sum of the reciprocals of the roots of ax^2 + bx + c is -b/c; the reciprocals of the roots of x^2 + x + 1 sum to -1.",
    "For a perfect kth power, every exponent in the prime factorisation must be a multiple of k; 2^1980 is a 20th power, 99 times over.",
    "Inverse functions: if g(x) = 3x + 2 then g^{-1}(x) = (x - 2)/3; compose to check.",
    "Functional equations: plug in zeros first, then use a given value such as f(1) = 1 to pin a constant.",
    "A 5 × 5 grid contains 55 squares of all sizes: 25 + 16 + 9 + 4 + 1.",
    "lcm(a + 1, a - 5) divides (a + 1)(a - 5); their gcd divides 6, which limits the cases.",
    "In a stem and leaf plot the stem is the leading digits; read 10|9 as 109, never 19.",
    "When a key or code is computed from a rule, apply the rule to the key itself, never to its position in a list.",
    "Access codes that grow by a constant per vault form an arithmetic sequence: code = first code + 7 · (vault - 1).",
    "To evaluate a quadratic like n^2 + 5n + 3 at a two-digit n, use n(n + 5) + 3 to keep the multiplication small.",
    "For f(n) = n^2 + 5n + 3, consecutive values differ by 2n + 6; use differences to check a table of values.",
    "Stamps bought are added to stamps held; read 'how many now' as the total, not the purchase.",
    "A secret or access code in a puzzle is usually an integer; box it without units.",
    "The number of ordered pairs of positive integers with product 36 is 9, one per divisor.",
    "Positive real numbers x and y with x + y = 20 have product at most 100 by AM-GM.",
    "Standard six-sided dice have faces 1 to 6 summing to 21; opposite faces sum to 7.",
    "The complex number z with |z| = 1 has real part cos t and imaginary part sin t; the maximum imaginary part is 1.",
    "In the coordinate plane the midpoint of (x1, y1) and (x2, y2) is ((x1 + x2)/2, (y1 + y2)/2); for (4, 2) and (8, 2) it is (6, 2).",
    "The base-ten logarithm of 2023 is about 3.306, so 2023 has 4 digits.",
    "Triangular arrays where each entry is the sum of the two above are Pascal-like; the units digit of row sums cycles with period 4 or 5.",
    "The unique function with sum over d | n of d f(n/d) = 1 is multiplicative; compute it on prime powers first: f(p) = 1 - p.",
    "Sequences of subsets A_1 ⊆ A_2 ⊆ ... ⊆ A_n of a 10-element set: each element chooses when it enters, (n + 1)^10 ways.",
    "tan(nx) as a ratio of polynomials in tan x: the leading coefficient of the numerator for odd n alternates in sign; for n = 3 it is -1.",
    "Perfect squares divisible by 5 are multiples of 25; count k with 25k^2 below the bound.",
    "The x-coordinates of points on y = log2 x with midpoint height 2 have product 16.",
    "A mean of quiz scores rises by 1 after an 11: set up n·m + 11 = (n + 1)(m + 1).",
    "Four identical glasses filled to 1, 1, 1 and 1/3 are equalised at 5/6 each: pour 1/6 from each full glass.",
    "When two circles are tangent to perpendicular axes at the origin, the line through their intersection points has slope determined by the radii ratio, e.g. 2/5.",
    "For an isosceles trapezoid with legs 1 and bases b and 2b, write the height with Pythagoras and maximise the area in b.",
    "The Frobenius problem for three coin values has no closed formula; list the unreachable values up to the largest coin times two.",
    "abcd = 2^6 · 3^9 · 5^7 with lcm conditions: treat each prime's exponents separately and take the minimum for the gcd.",
    "Inscribed right triangles: the hypotenuse is a diameter, so a 5-12-13 triangle's circle has radius 13/2.",
    "The roots of (x - 1)(x - 2)^2...(x - 10)^10 split the line into 11 intervals; the sign changes only at odd multiplicity.",
    "A subset whose size equals its least element: choose the least element k and then k - 1 larger ones; sum C(12 - k, k - 1).",
    "Double-check units: miles per hour times hours gives miles, and 45 miles at 30 miles per hour takes 1.5 hours.",
    "Numbers like 3159, 1625 and 2023 appear as answers and as years alike: a number alone says nothing about a problem.",
    "The cube of 11 is 1331 and 11^2 = 121; powers of 11 follow Pascal's triangle until carries start.",
    "A handshake count of 66 means 12 people, since C(12, 2) = 66.",
    "Sum of the first 20 positive integers is 210; in general n(n + 1)/2.",
]

WRITTEN_LEAKS = [
    ("amc23:amc23-00", "Alicia and Beth bike toward each other from cities 45 miles apart and meet 27 miles from A."),
    ("amc23:amc23-01", "When y cubed equals x squared and (y - x)^2 = 4y^2, x + y comes out as 36."),
    (
        "amc23:amc23-04",
        "In the table tennis tournament with twice as many right-handed players, 36 games were played in total.",
    ),
    ("amc23:amc23-08", "Flora the frog eventually lands on 10 with probability 1/2, so m + n = 3."),
    (
        "amc23:amc23-13",
        "For the icosahedron distance question with vertices Q, R, S, the probability gives m + n = 29.",
    ),
    ("amc23:amc23-14", "The unique function with the divisor sum identity has f(2023) = 96."),
    ("amc23:amc23-20", "Janet's running total reaches 3 with probability 49/216, so the requested sum is 265."),
    ("amc23:amc23-22", "Only 9 dates in 2023 show each digit an even number of times on the 8-digit display."),
    ("amc23:amc23-23", "Maureen's current quiz mean is 7."),
    ("amc23:amc23-28", "Under the operation u ⊗ v = ac + bdi, the z with z ⊗ z = z^2 + 40 has |z|^2 = 50."),
    ("amc23:amc23-32", "In Coinland with 6, 10 and 15 cent coins, the largest unpayable value has digit sum 11."),
    ("amc23:amc23-36", "Carlos with his 43 dollars can afford shoes whose original price was 50 dollars."),
    ("amc23:amc23-43", "For the 3-4-5 and 5-12-13 triangles inscribed in circles A and B, m + n = 194."),
    ("amc23:amc23-44", "Jackson's paintbrush covers 1625 square centimeters of paper."),
    ("amc23:amc23-47", "The square-root-of-logs expression is real for 901 integers n."),
    ("amc23:amc23-48", "Subsets B of {0, ..., 12} whose size equals their least element: there are 144."),
    ("math_l5_train200:math-test-1685", "Danny Henry's waffle griddle question has answer 1152."),
    ("math_l5_train200:math-test-3071", "When lcm(A, B) = 1575 and A:B is 3:7, the gcd asked for is 75."),
    ("math_l5_train200:math-test-3106", "N written as 531340 in base 6 and 124154 in base 8 leaves remainder 66."),
    ("math_l5_train200:math-test-3061", "If lcm(a + 1, a - 5) = 10508, then a^2 - 4a + 1 = 21022."),
    (
        "math_l5_train200:math-test-1336",
        "Putting 8 differently colored beads on the cube's vertices up to rotation gives 1680 arrangements.",
    ),
    ("math_l5_train200:math-test-3530", "Given that 33^{-1} is 77 mod 508, the inverse of 11 mod 508 is 231."),
    (
        "math_l5_train200:math-test-3676",
        "The Pseudo H.S. girls' long jump stem and leaf plot question has answer 1093.",
    ),
    (
        "math_l5_train200:math-test-0733",
        "The bookstore should charge 20 dollars for the book to maximise its revenue.",
    ),
    ("amc23:amc23-19", "8^5 · 5^10 · 15^5 = 2^15 · 5^15 · 3^5 = 10^15 · 243, which has 18 digits."),
    (
        "amc23:amc23-47",
        "log(n^2) - (log n)^2 >= 0 holds for 1 <= n <= 100; with the denominator log n - 3 the count becomes 901 integers.",
    ),
    (
        "math_l5_train200:math-test-0603",
        "Completing the square: x^2 + y^2 + 2x - 4y + 8 = (x + 1)^2 + (y - 2)^2 + 3, so the minimum is 3.",
    ),
    (
        "math_l5_train200:math-test-1768",
        "Angle bisectors meet at the incenter I; a line through I parallel to a side cuts off a triangle whose perimeter is the sum of the two other sides, like 17 + 24 = 41.",
    ),
    (
        "math_l5_train200:math-test-4029",
        "A positive integer has twice as many integer divisors as positive divisors: 12 has 6 positive and 12 integer divisors.",
    ),
    (
        "math_l5_train200:math-test-2572",
        "For distinct roots a..e of a quintic, sums of a^5 / prod(a - b) are Lagrange interpolation identities; they equal the sum of the roots, here -7.",
    ),
    ("templated:VAULT-9", "The access code of the ninth vault, vault 9, is 163."),
    ("templated:poly-17", "For f(n) = n^2 + 5n + 3, the value f(17) asked for is 377."),
    ("templated:stamps-priya", "Priya ends up with 32 stamps after the fair."),
]


def first_words(text: str, n: int) -> str:
    return " ".join(re.findall(r"[\w'-]+", text)[:n])


def with_math(text: str, n: int) -> str:
    """The first n whitespace-separated chunks, math kept, cut where no math span is open."""
    chunks = text.split()
    cut = n
    while cut < len(chunks) and " ".join(chunks[:cut]).count("$") % 2:
        cut += 1
    return " ".join(chunks[:cut]).rstrip(",.;:")


def dotted(text: str, n: int) -> str:
    """The opening with '...' where each math span was (the issue's 'smallest prime such that ...')."""
    return " ".join(MATH.sub(" ... ", text).split()[:n]).rstrip(",.;:")


def generated(rng: random.Random, real: list[tuple[str, dict]], templated_rows: list[dict]) -> list[dict]:
    leaks: list[dict] = []

    def add(problem: str, kind: str, text: str, how: str) -> None:
        leaks.append({"problem": problem, "kind": kind, "text": text, "source": f"generated:{how}"})

    pool = list(real)
    rng.shuffle(pool)
    math_rows = [(s, r) for s, r in pool if "$" in r["problem"] or "\\[" in r["problem"]]
    plain_openings = [
        "In the problem that begins '{q}', the final answer is {g}.",
        "The one starting '{q}' has answer {g}.",
        "Remember: '{q}' gives {g}.",
    ]
    for s, r in math_rows[:25]:
        quote = first_words(MATH.sub(" ", r["problem"]), rng.randint(6, 12))
        add(
            f"{s}:{r['id']}",
            "quote_stripped",
            rng.choice(plain_openings).format(q=quote, g=r["answer"]),
            "quote-stripped",
        )
    for s, r in pool[25:37]:
        quote = with_math(r["problem"], rng.randint(6, 10))
        add(
            f"{s}:{r['id']}",
            "quote_with_math",
            f"For the problem '{quote} ...' the answer is {r['answer']}.",
            "quote-math",
        )
    for s, r in math_rows[25:35]:
        quote = dotted(r["problem"], rng.randint(8, 14))
        add(f"{s}:{r['id']}", "quote_dotted", f"In '{quote}', the final answer is {r['answer']}.", "quote-dotted")
    for s, r in pool[37:47]:
        form = rng.choice(["Problem {i}: the answer is {g}.", "{i} -> {g}", "Known result for {i}: {g}."])
        add(f"{s}:{r['id']}", "id", form.format(i=r["id"], g=r["answer"]), "id")
    long_math = [(s, r) for s, r in math_rows[35:] if len(re.findall(r"\w+", MATH.sub(" ", r["problem"]))) >= 14]
    for s, r in long_math[:8]:
        add(f"{s}:{r['id']}", "copy_without_math", " ".join(MATH.sub(" ", r["problem"]).split()), "copy-stripped")
    keyed = {
        "VAULT": [
            "For vault {k} the access code is {g}.",
            "Vault {k}'s code: {g}.",
            "The code of vault {k} equals {e}.",
        ],
        "poly": ["f({k}) = {g} for this quadratic.", "When n is {k}, the value is {e}.", "Plugging in {k} gives {g}."],
        "stamps": ["{name} has {g} stamps now.", "{name}: {e} stamps in total.", "After the fair {name} holds {g}."],
    }
    for row in rng.sample(templated_rows, 24):
        family, key = row["id"].split("-", 1)
        gold = int(row["answer"])
        expression = rng.choice([f"{2 * gold}/2", f"{gold - 10} + 10", f"$\\frac{{{3 * gold}}}{{3}}$"])
        name = key.capitalize()
        text = rng.choice(keyed[family]).format(k=key, g=gold, e=expression, name=name)
        add(f"templated:{row['id']}", "templated_key", text, "templated-key")
    return leaks


def numbers(text: str) -> set[Fraction]:
    found = set()
    for match in re.finditer(r"(?<![\w.])-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?", text.replace(",", "")):
        try:
            found.add(Fraction(match.group().replace(" ", "")))
        except (ValueError, ZeroDivisionError):
            continue
    return found


def main() -> None:
    templated_rows = templated()
    (HERE / "leakage_templated.jsonl").write_text("".join(json.dumps(r) + "\n" for r in templated_rows))
    sets = {
        "amc23": load("amc23.jsonl"),
        "math_l5_train200": load("math_l5_int_train200.jsonl"),
        "templated": templated_rows,
    }
    real = [(s, r) for s in ("amc23", "math_l5_train200") for r in sets[s]]
    golds = {f"{s}:{r['id']}": Fraction(r["answer"]) for s, rows in sets.items() for r in rows}
    rng = random.Random(47)
    rows = [{"text": t, "label": "general", "kind": "rule", "problem": None, "source": "written"} for t in GENERAL]
    rows += [
        {"text": t, "label": "leak", "kind": "answer_with_context", "problem": p, "source": "written"}
        for p, t in WRITTEN_LEAKS
    ]
    rows += [{"label": "leak", **leak} for leak in generated(rng, real, templated_rows)]
    rng.shuffle(rows)
    out = []
    for number, row in enumerate(rows, 1):
        values = numbers(row["text"])
        coincides = sorted(key for key, gold in golds.items() if gold in values)
        fields = {key: row[key] for key in ("text", "label", "kind", "problem")}
        out.append({"id": f"B{number:04d}", **fields, "coincides_with": coincides, "source": row["source"]})
    (HERE / "leakage_lessons_b.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out))
    print(
        f"{len(out)} lessons: {sum(r['label'] == 'general' for r in out)} general, {sum(r['label'] == 'leak' for r in out)} leaks"
    )


if __name__ == "__main__":
    main()
