"""`POST /v1/feedback`: a reward for a stored exchange, given directly or as a gold answer to score.

Who may rate: with client keys on, only the key that made the exchange (its owner) or an admin key; any
other key gets a 403. An exchange that failed (an error status or code) cannot be rated (409): it has no
answer of the library's to judge. Without client keys (open mode) anyone who knows an exchange id may rate it.

One rating per exchange: every feedback is appended to the exchange's history (with who sent it); the
latest replaces the earlier one as the exchange's reward, which is all a comparison counts. A reward sent
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
    rater: str | None = None,
    rater_is_admin: bool = False,
) -> tuple[str, float, str | None]:
    """Validate `{"id", "reward"}` or `{"id", "gold"}`, store the reward; (id, reward, gold).
    `rater`: the identity (sha256 hex) of the client key sending it; None in open mode."""
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
    stored = traces.exchange(exchange_id)
    if stored is None:
        raise _not_found(exchange_id)
    _check_may_rate(exchange_id, stored, rater, rater_is_admin)
    if gold is not None:
        value = _score_gold(exchange_id, stored, gold, score)
    if not traces.set_feedback(exchange_id, reward=value, gold=gold, rated_by=rater):
        raise _not_found(exchange_id)
    return exchange_id, value, gold


def _check_may_rate(exchange_id: str, stored: dict[str, object], rater: str | None, rater_is_admin: bool) -> None:
    """403 unless `rater` made the exchange (or is an admin); 409 for an exchange that failed.
    In open mode both the owner and the rater are None, so anyone may rate an exchange of open mode, and no
    one an exchange made with a key (the store may outlive a change of mode)."""
    if stored["owner"] != rater and not rater_is_admin:
        raise RequestRejected(
            403,
            f"exchange {exchange_id!r} was made with another client key: only its owner may rate it",
            "not_exchange_owner",
        )
    status = stored["status"]
    if stored["error"] is not None or not isinstance(status, int) or status >= 400:
        raise RequestRejected(
            409,
            f"exchange {exchange_id!r} failed (status {status}): a failed exchange cannot be rated",
            "exchange_failed",
        )


def _checked_reward(reward: object, bounds: tuple[float, float]) -> float:
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        raise _invalid("'reward' must be a finite number")
    low, high = bounds
    if not low <= reward <= high:
        raise RequestRejected(
            400, f"'reward' must lie in [{low:g}, {high:g}] (reward_min, reward_max)", "reward_out_of_bounds"
        )
    return float(reward)


def _score_gold(
    exchange_id: str, stored: dict[str, object], gold: str, score: Callable[[str, str], float | None]
) -> float:
    if not isinstance(stored["reply"], str):
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
