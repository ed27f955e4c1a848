"""`POST /v1/feedback`: a reward for a stored exchange, given directly or as a gold answer to score."""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from rewards.errors import RewardError
from tfgrpo.serve.traces import TraceStore


class FeedbackError(ValueError):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def score_feedback(
    raw: bytes, traces: TraceStore, score: Callable[[str, str], float | None]
) -> tuple[str, float, str | None]:
    """Validate `{"id", "reward"}` or `{"id", "gold"}`, store the reward; (id, reward, gold)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FeedbackError(f"feedback body is not valid JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        raise FeedbackError(
            'feedback must be a JSON object {"id": "<x-tfgrpo-exchange-id>", "reward": 1.0} or {"id": ..., "gold": "..."}'
        )
    unknown = set(body) - {"id", "reward", "gold"}
    if unknown:
        raise FeedbackError(f"unknown feedback field(s): {', '.join(sorted(unknown))}")
    exchange_id, reward, gold = body["id"], body.get("reward"), body.get("gold")
    if (reward is None) == (gold is None):
        raise FeedbackError(
            "send exactly one of 'reward' (a number) or 'gold' (the right answer, scored by the server's reward)"
        )
    if gold is not None and not isinstance(gold, str):
        raise FeedbackError("'gold' must be a string")
    if reward is not None and (
        isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward)
    ):
        raise FeedbackError("'reward' must be a finite number")
    if gold is not None:
        stored = traces.exchange(exchange_id)
        if stored is None:
            raise FeedbackError(f"no exchange with id {exchange_id!r}", status=404)
        if stored["reply"] is None:
            raise FeedbackError(
                f"exchange {exchange_id!r} has no reply to score (status {stored['status']})", status=409
            )
        try:
            reward = score(stored["reply"], gold)
        except RewardError as exc:
            raise FeedbackError(f"could not score the reply: {exc}") from None
        reward = 0.0 if reward is None else reward
    if not traces.set_feedback(exchange_id, reward=float(reward), gold=gold):
        raise FeedbackError(f"no exchange with id {exchange_id!r}", status=404)
    return exchange_id, float(reward), gold
