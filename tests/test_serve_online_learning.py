"""The whole loop: serve -> traffic with feedback -> `learn --from-traces` -> hot reload -> arm B improves.

The scripted upstream answers "What is A+B?" right only half the time (sample k: even right, odd
wrong), unless its system message carries the lesson "When adding A and B, check the carry." — the
lesson the scripted group-advantage stage proposes. So the lesson matters, and only learning puts it there.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from learn_world import PROBLEM, World
from serve_fixtures import proxy, write_library
from serve_upstream import ScriptedUpstream
from typer.testing import CliRunner

from eval.traces import compare_traces
from tfgrpo.cli.app import app

PROBLEMS = [(12, 34), (5, 7), (21, 9)]


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
            response = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": messages, "user": f"user-{user}"})
            assert response.status_code == 200
            feedback = httpx.post(url + "/v1/feedback", json={"id": response.headers["x-tfgrpo-exchange-id"], "gold": str(a + b)})
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
            "learn", "--from-traces", str(traces), "--out", str(tmp_path / "run"), "--backend", "openai", "--model", "m",
            "--base-url", upstream_url, "--api-key", "sk-test", "-G", "4", "--epochs", "1", "--concurrency", "8",
        ]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        learned = json.loads((tmp_path / "run" / "library.json").read_text())
        assert {e["text"] for e in learned["experiences"]} >= {f"When adding {a} and {b}, check the carry." for a, b in PROBLEMS}
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
    by_version = {result.version: result for result in compare_traces(traces)}
    assert by_version[str(new)].paired.diff > 0.25
    assert by_version[str(new)].arms["B"].mean_reward == 1.0
