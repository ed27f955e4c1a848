"""Precision and recall of the leakage guard on a labelled set of math lessons.

    OMP_NUM_THREADS=1 python benchmarks/leakage.py [--misses]

The set is `tests/data/leakage_lessons.jsonl` (263 lessons, provenance in leakage_lessons.md): general rules,
most with a number that equals some reference problem's gold answer by coincidence, and real leaks (a
problem's answer stated with the problem named, problems copied). References: the bundled dapo100 (all 110
rows) as training problems, aime24 and aime25 as test sets. A lesson counts as rejected when the guard's
default `reject` mode would reject it. Three modes:

- before: every match rejects (the guard before issue 26);
- library check: no provenance (`tfgrpo library check`, `eval --library`);
- learn: a leak of a training problem arrives as it does in `tfgrpo learn`, proposed by that problem's group
  alone; general rules arrive proposed by two groups (a rule shared by a batch); test problems are never
  learned on, so their leaks have no provenance.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from tfgrpo.experiences.leakage import LeakageChecker  # noqa: E402

ROOT = _HERE.parent
SETS = {
    "dapo100": "tfgrpo/core/data/dapo_math_17k_first110.jsonl",
    "aime24": "tfgrpo/core/data/aime24.jsonl",
    "aime25": "tfgrpo/core/data/aime25.jsonl",
}


def load_sets() -> dict[str, list[SimpleNamespace]]:
    sets = {}
    for name, path in SETS.items():
        rows = [json.loads(line) for line in (ROOT / path).read_text().splitlines() if line.strip()]
        sets[name] = [SimpleNamespace(id=str(r["id"]), problem=r["problem"], answer=r["answer"]) for r in rows]
    return sets


def lessons() -> list[dict]:
    path = ROOT / "tests" / "data" / "leakage_lessons.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rejected(checker: LeakageChecker, rows: list[dict], mode: str) -> set[str]:
    """Ids of the lessons the guard rejects in `mode`."""
    sources = None
    if mode == "learn":
        sources = [
            {row["problem"].split(":", 1)[1]}
            if row["label"] == "leak" and row["problem"].startswith("dapo100:")
            else {"a-batch-query", "another-batch-query"}
            for row in rows
        ]
    findings = checker.check([(row["id"], row["text"]) for row in rows], sources)
    if mode == "before":
        return {f.experience_id for f in findings if f.kind == "copy" or not _small(checker, f)}
    return {f.experience_id for f in findings if f.is_leak}


def _small(checker: LeakageChecker, finding) -> bool:
    return checker._ref(finding).small  # noqa: SLF001 -- the old guard never compared small golds


def table(rows: list[dict], checker: LeakageChecker) -> list[dict]:
    general = [row for row in rows if row["label"] == "general"]
    leaks = [row for row in rows if row["label"] == "leak"]
    out = []
    for mode in ("every match rejects (before)", "library check", "learn"):
        hit = rejected(checker, rows, {"library check": "check", "learn": "learn"}.get(mode, "before"))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list the missed leaks and rejected rules")
    args = parser.parse_args()
    rows = lessons()
    checker = LeakageChecker(load_sets())
    results = table(rows, checker)
    print(f"{len(rows)} lessons; references: {checker.size} problems\n")
    print("| mode | leaks caught (recall) | general rules rejected | precision | by kind of leak |")
    print("|---|---:|---:|---:|---|")
    for row in results:
        (caught, leaks), (false, general) = row["leaks caught"], row["general rejected"]
        kinds = ", ".join(f"{kind} {a}/{b}" for kind, (a, b) in row["by kind"].items())
        print(
            f"| {row['mode']} | {caught}/{leaks} ({100 * caught / leaks:.1f} %) | {false}/{general} "
            f"({100 * false / general:.1f} %) | {row['precision']:.3f} | {kinds} |"
        )
    if args.misses:
        for row in results:
            for missed in row["missed"]:
                print(f"{row['mode']}: missed {missed['kind']} {missed['problem']}: {missed['text']}")
            for false in row["false"]:
                print(f"{row['mode']}: rejected rule: {false['text']}")


if __name__ == "__main__":
    main()
