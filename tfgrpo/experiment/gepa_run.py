"""Run GEPA (the `gepa` package) on tfgrpo's client, data, reward and test-set lockout; write its run folder.

    OUT/system_prompt.txt   the best candidate: the system prompt to ship (and to evaluate with --system-prompt)
    OUT/library.json        the same prompt as a library, one line per experience (to seed `tfgrpo learn`)
    OUT/metrics.json        what the run saw (train / validation problems) and spent (calls, tokens, $, time)
    OUT/result.json         GEPA's own result: every candidate, its validation scores, the lineage
    OUT/gepa/               GEPA's state (resumed by a rerun) and its log
    OUT/cache.sqlite        the response cache: a rerun or a resumed run pays for no call twice

The budget is the client's (`llm.budget_usd`): a stop is `BudgetExceededError`, after metrics.json has been
written with what was spent, so the caller can resume with a larger budget.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgrpo.core.atomic import atomic_write_text
from tfgrpo.core.config import ConfigError, dump_config
from tfgrpo.core.datasets import Problem, load_dataset_rows
from tfgrpo.core.lockout import check_no_test_overlap, load_test_sets
from tfgrpo.experiences import Library, export_library
from tfgrpo.experiences.export import export_text, library_from_lines
from tfgrpo.experiment.gepa_adapter import CallCounts, ClientLM, LoopBridge, RewardAdapter
from tfgrpo.experiment.gepa_config import COMPONENT, GepaConfig
from tfgrpo.llm.client import LLMClient
from tfgrpo.llm.errors import BudgetExceededError
from tfgrpo.llm.factory import build_client
from tfgrpo.prompts import render_prompt
from tfgrpo.rollout.scoring import build_reward

PROMPT_FILE, LIBRARY_FILE, METRICS_FILE = "system_prompt.txt", "library.json", "metrics.json"


def require_gepa() -> None:
    """One line when the optional `gepa` package is missing."""
    from importlib.util import find_spec

    if find_spec("gepa") is None:
        raise ConfigError("GEPA needs the `gepa` package: pip install 'tfgrpo[gepa]'")


@dataclass
class FileLog:
    """GEPA's logger, writing to a file only (GEPA's own Logger redirects sys.stdout of the whole process)."""

    path: Path

    def log(self, *parts: Any, **_: Any) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(" ".join(str(part) for part in parts) + "\n")


def seed_prompt(config: GepaConfig) -> str:
    """GEPA's first candidate: a library's exported system prompt, a prompt file, or the bundled template."""
    if config.seed_library:
        text = export_text(Library.load(config.seed_library), "system-prompt").strip()
        if not text:
            raise ConfigError(f"seed_library {config.seed_library}: the library is empty, so it has no system prompt")
        return text
    if config.seed_prompt:
        path = Path(config.seed_prompt)
        if not path.is_file():
            raise ConfigError(f"seed_prompt {config.seed_prompt}: no such file")
        return path.read_text(encoding="utf-8").strip()
    return render_prompt("gepa_seed")


def _load(config: GepaConfig, spec: str, limit: int | None) -> list[Problem]:
    return load_dataset_rows(
        spec, problem_key=config.problem_key, answer_key=config.answer_key, id_key=config.id_key, limit=limit
    )


def load_splits(config: GepaConfig) -> tuple[list[Problem], list[Problem] | None]:
    """Training and validation problems, refused (one line) if any is a problem of a test set."""
    train = _load(config, config.data, config.limit)
    val = _load(config, config.val_data, None) if config.val_data else None
    if not config.allow_test_overlap:
        data = {f"gepa data {config.data}": train, **({f"gepa val_data {config.val_data}": val} if val else {})}
        test_sets = load_test_sets(
            config.test_data, problem_key=config.problem_key, answer_key=config.answer_key, id_key=config.id_key
        )
        check_no_test_overlap(data, test_sets)
    return train, val


def run_gepa(config: GepaConfig) -> dict[str, Any]:
    """Run GEPA end to end (or resume it from its folder); returns metrics.json's content."""
    require_gepa()
    return asyncio.run(_run(config))


async def _run(config: GepaConfig) -> dict[str, Any]:
    out = Path(config.out)
    train, val = load_splits(config)
    seed = seed_prompt(config)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "config.yaml", dump_config(config))
    client = build_client(config.llm, cache_path=out / "cache.sqlite")
    reflector = client
    if config.reflection_llm is not None:
        reflector = build_client(config.reflection_llm, cache_path=out / "reflection_cache.sqlite")
        reflector.accounting = client.accounting  # one ledger, so one budget covers both models
        reflector.budget_usd = client.budget_usd
    bridge = LoopBridge(asyncio.get_running_loop())
    adapter = RewardAdapter(
        bridge,
        client,
        build_reward(config.reward, client),
        config.sampling,
        COMPONENT,
        user_template=config.user_template,
        feedback_gold=config.feedback_gold,
    )
    reflection = ClientLM(bridge, reflector, config.reflection_sampling)
    started, status, result = time.perf_counter(), "interrupted", None
    try:
        result = await asyncio.to_thread(_optimize, config, seed, train, val, adapter, reflection, out)
        _finish(out, result, seed)
        status = "completed"
    except BudgetExceededError:
        status = "budget_exceeded"
        raise
    except BaseException:  # Ctrl-C, a cancelled task: GEPA's thread stops at its next call
        bridge.stop()
        raise
    finally:
        metrics = _metrics(config, out, client, adapter.usage, reflection.usage, train, val, result, status)
        metrics["sessions"][-1]["wall_time_s"] = round(time.perf_counter() - started, 3)
        _write_metrics(out, metrics)
        await _close(client, reflector)
    return metrics


def _optimize(
    config: GepaConfig,
    seed: str,
    train: list[Problem],
    val: list[Problem] | None,
    adapter: RewardAdapter,
    reflection: ClientLM,
    out: Path,
) -> Any:
    import gepa

    state = out / "gepa"
    state.mkdir(parents=True, exist_ok=True)
    return gepa.optimize(
        seed_candidate={COMPONENT: seed},
        trainset=train,
        valset=val,
        adapter=adapter,
        reflection_lm=reflection,
        candidate_selection_strategy=config.candidate_selection,
        reflection_minibatch_size=config.reflection_minibatch_size,
        use_merge=config.use_merge,
        max_metric_calls=config.max_metric_calls,
        stop_callbacks=adapter.bridge.stopped,
        logger=FileLog(state / "run_log.txt"),
        run_dir=str(state),
        seed=config.seed,
        raise_on_exception=True,  # a budget stop or a broken endpoint ends the run, as in learn
    )


def _finish(out: Path, result: Any, seed: str) -> None:
    best = str(result.best_candidate[COMPONENT]).strip() if result.candidates else seed
    atomic_write_text(out / PROMPT_FILE, best + "\n" if best else "")
    export_library(library_from_lines(best.splitlines(), source="GEPA"), out / LIBRARY_FILE, "json")
    atomic_write_text(out / "result.json", json.dumps(result.to_dict(), indent=2, ensure_ascii=False, default=str))


def _previous_sessions(out: Path) -> list[dict[str, Any]]:
    path = out / METRICS_FILE
    if not path.is_file():
        return []
    try:
        return list(json.loads(path.read_text(encoding="utf-8")).get("sessions") or [])
    except (OSError, json.JSONDecodeError, AttributeError):
        return []


def _metrics(
    config: GepaConfig,
    out: Path,
    client: LLMClient,
    task: CallCounts,
    reflection: CallCounts,
    train: list[Problem],
    val: list[Problem] | None,
    result: Any,
    status: str,
) -> dict[str, Any]:
    """This session's ledger added to the earlier sessions' (a resumed run); totals over all of them."""
    ledger = client.accounting.snapshot()
    session = {
        "status": status,
        "cost_usd": round(client.accounting.cost_usd, 8),
        "metric_calls": task.task_samples,
        "reflections": reflection.reflections,
        "prompt_tokens": ledger["total"]["prompt_tokens"],  # calls sent only: cache hits are free
        "completion_tokens": ledger["total"]["completion_tokens"],
        "calls_sent": ledger["total"]["calls"],
        "calls_cached": ledger["total"]["cached_samples"],
        "ledger": ledger,
    }
    sessions = [*_previous_sessions(out), session]
    summed = ("cost_usd", "prompt_tokens", "completion_tokens", "calls_sent", "calls_cached", "reflections")
    totals = {key: sum(s.get(key) or 0 for s in sessions) for key in summed}
    return {
        "status": status,
        "saw": {
            "train": {"data": config.data, "problems": len(train)},
            "val": {"data": config.val_data, "problems": len(val)} if val else "the training problems",
        },
        "totals": {
            **totals,
            # GEPA's own count, kept in its state across sessions
            "metric_calls": result.total_metric_calls if result is not None else task.task_samples,
            "candidates": result.num_candidates if result is not None else None,
            "wall_time_s": None,
        },
        "sessions": sessions,
    }


def _write_metrics(out: Path, metrics: dict[str, Any]) -> None:
    metrics["totals"]["wall_time_s"] = round(sum(s.get("wall_time_s") or 0.0 for s in metrics["sessions"]), 3)
    atomic_write_text(out / METRICS_FILE, json.dumps(metrics, indent=2, ensure_ascii=False))


async def _close(*clients: LLMClient) -> None:
    for client in dict.fromkeys(clients):
        await client.aclose()
        client.close_cache()


__all__ = ["LIBRARY_FILE", "METRICS_FILE", "PROMPT_FILE", "load_splits", "require_gepa", "run_gepa", "seed_prompt"]
