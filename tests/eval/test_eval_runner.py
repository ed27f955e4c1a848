"""`tfgrpo eval` end to end on a scripted backend: metrics, injection, caching, and a paired compare."""

from __future__ import annotations

import json
import re

import pytest

from tfgrpo.eval.runner import EvalConfig, evaluate
from tfgrpo.experiences import Library
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.factory import build_client

NUM_PROBLEMS = 12


@pytest.fixture()
def dataset(tmp_path):
    path = tmp_path / "toy.jsonl"
    rows = [
        {"id": f"q{i:02d}", "problem": f"Problem number {i}: what is {i} times 1?", "answer": str(i)}
        for i in range(NUM_PROBLEMS)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def library(tmp_path):
    path = tmp_path / "learn" / "library.json"
    path.parent.mkdir()
    Library.from_texts(["Multiply carefully and box the final integer."]).save(path)
    return path


def responder(request, index):
    """Right on every problem when the library is in the system prompt; else right only on even samples
    of even problems. Deterministic, so the better system is known."""
    system = next((m.content for m in request.messages if m.role == "system"), "") or ""
    user = request.messages[-1].content
    number = int(re.search(r"Problem number (\d+)", user).group(1))
    if "Multiply carefully" in system or (number % 2 == 0 and index % 2 == 0):
        return f"Reasoning... so the answer is \\boxed{{{number}}}"
    return "I think it is \\boxed{-1}"


def run(config: EvalConfig, backend: ScriptedBackend):
    client = build_client(config.llm, cache_path=f"{config.out}/cache.sqlite", backends=[backend])
    return evaluate(config, client=client)


def test_eval_writes_metrics_and_samples_and_injects_library(tmp_path, dataset, library):
    backend = ScriptedBackend(responder)
    base = run(EvalConfig(data=str(dataset), out=str(tmp_path / "base"), samples=4), backend)
    assert base.metrics["num_problems"] == NUM_PROBLEMS
    assert base.metrics["mean_at_k"] == pytest.approx(0.25)  # half the problems, half the samples
    assert base.metrics["pass_at_k"]["4"] == pytest.approx(0.5)
    rows = [json.loads(line) for line in (tmp_path / "base" / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == NUM_PROBLEMS * 4
    assert [r["problem_id"] for r in rows[:4]] == ["q00"] * 4  # problem order, not completion order

    with_lib = run(EvalConfig(data=str(dataset), out=str(tmp_path / "lib"), samples=4, library=str(library)), backend)
    assert with_lib.metrics["mean_at_k"] == pytest.approx(1.0)
    assert with_lib.metrics["provenance"]["library_hash"]
    lib_rows = [json.loads(line) for line in (tmp_path / "lib" / "samples.jsonl").read_text().splitlines()]
    assert "[G0]. Multiply carefully" in lib_rows[0]["messages"][0]["content"]


def test_rerun_is_free_and_identical(tmp_path, dataset):
    backend = ScriptedBackend(responder)
    config = EvalConfig(data=str(dataset), out=str(tmp_path / "e"), samples=3)
    first = run(config, backend)
    served = backend.num_samples_served
    text = (tmp_path / "e" / "samples.jsonl").read_text()
    second = run(config, backend)
    assert backend.num_samples_served == served
    assert second.metrics["mean_at_k"] == first.metrics["mean_at_k"]
    assert second.metrics["usage"]["total"]["calls"] == 0
    strip = lambda t: [{k: v for k, v in json.loads(line).items() if k not in ("cached",)} for line in t.splitlines()]  # noqa: E731
    assert strip((tmp_path / "e" / "samples.jsonl").read_text()) == strip(text)


def test_failed_calls_are_excluded_not_scored_wrong(tmp_path, dataset):
    from tfgrpo.llm.errors import ServerError

    def flaky(request, index):
        return ServerError("503", status=503) if index == 0 else responder(request, index)

    config = EvalConfig(data=str(dataset), out=str(tmp_path / "f"), samples=2, llm=LLMConfig(max_retries=0))
    result = run(config, ScriptedBackend(flaky))
    assert result.metrics["failed_samples"] == NUM_PROBLEMS
    # Only sample 1 of each problem remains (wrong everywhere): failures are not counted as samples.
    assert result.metrics["num_samples"] == NUM_PROBLEMS
    assert result.metrics["mean_at_k"] == 0.0


def test_compare_detects_the_better_system_and_not_identical_ones(tmp_path, dataset, library):
    from tfgrpo.eval.compare import compare_runs

    backend = ScriptedBackend(responder)
    run(EvalConfig(data=str(dataset), out=str(tmp_path / "base"), samples=4), backend)
    run(EvalConfig(data=str(dataset), out=str(tmp_path / "base2"), samples=4, label="base-again"), backend)
    run(EvalConfig(data=str(dataset), out=str(tmp_path / "lib"), samples=4, library=str(library)), backend)

    comparison, files = compare_runs([tmp_path / "base", tmp_path / "lib"], tmp_path / "report")
    better = comparison.paired[0].result
    assert better.diff == pytest.approx(0.75)
    assert better.p_value < 0.05
    assert better.wins == NUM_PROBLEMS and better.losses == 0  # every problem improves
    same, _ = compare_runs([tmp_path / "base", tmp_path / "base2"], tmp_path / "report2")
    assert same.paired[0].result.p_value == pytest.approx(1.0)
    assert (tmp_path / "report" / "report.md").is_file() and (tmp_path / "report" / "report.html").is_file()


def test_eval_with_python_tool_records_tool_calls(tmp_path, dataset):
    """Text protocol: the model runs code, sees the output, then answers; evals report tool calls."""
    from tfgrpo.rollout.agent import AgentConfig

    def agentic(request, index):
        last = request.messages[-1].content or ""
        if "Output:" in last:
            value = re.search(r"Output:\s*```[a-z]*\s*(-?\d+)", last) or re.search(
                r"(-?\d+)", last.split("Output:")[-1]
            )
            return f"The tool says {value.group(1)}, so \\boxed{{{value.group(1)}}}"
        number = int(re.search(r"Problem number (\d+)", request.messages[-1].content).group(1))
        return f"Let me compute.\n```python\nprint({number} * 1)\n```"

    config = EvalConfig(
        data=str(dataset),
        out=str(tmp_path / "tools"),
        samples=1,
        limit=3,
        agent=AgentConfig(tools=["python"], protocol="text", max_turns=3),
    )
    result = run(config, ScriptedBackend(agentic))
    assert result.metrics["avg_tool_calls"] == pytest.approx(1.0)
    assert result.metrics["mean_at_k"] == pytest.approx(1.0)
    row = json.loads((tmp_path / "tools" / "samples.jsonl").read_text().splitlines()[0])
    assert row["trajectory"]["turns"][0]["tool_calls"]


def test_topk_injection_uses_the_nearest_experiences(tmp_path, dataset):
    """--inject topk:1 puts only the experience nearest to each problem into its prompt."""
    library = tmp_path / "lib.json"
    Library.from_texts(
        [
            "Multiply carefully and box the final integer.",
            "In geometry, draw the triangle and label every angle before using the law of sines.",
        ]
    ).save(library)
    config = EvalConfig(
        data=str(dataset), out=str(tmp_path / "topk"), samples=1, limit=2, library=str(library), inject="topk:1"
    )
    run(config, ScriptedBackend(responder))
    row = json.loads((tmp_path / "topk" / "samples.jsonl").read_text().splitlines()[0])
    system = row["messages"][0]["content"]
    assert "Multiply carefully" in system and "law of sines" not in system


def test_exported_system_prompt_sends_the_same_messages_as_the_library(tmp_path, dataset, library):
    """What is learned is what is shipped: `--library` and its exported system prompt are one prompt."""
    from tfgrpo.experiences import render_system_prompt

    prompt_file = tmp_path / "system_prompt.txt"
    prompt_file.write_text(render_system_prompt(Library.load(library)) + "\n")
    backend = ScriptedBackend(responder)
    shared_cache = LLMConfig(cache=str(tmp_path / "shared.sqlite"))
    run(
        EvalConfig(data=str(dataset), out=str(tmp_path / "lib"), samples=2, library=str(library), llm=shared_cache),
        backend,
    )
    served = backend.num_samples_served
    run(
        EvalConfig(
            data=str(dataset), out=str(tmp_path / "sp"), samples=2, system_prompt=str(prompt_file), llm=shared_cache
        ),
        backend,
    )
    lib_rows = (tmp_path / "lib" / "samples.jsonl").read_text().splitlines()
    sp_rows = (tmp_path / "sp" / "samples.jsonl").read_text().splitlines()
    assert [json.loads(r)["messages"] for r in lib_rows] == [json.loads(r)["messages"] for r in sp_rows]
    assert backend.num_samples_served == served  # identical requests: all answered from the shared cache keys


def test_judge_reward_goes_through_the_client(tmp_path, dataset):
    """`--reward judge`: the grader is the same client (cached, accounted under the tag 'judge')."""

    def respond(request, index):
        if request.tag == "judge":
            prompt = request.messages[-1].content
            return "VERDICT: CORRECT" if "\\boxed{3}" in prompt else "Wrong number.\nVERDICT: INCORRECT"
        number = int(re.search(r"Problem number (\d+)", request.messages[-1].content).group(1))
        return f"\\boxed{{{number}}}"

    config = EvalConfig(data=str(dataset), out=str(tmp_path / "judge"), samples=1, reward="judge")
    result = run(config, ScriptedBackend(respond))
    assert result.metrics["mean_at_k"] == pytest.approx(1 / NUM_PROBLEMS)  # the judge accepts only problem 3
    assert result.metrics["usage"]["by_tag"]["judge"]["calls"] == NUM_PROBLEMS
    judged = result.metrics["usage"]["structured_replies"]["judge"]  # the verdicts' outcomes, counted
    assert judged["replies"] == NUM_PROBLEMS and judged["repaired"] == NUM_PROBLEMS and judged["lost"] == 0


def test_conflicting_injection_options_are_refused():
    from tfgrpo.core.config import ConfigError, build_config

    with pytest.raises(ConfigError, match="not both"):
        build_config(EvalConfig, None, {"library": "a.json", "system_prompt": "p.txt"})
    with pytest.raises(ConfigError, match="add --library"):
        build_config(EvalConfig, None, {"inject": "topk:4"})
    with pytest.raises(ConfigError, match="topk"):
        build_config(EvalConfig, None, {"library": "a.json", "inject": "topk:abc"})


def test_an_eval_where_every_call_failed_says_why(tmp_path, dataset):
    from tfgrpo.llm.errors import AllRequestsFailedError, ServerError

    config = EvalConfig(
        data=str(dataset), out=str(tmp_path / "down"), samples=1, limit=2, llm=LLMConfig(max_retries=0)
    )
    with pytest.raises(AllRequestsFailedError, match="ServerError"):
        run(config, ScriptedBackend(lambda r, i: ServerError("503 unavailable", status=503)))
