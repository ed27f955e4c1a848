"""Scoring a JSONL file of completions: the library side of `tfgrpo score`.

Each row needs the completion (key configurable) and, for rewards that compare, the reference. A row
that is not valid JSON, not an object, or lacks a needed key is reported with its line number and
skipped; every other row is scored and written back with `reward`, `extracted` and `reason` added.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tfgrpo.core.textfile import JSONValueError, strict_json_loads
from tfgrpo.rewards.base import Reward
from tfgrpo.rewards.errors import RewardError

NEEDS_REFERENCE = frozenset({"math", "exact", "choice", "numeric", "judge"})


@dataclass
class ScoreSummary:
    rows: int = 0
    scored: int = 0
    unscorable: int = 0
    total_reward: float = 0.0
    malformed: list[str] = field(default_factory=list)

    @property
    def mean_reward(self) -> float | None:
        return self.total_reward / self.scored if self.scored else None

    def line(self) -> str:
        mean = "n/a" if self.mean_reward is None else f"{self.mean_reward:.4f}"
        return (
            f"{self.rows} rows: {self.scored} scored, mean reward {mean}, {self.unscorable} unscorable (None), "
            f"{len(self.malformed)} malformed"
        )


def _parse_line(number: int, line: str, source: str, completion_key: str, answer_key: str | None) -> dict[str, Any]:
    try:
        row = strict_json_loads(line)
    except json.JSONDecodeError as exc:
        raise RewardError(f"{source}:{number}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except JSONValueError as exc:  # a duplicate key, a number too long to read, a lone surrogate
        raise RewardError(f"{source}:{number}: {exc}") from None
    except RecursionError:
        raise RewardError(f"{source}:{number}: JSON nested too deeply to read") from None
    if not isinstance(row, dict):
        raise RewardError(f"{source}:{number}: a row must be a JSON object, got {type(row).__name__}")
    if completion_key not in row:
        raise RewardError(f"{source}:{number}: missing key '{completion_key}' (keys: {sorted(row)})")
    if not isinstance(row[completion_key], (str, list)):
        raise RewardError(f"{source}:{number}: '{completion_key}' must be a string or a list of messages")
    if answer_key is not None and answer_key not in row:
        raise RewardError(f"{source}:{number}: missing key '{answer_key}' (keys: {sorted(row)})")
    return row


def score_lines(
    lines: Iterable[str],
    reward: Reward,
    *,
    source: str = "input",
    completion_key: str = "completion",
    answer_key: str = "answer",
    chunk_size: int = 512,
    summary: ScoreSummary | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield scored rows in input order; malformed lines go to `summary.malformed` (also grouped rewards
    such as `majority` see the whole file as one batch, so their groups are never split)."""
    summary = summary if summary is not None else ScoreSummary()
    needed_answer = answer_key if reward.name in NEEDS_REFERENCE else None
    size = chunk_size if reward.name != "majority" else None
    chunk: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        summary.rows += 1
        try:
            chunk.append((number, _parse_line(number, line, source, completion_key, needed_answer)))
        except RewardError as exc:
            summary.malformed.append(str(exc))
            continue
        if size and len(chunk) >= size:
            yield from _score_chunk(chunk, reward, source, completion_key, answer_key, summary)
            chunk = []
    if chunk:
        yield from _score_chunk(chunk, reward, source, completion_key, answer_key, summary)


def _score_chunk(
    chunk: list[tuple[int, dict[str, Any]]],
    reward: Reward,
    source: str,
    completion_key: str,
    answer_key: str,
    summary: ScoreSummary,
) -> Iterator[dict[str, Any]]:
    try:
        scores = _score_rows([row for _, row in chunk], reward, completion_key, answer_key)
    except RewardError:
        if len(chunk) == 1:
            number = chunk[0][0]
            try:
                scores = _score_rows([chunk[0][1]], reward, completion_key, answer_key)
            except RewardError as exc:
                summary.malformed.append(f"{source}:{number}: {exc}")
                return
        else:  # find the offending rows one by one; the others are still scored
            for item in chunk:
                yield from _score_chunk([item], reward, source, completion_key, answer_key, summary)
            return
    for (_, row), score in zip(chunk, scores, strict=True):
        summary.scored += score.value is not None
        summary.unscorable += score.value is None
        summary.total_reward += score.value or 0.0
        yield {**row, "reward": score.value, "extracted": score.extracted, "reason": score.reason}


def _score_rows(rows: list[dict[str, Any]], reward: Reward, completion_key: str, answer_key: str) -> list[Any]:
    keys = {key for row in rows for key in row} - {completion_key}
    columns = {key: [row.get(key) for row in rows] for key in keys}
    if answer_key != "answer" and answer_key in columns:
        columns["answer"] = columns.pop(answer_key)
    prompts = columns.get("prompt")
    return reward.score([row[completion_key] for row in rows], prompts=prompts, **columns)


__all__ = ["NEEDS_REFERENCE", "ScoreSummary", "score_lines"]
