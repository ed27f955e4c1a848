"""Bounded inputs of `tfgrpo serve`: every limit answers a 4xx OpenAI-style error, on every route, and the
server keeps serving; feedback keeps its history and its rewards within bounds."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.helpers.serve_fixtures import announce_a_body_and_stall, proxy
from tfgrpo.eval.traces import compare_traces

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


def _error(response: httpx.Response, status: int, code: str) -> dict:
    assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"} and error["code"] == code, error
    return error


def _ask(url: str) -> str:
    response = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION})
    assert response.status_code == 200
    return response.headers["x-tfgrpo-exchange-id"]


def test_a_long_feedback_id_is_refused_without_being_echoed(tmp_path):
    with proxy(tmp_path) as p:
        response = httpx.post(p.url + "/v1/feedback", json={"id": "x" * 50_000, "reward": 1})
        _error(response, 400, "invalid_feedback")
        assert len(response.content) < 1000  # the id is not sent back


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/feedback", "/health"])
def test_an_oversized_header_is_a_431(tmp_path, route):
    with proxy(tmp_path) as p:  # default: 32 KiB of request line and headers
        headers = {"x-tfgrpo-user": "u" * 100_000}
        body = {"model": "m", "messages": QUESTION}
        response = httpx.request("GET" if route == "/health" else "POST", p.url + route, json=body, headers=headers)
        _error(response, 431, "headers_too_large")
        assert not p.upstream.bodies and len(response.content) < 1000
        assert (
            httpx.post(p.url + "/v1/chat/completions", json=body, headers={"x-tfgrpo-user": "u1"}).status_code == 200
        )


@pytest.mark.parametrize("depth", [101, 30_000])  # 30,000: a RecursionError in Python's parser
def test_deeply_nested_json_is_a_400_on_chat_and_feedback(tmp_path, depth):
    nested = b"[" * depth + b"]" * depth
    with proxy(tmp_path) as p:  # default max_json_depth: 100
        chat = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "extra": ' + nested + b"}"
        _error(httpx.post(p.url + "/v1/chat/completions", content=chat), 400, "json_too_deep")
        _error(httpx.post(p.url + "/v1/feedback", content=b'{"id": ' + nested + b"}"), 400, "json_too_deep")
        assert not p.upstream.bodies
        shallow = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "extra": ' + b"[" * 97 + b"]" * 97
        assert httpx.post(p.url + "/v1/chat/completions", content=shallow + b"}").status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/feedback"])
def test_a_client_that_never_sends_its_body_gets_a_408_and_is_disconnected(tmp_path, path):
    with proxy(tmp_path, body_timeout_s=0.5) as p:
        answer, waited = announce_a_body_and_stall(p.url, path)
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert waited < 5  # answered, then the connection closed: not held until the client's own timeout
        body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["code"] == "body_timeout"


def test_a_feedback_body_over_the_limit_is_a_413(tmp_path):
    with proxy(tmp_path) as p:  # default max_feedback_bytes: 64 KiB
        exchange_id = _ask(p.url)
        response = httpx.post(p.url + "/v1/feedback", json={"id": exchange_id, "gold": "4" * 100_000})
        _error(response, 413, "request_too_large")
        assert httpx.post(p.url + "/v1/feedback", json={"id": exchange_id, "gold": "4"}).status_code == 200


def test_every_route_answers_openai_style_errors(tmp_path):
    with proxy(tmp_path) as p:
        unknown = httpx.post(p.url + "/v1/embeddings", json={"input": "x"})
        _error(unknown, 404, "unknown_route")
        _error(httpx.get(p.url + "/v1/feedback"), 405, "method_not_allowed")
        _error(httpx.delete(p.url + "/health"), 405, "method_not_allowed")
        _error(httpx.get(p.url + "/v1/chat/completions"), 405, "method_not_allowed")
        _error(httpx.post(p.url + "/v1/chat/completions", content=b"{nope"), 400, "invalid_json")
        _error(httpx.post(p.url + "/v1/feedback", json={"id": "no-such-id", "reward": 1}), 404, "exchange_not_found")
        long_path = httpx.get(p.url + "/" + "p" * 20_000)
        _error(long_path, 404, "unknown_route")
        assert len(long_path.content) < 1000


def test_rewards_outside_the_bounds_are_refused_and_the_bounds_are_configurable(tmp_path):
    with proxy(tmp_path) as p:
        exchange_id = _ask(p.url)
        error = _error(
            httpx.post(p.url + "/v1/feedback", json={"id": exchange_id, "reward": 1e9}), 400, "reward_out_of_bounds"
        )
        assert "[0, 1]" in error["message"]
        _error(
            httpx.post(p.url + "/v1/feedback", json={"id": exchange_id, "reward": -0.5}), 400, "reward_out_of_bounds"
        )
    with proxy(tmp_path / "stars", reward_min=1, reward_max=5) as p:
        assert httpx.post(p.url + "/v1/feedback", json={"id": _ask(p.url), "reward": 4}).status_code == 200


def test_feedback_history_is_kept_and_the_latest_wins(tmp_path):
    with proxy(tmp_path, holdout=0.5) as p:
        exchange_id = _ask(p.url)
        for reward in (0.0, 1.0, 0.25):
            assert httpx.post(p.url + "/v1/feedback", json={"id": exchange_id, "reward": reward}).status_code == 200
        assert httpx.post(p.url + "/v1/feedback", json={"id": exchange_id, "gold": "4"}).status_code == 200
        history = p.state.traces.feedback_history(exchange_id)
        assert [(entry["reward"], entry["gold"]) for entry in history] == [
            (0.0, None),
            (1.0, None),
            (0.25, None),
            (0.0, "4"),
        ]
        assert history == sorted(history, key=lambda entry: entry["created_at"])
        assert p.state.traces.exchange(exchange_id)["reward"] == 0.0  # the latest
        p.state.traces.flush()
    (result,) = compare_traces(tmp_path / "traces.sqlite")
    arm = next(stats for stats in result.arms.values() if stats.exchanges)
    assert arm.exchanges == 1 and arm.mean_reward == 0.0
