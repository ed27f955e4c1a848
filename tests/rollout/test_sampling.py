"""`sample_problems`: the one "run these problems K times" loop of learn's validation and `tfgrpo eval`."""

from __future__ import annotations

import asyncio
import io
import json
import re

import pytest
from rich.console import Console

import tfgrpo.eval.runner
import tfgrpo.learn.validation
import tfgrpo.rollout.sampling
from tfgrpo.core.datasets import Problem
from tfgrpo.eval.runner import EvalConfig, evaluate
from tfgrpo.experiences import Library
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.rundir import RunDir
from tfgrpo.learn.step import Engine
from tfgrpo.llm.backends.scripted import ScriptedBackend
from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.errors import ServerError
from tfgrpo.llm.factory import build_client
from tfgrpo.llm.types import SamplingParams
from tfgrpo.rewards import get_reward
from tfgrpo.rollout.sampling import PromptSpec, sample_problems

K = 4
PROBLEMS = [Problem(id=f"q{i}", problem=f"Problem number {i}: what is {i} times 1?", answer=str(i)) for i in range(6)]


def responder(request, index):
    """Right on sample indices below the problem number (mod K), better with the library in the prompt.

    Deterministic per (prompt, sample index), so two paths that send the same prompts with the same
    sample indices and score them alike get the same per-problem results.
    """
    number = int(re.search(r"Problem number (\d+)", request.messages[-1].content).group(1))
    system = next((m.content for m in request.messages if m.role == "system"), "") or ""
    right = index < number % K or ("Box the integer" in system and index == K - 1)
    return f"so \\boxed{{{number if right else -1}}}"


def sample(backend, reward, *, problems=PROBLEMS, n=K, sampling=None, **options):
    """`sample_problems` of `problems` through `backend`, no library, as eval runs it."""
    client = build_client(LLMConfig(max_retries=0), backends=[backend], cache_path=None)
    return asyncio.run(
        sample_problems(
            client,
            problems,
            prompt=PromptSpec(),
            experiences_for=lambda problem: "",
            reward=reward,
            n=n,
            sampling=sampling or SamplingParams(temperature=0.6),
            tag="eval",
            **options,
        )
    )


def write_problems(path):
    path.write_text(
        "".join(json.dumps({"id": p.id, "problem": p.problem, "answer": p.answer}) + "\n" for p in PROBLEMS)
    )
    return path


def spy_on_sample_problems(monkeypatch):
    """Every module that imported `sample_problems` calls this wrapper instead; it records the tags."""
    tags = []
    real = tfgrpo.rollout.sampling.sample_problems

    async def spy(*args, **kwargs):
        tags.append(kwargs["tag"])
        return await real(*args, **kwargs)

    monkeypatch.setattr(tfgrpo.eval.runner, "sample_problems", spy)
    monkeypatch.setattr(tfgrpo.learn.validation, "sample_problems", spy)
    return tags


def test_every_problem_k_times_in_problem_order_scored():
    done = []
    groups = sample(
        ScriptedBackend(responder, latency_s=0.001),
        get_reward("math"),
        on_problem_done=lambda problem, rollouts: done.append((problem.id, len(rollouts))),
    )
    assert [g[0].query_id for g in groups] == [p.id for p in PROBLEMS]  # problem order, not completion order
    assert [[r.sample for r in g] for g in groups] == [list(range(K))] * len(PROBLEMS)
    assert [sum(r.reward == 1.0 for r in g) for g in groups] == [i % K for i in range(len(PROBLEMS))]
    assert sorted(done) == [(p.id, K) for p in PROBLEMS]


def test_a_failed_call_is_one_unscored_rollout():
    def flaky(request, index):
        return ServerError("down") if index == 0 else responder(request, index)

    groups = sample(ScriptedBackend(flaky), get_reward("math"), problems=PROBLEMS[:2], sampling=SamplingParams())
    for group in groups:
        assert group[0].error and group[0].reward is None
        assert all(r.ok and r.reward is not None for r in group[1:])


@pytest.mark.parametrize("with_library", [False, True])
def test_learn_validation_and_eval_run_the_same_loop(tmp_path, monkeypatch, with_library):
    """Same data, library, K and scripted model: the same prompts and the same per-problem results."""
    tags = spy_on_sample_problems(monkeypatch)
    data = write_problems(tmp_path / "val.jsonl")
    library = Library.from_texts(["Box the integer answer."]) if with_library else Library()
    library_path = tmp_path / "library.json"
    library.save(library_path)

    eval_backend = ScriptedBackend(responder)
    eval_config = EvalConfig(
        data=str(data),
        out=str(tmp_path / "eval"),
        samples=K,
        library=str(library_path) if with_library else None,
        llm=LLMConfig(max_retries=0),
    )
    client = build_client(eval_config.llm, backends=[eval_backend], cache_path=None)
    evaluated = evaluate(eval_config, client=client, console=Console(file=io.StringIO()))
    rows = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    eval_per_problem = {p.id: sum(r["reward"] for r in rows if r["problem_id"] == p.id) / K for p in PROBLEMS}

    learn_backend = ScriptedBackend(responder)
    learn_config = LearnConfig(
        data=str(data), val_data=str(data), val_samples=K, out=str(tmp_path / "learn"), dedup=False
    )
    learn_client = build_client(LLMConfig(max_retries=0), backends=[learn_backend], cache_path=None)
    engine = Engine(
        learn_config,
        learn_client,
        get_reward("math"),
        RunDir(tmp_path / "learn"),
        Console(file=io.StringIO()),
        val_problems=PROBLEMS,
    )
    try:
        validated = asyncio.run(engine.validator.validate(1, library))
    finally:
        engine.close()

    assert tags == ["eval", "validation"]
    assert validated["per_problem"] == eval_per_problem
    assert validated["mean_at_k"] == pytest.approx(evaluated.metrics["mean_at_k"])
    # the very same requests: messages and sample indices (only the tag differs)
    assert sorted(
        (json.dumps([m.model_dump() for m in r.messages]), r.sample_offset) for r in eval_backend.calls
    ) == sorted((json.dumps([m.model_dump() for m in r.messages]), r.sample_offset) for r in learn_backend.calls)
    assert {r.tag for r in learn_backend.calls} == {"validation"}
