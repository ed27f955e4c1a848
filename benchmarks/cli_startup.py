"""How fast the CLI answers: median wall time of quick commands, next to a bare interpreter's start.

    OMP_NUM_THREADS=1 python benchmarks/cli_startup.py [--repeats 7]

Each command runs as a user runs it (a fresh `tfgrpo` process), alternating with `python -c pass`, on a
small library and a one-row score file made in a temporary folder. Target (issue 31): ≤ 0.3 s each.
docs/performance.md keeps the table with the CPU model and load it was measured at.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LIBRARY = {
    "format": "tfgrpo.library/1",
    "version": 2,
    "experiences": [{"id": f"G{i}", "text": f"Check the carry of column {i} twice."} for i in range(20)],
}


def commands(folder: Path) -> dict[str, list[str]]:
    lib, other, md = folder / "lib.json", folder / "other.json", folder / "lib.md"
    return {
        "--help": ["--help"],
        "library show": ["library", "show", str(lib)],
        "library history": ["library", "history", str(lib)],
        "library diff": ["library", "diff", str(lib), str(other)],
        "export": ["export", str(lib), "--format", "md", "--out", str(md)],
        "import": ["import", str(md), "--out", str(folder / "imported.json")],
        "score (math, 1 row)": ["score", "-r", "math", str(folder / "rows.jsonl")],
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _seconds(argv: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one run; CPU (user + system) moves less with the machine's load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    tfgrpo = shutil.which("tfgrpo", path=str(Path(sys.executable).parent)) or "tfgrpo"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "lib.json").write_text(json.dumps(LIBRARY))
        other = dict(LIBRARY, version=3, experiences=LIBRARY["experiences"][:-1])
        (folder / "other.json").write_text(json.dumps(other))
        (folder / "rows.jsonl").write_text(json.dumps({"completion": "\\boxed{3}", "answer": "3"}) + "\n")
        subprocess.run([tfgrpo, "export", str(folder / "lib.json"), "--format", "md", "--out", str(folder / "lib.md")])
        print(f"cpu: {_cpu_model()}, load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'command':<22} {'wall s':>7} {'CPU s':>6} {'python -c pass (wall)':>22}")
        for name, argv in commands(folder).items():
            ours, floor = [], []
            for _ in range(args.repeats):
                ours.append(_seconds([tfgrpo, *argv]))
                floor.append(_seconds([sys.executable, "-c", "pass"])[0])
            wall = statistics.median(w for w, _ in ours)
            cpu = statistics.median(c for _, c in ours)
            print(f"{name:<22} {wall:>7.3f} {cpu:>6.3f} {statistics.median(floor):>22.3f}")
        print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
