"""`POST /v1/feedback`: a reward for a stored exchange, given directly or as a gold answer to score.

Every feedback is appended to the exchange's history; the latest is the exchange's reward. A reward sent
directly must lie within the configured bounds (default [0, 1], the range of the built-in rewards), so a
typo like 1e9 cannot swamp a comparison. Nothing unbounded is echoed back: an id longer than any exchange
id is refused without being repeated.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tfgrpo.rewards.errors import RewardError
from tfgrpo.serve.errors import RequestRejected
from tfgrpo.serve.limits import load_json
from tfgrpo.serve.traces import ID_CHARS, TraceStore

USAGE = 'feedback must be a JSON object {"id": "<x-tfgrpo-exchange-id>", "reward": 1.0} or {"id": ..., "gold": "..."}'


def _invalid(message: str) -> RequestRejected:
    return RequestRejected(400, message, "invalid_feedback")


def score_feedback(
    raw: bytes,
    traces: TraceStore,
    score: Callable[[str, str], float | None],
    *,
    reward_bounds: tuple[float, float],
    max_json_depth: int,
) -> tuple[str, float, str | None]:
    """Validate `{"id", "reward"}` or `{"id", "gold"}`, store the reward; (id, reward, gold)."""
    body = load_json(raw, max_json_depth, what="feedback body")
    if not isinstance(body, dict) or not isinstance(body.get("id"), str):
        raise _invalid(USAGE)
    unknown = set(body) - {"id", "reward", "gold"}
    if unknown:
        raise _invalid(f"unknown feedback field(s): {', '.join(sorted(unknown))[:200]}")
    exchange_id, reward, gold = body["id"], body.get("reward"), body.get("gold")
    if len(exchange_id) > ID_CHARS:
        raise _invalid(f"'id' is longer than any exchange id ({ID_CHARS} characters): send x-tfgrpo-exchange-id")
    if (reward is None) == (gold is None):
        raise _invalid(
            "send exactly one of 'reward' (a number) or 'gold' (the right answer, scored by the server's reward)"
        )
    if gold is not None and not isinstance(gold, str):
        raise _invalid("'gold' must be a string")
    if gold is None:
        value = _checked_reward(reward, reward_bounds)
    else:
        value = _score_gold(exchange_id, gold, traces, score)
    if not traces.set_feedback(exchange_id, reward=value, gold=gold):
        raise _not_found(exchange_id)
    return exchange_id, value, gold


def _checked_reward(reward: object, bounds: tuple[float, float]) -> float:
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise _invalid("'reward' must be a finite number")
    low, high = bounds
    if not low <= reward <= high:
        raise RequestRejected(
            400, f"'reward' must lie in [{low:g}, {high:g}] (reward_min, reward_max)", "reward_out_of_bounds"
        )
    return float(reward)


def _score_gold(exchange_id: str, gold: str, traces: TraceStore, score: Callable[[str, str], float | None]) -> float:
    stored = traces.exchange(exchange_id)
    if stored is None:
        raise _not_found(exchange_id)
    if stored["reply"] is None:
        raise RequestRejected(
            409, f"exchange {exchange_id!r} has no reply to score (status {stored['status']})", "no_reply_to_score"
        )
    try:
        reward = score(stored["reply"], gold)
    except RewardError as exc:
        raise _invalid(f"could not score the reply: {exc}") from None
    return 0.0 if reward is None else float(reward)


def _not_found(exchange_id: str) -> RequestRejected:
    return RequestRejected(404, f"no exchange with id {exchange_id!r}", "exchange_not_found")
