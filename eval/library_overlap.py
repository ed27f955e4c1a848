"""Does a library overlap the set it is evaluated on? Content (leaked answers, copied problems) and provenance.

`tfgrpo eval --library` records the result under `metrics.json` → `provenance.leakage` and warns; `tfgrpo
compare` marks a system whose library overlaps its eval set. Provenance overlap is either of:
- experiences learned from queries whose ids are eval problem ids (generated `row-NNNN` ids excepted);
- the learn run beside the library (its `config.yaml`) named the eval set as `data` or `val_data`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tfgrpo.core.config import ConfigError, load_yaml_text
from tfgrpo.core.datasets import Problem
from tfgrpo.experiences.leakage import LeakageChecker
from tfgrpo.experiences.model import Library

_GENERATED_ID = re.compile(r"^row-\d{4,}$")
_KEPT_FINDINGS = 20


def library_eval_overlap(
    library_path: str | Path, library: Library, problems: Sequence[Problem], *, data_name: str
) -> dict[str, Any]:
    """{overlaps, answer_leaks, copies, provenance_ids, learned_on, findings[:20]} for a library and an eval set."""
    findings = LeakageChecker({data_name: problems}).check_library(library)
    eval_ids = {p.id for p in problems if not _GENERATED_ID.match(p.id)}
    provenance_ids = sorted({qid for e in library for qid in e.provenance.query_ids} & eval_ids)
    learned_on = _learn_run_sets(Path(library_path)) & {data_name}
    return {
        "overlaps": bool(any(f.is_leak for f in findings) or provenance_ids or learned_on),
        "answer_leaks": sum(f.kind == "answer" and f.is_leak for f in findings),
        "coincidences": sum(not f.is_leak for f in findings),
        "copies": sum(f.kind == "copy" for f in findings),
        "provenance_ids": provenance_ids,
        "learned_on": sorted(learned_on),
        "findings": [f.model_dump() for f in findings[:_KEPT_FINDINGS]],
    }


def describe_overlap(overlap: dict[str, Any], data_name: str) -> str:
    parts = []
    if overlap["answer_leaks"]:
        parts.append(f"{overlap['answer_leaks']} experience(s) contain a gold answer")
    if overlap["copies"]:
        parts.append(f"{overlap['copies']} copy a problem")
    if overlap["provenance_ids"]:
        parts.append(f"{len(overlap['provenance_ids'])} eval problem(s) were learning queries")
    if overlap["learned_on"]:
        parts.append("the learn run used this set as data or val_data")
    return (
        f"the library overlaps the eval set {data_name}: "
        + "; ".join(parts)
        + " (details in metrics.json provenance.leakage)"
    )


def _learn_run_sets(library_path: Path) -> set[str]:
    config_path = library_path.parent / "config.yaml"
    if not config_path.is_file():
        return set()
    # the learn run's own config, read by the configs' strict loader: an edited or foreign file (an alias bomb,
    # bytes that are not UTF-8) only means the sets it names are unknown, never a traceback after the run began
    try:
        config = load_yaml_text(config_path.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, ConfigError, UnicodeDecodeError, OSError):
        return set()
    if not isinstance(config, dict):
        return set()
    return {str(config[key]) for key in ("data", "val_data") if config.get(key)}


__all__ = ["describe_overlap", "library_eval_overlap"]
