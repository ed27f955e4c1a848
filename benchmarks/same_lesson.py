"""Does dedup fold only what is one lesson? The rule of `tfgrpo learn` and `library dedup` on labelled pairs.

    OMP_NUM_THREADS=1 python benchmarks/same_lesson.py [--misses]

Five sets of pairs (tests/data, provenance in each set's .md):
- lesson_pairs.jsonl (80): the set the threshold was chosen on (the lowest cosine folding no different pair);
- lesson_contrasts.jsonl (135): near-misses made by written perturbation rules from public lesson libraries
  and hand-checked paraphrases, used while the word checks were written (a development set);
- lesson_contrasts_heldout.jsonl (132): built the same way from other seeds after that, by someone who had
  not seen the rule; its first measurement is in the docs, and its misses then shaped the word checks too;
- lesson_contrasts_final.jsonl (132): built the same way from other seeds again, after both; its misses
  shaped the checks too;
- lesson_contrasts_fresh.jsonl (132): built the same way, blind to the rule, from sources none of the
  others used, after all of them: the set the result is reported on.

A pair is folded when `tfgrpo.experiences.dedup.is_near_duplicate` says so with the offline MiniLM's cosine; the
table gives, per rule of the perturbation, how many pairs were folded (0 is the target for different
pairs; >= 80% for paraphrases).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.lesson_pairs import SETS, fold_decisions, load_pairs  # noqa: E402


def table(name: str, decisions: list[tuple[dict[str, Any], float, bool, str | None]]) -> str:
    total, folded = Counter(), Counter()
    for row, _, fold, _ in decisions:
        total[row["rule"]] += 1
        folded[row["rule"]] += fold
    same = [d for d in decisions if d[0]["same"]]
    different = [d for d in decisions if not d[0]["same"]]
    lines = [
        f"\n{name}: {len(same)} paraphrase pairs, {len(different)} different pairs",
        "",
        "| rule | folded |",
        "|---|---:|",
    ]
    lines += [f"| {rule} | {folded[rule]}/{total[rule]} |" for rule in sorted(total)]
    lines.append(
        f"| **different pairs folded** | **{sum(d[2] for d in different)}/{len(different)}** |\n"
        f"| **paraphrase pairs folded** | **{sum(d[2] for d in same)}/{len(same)} "
        f"({sum(d[2] for d in same) / max(len(same), 1):.0%})** |"
    )
    return "\n".join(lines)


def main() -> None:
    from tfgrpo.experiences.onnx_embedder import OnnxMiniLMEmbedder

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--misses", action="store_true", help="List the pairs decided wrongly.")
    parser.add_argument("--sets", nargs="*", default=list(SETS), help="Which sets (default: all four).")
    args = parser.parse_args()
    embedder = OnnxMiniLMEmbedder()
    for name in args.sets:
        decisions = fold_decisions(load_pairs(name), embedder)
        print(table(name, decisions))
        if args.misses:
            for row, cosine, fold, why in decisions:
                if fold != row["same"]:
                    print(
                        f"  {'FOLDED' if fold else 'kept'} {row['rule']} cos {cosine:.2f} ({why}): {row['a']} | {row['b']}"
                    )


if __name__ == "__main__":
    main()
