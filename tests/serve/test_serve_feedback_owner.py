"""Who may rate an exchange, and who chooses an arm (issue 43): feedback is bound to the client key that made
the exchange, one rating per exchange, never on a failed one; a client key cannot pick its arm by picking
an `x-tfgrpo-user`. Every test runs a real server in front of a scripted upstream."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from tests.helpers.serve_fixtures import proxy
from tests.helpers.serve_upstream import Fault
from tfgrpo.eval.traces import compare_traces
from tfgrpo.serve.arms import assign_arm
from tfgrpo.serve.config import ServeConfig

HOLDOUT = 0.5


def _identity(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _key_in(arm: str, prefix: str) -> str:
    """A client key whose identity the server assigns to `arm`."""
    return next(f"{prefix}-{i:04d}" for i in range(1000) if assign_arm(_identity(f"{prefix}-{i:04d}"), HOLDOUT) == arm)


def _user_in(arm: str) -> str:
    return next(f"user-{i}" for i in range(100) if assign_arm(f"user-{i}", HOLDOUT) == arm)


ALICE, BOB, MALLORY = _key_in("A", "sk-alice"), _key_in("B", "sk-bob"), _key_in("B", "sk-mallory")
ADMIN = "sk-admin-grader-0001"


def _key_files(tmp_path: Path) -> dict[str, str]:
    clients, admins = tmp_path / "keys.txt", tmp_path / "admins.txt"
    clients.write_text("\n".join([ALICE, BOB, MALLORY]) + "\n")
    admins.write_text(f"sha256:{_identity(ADMIN)}\n")
    return {"client_keys": str(clients), "admin_keys": str(admins)}


def _chat(url: str, key: str, prompt: str = "What is 2+2?", user: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} | ({"x-tfgrpo-user": user} if user else {})
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
    return httpx.post(url + "/v1/chat/completions", json=body, headers=headers)


def _rate(url: str, key: str, exchange_id: str, reward: float) -> httpx.Response:
    return httpx.post(
        url + "/v1/feedback", json={"id": exchange_id, "reward": reward}, headers={"authorization": f"Bearer {key}"}
    )


def _refused(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"]


def test_only_the_key_that_made_an_exchange_or_an_admin_may_rate_it(tmp_path):
    with proxy(tmp_path, holdout=HOLDOUT, **_key_files(tmp_path)) as p:
        exchange = _chat(p.url, ALICE).headers["x-tfgrpo-exchange-id"]
        _refused(_rate(p.url, MALLORY, exchange, 0.0), 403, "not_exchange_owner")
        _refused(_rate(p.url, MALLORY, "f" * 32, 0.0), 404, "exchange_not_found")
        assert p.state.traces.exchange(exchange)["reward"] is None  # the forgery left nothing
        assert _rate(p.url, ALICE, exchange, 1.0).status_code == 200
        assert _rate(p.url, ADMIN, exchange, 0.5).status_code == 200  # a grader the operator trusts
        row = p.state.traces.exchange(exchange)
        assert row["owner"] == _identity(ALICE) and row["reward"] == 0.5
        history = p.state.traces.feedback_history(exchange)
        assert [(e["reward"], e["rated_by"]) for e in history] == [(1.0, _identity(ALICE)), (0.5, _identity(ADMIN))]
        files = [tmp_path / name for name in ("traces.sqlite", "traces.sqlite-wal")]
        stored = b"".join(path.read_bytes() for path in files if path.exists())
        for key in (ALICE, MALLORY, ADMIN):
            assert key.encode() not in stored  # the store holds the keys' hashes, never a key


def test_a_later_rating_replaces_the_earlier_and_compare_counts_each_exchange_once(tmp_path):
    with proxy(tmp_path, **_key_files(tmp_path)) as p:
        exchange = _chat(p.url, BOB).headers["x-tfgrpo-exchange-id"]
        for reward in (0.0, 0.0, 0.0, 1.0):
            assert _rate(p.url, BOB, exchange, reward).status_code == 200
        assert [e["reward"] for e in p.state.traces.feedback_history(exchange)] == [0.0, 0.0, 0.0, 1.0]
    (result,) = compare_traces(tmp_path / "traces.sqlite")
    assert result.arms["B"].exchanges == 1 and result.arms["B"].mean_reward == 1.0


def test_a_failed_exchange_cannot_be_rated(tmp_path):
    with proxy(tmp_path, max_retries=0, **_key_files(tmp_path)) as p:
        p.upstream.push(Fault(status=500))
        failed = _chat(p.url, BOB)
        assert failed.status_code == 500
        exchange = failed.headers["x-tfgrpo-exchange-id"]
        p.traces(1)
        _refused(_rate(p.url, BOB, exchange, 1.0), 409, "exchange_failed")
        _refused(
            httpx.post(
                p.url + "/v1/feedback", json={"id": exchange, "gold": "4"}, headers={"authorization": f"Bearer {BOB}"}
            ),
            409,
            "exchange_failed",
        )
        assert p.state.traces.feedback_history(exchange) == []


def test_a_client_key_cannot_choose_its_arm_with_the_user_header(tmp_path):
    with proxy(tmp_path, holdout=HOLDOUT, **_key_files(tmp_path)) as p:
        for key, arm in ((ALICE, "A"), (BOB, "B")):
            for user in (_user_in("A"), _user_in("B"), None):
                assert _chat(p.url, key, user=user).headers["x-tfgrpo-arm"] == arm, (key, user)
        # an admin key (a backend naming the users it fronts) spreads them over both arms, each sticky
        arms = {
            user: {_chat(p.url, ADMIN, user=user).headers["x-tfgrpo-arm"] for _ in range(2)}
            for user in map(str, range(40))
        }
        assert all(len(seen) == 1 for seen in arms.values()) and {"A", "B"} == set().union(*arms.values())


def test_open_mode_still_assigns_arms_by_the_user_header_and_takes_anyones_feedback(tmp_path):
    """No client keys: nothing about the caller is trusted, so the header is used as sent (documented)."""
    with proxy(tmp_path, holdout=HOLDOUT) as p:
        for arm in ("A", "B"):
            served = httpx.post(
                p.url + "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                headers={"x-tfgrpo-user": _user_in(arm)},
            )
            assert served.headers["x-tfgrpo-arm"] == arm
            given = httpx.post(
                p.url + "/v1/feedback", json={"id": served.headers["x-tfgrpo-exchange-id"], "reward": 1}
            )
            assert given.status_code == 200


PROMPTS = [f"What is {i}+{i}?" for i in range(10)]


def _paired(traces: Path) -> str:
    (result,) = compare_traces(traces)
    paired = result.paired
    return "–" if paired is None else f"{paired.diff:+.3f} [{paired.ci95[0]:+.3f}, {paired.ci95[1]:+.3f}]"


def test_one_key_can_no_longer_split_itself_over_both_arms_and_sink_b(tmp_path):
    """The issue's scenario: one key, 40 requests, each arm picked with `x-tfgrpo-user`, A rated 1 and B 0.
    Before: B − A = −1.000 [−1.000, −1.000] over 10 paired prompts. Now all 40 are in the key's arm, so
    no prompt is in both arms and there is no B − A to read."""
    with proxy(tmp_path, holdout=HOLDOUT, **_key_files(tmp_path)) as p:
        for i in range(40):
            served = _chat(p.url, MALLORY, PROMPTS[(i // 2) % 10], user=_user_in("A" if i % 2 == 0 else "B"))
            reward = 1.0 if served.headers["x-tfgrpo-arm"] == "A" else 0.0
            assert _rate(p.url, MALLORY, served.headers["x-tfgrpo-exchange-id"], reward).status_code == 200
    (result,) = compare_traces(tmp_path / "traces.sqlite")
    assert result.arms["A"].exchanges == 0 and result.arms["B"].exchanges == 40 and result.paired is None
    print("one key, 40 requests: B - A =", _paired(tmp_path / "traces.sqlite"))


def test_forged_feedback_on_other_keys_exchanges_no_longer_shows_in_compare_traces(tmp_path):
    """Alice (arm A) and Bob (arm B) ask the same 10 prompts and rate every reply 1.0; Mallory then rates
    Alice's exchanges 1 and Bob's 0. Before: her 20 forgeries replaced their ratings, B − A = −1.000
    [−1.000, −1.000]. Now each is a 403 and compare reads what Alice and Bob said: B − A = +0.000."""
    with proxy(tmp_path, holdout=HOLDOUT, **_key_files(tmp_path)) as p:
        honest = {
            key: [
                _chat(p.url, key, prompt, user=_user_in("A" if key == ALICE else "B")).headers["x-tfgrpo-exchange-id"]
                for prompt in PROMPTS
            ]
            for key in (ALICE, BOB)
        }
        for key, ids in honest.items():
            for exchange in ids:
                assert _rate(p.url, key, exchange, 1.0).status_code == 200
        forged = [
            _rate(p.url, MALLORY, exchange, 1.0 if key == ALICE else 0.0)
            for key, ids in honest.items()
            for exchange in ids
        ]
        assert [answer.status_code for answer in forged] == [403] * 20
    (result,) = compare_traces(tmp_path / "traces.sqlite")
    assert result.arms["A"].mean_reward == result.arms["B"].mean_reward == 1.0
    assert result.paired is not None and result.paired.num_problems == 10 and result.paired.diff == 0.0
    print("forged ratings of other keys' exchanges: B - A =", _paired(tmp_path / "traces.sqlite"))


def test_admin_keys_need_client_keys(tmp_path):
    admins = tmp_path / "admins.txt"
    admins.write_text(f"{ADMIN}\n")
    with pytest.raises(ValidationError, match="admin_keys needs client_keys"):
        ServeConfig(library=tmp_path / "library.json", upstream=["http://127.0.0.1:1/v1"], admin_keys=admins)
