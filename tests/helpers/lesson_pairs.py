"""The labelled pairs of lessons (tests/data/lesson_*.jsonl) and what the dedup rule does with them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "data"
SETS = (
    "lesson_pairs.jsonl",
    "lesson_contrasts.jsonl",
    "lesson_contrasts_heldout.jsonl",
    "lesson_contrasts_final.jsonl",
    "lesson_contrasts_fresh.jsonl",  # built blind to the rule after all the above: the set results are reported on
)


def load_pairs(name: str) -> list[dict[str, Any]]:
    """A set's rows, each with `same` (bool) and `rule` ("paraphrase" / "different" in lesson_pairs)."""
    rows = [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]
    for row in rows:
        if "duplicate" in row:  # lesson_pairs.jsonl: no rule names
            row["same"], row["rule"] = bool(row["duplicate"]), "paraphrase" if row["duplicate"] else "different"
        else:
            row["same"] = row["label"] == "same"
    return rows


def fold_decisions(rows: list[dict[str, Any]], embedder: Any) -> list[tuple[dict[str, Any], float, bool, str | None]]:
    """Per pair: (row, cosine, folded, the meaning difference found)."""
    import numpy as np

    from tfgrpo.experiences.contrast import meaning_difference
    from tfgrpo.experiences.dedup import is_near_duplicate

    a = np.asarray(embedder.embed([r["a"] for r in rows]))
    b = np.asarray(embedder.embed([r["b"] for r in rows]))
    cosines = (a * b).sum(axis=1)
    return [
        (row, float(c), is_near_duplicate(row["a"], row["b"], float(c)), meaning_difference(row["a"], row["b"]))
        for row, c in zip(rows, cosines, strict=True)
    ]
