"""The whole loop: serve -> traffic with feedback -> `learn --from-traces` -> hot reload -> arm B improves.

The scripted upstream answers "What is A+B?" right only half the time (sample k: even right, odd
wrong), unless its system message carries the lesson "When adding A and B, check the carry." — the
lesson the scripted group-advantage stage proposes. So the lesson matters, and only learning puts it there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from tests.helpers.learn_world import PROBLEM, World
from tests.helpers.serve_fixtures import proxy, write_library
from tests.helpers.serve_upstream import ScriptedUpstream
from tfgrpo.cli.app import app
from tfgrpo.eval.traces import compare_traces
from tfgrpo.serve.dataset import problems_from_traces
from tfgrpo.serve.traces import TraceStore

PROBLEMS = [(12, 34), (5, 8), (21, 9)]  # no lesson names another problem's answer (the leakage guard would reject it)


class LessonWorld(World):
    def reply_for(self, messages, index):
        system = " ".join(m["content"] for m in messages if m["role"] == "system")
        match = PROBLEM.search(messages[-1]["content"] or "")
        if match and f"When adding {match[1]} and {match[2]}, check the carry." in system:
            return f"Carefully: \\boxed{{{int(match[1]) + int(match[2])}}}"
        return super().reply_for(messages, index)


def _serve_round(url: str, users: range) -> None:
    for user in users:
        for a, b in PROBLEMS:
            messages = [{"role": "user", "content": f"What is {a}+{b}?"}]
            response = httpx.post(
                url + "/v1/chat/completions", json={"model": "m", "messages": messages, "user": f"user-{user}"}
            )
            assert response.status_code == 200
            feedback = httpx.post(
                url + "/v1/feedback", json={"id": response.headers["x-tfgrpo-exchange-id"], "gold": str(a + b)}
            )
            assert feedback.status_code == 200


def _mean(rows, arm, version):
    rewards = [r["reward"] for r in rows if r["arm"] == arm and r["library_version"] == version]
    return sum(rewards) / len(rewards)


@pytest.mark.timeout(300)
def test_library_learned_from_served_traffic_improves_the_library_arm(tmp_path):
    world = LessonWorld()
    upstream = ScriptedUpstream(responder=world.reply_for)
    library = tmp_path / "library.json"
    write_library(library, {}, version=0)
    traces = tmp_path / "traces.sqlite"
    with proxy(tmp_path, upstream, library=library, traces=str(traces), holdout=0.5, reload_interval_s=0.1) as p:
        _serve_round(p.url, range(8))
        upstream_url = p.state.config.upstream[0]
        args = [
            "learn",
            "--from-traces",
            str(traces),
            "--out",
            str(tmp_path / "run"),
            "--backend",
            "openai",
            "--model",
            "m",
            "--base-url",
            upstream_url,
            "--api-key",
            "sk-test",
            "-G",
            "4",
            "--epochs",
            "1",
            "--concurrency",
            "8",
        ]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        learned = json.loads((tmp_path / "run" / "library.json").read_text())
        assert {e["text"] for e in learned["experiences"]} >= {
            f"When adding {a} and {b}, check the carry." for a, b in PROBLEMS
        }
        problems = [json.loads(line) for line in (tmp_path / "run" / "traces_problems.jsonl").read_text().splitlines()]
        assert sorted(p_["answer"] for p_ in problems) == sorted(str(a + b) for a, b in PROBLEMS)

        # deploy: replace the served file atomically; serve picks it up without a restart
        (tmp_path / "library.next.json").write_text(json.dumps(learned))
        (tmp_path / "library.next.json").replace(library)
        for _ in range(100):
            if httpx.get(p.url + "/health").json()["library_version"] == learned["version"]:
                break
            time.sleep(0.05)
        assert httpx.get(p.url + "/health").json()["library_version"] == learned["version"] > 0
        _serve_round(p.url, range(8))
        rows = p.state.traces.exchanges(with_feedback=True)
    new = learned["version"]
    assert _mean(rows, "B", new) == 1.0  # the lesson is in every B prompt now
    assert _mean(rows, "B", 0) < 0.75 and _mean(rows, "A", new) < 0.75  # before, and without it: a coin flip
    by_version = {result.library_version: result for result in compare_traces(traces) if result.version != "all"}
    assert by_version[new].paired.diff > 0.25 and by_version[new].treated_paired == by_version[new].paired
    assert by_version[new].arms["B"].mean_reward == 1.0 and by_version[new].untreated == 0
    assert by_version[0].untreated == by_version[0].arms["B"].exchanges  # an empty library treats nobody


def test_problems_from_traces_with_and_without_ground_truth(tmp_path):
    upstream = ScriptedUpstream(responder=lambda m, k: "\\boxed{12}")
    traces = tmp_path / "traces.sqlite"
    with proxy(tmp_path, upstream, traces=str(traces)) as p:
        ids = {}
        for a, b in PROBLEMS:
            for _ in range(2):
                ids[(a, b)] = httpx.post(
                    p.url + "/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": f"What is {a}+{b}?"}]},
                ).headers["x-tfgrpo-exchange-id"]
        httpx.post(p.url + "/v1/feedback", json={"id": ids[PROBLEMS[0]], "gold": "46"})
        httpx.post(p.url + "/v1/feedback", json={"id": ids[PROBLEMS[1]], "reward": 1.0})  # no gold: cannot re-score
    with_gold = problems_from_traces(traces, tmp_path / "gold.jsonl")
    assert (with_gold.problems, with_gold.exchanges, with_gold.skipped_without_gold) == (1, 2, 1)
    assert [json.loads(line) for line in (tmp_path / "gold.jsonl").read_text().splitlines()][0]["answer"] == "46"
    everything = problems_from_traces(traces, tmp_path / "all.jsonl", ground_truth=False)
    rows = [json.loads(line) for line in (tmp_path / "all.jsonl").read_text().splitlines()]
    assert everything.problems == 3 and all("answer" not in row for row in rows)
    assert sorted(row["problem"] for row in rows) == sorted(f"What is {a}+{b}?" for a, b in PROBLEMS)


def test_learn_from_traces_refuses_bad_combinations_with_one_line(tmp_path):
    empty = tmp_path / "empty.sqlite"
    TraceStore(empty).close()
    cases = [
        (["learn", "--from-traces", str(empty), "--data", "easy", "--out", str(tmp_path / "r1")], "exclusive"),
        (["learn", "--from-traces", str(empty)], "needs --out"),
        (["learn", "--from-traces", str(empty), "--out", str(tmp_path / "r2")], "no usable exchanges"),
    ]
    for args, message in cases:
        result = subprocess.run([sys.executable, "-m", "tfgrpo", *args], capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
