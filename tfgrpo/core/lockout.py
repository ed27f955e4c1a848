"""Test-set lockout: refuse to learn (or validate) on problems of a set whose score will be reported.

A problem of the learning data matches a test problem when
- their ids are equal (ids a file did not give, `row-NNNN` from the row position, are never compared:
  two unrelated files share them), or
- their texts are equal after normalisation: lower case, every run of non-alphanumeric characters made one
  space (so spacing, punctuation and LaTeX delimiters do not hide a copy); compared as SHA-256 hashes.

The bundled benchmarks (`BENCHMARKS`: aime24, aime25) are always test sets (amc23 is the bundled held-out
validation set, so it is not); users declare more
(`learn --test-data FILE`). `tfgrpo learn` calls `check_no_test_overlap` before any LLM call.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel

from tfgrpo.core.datasets import Problem, load_dataset_rows
from tfgrpo.core.errors import EvalError

BENCHMARKS = ("aime24", "aime25")
_GENERATED_ID = re.compile(r"^row-\d{4,}$")
_NON_WORD = re.compile(r"[\W_]+")
_SHOWN = 3


class TestSetOverlapError(EvalError):
    """Learning or validation data shares problems with a test set."""

    __test__ = False  # not a pytest test class


class Overlap(BaseModel):
    data: str  # the learning data's name (--data / --val-data)
    data_id: str
    test_set: str
    test_id: str
    by: str  # "id" | "text"


def text_hash(text: str) -> str:
    """SHA-256 of the normalised problem text (see the module docstring)."""
    normalized = _NON_WORD.sub(" ", text.lower()).strip()
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()


def find_test_overlap(
    data: Mapping[str, Sequence[Problem]], test_sets: Mapping[str, Sequence[Problem]]
) -> list[Overlap]:
    """Every (learning problem, test problem) pair that matches by id or by text, in data order."""
    overlaps: list[Overlap] = []
    for test_name, test_problems in test_sets.items():
        by_id = {p.id: p for p in test_problems if not _GENERATED_ID.match(p.id)}
        by_text = {text_hash(p.problem): p for p in test_problems}
        for data_name, problems in data.items():
            for problem in problems:
                same_id = None if _GENERATED_ID.match(problem.id) else by_id.get(problem.id)
                if same_id is not None:
                    overlaps.append(
                        Overlap(data=data_name, data_id=problem.id, test_set=test_name, test_id=same_id.id, by="id")
                    )
                    continue
                same_text = by_text.get(text_hash(problem.problem))
                if same_text is not None:
                    overlaps.append(
                        Overlap(
                            data=data_name, data_id=problem.id, test_set=test_name, test_id=same_text.id, by="text"
                        )
                    )
    return overlaps


def load_test_sets(
    declared: Sequence[str] = (), *, include_benchmarks: bool = True, cache_dir: Path | None = None, **keys: str
) -> dict[str, list[Problem]]:
    """The bundled benchmarks plus the declared sets (names or files), by name; `keys` are the column names."""
    names = [*(BENCHMARKS if include_benchmarks else ()), *declared]
    return {
        name: load_dataset_rows(name, require_answer=False, cache_dir=cache_dir, **keys)
        for name in dict.fromkeys(names)
    }


def check_no_test_overlap(data: Mapping[str, Sequence[Problem]], test_sets: Mapping[str, Sequence[Problem]]) -> None:
    """Raise `TestSetOverlapError` (one line) when any learning problem is a test problem."""
    overlaps = find_test_overlap(data, test_sets)
    if not overlaps:
        return
    first = overlaps[0]
    shown = ", ".join(f"{o.data_id}={o.test_set}:{o.test_id} (by {o.by})" for o in overlaps[:_SHOWN])
    more = f" and {len(overlaps) - _SHOWN} more" if len(overlaps) > _SHOWN else ""
    sets = ", ".join(sorted({o.test_set for o in overlaps}))
    raise TestSetOverlapError(
        f"{first.data} shares {len(overlaps)} problem(s) with the test set(s) {sets}: {shown}{more}; a score on a set "
        "you learned from means nothing. Remove them, or pass --allow-test-overlap to learn anyway"
    )


__all__ = [
    "BENCHMARKS",
    "Overlap",
    "TestSetOverlapError",
    "check_no_test_overlap",
    "find_test_overlap",
    "load_test_sets",
    "text_hash",
]
