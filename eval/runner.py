"""`tfgrpo eval`: K samples per problem with the library injected, scored by `rewards`, summarised.

The same rollout code, prompt templates and library renderer as `tfgrpo learn`, and the same
"run these problems K times" loop as learn's validation (`tfgrpo.rollout.sampling.sample_problems`);
every call is cached in the run directory, so an interrupted eval resumes for free and a rerun is
identical.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel
from rich.console import Console

from tfgrpo import __version__
from tfgrpo.core.atomic import folder_target, removed_on_failure
from tfgrpo.core.config import config_dict, dump_config
from tfgrpo.core.datasets import Problem, dataset_cache_dir, load_dataset_rows
from tfgrpo.core.errors import EvalError
from tfgrpo.core.metrics import summarize
from tfgrpo.core.progress import stage_progress
from tfgrpo.core.tracking import open_trackers, require_trackers, scalars
from tfgrpo.eval.config import EvalConfig
from tfgrpo.eval.library_overlap import describe_overlap, library_eval_overlap
from tfgrpo.experiences.model import Library
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import AllRequestsFailedError
from tfgrpo.llm.factory import build_client
from tfgrpo.rewards import is_equivalent
from tfgrpo.rollout.injection import Injector, injection_warning
from tfgrpo.rollout.sampling import PromptSpec, Rollout, sample_problems
from tfgrpo.rollout.scoring import build_reward


class EvalResult(BaseModel):
    out: str
    metrics: dict[str, Any]


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def evaluate(config: EvalConfig, *, client: LLMClient | None = None, console: Any | None = None) -> EvalResult:
    """Run an eval end to end and write its run directory."""
    return asyncio.run(evaluate_async(config, client=client, console=console))


async def evaluate_async(
    config: EvalConfig, *, client: LLMClient | None = None, console: Any | None = None
) -> EvalResult:
    console = console or Console(stderr=True)
    out = folder_target(config.out, EvalError)  # a file at or above --out: one line, before anything is read
    owns_client = client is None
    with removed_on_failure(out):  # a command that fails before its first call leaves no folder behind
        setup = _set_up(config, out, console, client)
    started = time.perf_counter()
    try:
        groups = await _sample_all(config, setup, out / "samples.jsonl", console)
    finally:
        if owns_client:
            await setup.client.aclose()
            setup.client.close_cache()
    rows = _write_samples(out / "samples.jsonl", setup.problems, groups)
    metrics = _metrics(config, rows, setup, wall_time_s=time.perf_counter() - started)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, ensure_ascii=False), encoding="utf-8")
    with open_trackers(config, command="eval", out=out) as trackers:
        trackers.log_metrics(scalars({k: v for k, v in metrics.items() if k not in UNTRACKED_METRICS}), step=0)
        trackers.log_table("samples", [{key: row.get(key) for key in TRACKED_SAMPLE_KEYS} for row in rows])
    return EvalResult(out=str(out), metrics=metrics)


#: metrics.json keys the trackers get otherwise (the config, logged whole as the run's settings) or not at all
UNTRACKED_METRICS = ("settings", "provenance")
#: the samples table's columns: a sample's outcome, not its prompt (the same for every sample of a problem)
TRACKED_SAMPLE_KEYS = (
    "problem_id",
    "sample",
    "gold",
    "extracted",
    "reward",
    "error",
    "completion",
    "completion_tokens",
)


@dataclass
class _EvalSetup:
    """What an eval reads and builds before its first call."""

    problems: list[Problem]
    injector: Injector | None
    leakage: dict[str, Any] | None
    prompt: PromptSpec
    agent: Any | None
    client: LLMClient
    reward: Any


def _set_up(config: EvalConfig, out: Path, console: Any, client: LLMClient | None) -> _EvalSetup:
    """Data, run directory, library (and its overlap with the data), prompt, agent, client, reward and the
    trackers' extras."""
    require_trackers(config.trackers)
    problems = load_dataset_rows(
        config.data,
        problem_key=config.problem_key,
        answer_key=config.answer_key,
        id_key=config.id_key,
        limit=config.limit,
        max_row_bytes=config.max_row_bytes,
        cache_dir=dataset_cache_dir(config.dataset_cache, out),
    )
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(dump_config(config), encoding="utf-8")
    injector = Injector.from_paths(config.library, config.inject, store_dir=out / "store") if config.library else None
    leakage = (
        library_eval_overlap(config.library, Library.load(config.library), problems, data_name=config.data)
        if config.library
        else None
    )
    warnings = [
        describe_overlap(leakage, config.data) if leakage and leakage["overlaps"] else None,
        injection_warning(injector.library, config.inject, str(config.library)) if injector else None,
    ]
    for warning in filter(None, warnings):
        console.print(f"warning: {warning}", style="yellow", highlight=False, markup=False)
    system_prompt = Path(config.system_prompt).read_text(encoding="utf-8") if config.system_prompt else None
    prompt = PromptSpec(config.system_template, config.user_template, system_prompt)
    client = client or build_client(config.llm, cache_path=out / "cache.sqlite")
    reward = build_reward(config.reward, client)
    return _EvalSetup(problems, injector, leakage, prompt, _agent(config), client, reward)


async def _sample_all(config: EvalConfig, setup: _EvalSetup, samples_path: Path, console: Any) -> list[list[Rollout]]:
    """K samples of every problem, scored; each problem's rows are appended to a partial file as they come."""
    injector = setup.injector
    with (
        samples_path.with_suffix(".jsonl.partial").open("w", encoding="utf-8") as handle,
        stage_progress(console) as progress,
    ):
        task = progress.add_task(f"eval {config.data} (K={config.samples})", total=len(setup.problems))

        def done(problem: Problem, rollouts: list[Rollout]) -> None:
            _write_rows(handle, _sample_rows(problem, rollouts))
            progress.advance(task)

        return await sample_problems(
            setup.client,
            setup.problems,
            prompt=setup.prompt,
            experiences_for=injector.text_for if injector else lambda _problem: "",
            reward=setup.reward,
            n=config.samples,
            sampling=config.sampling,
            tag="eval",
            agent=setup.agent,
            on_problem_done=done,
        )


def _sample_rows(problem: Problem, rollouts: list[Rollout]) -> list[dict[str, Any]]:
    """One `samples.jsonl` row per rollout: the rollout's row keyed by problem id, with its gold answer."""
    rows = []
    for rollout in rollouts:
        row = rollout.to_row()
        row.update(problem_id=problem.id, gold=problem.answer)
        row.pop("query_id", None)
        rows.append(row)
    return rows


def _write_rows(handle: TextIO, rows: list[dict[str, Any]]) -> None:
    handle.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    handle.flush()


def _write_samples(samples_path: Path, problems: list[Problem], groups: list[list[Rollout]]) -> list[dict[str, Any]]:
    """All rows in problem order, not completion order, so reruns write identical files; fails if every call did."""
    rows = [row for problem, rollouts in zip(problems, groups, strict=True) for row in _sample_rows(problem, rollouts)]
    tmp_path = samples_path.with_suffix(".jsonl.partial")
    with tmp_path.open("w", encoding="utf-8") as handle:
        _write_rows(handle, rows)
    tmp_path.replace(samples_path)
    failures = [r["error"] for r in rows if r.get("error")]
    if rows and len(failures) == len(rows):
        raise AllRequestsFailedError(
            f"every sample of the eval failed ({len(failures)} calls), e.g. {failures[0]}; check the endpoint and rerun "
            "(answered calls are cached)"
        )
    return rows


def _metrics(
    config: EvalConfig, rows: list[dict[str, Any]], setup: _EvalSetup, *, wall_time_s: float
) -> dict[str, Any]:
    """The scores of the samples plus what produced them (settings, usage, provenance of library or adapter)."""
    try:
        metrics = summarize(rows, seed=config.seed, answer_checker=is_equivalent if config.reward == "math" else None)
    except ValueError as exc:
        raise EvalError(f"eval produced no scored samples: {exc}") from None
    tool_calls = [r.get("num_tool_calls", 0) for r in rows if not r.get("error")]
    metrics.update(
        {
            "label": config.label or _default_label(config),
            "dataset": config.data,
            "avg_tool_calls": sum(tool_calls) / len(tool_calls) if tool_calls else 0.0,
            "wall_time_s": round(wall_time_s, 3),
            "usage": setup.client.accounting.snapshot(),
            "settings": config_dict(config, exclude={"llm": {"api_key"}}),
            "provenance": _provenance(config, setup),
        }
    )
    return metrics


def _provenance(config: EvalConfig, setup: _EvalSetup) -> dict[str, Any]:
    return {
        "package_version": __version__,
        "model": setup.client.model_name,
        "backend": config.llm.backend,
        "adapter": config.llm.adapter,
        "library": config.library,
        "library_hash": file_sha256(config.library) if config.library else None,
        "system_prompt_hash": file_sha256(config.system_prompt) if config.system_prompt else None,
        "seed": config.seed,
        **_learn_provenance(config.library),
        **({"leakage": setup.leakage} if setup.leakage is not None else {}),
        **_finetune_provenance(config.llm.adapter),
    }


def _agent(config: EvalConfig):
    return config.agent.build() if config.agent.tools else None


def _default_label(config: EvalConfig) -> str:
    if config.llm.adapter:
        finetune = _finetune_provenance(config.llm.adapter)
        method = finetune.get("finetune_method")
        peft = finetune.get("finetune_peft")
        kind = f"{method}+{peft}" if method and peft else method or "adapter"
        return f"{kind}:{Path(config.llm.adapter).name}"
    if config.library:
        return f"library:{Path(config.library).parent.name or Path(config.library).stem}"
    if config.system_prompt:
        return f"prompt:{Path(config.system_prompt).stem}"
    return "baseline"


def _learn_provenance(library: str | None) -> dict[str, Any]:
    """Cost and time of the learn run that produced the library (for the compare report's cost table)."""
    if not library:
        return {}
    metrics_path = Path(library).parent / "metrics.json"
    if not metrics_path.is_file():
        return {}
    try:
        data = json.loads(metrics_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}
    totals = data.get("totals", data)
    return {
        "learn_run": str(metrics_path.parent),
        "learn_cost_usd": totals.get("cost_usd"),
        "learn_wall_s": totals.get("wall_time_s"),
        "train_samples": totals.get("rollouts") or totals.get("num_rollouts"),
    }


def _finetune_provenance(adapter: str | None) -> dict[str, Any]:
    if not adapter:
        return {}
    for candidate in (Path(adapter) / "finetune_summary.json", Path(adapter).parent / "finetune_summary.json"):
        if candidate.is_file():
            data = json.loads(candidate.read_text(encoding="utf-8"))
            return {
                "finetune_method": data.get("method"),
                "finetune_peft": data.get("peft"),
                "finetune_wall_s": data.get("wall_time_s"),
                "train_samples": data.get("samples"),
                # what the training did (tfgrpo.finetune.run.learning_signal): the per-set report's training table
                "finetune_steps": data.get("steps"),
                "finetune_tokens_processed": data.get("tokens_processed"),
                "finetune_tokens_in_loss": data.get("tokens_in_loss"),
                "finetune_groups": data.get("groups"),
                "finetune_rl_batches": data.get("rl_batches"),
                "finetune_rl_batches_nothing_to_learn": data.get("rl_batches_nothing_to_learn"),
            }
    return {}
