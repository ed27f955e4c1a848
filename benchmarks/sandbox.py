"""Cost of each isolation level of the Python sandbox: start an interpreter, run one cell, close it
(python tool), and score one candidate against two tests (code reward).

    OMP_NUM_THREADS=1 PYTHONPATH=. python -P benchmarks/sandbox.py [--repeats 10]   (-P: benchmarks/rewards.py would shadow the package)

Also reports which isolation tools exist here (bubblewrap, nsjail, unshare): the choice of bubblewrap is
written down in docs/security.md with this table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from tfgrpo.rewards.code import run_tests  # noqa: E402
from tfgrpo.rollout.tools.python_sandbox import PythonTool  # noqa: E402


async def _tool_once(level: str) -> float:
    started = time.perf_counter()
    result = await PythonTool(isolation=level, timeout_s=20, cpu_s=20).run({"code": "sum(range(1000))"})
    assert result.ok and result.output == "499500\n", result.error
    return time.perf_counter() - started


def _reward_once(sandbox: str) -> float:
    started = time.perf_counter()
    passed, failures = run_tests(
        "def add(a, b):\n    return a + b\n",
        ["assert add(1, 2) == 3", "assert add(2, 2) == 4"],
        timeout_s=20,
        sandbox=sandbox,
    )
    assert passed == 2, failures
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    print(
        "tools: "
        + ", ".join(f"{name}={'yes' if shutil.which(name) else 'no'}" for name in ("bwrap", "nsjail", "unshare"))
    )
    print(f"load average: {os.getloadavg()[0]:.2f} (1 min), cpus: {os.cpu_count()}")
    print(f"{'what':<34}{'median ms':>10}{'p90 ms':>10}")
    rows = [
        (f"python tool, {level}", lambda level=level: asyncio.run(_tool_once(level)))
        for level in ("bubblewrap", "namespace", "process")
    ]
    rows += [
        (f"code reward, {sandbox}", lambda sandbox=sandbox: _reward_once(sandbox))
        for sandbox in ("bubblewrap", "process")
    ]
    for name, once in rows:
        once()  # warm the page cache
        times = sorted(once() for _ in range(args.repeats))
        p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
        print(f"{name:<34}{statistics.median(times) * 1000:>10.0f}{p90 * 1000:>10.0f}")


if __name__ == "__main__":
    main()
