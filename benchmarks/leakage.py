"""Precision and recall of the leakage guard on its three labelled sets of math lessons.

    OMP_NUM_THREADS=1 python benchmarks/leakage.py [--misses]

The sets, their references and the modes are described in tests/helpers/leakage_sets.py; docs/trust.md says
which set was held out from which version of the guard.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

from tests.helpers.leakage_sets import SETS, measure  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list the missed leaks and rejected rules")
    args = parser.parse_args()
    for labelled in SETS:
        count, size, results = measure(labelled)
        print(
            f"\nSet {labelled.name}: {count} lessons; references: {size} problems ({', '.join(labelled.references)})\n"
        )
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
            for row in results[1:]:
                for missed in row["missed"]:
                    print(f"{row['mode']}: missed {missed['kind']} {missed['problem']}: {missed['text']}")
                for false in row["false"]:
                    print(f"{row['mode']}: rejected rule: {false['text']}")


if __name__ == "__main__":
    main()
