"""Served exchanges as learn problems: what `tfgrpo learn --from-traces` trains on.

Learning needs to score NEW rollouts of a prompt, so with ground truth an exchange is usable when its
feedback carried a gold answer (`{"id", "gold"}`); a bare reward scores one old reply only, and such
exchanges are counted as skipped. Without ground truth (`--no-ground-truth`) every served prompt is
usable (the learn loop scores each group against its majority answer). The problem is the last user
message of the exchange (earlier turns are not replayed); one problem per distinct prompt, with the
most recent gold answer given for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tfgrpo.core.atomic import atomic_write_text
from tfgrpo.serve.exchange import last_user_text
from tfgrpo.serve.traces import TraceStore


@dataclass
class TraceProblems:
    path: Path
    problems: int
    exchanges: int
    skipped_without_gold: int


def problems_from_traces(traces: str | Path, out_file: Path, *, ground_truth: bool = True) -> TraceProblems:
    store = TraceStore(traces)
    try:
        rows = store.exchanges(with_feedback=ground_truth)
    finally:
        store.close()
    problems: dict[str, dict[str, str]] = {}
    skipped = 0
    for row in rows:
        text = last_user_text(row["messages"])
        if not text.strip():
            continue
        if ground_truth and row["gold"] is None:
            skipped += 1
            continue
        entry = {"id": f"trace-{row['prompt_key'][:12]}", "problem": text}
        if ground_truth:
            entry["answer"] = row["gold"]
        problems[row["prompt_key"]] = entry  # rows are oldest first: the latest gold wins
    out_file.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_file, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in problems.values()))
    return TraceProblems(path=out_file, problems=len(problems), exchanges=len(rows), skipped_without_gold=skipped)
