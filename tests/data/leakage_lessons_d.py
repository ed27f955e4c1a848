"""Builds leakage set D (leakage_lessons_d.jsonl) from the rows in leakage_lessons_d_rows.py.

Run from the repository root: `python -m tests.data.leakage_lessons_d`. It rewrites the templated problem set,
computes `coincides_with` exactly as set A's notes describe, checks every row and writes the set, shuffled.
"""

import json
import random
import re
from fractions import Fraction
from pathlib import Path

from tests.data import leakage_templated_d_build as templated
from tests.data.leakage_lessons_d_rows import LEAKS, RULES

HERE = Path(__file__).parent
DATA = HERE.parents[1] / "tfgrpo" / "core" / "data"
SETS = {
    "amc23": DATA / "amc23.jsonl",
    "math_l5_train200": DATA / "math_l5_int_train200.jsonl",
    "templated_d": templated.OUT,
}
OUT = HERE / "leakage_lessons_d.jsonl"
SEED = 20261208

_FRAC = re.compile(r"\\[dt]?frac\{\s*(\d+)\s*\}\{\s*(\d+)\s*\}")
# A literal is a whole token: no word character or "." before it, no word character after it. A sign counts
# only when the character before it is not a word character.
_NUMBER = re.compile(r"(?<![\w.])([-+]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:/(\d+))?(?!\w)")


def numbers(text: str) -> set[Fraction]:
    values = {Fraction(int(a), int(b)) for a, b in _FRAC.findall(text) if int(b)}
    rest = _FRAC.sub(" ", text)
    for match in _NUMBER.finditer(rest):
        sign, whole, decimals, denominator = match.groups()
        if sign and match.start() > 0 and re.match(r"\w", rest[match.start() - 1]):
            sign = ""
        value = Fraction(whole.replace(",", "") + ("." + decimals if decimals else ""))
        if denominator:
            if int(denominator) == 0:
                continue
            value /= int(denominator)
        values.add(-value if sign == "-" else value)
    return values


def load_problems() -> dict[str, dict[str, str]]:
    problems = {}
    for name, path in SETS.items():
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            problems[f"{name}:{row['id']}"] = row
    return problems


def build() -> list[dict[str, object]]:
    problems = load_problems()
    check_quotes({ref: row["problem"] for ref, row in problems.items()})
    golds = {ref: Fraction(int(row["answer"])) for ref, row in problems.items()}
    rows: list[dict[str, object]] = []
    for form, problem, text in LEAKS:
        rows.append(
            {
                "text": text,
                "label": "leak",
                "kind": form,
                "problem": problem,
                "source": "written",
                "_gold": golds[problem],
            }
        )
    for source, text in RULES:
        kind = "rule_with_number" if re.search(r"\d", text) else "rule_no_number"
        rows.append({"text": text, "label": "general", "kind": kind, "problem": None, "source": source})
    for row in rows:
        values = numbers(str(row["text"]))
        row["coincides_with"] = sorted(ref for ref, gold in golds.items() if gold in values)
    check(rows)
    random.Random(SEED).shuffle(rows)
    keys = ("id", "text", "label", "kind", "problem", "coincides_with", "source")
    return [{k: (f"D{i:04d}" if k == "id" else row[k]) for k in keys} for i, row in enumerate(rows, 1)]


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _without_math(text: str) -> str:
    return re.sub(r"\$[^$]*\$|\\\[.*?\\\]", " ", text.replace("\\$", ""), flags=re.S)


def _is_run(quote: list[str], text: list[str]) -> bool:
    return any(text[i : i + len(quote)] == quote for i in range(len(text) - len(quote) + 1))


def check_quotes(problems: dict[str, str]) -> None:
    """A quote is a run of its problem's words, with the math kept or with all of it removed.

    An opening quote is one or the other by its form; a middle quote may be either.
    """
    for form, problem, text in LEAKS:
        if form.startswith("quote"):
            match = re.search(r'"([^"]+)"', text)
            assert match, text
            quote = _tokens(match.group(1))
            verbatim = _is_run(quote, _tokens(problems[problem]))
            stripped = _is_run(quote, _tokens(_without_math(problems[problem])))
            assert verbatim or stripped, text
            if form.startswith("quote_opening"):
                assert verbatim != form.endswith("math_stripped"), text
                source = problems[problem] if verbatim else _without_math(problems[problem])
                assert _tokens(source)[: len(quote)] == quote, f"not an opening: {text}"


def check(rows: list[dict[str, object]]) -> None:
    texts = [row["text"] for row in rows]
    assert len(set(texts)) == len(texts), "duplicate text"
    problems = [row["problem"] for row in rows if row["label"] == "leak"]
    assert len(set(problems)) == len(problems), "two leaks target one problem"
    for row in rows:
        words = len(str(row["text"]).split())
        assert 3 <= words <= 70, (words, row["text"])
        if row["label"] == "leak":
            own = row["problem"] in row["coincides_with"]  # type: ignore[operator]
            literal = row["_gold"] in numbers(str(row["text"]))
            assert own == literal
            if row["kind"] != "equivalent_expression":
                assert own, row["text"]


def main() -> None:
    templated.main()
    rows = build()
    OUT.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    print(len(rows), "rows")


if __name__ == "__main__":
    main()
