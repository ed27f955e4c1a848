"""Runs inside the sandbox subprocess: set limits, run the candidate, then each test, recording passes.

Usage: python -I _code_harness.py SOLUTION.py TESTS.json RESULTS.txt MEMORY_BYTES CPU_SECONDS
Results are appended line by line (PASS / FAIL name: error), so a timeout still tells which tests passed.
"""

import json
import resource
import sys


def _limit(memory_bytes: int, cpu_seconds: int) -> None:
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024 * 1024, 16 * 1024 * 1024))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main(solution_path: str, tests_path: str, results_path: str, memory_bytes: str, cpu_seconds: str) -> None:
    with open(solution_path, encoding="utf-8") as f:
        solution = f.read()
    with open(tests_path, encoding="utf-8") as f:
        tests = json.load(f)
    results = open(results_path, "a", encoding="utf-8", buffering=1)
    _limit(int(memory_bytes), int(cpu_seconds))
    namespace = {"__name__": "__solution__"}
    try:
        exec(compile(solution, "solution.py", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 -- any failure of untrusted code is a result, not a crash
        results.write(f"ERROR solution: {type(exc).__name__}: {str(exc)[:200]!r}\n")
        return
    for index, test in enumerate(tests):
        try:
            exec(compile(test, f"test_{index}", "exec"), dict(namespace))
            results.write("PASS\n")
        except BaseException as exc:  # noqa: BLE001
            results.write(f"FAIL test {index}: {type(exc).__name__}: {str(exc)[:200]!r}\n")


if __name__ == "__main__":
    main(*sys.argv[1:6])
