"""Traces of `tfgrpo serve`: feedback (reward or gold answer), PostgreSQL, and the arm comparison."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from tests.helpers.postgres_server import postgres_server
from tests.helpers.serve_fixtures import proxy
from tests.helpers.serve_upstream import ScriptedUpstream
from tfgrpo.eval.traces import compare_traces
from tfgrpo.serve.traces import TraceStore

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


def _ask(url: str, messages=QUESTION, **fields) -> httpx.Response:
    response = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": messages, **fields})
    assert response.status_code == 200
    return response


def test_feedback_with_a_reward_or_a_gold_answer_scored_by_the_reward(tmp_path):
    upstream = ScriptedUpstream(responder=lambda m, k: "The answer is \\boxed{4}")
    with proxy(tmp_path, upstream) as p:
        first, second = _ask(p.url).headers["x-tfgrpo-exchange-id"], _ask(p.url).headers["x-tfgrpo-exchange-id"]
        given = httpx.post(p.url + "/v1/feedback", json={"id": first, "reward": 0.25})
        assert given.status_code == 200 and given.json()["reward"] == 0.25
        right = httpx.post(p.url + "/v1/feedback", json={"id": second, "gold": "4"})
        assert right.json() == {"id": second, "reward": 1.0, "gold": "4"}
        wrong = httpx.post(p.url + "/v1/feedback", json={"id": second, "gold": "5"})
        assert wrong.json()["reward"] == 0.0
        stored = {row["id"]: row for row in p.state.traces.exchanges(with_feedback=True)}
        assert stored[first]["reward"] == 0.25 and stored[first]["gold"] is None
        assert stored[second]["reward"] == 0.0 and stored[second]["gold"] == "5" and stored[second]["feedback_at"] > 0


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"nope", 400, "not valid JSON"),
        (b'{"reward": 1}', 400, '"id"'),
        (b'{"id": "x"}', 400, "exactly one of 'reward'"),
        (b'{"id": "x", "reward": 1, "gold": "4"}', 400, "exactly one of"),
        (b'{"id": "x", "reward": "high"}', 400, "finite number"),
        (b'{"id": "x", "reward": 1, "extra": 2}', 400, "unknown feedback field"),
        (b'{"id": "no-such-exchange", "reward": 1}', 404, "no exchange"),
        (b'{"id": "no-such-exchange", "gold": "4"}', 404, "no exchange"),
    ],
)
def test_bad_feedback_is_refused_with_a_clear_message(tmp_path, body, status, message):
    with proxy(tmp_path) as p:
        response = httpx.post(p.url + "/v1/feedback", content=body)
        assert response.status_code == status and message in response.json()["error"]["message"]


def test_postgresql_traces_on_a_real_server(tmp_path):
    with postgres_server() as url:
        upstream = ScriptedUpstream(responder=lambda m, k: "\\boxed{4}")
        with proxy(tmp_path, upstream, traces=url, holdout=0.5) as p:
            ids = [_ask(p.url, user=f"u{i}").headers["x-tfgrpo-exchange-id"] for i in range(8)]
            for exchange_id in ids:
                assert httpx.post(p.url + "/v1/feedback", json={"id": exchange_id, "gold": "4"}).status_code == 200
            stream = httpx.post(
                p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION, "stream": True}
            )
            assert stream.status_code == 200 and "[DONE]" in stream.text
            p.traces(9)
        store = TraceStore(url)  # a new connection: the rows are in the database, not in memory
        rows = store.exchanges()
        store.close()
        assert len(rows) == 9 and sum(row["reward"] == 1.0 for row in rows) == 8
        assert {row["arm"] for row in rows} == {"A", "B"}
        assert all(row["reply"] == "\\boxed{4}" for row in rows)
        results = compare_traces(url)
        assert results[0].arms["A"].exchanges + results[0].arms["B"].exchanges == 8
        assert results[0].paired.num_problems == 1 and results[0].paired.diff == 0.0  # one prompt, seen in both arms


def _fake_rows(store: TraceStore) -> None:
    rewards = {  # prompt -> (A rewards, B rewards) on version 1; version 2 only B
        "p1": ([0.0, 0.0], [1.0]),
        "p2": ([1.0], [1.0, 1.0]),
        "p3": ([0.0], [1.0]),
        "p4": ([], [0.0]),
    }
    n = 0
    for prompt, (a, b) in rewards.items():
        for arm, values in (("A", a), ("B", b)):
            for reward in values:
                n += 1
                store.add(
                    {
                        "id": f"x{n}",
                        "created_at": float(n),
                        "model": "m",
                        "upstream": "u",
                        "arm": arm,
                        "library_version": 1,
                        "injected_ids": "[]",
                        "prompt_key": prompt,
                        "messages": json.dumps([{"role": "user", "content": prompt}]),
                        "reply": "r",
                        "status": 200,
                        "stream": False,
                        "latency_ms": 1.0,
                        "prompt_tokens": 1,
                        "completion_tokens": 1,
                        "reward": reward,
                    }
                )
    store.add(
        {
            "id": "v2",
            "created_at": 99.0,
            "model": "m",
            "upstream": "u",
            "arm": "B",
            "library_version": 2,
            "injected_ids": "[]",
            "prompt_key": "p1",
            "messages": "[]",
            "reply": "r",
            "status": 200,
            "stream": False,
            "reward": 1.0,
        }
    )
    store.flush()


def test_compare_traces_pairs_prompts_seen_in_both_arms(tmp_path):
    store = TraceStore(tmp_path / "t.sqlite")
    _fake_rows(store)
    store.close()
    version1, version2, overall = compare_traces(tmp_path / "t.sqlite")
    assert version1.version == "1" and version2.version == "2" and overall.version == "all"
    assert version1.arms["A"].exchanges == 4 and version1.arms["A"].mean_reward == 0.25
    assert version1.arms["B"].exchanges == 5 and version1.arms["B"].mean_reward == 0.8
    # paired over p1, p2, p3: per-prompt means A = 0, 1, 0 and B = 1, 1, 1
    assert version1.paired.num_problems == 3 and version1.paired.diff == pytest.approx(2 / 3)
    assert (
        version1.paired.wins == 2 and version1.paired.ties == 1 and version1.paired.p_value == 0.5
    )  # exact: 4 sign flips
    assert version2.paired is None and version2.arms["A"].exchanges == 0


def test_compare_cli_prints_the_arms(tmp_path):
    store = TraceStore(tmp_path / "t.sqlite")
    _fake_rows(store)
    store.close()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfgrpo",
            "compare",
            "--traces",
            str(tmp_path / "t.sqlite"),
            "--out",
            str(tmp_path / "report"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "+0.667" in result.stdout and "0.250" in result.stdout and "0.800" in result.stdout
    saved = json.loads((tmp_path / "report" / "traces_comparison.json").read_text())
    assert [entry["version"] for entry in saved] == ["1", "2", "all"]
    both = subprocess.run(
        [sys.executable, "-m", "tfgrpo", "compare", "runs/a", "--traces", "t.sqlite"], capture_output=True, text=True
    )
    assert both.returncode == 2 and "either eval run directories or --traces" in both.stderr
