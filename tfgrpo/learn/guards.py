"""The guards a learn run applies so its results can be trusted (docs/trust.md).

- Test-set lockout, before any LLM call: the training and validation data must not share problems with
  the bundled benchmarks or the user's declared test sets (`tfgrpo.core.lockout`).
- Leakage, after every step's consolidation: an operation whose text contains a gold answer of a
  training, validation or declared test problem tied to that problem (it came from that problem's group
  alone, names the problem by its id, a quote or a token only it has, or the value is too specific for
  chance), or copies one, is rejected or flagged per the config (`tfgrpo.experiences.leakage`); an untied
  match (a general rule's number that equals some problem's answer) is only flagged. Every finding is recorded in the step's metrics and the library
  history.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from tfgrpo.core.datasets import Problem, dataset_cache_dir
from tfgrpo.core.lockout import check_no_test_overlap, find_test_overlap, load_test_sets
from tfgrpo.experiences.leakage import LeakageChecker, LeakFinding
from tfgrpo.experiences.lexical import similar_pairs
from tfgrpo.experiences.model import Library
from tfgrpo.experiences.ops import Operation
from tfgrpo.learn.config import LearnConfig


def load_declared_test_sets(config: LearnConfig) -> dict[str, list[Problem]]:
    keys = {"problem_key": config.problem_key, "answer_key": config.answer_key, "id_key": config.id_key}
    return load_test_sets(config.test_data, cache_dir=dataset_cache_dir(config.dataset_cache, config.out), **keys)


def check_learning_data(
    config: LearnConfig,
    problems: Sequence[Problem],
    val_problems: Sequence[Problem],
    test_sets: dict[str, list[Problem]],
) -> str | None:
    """Raise on overlap with a test set; with `allow_test_overlap`, return a warning line instead (None: clean)."""
    data = {f"--data {config.data}": problems}
    if val_problems:
        data[f"--val-data {config.val_data}"] = val_problems
    if not config.allow_test_overlap:
        check_no_test_overlap(data, test_sets)
        return None
    overlaps = find_test_overlap(data, test_sets)
    if not overlaps:
        return None
    return f"learning data shares {len(overlaps)} problem(s) with test sets (allowed by --allow-test-overlap)"


@dataclass
class Screened:
    """Operations that passed, and every finding with what was done about it."""

    kept: list[Operation]
    records: list[dict[str, Any]] = field(default_factory=list)  # one per finding: action, kind, problem, op


class LeakageGuard:
    """Screens a step's final operations against the run's training, validation and test problems.

    Its index of those problems (`checker`) is built on first use, the first consolidation's screen: a fresh
    run's empty starting library needs no index for its warnings.
    """

    def __init__(self, config: LearnConfig, sets: dict[str, Sequence[Problem]]) -> None:
        self.modes = {"answer": config.leakage, "copy": config.leakage_copy}
        self._build = partial(
            LeakageChecker, sets, ngram=config.leakage_ngram, copy_threshold=config.leakage_copy_threshold
        )
        self._checker: LeakageChecker | None = None

    @property
    def checker(self) -> LeakageChecker:
        """The index, built on first use."""
        if self._checker is None:
            self._checker = self._build()
        return self._checker

    @classmethod
    def for_run(
        cls,
        config: LearnConfig,
        problems: Sequence[Problem],
        val_problems: Sequence[Problem],
        test_sets: dict[str, list[Problem]],
    ) -> LeakageGuard | None:
        if config.leakage == "off" and config.leakage_copy == "off":
            return None
        declared = {name: test_sets[name] for name in config.test_data if name in test_sets}
        return cls(config, {"train": problems, **({"val": val_problems} if val_problems else {}), **declared})

    def screen(
        self, operations: Sequence[Operation], proposals: Sequence[tuple[str, Sequence[Operation]]] = ()
    ) -> Screened:
        """Screen the final operations; `proposals` are (query id, proposed operations) of the step's groups,
        from which each operation's provenance (the groups that proposed it) is traced."""
        with_text = [(index, op.experience) for index, op in enumerate(operations) if getattr(op, "experience", None)]
        texts = [text for _, text in with_text]
        findings_by_op: dict[int, list[LeakFinding]] = {}
        per_item = self._per_item(texts, proposers(texts, proposals))
        for (index, _), finding_group in zip(with_text, per_item, strict=True):
            findings_by_op[index] = [f for f in finding_group if self.modes[f.kind] != "off"]
        screened = Screened(kept=[])
        for index, op in enumerate(operations):
            findings = findings_by_op.get(index, [])
            reject = any(self.modes[f.kind] == "reject" and f.is_leak for f in findings)
            wire = op.to_wire()
            for finding in findings:
                action = "rejected" if reject else "flagged"
                screened.records.append(
                    {"action": action, **finding.model_dump(exclude={"experience_id"}), "op": wire}
                )
            if not reject:
                screened.kept.append(op)
        return screened

    def initial_warnings(self, library: Library) -> list[str]:
        """The starting library (--init-library) is the user's: its leaks are reported, never removed."""
        if not len(library):
            return []
        return [
            f"--init-library: {finding.describe()}"
            for finding in self.checker.check_library(library)
            if self.modes[finding.kind] != "off"
        ]

    def _per_item(self, texts: list[str], sources: list[set[str]]) -> list[list[LeakFinding]]:
        keyed = self.checker.check(((str(i), text) for i, text in enumerate(texts)), sources)
        grouped: list[list[LeakFinding]] = [[] for _ in texts]
        for finding in keyed:
            grouped[int(finding.experience_id)].append(finding)
        return grouped


#: How close (word-sequence ratio) a final lesson must be to a group's proposal to count as proposed by it.
PROVENANCE_SIMILARITY = 0.6


def proposers(texts: Sequence[str], proposals: Sequence[tuple[str, Sequence[Operation]]]) -> list[set[str]]:
    """For each text, the query ids whose groups proposed it (the same or nearly the same words)."""
    owners = [
        (query_id, proposed)
        for query_id, operations in proposals
        for proposed in (getattr(op, "experience", None) for op in operations)
        if proposed
    ]
    similar = similar_pairs(texts, [proposed for _, proposed in owners], PROVENANCE_SIMILARITY)
    return [{owners[index][0] for index in indices} for indices in similar]


def history_records(screened: Screened) -> list[dict[str, Any]]:
    """The library history's op-log entries for leaked operations that were rejected."""
    reasons: dict[int, list[str]] = {}
    ops: dict[int, dict[str, Any]] = {}
    for record in screened.records:
        if record["action"] == "rejected":
            reasons.setdefault(id(record["op"]), []).append(
                f"{record['kind']} of {record['source']}:{record['problem_id']}"
            )
            ops[id(record["op"])] = record["op"]
    return [
        {"kind": "rejected", "op": ops[key], "reason": "leakage: " + "; ".join(why)} for key, why in reasons.items()
    ]


__all__ = ["LeakageGuard", "Screened", "check_learning_data", "history_records", "load_declared_test_sets"]
