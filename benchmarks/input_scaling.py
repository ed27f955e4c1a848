"""CPU time of the text scanners on long adversarial inputs (issue 43): each should grow ~10x per 10x.

    OMP_NUM_THREADS=1 python benchmarks/input_scaling.py [--sizes 4000,40000,1048576]

Rows: the leakage guard's index over one problem of that text (built for every learn run, `--leakage off`
too), its check of a lesson, the reply parser and answer extraction, on each family of
tests/helpers/adversarial.py. The test (tests/experiences/test_scanners_adversarial.py) bounds the ratio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path and its name would shadow the package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from tests.experiences.test_scanners_adversarial import SCANNERS, _make  # noqa: E402
from tests.helpers.adversarial import PIECES, cpu_seconds  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4000,40000", help="comma-separated input lengths in characters")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print("| scanner | input | " + " | ".join(f"{size:,} chars" for size in sizes) + " |")
    print("|---|---|" + "---:|" * len(sizes))
    for scanner, call in SCANNERS.items():
        for family in [*PIECES, "mixture-1"]:
            times = [cpu_seconds(call, _make(family)(size), runs=1) for size in sizes]
            print(f"| {scanner} | {family} | " + " | ".join(f"{t * 1000:.1f} ms" for t in times) + " |", flush=True)


if __name__ == "__main__":
    main()
