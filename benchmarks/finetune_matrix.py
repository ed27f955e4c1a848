"""Every fine-tuning method x adapter on a tiny model: status, objective before/after, wall time.

    OMP_NUM_THREADS=1 python benchmarks/finetune_matrix.py [--methods sft,dpo] [--adapters lora,pissa]

Each cell overfits a handful of examples for a few dozen steps through our own config and builder
(`tests/helpers/finetune_cells.py`, the same cells `tests/finetune/test_finetune_learning.py` asserts on) and reports the
method's own objective: SFT NLL, DPO/IPO/cDPO preference margin, KTO/ORPO loss, GRPO/GSPO/PPO reward.
Status: `ok` (the objective improved by the stated margin), `weak` (trained, margin not reached),
`refused` (the combination is refused with one line, which is printed), `error` (anything else).
The process exits non-zero when any cell is `error` or `weak`. Wall time depends on the machine's load:
note `uptime` next to the table.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # two shared cores: more threads is 4-70x slower (ENVIRONMENT.md)
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.helpers.finetune_cells import ADAPTERS, METHODS, OBJECTIVES, learnable_model_dir, run_cell  # noqa: E402
from tests.helpers.tiny_models import build_tiny_tokenizer  # noqa: E402
from tfgrpo.finetune.errors import FinetuneError  # noqa: E402


def one_cell(method: str, peft: str, model_dir: Path, tokenizer, root: Path) -> dict:
    objective = OBJECTIVES[method]
    row = {"method": method, "adapter": peft, "objective": objective.description, "margin": objective.margin}
    started = time.perf_counter()
    try:
        result = run_cell(method, peft, model_dir, tokenizer, tempfile.mkdtemp(dir=root))
    except (FinetuneError, ValueError) as exc:  # a refused combination: the one-line reason
        return {**row, "status": "refused", "note": str(exc).splitlines()[0], "wall_s": time.perf_counter() - started}
    except Exception as exc:  # noqa: BLE001 - a benchmark reports every failure as a cell, and goes on
        return {
            **row,
            "status": "error",
            "note": f"{type(exc).__name__}: {exc}".splitlines()[0],
            "wall_s": time.perf_counter() - started,
        }
    return {
        **row,
        "status": "ok" if result.improved else "weak",
        "before": result.before,
        "after": result.after,
        "gain": result.gain,
        "wall_s": result.wall_s,
        "note": "",
    }


def print_table(rows: list[dict]) -> None:
    print("| method | adapter | status | objective | before | after | gain (margin) | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        numbers = (
            f"{r['before']:.3f} | {r['after']:.3f} | {r['gain']:.3f} ({r['margin']})"
            if "before" in r
            else f"– | – | – ({r['margin']})"
        )
        print(f"| {r['method']} | {r['adapter']} | {r['status']} | {r['objective']} | {numbers} | {r['wall_s']:.1f} |")
    notes = [r for r in rows if r["note"]]
    for r in notes:
        print(f"\n{r['method']} x {r['adapter']} ({r['status']}): {r['note']}", end="")
    if notes:
        print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--adapters", default=",".join(ADAPTERS))
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # TRL / peft notices; the table is the output
    tokenizer = build_tiny_tokenizer()
    rows = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = learnable_model_dir(root, tokenizer)
        for method in args.methods.split(","):
            for peft in args.adapters.split(","):
                rows.append(one_cell(method, peft, model_dir, tokenizer, root))
                print(
                    f"{method:5} {peft:8} {rows[-1]['status']:7} {rows[-1]['wall_s']:.1f}s",
                    file=sys.stderr,
                    flush=True,
                )
    print_table(rows)
    print(f"\n{len(rows)} cells in {time.perf_counter() - started:.0f}s; load: {os.getloadavg()[0]:.2f} (1-min avg)")
    return 1 if any(r["status"] in ("error", "weak") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
