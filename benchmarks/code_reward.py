"""The code reward against a public suite and against forging completions: a table per sandbox level.

    OMP_NUM_THREADS=1 PYTHONPATH=. python -P benchmarks/code_reward.py [--sandbox bubblewrap process]

HumanEval (tests/data/code_reward/, 164 tasks): canonical programs must pass (recall), each prompt
completed with the next task's body must fail (precision). The forging completions are those of
tests/rewards/test_code_reward_verdict.py; each must score 0. docs/security.md keeps the table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from tfgrpo.rewards.code import CodeReward  # noqa: E402

HUMANEVAL = Path(__file__).parents[1] / "tests" / "data" / "code_reward" / "humaneval.jsonl"


def _forgeries() -> dict[str, str]:
    from tests.rewards.test_code_reward_verdict import FORGERIES

    return FORGERIES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sandbox", nargs="+", default=["bubblewrap", "process"])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    rows = [json.loads(line) for line in HUMANEVAL.read_text(encoding="utf-8").splitlines()]
    tests = [[row["test"] + f"\ncheck({row['entry_point']})\n"] for row in rows]
    canonical = [row["prompt"] + row["canonical_solution"] for row in rows]
    shifted = [rows[i]["prompt"] + rows[(i + 1) % len(rows)]["canonical_solution"] for i in range(len(rows))]
    forgeries = _forgeries()
    print(f"cpu: {platform.processor() or platform.machine()}, load: {os.getloadavg()[0]:.2f}")
    print(f"{'sandbox':<11} {'canonical pass':>15} {'shifted pass':>13} {'forged > 0':>11} {'ms/candidate':>13}")
    for sandbox in args.sandbox:
        reward = CodeReward(sandbox=sandbox, timeout_s=30, workers=args.workers)
        started = time.perf_counter()
        good = sum(score.value == 1.0 for score in reward.score(canonical, tests=tests))
        bad = sum((score.value or 0) > 0 for score in reward.score(shifted, tests=tests))
        per_candidate = (time.perf_counter() - started) / (2 * len(rows)) * 1000
        forged_scores = reward.score(
            [f"```python\n{code}\n```" for code in forgeries.values()],
            tests=[["assert add(1, 2) == 3"]] * len(forgeries),
        )
        forged = sum((score.value or 0) > 0 for score in forged_scores)
        print(
            f"{sandbox:<11} {good:>9} / {len(rows)} {bad:>7} / {len(rows)} {forged:>5} / {len(forgeries)} "
            f"{per_candidate:>13.0f}"
        )


if __name__ == "__main__":
    main()
