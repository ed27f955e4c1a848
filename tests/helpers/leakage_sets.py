"""The leakage guard's labelled sets of lessons and how precision and recall are measured on them.

Set A, `tests/data/leakage_lessons.jsonl` (263 lessons, provenance in leakage_lessons.md), against the bundled
dapo100 (all 110 rows) as training problems and aime24 + aime25 as test sets: the set the guard's parameters
were first chosen on. Set B, `tests/data/leakage_lessons_b.jsonl` (written by tests/data/leakage_lessons_b.py), against
math_l5_train200 and three templated families as training problems and amc23 as validation. Set C,
`tests/data/leakage_lessons_c.jsonl` (tests/data/leakage_lessons_c.py), against easy_train and a templated
family as training problems, easy and aime25. All three are development sets for the second round of issue 47;
Set D, `tests/data/leakage_lessons_d.jsonl` (tests/data/leakage_lessons_d.py, notes in leakage_lessons_d.md), written
blind to the rules, against math_l5_train200 and two templated families as training problems and amc23 as
validation: the held-out set. docs/trust.md says which set was held out from which version.

A lesson counts as rejected when the guard's default `reject` mode would reject it (an answer tied to its
problem, or a copy). Three modes:

- before: every match rejects (the guard before issue 26);
- library check: no provenance (`tfgrpo library check`, `eval --library`);
- learn: a leak of a training problem arrives as it does in `tfgrpo learn`, proposed by that problem's group
  alone; general rules arrive proposed by two groups (a rule shared by a batch); validation and test problems
  are never learned on, so their leaks have no provenance.

Used by tests/experiences/test_leakage_naming.py and benchmarks/leakage.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from tfgrpo.experiences.leakage import LeakageChecker

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tfgrpo" / "core" / "data"
TESTS = ROOT / "tests" / "data"


@dataclass(frozen=True)
class LabelledSet:
    name: str
    lessons: Path
    references: dict[str, Path]
    training: tuple[str, ...]  # the reference sets learned on: their leaks arrive with provenance in learn mode


SETS = (
    LabelledSet(
        "A (development: the first parameters were chosen on it)",
        TESTS / "leakage_lessons.jsonl",
        {
            "dapo100": DATA / "dapo_math_17k_first110.jsonl",
            "aime24": DATA / "aime24.jsonl",
            "aime25": DATA / "aime25.jsonl",
        },
        ("dapo100",),
    ),
    LabelledSet(
        "B (development; held out from the first version of the naming rules)",
        TESTS / "leakage_lessons_b.jsonl",
        {
            "amc23": DATA / "amc23.jsonl",
            "math_l5_train200": DATA / "math_l5_int_train200.jsonl",
            "templated": TESTS / "leakage_templated.jsonl",
        },
        ("math_l5_train200", "templated"),
    ),
    LabelledSet(
        "C (development; held out after their revision on B)",
        TESTS / "leakage_lessons_c.jsonl",
        {
            "aime25": DATA / "aime25.jsonl",
            "easy": DATA / "easy_arith.jsonl",
            "easy_train": DATA / "easy_arith_train.jsonl",
            "templated": TESTS / "leakage_templated_c.jsonl",
        },
        ("easy_train", "templated"),
    ),
    LabelledSet(
        "D (held out: written blind to the second round's rules, measured once with them)",
        TESTS / "leakage_lessons_d.jsonl",
        {
            "amc23": DATA / "amc23.jsonl",
            "math_l5_train200": DATA / "math_l5_int_train200.jsonl",
            "templated_d": TESTS / "leakage_templated_d.jsonl",
        },
        ("math_l5_train200", "templated_d"),
    ),
)
MODES = {"every match rejects (before)": "before", "library check": "check", "learn": "learn"}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def load_references(labelled: LabelledSet) -> dict[str, list[SimpleNamespace]]:
    return {
        name: [SimpleNamespace(id=str(r["id"]), problem=r["problem"], answer=r["answer"]) for r in _rows(path)]
        for name, path in labelled.references.items()
    }


def lessons(labelled: LabelledSet) -> list[dict]:
    return _rows(labelled.lessons)


def rejected(checker: LeakageChecker, rows: list[dict], mode: str, training: tuple[str, ...]) -> set[str]:
    """Ids of the lessons the guard rejects in `mode`."""
    sources = None
    if mode == "learn":
        sources = [
            {row["problem"].split(":", 1)[1]}
            if row["label"] == "leak" and row["problem"].split(":", 1)[0] in training
            else {"a-batch-query", "another-batch-query"}
            for row in rows
        ]
    findings = checker.check([(row["id"], row["text"]) for row in rows], sources)
    if mode == "before":
        return {f.experience_id for f in findings if f.kind == "copy" or not checker._ref(f).small}  # noqa: SLF001
    return {f.experience_id for f in findings if f.is_leak}


def table(rows: list[dict], checker: LeakageChecker, training: tuple[str, ...]) -> list[dict]:
    general = [row for row in rows if row["label"] == "general"]
    leaks = [row for row in rows if row["label"] == "leak"]
    out = []
    for mode, key in MODES.items():
        hit = rejected(checker, rows, key, training)
        caught = sum(row["id"] in hit for row in leaks)
        false = sum(row["id"] in hit for row in general)
        kinds = {
            kind: (sum(r["id"] in hit for r in leaks if r["kind"] == kind), sum(r["kind"] == kind for r in leaks))
            for kind in dict.fromkeys(r["kind"] for r in leaks)
        }
        out.append(
            {
                "mode": mode,
                "leaks caught": (caught, len(leaks)),
                "general rejected": (false, len(general)),
                "precision": caught / max(1, caught + false),
                "by kind": kinds,
                "missed": [row for row in leaks if row["id"] not in hit],
                "false": [row for row in general if row["id"] in hit],
            }
        )
    return out


def measure(labelled: LabelledSet) -> tuple[int, int, list[dict]]:
    """(lessons, reference problems, one row per mode) of one labelled set with the default guard."""
    rows = lessons(labelled)
    checker = LeakageChecker(load_references(labelled))
    return len(rows), checker.size, table(rows, checker, labelled.training)
