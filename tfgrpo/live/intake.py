"""The rewarded exchanges of a trace store that came in after a cursor: what the learner learns from.

Read on the learner's own connection, a few explicit columns only (the client's messages, the reply, the
prompt key, the feedback), never the owner's key hash or anything of the request's headers (traces hold
none). Each row becomes a learn problem or a skip with its reason:

- with ground truth, one row per FEEDBACK given, in append order (`tfgrpo_feedback.id` is the cursor): a
  gold answer is the problem's answer; a reward without one counts only at or above `rated_threshold`,
  when the rated reply's final answer becomes the answer (a low rating says the reply was wrong, not what
  is right);
- without ground truth, one row per successful EXCHANGE, in (created_at, id) order (the cursor): every
  served prompt, to be scored against its group's majority answer.

Only rows older than `settle_s` are read, so a row another worker commits a moment late is not passed by.
A row that cannot be a problem (messages that are not JSON, no user message, a prompt cut at
max_trace_chars, a prompt of a locked-out test set) is skipped and recorded; the cursor moves past it all
the same, so nothing is read twice.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from tfgrpo.core.datasets import Problem
from tfgrpo.core.lockout import find_test_overlap
from tfgrpo.rewards.extraction import extract_answer
from tfgrpo.serve.exchange import last_user_text
from tfgrpo.serve.traces import EXCHANGES, FEEDBACK

#: rows read per query: a backlog is consumed over several polls, never loaded whole
PAGE = 1000


@dataclass(frozen=True)
class Cursor:
    """Where reading resumes: the last feedback id read (with ground truth), or the last exchange's
    (created_at, id) (without)."""

    feedback_id: int = 0
    exchange_at: float = 0.0
    exchange_id: str = ""


@dataclass
class Intake:
    """What one read found: problems keyed by prompt (the latest answer wins), skips, the cursor after it."""

    cursor: Cursor
    problems: dict[str, Problem] = field(default_factory=dict)
    rows: int = 0  # trace rows read (a full page: more may wait)
    rewarded: int = 0  # exchanges that became problems (a prompt seen twice counts twice)
    #: {"exchange_id", "reason", "kind": malformed | locked_out | unusable}
    skipped: list[dict[str, Any]] = field(default_factory=list)


class ExchangeReader:
    """Reads the rewarded exchanges after a cursor from `engine` (a trace store's)."""

    def __init__(
        self,
        engine: sa.Engine,
        *,
        ground_truth: bool,
        rated_threshold: float | None,
        settle_s: float,
        test_sets: dict[str, list[Problem]],
    ):
        self.engine = engine
        self.ground_truth = ground_truth
        self.rated_threshold = rated_threshold
        self.settle_s = settle_s
        self.test_sets = test_sets

    def read(self, cursor: Cursor) -> Intake:
        settled = time.time() - self.settle_s
        with self.engine.connect() as connection:
            if self.ground_truth:
                rows = connection.execute(self._feedback_query(cursor, settled)).mappings().all()
            else:
                rows = connection.execute(self._exchange_query(cursor, settled)).mappings().all()
        intake = Intake(cursor=cursor, rows=len(rows))
        for row in rows:
            self._take(intake, row)
            intake.cursor = (
                Cursor(feedback_id=row["feedback_id"])
                if self.ground_truth
                else Cursor(exchange_at=row["created_at"], exchange_id=row["exchange_id"])
            )
        self._lock_out(intake)
        return intake

    def _feedback_query(self, cursor: Cursor, settled: float) -> sa.Select[Any]:
        return (
            sa.select(
                FEEDBACK.c.id.label("feedback_id"),
                FEEDBACK.c.reward,
                FEEDBACK.c.gold,
                EXCHANGES.c.id.label("exchange_id"),
                EXCHANGES.c.prompt_key,
                EXCHANGES.c.messages,
                EXCHANGES.c.reply,
                EXCHANGES.c.truncated,
            )
            .join(EXCHANGES, EXCHANGES.c.id == FEEDBACK.c.exchange_id)
            .where(FEEDBACK.c.id > cursor.feedback_id, FEEDBACK.c.created_at <= settled)
            .order_by(FEEDBACK.c.id)
            .limit(PAGE)
        )

    def _exchange_query(self, cursor: Cursor, settled: float) -> sa.Select[Any]:
        after = sa.or_(
            EXCHANGES.c.created_at > cursor.exchange_at,
            sa.and_(EXCHANGES.c.created_at == cursor.exchange_at, EXCHANGES.c.id > cursor.exchange_id),
        )
        return (
            sa.select(
                EXCHANGES.c.id.label("exchange_id"),
                EXCHANGES.c.created_at,
                EXCHANGES.c.prompt_key,
                EXCHANGES.c.messages,
                EXCHANGES.c.truncated,
            )
            .where(after, EXCHANGES.c.created_at <= settled, EXCHANGES.c.status == 200)
            .order_by(EXCHANGES.c.created_at, EXCHANGES.c.id)
            .limit(PAGE)
        )

    def _take(self, intake: Intake, row: Any) -> None:
        def skip(reason: str, kind: str = "unusable") -> None:
            intake.skipped.append({"exchange_id": row["exchange_id"], "reason": reason, "kind": kind})

        text, problem_error, malformed = _prompt(row)
        if problem_error:
            return skip(problem_error, "malformed" if malformed else "unusable")
        answer: str | None = None
        if self.ground_truth:
            answer, reason = self._answer(row)
            if answer is None:
                return skip(reason)
        key = str(row["prompt_key"])
        intake.problems[key] = Problem(
            id=f"trace-{key[:12]}",
            problem=text,
            answer=answer,
            extra={"exchange_id": row["exchange_id"], "prompt_key": key},
        )
        intake.rewarded += 1

    def _answer(self, row: Any) -> tuple[str | None, str]:
        gold = row["gold"]
        if isinstance(gold, str) and gold.strip():
            return gold.strip(), ""
        if self.rated_threshold is None:
            return None, "a reward without a gold answer (set rated_threshold to learn from rated replies)"
        if row["reward"] is None or row["reward"] < self.rated_threshold:
            return None, f"rated below rated_threshold {self.rated_threshold:g}"
        answer = extract_answer(row["reply"] or "")
        return (answer, "") if answer else (None, "the rated reply has no final answer")

    def _lock_out(self, intake: Intake) -> None:
        """Prompts of a test set are never learned from: dropped, and recorded as skipped."""
        if not intake.problems or not self.test_sets:
            return
        overlaps = find_test_overlap({"traces": list(intake.problems.values())}, self.test_sets)
        locked = {overlap.data_id: overlap for overlap in overlaps}
        for key, problem in list(intake.problems.items()):
            overlap = locked.get(problem.id)
            if overlap is not None:
                del intake.problems[key]
                intake.rewarded -= 1
                intake.skipped.append(
                    {
                        "exchange_id": problem.extra["exchange_id"],
                        "reason": f"locked out: the prompt is {overlap.test_set}:{overlap.test_id} (by {overlap.by})",
                        "kind": "locked_out",
                    }
                )


def _prompt(row: Any) -> tuple[str, str, bool]:
    """The last user message's text, or ('', why it cannot be a problem, whether the row is malformed)."""
    try:
        messages = json.loads(row["messages"])
        truncated = json.loads(row["truncated"]) if row["truncated"] else {}
    except (TypeError, ValueError) as exc:
        return "", f"malformed row: not JSON ({type(exc).__name__})", True
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return "", "malformed row: messages are not a list of messages", True
    if isinstance(truncated, dict) and "messages" in truncated:
        return "", "the prompt was cut at max_trace_chars", False
    text = last_user_text(messages)
    if not text.strip():
        return "", "no user message", False
    return text, "", False


__all__ = ["Cursor", "ExchangeReader", "Intake"]
