"""Retries are visible: an injected mix of transient faults is counted by cause in the client's accounting,
the learn step counters and totals (metrics.json), the run summary, and the compare cost table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.servers import Reply
from tfgrpo.cli.app import app
from tfgrpo.core.metrics import summarize
from tfgrpo.eval.compare import compare_runs
from tfgrpo.learn.metrics import StepCounters, epoch_table
from tfgrpo.llm.accounting import TagTotals, context_window, retries_line
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import (
    ConnectionFailedError,
    ContextWindowExceededError,
    MalformedResponseError,
    RateLimitError,
    RequestFailedError,
    RequestTimeoutError,
    ServerError,
)

#: per prompt, the faults its attempts meet before it succeeds (the last prompt never does)
FAULTS = {
    "p0": [RateLimitError("429", retry_after=0.0), RateLimitError("429", retry_after=0.0)],
    "p1": [ServerError("502", status=502)],
    "p2": [RequestTimeoutError("no reply within 1s"), MalformedResponseError("not JSON")],
    "p3": [ConnectionFailedError("reset")],
    "p4": [],
    "dead": [ServerError("503", status=503)] * 10,
}


def faulty_backend() -> ScriptedBackend:
    seen: dict[str, int] = {}

    def respond(request, index):
        prompt = request.messages[-1].content
        attempt = seen.get(prompt, 0)
        seen[prompt] = attempt + 1
        faults = FAULTS[prompt]
        return faults[attempt] if attempt < len(faults) else f"answer to {prompt}"

    return ScriptedBackend(respond)


async def test_the_client_counts_retried_calls_by_cause():
    client = LLMClient(faulty_backend(), max_retries=3, backoff_initial_s=0.001, backoff_max_s=0.002)
    for prompt in ("p0", "p1", "p2", "p3", "p4"):
        [completion] = await client.chat([{"role": "user", "content": prompt}], tag="rollout")
        assert completion.text == f"answer to {prompt}"
    with pytest.raises(RequestFailedError):
        await client.chat([{"role": "user", "content": "dead"}], tag="summary")
    rollout = client.accounting.by_tag["rollout"]
    assert (
        rollout.retries_rate_limit,
        rollout.retries_server_error,
        rollout.retries_timeout,
        rollout.retries_bad_body,
        rollout.retries_connection,
    ) == (2, 1, 1, 1, 1)
    summary = client.accounting.by_tag["summary"]
    assert summary.retries_server_error == 3 and summary.failed_calls == 1  # 4 attempts: 3 retried, then given up
    total = client.accounting.snapshot()["total"]
    assert total["retries_server_error"] == 4 and total["retries_rate_limit"] == 2
    assert retries_line(total) == "retried calls: 9 (429 ×2, 5xx ×4, timeout ×1, bad body ×1, connection ×1)"


async def test_learn_step_counters_and_summary_show_retries():
    client = LLMClient(faulty_backend(), max_retries=3, backoff_initial_s=0.001, backoff_max_s=0.002)
    before = TagTotals(**vars(client.accounting.total))
    for prompt in ("p0", "p2"):
        await client.chat([{"role": "user", "content": prompt}], tag="rollout")
    counters = StepCounters(step=1, epoch=1, batch=1, queries=2)

    class EmptyLibrary:
        version = 1

        def __len__(self):
            return 0

    counters.finish(before, client.accounting.total, 1.0, EmptyLibrary())
    step = counters.as_dict()
    assert (step["retries_rate_limit"], step["retries_timeout"], step["retries_bad_body"]) == (2, 1, 1)
    totals = {
        key: 0
        for key in (
            "rollouts",
            "rollouts_failed",
            "rollouts_unscored",
            "groups_kept",
            "groups_total",
            "ops_proposed",
            "ops_applied",
            "parse_retries",
            "parse_failures",
            "prompt_tokens",
            "completion_tokens",
            "library_version",
            "library_size",
        )
    }
    totals.update(cost_usd=0.0, wall_time_s=1.0, **{k: v for k, v in step.items() if k.startswith("retries_")})
    table = epoch_table({"status": "completed", "epochs": [], "totals": totals})
    assert "retried calls: 4 (429 ×2, timeout ×1, bad body ×1)" in table.caption


def test_compare_cost_table_has_the_eval_retries(tmp_path: Path):
    rows = [
        {"problem_id": f"q{i}", "sample": s, "correct": (i + s) % 2 == 0, "reward": float((i + s) % 2 == 0)}
        for i in range(6)
        for s in range(2)
    ]
    run = tmp_path / "eval"
    run.mkdir()
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    metrics = summarize(rows, n_bootstrap=200)
    metrics["usage"] = {
        "total": {
            "retries_rate_limit": 3,
            "retries_server_error": 0,
            "retries_timeout": 2,
            "retries_bad_body": 0,
            "retries_connection": 0,
        }
    }
    (run / "metrics.json").write_text(json.dumps(metrics))
    comparison, files = compare_runs([run], tmp_path / "report", n_bootstrap=200)
    assert comparison.systems[0].eval_retries["retries_rate_limit"] == 3
    report = (
        files["markdown"].read_text()
        if "markdown" in files
        else next(p for p in files.values() if str(p).endswith(".md")).read_text()
    )
    assert "Eval retries" in report and "5 (429 ×3, timeout ×2)" in report


def test_timeout_option_reaches_the_client(fault_server):
    """`--timeout` on a command that calls a model: a reply slower than it is abandoned and retried."""
    fault_server.push(Reply(delay_s=3.0, text="too late"))
    fault_server.default = Reply(text="in time")
    result = CliRunner().invoke(
        app,
        [
            "chat",
            "hello",
            "--backend",
            "openai",
            "--base-url",
            fault_server.base_url,
            "--model",
            "m",
            "--api-key",
            "k",
            "--timeout",
            "0.5",
            "--no-usage",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "in time" in result.output and len(fault_server.requests) == 2
    for command in ("learn", "eval", "score", "chat"):
        assert "--timeout" in CliRunner().invoke(app, [command, "--help"], terminal_width=200).output, command


async def test_a_prompt_that_cannot_fit_the_context_is_refused_before_sending():
    backend = ScriptedBackend(lambda request, index: "ok")
    client = LLMClient(backend, context_tokens=1000, max_retries=3)
    with pytest.raises(
        ContextWindowExceededError, match="cannot fit scripted's context window of 1,000 tokens; not sent"
    ):
        await client.chat([{"role": "user", "content": "x" * 50_000}], tag="rollout")
    assert backend.calls == []  # never sent, never retried
    [completion] = await client.chat([{"role": "user", "content": "x" * 4_000}])  # might fit: sent
    assert completion.text == "ok"


def test_api_models_know_their_context_window():
    assert context_window("gpt-4o") and context_window("openai/gpt-4o") == context_window("gpt-4o")
    assert context_window("my-local-model") is None
