"""Agreement of the math reward with public answer-equivalence suites, beside raw math-verify.

    OMP_NUM_THREADS=1 python benchmarks/answer_equivalence.py [--disagreements FILE]

The corpus is `tests/data/answer_equivalence/cases.jsonl`: (gold, completion, expected) cases transcribed
from seven public suites (provenance in PROVENANCE.md beside it). Each case is scored twice, in the same
run: by `tfgrpo.rewards.MathReward` (credit >= 0.5 counts as "equal") and by math-verify called directly with its
default settings (`verify(parse(gold), parse(completion))`). A verdict agrees when it equals the suite's
expected one. Prints a Markdown table per suite and in total; `--disagreements` writes every case where
the reward disagrees, with its classification from `classification.jsonl` (or "UNCLASSIFIED").
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from tfgrpo.rewards import MathReward  # noqa: E402
from tfgrpo.rewards.verifier import Verifier  # noqa: E402

CORPUS = _HERE.parent / "tests" / "data" / "answer_equivalence"


def raw_math_verify(gold: str, completion: str) -> bool:
    from math_verify import parse, verify

    try:
        return bool(verify(parse(gold), parse(completion)))
    except Exception:  # noqa: BLE001 -- a crash of the library under test is a "not equal" verdict
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--disagreements", type=Path, help="write the reward's disagreements here (JSONL)")
    parser.add_argument("--timeout", type=float, default=5.0, help="reward's budget per comparison, CPU s")
    args = parser.parse_args()
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    cases = [json.loads(line) for line in (CORPUS / "cases.jsonl").read_text().splitlines() if line.strip()]
    classes = {
        row["id"]: row for row in map(json.loads, (CORPUS / "classification.jsonl").read_text().splitlines()) if row
    }

    with Verifier(timeout_s=args.timeout) as verifier:
        start = time.perf_counter()
        scores = MathReward(verifier=verifier).score(
            [case["completion"] for case in cases], answer=[case["gold"] for case in cases]
        )
        ours_s = time.perf_counter() - start
    start = time.perf_counter()
    raw = [raw_math_verify(case["gold"], case["completion"]) for case in cases]
    raw_s = time.perf_counter() - start

    per_suite: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    disagreements = []
    for case, score, raw_equal in zip(cases, scores, raw, strict=True):
        ours_equal = score.value is not None and score.value >= 0.5
        for key in (case["suite"], "all"):
            per_suite[key][0] += 1
            per_suite[key][1] += ours_equal == case["expected"]
            per_suite[key][2] += raw_equal == case["expected"]
        if ours_equal != case["expected"]:
            label = classes.get(case["id"], {"class": "UNCLASSIFIED", "why": ""})
            disagreements.append({**case, "ours": score.value, "extracted": score.extracted, **label})

    load = os.getloadavg()[0]
    print(f"{len(cases)} cases; load average {load:.1f}; reward {ours_s:.1f} s, raw math-verify {raw_s:.1f} s\n")
    print("| suite | cases | math reward agrees | raw math-verify agrees |")
    print("|---|---:|---:|---:|")
    for suite, (n, ours, direct) in sorted(per_suite.items(), key=lambda item: (item[0] == "all", -item[1][0])):
        print(f"| {suite} | {n} | {ours} ({100 * ours / n:.1f} %) | {direct} ({100 * direct / n:.1f} %) |")
    by_class: dict[str, int] = defaultdict(int)
    for row in disagreements:
        by_class[row["class"]] += 1
    print("\n| disagreement class | cases |\n|---|---:|")
    for label, count in sorted(by_class.items()):
        print(f"| {label} | {count} |")
    if args.disagreements:
        args.disagreements.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in disagreements))


if __name__ == "__main__":
    main()
