"""The plan of an experiment: its steps in run order, each with a fingerprint of its settings and inputs.

Steps are the existing commands on the existing run directories under the experiment folder:

    learn/seed-S          tfgrpo learn   (one per seed)
    finetune/NAME         tfgrpo finetune METHOD (on a learn run's rollouts or a dataset)
    eval/SET/SYSTEM       tfgrpo eval    (base, library-seed-S, NAME for each fine-tuned adapter)
    report                the paper-style table and one compare report per eval set

A step's fingerprint hashes its resolved settings (minus what cannot change a result: output folder,
API key, budget, concurrency, endpoint URLs), the content of the user's files it names (data, initial
library, system prompt) and the fingerprints of the steps it reads, so a changed setting or an edited file
reruns that step and everything downstream of it, and nothing else.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfgrpo.core.config import ConfigError, build_config
from tfgrpo.eval.config import EvalConfig
from tfgrpo.experiment.recipe import FinetuneSpec, Recipe
from tfgrpo.learn.config import LearnConfig
from tfgrpo.llm.config import LLMConfig

# LLM settings that decide where and how fast requests go, never what comes back.
_VOLATILE_LLM_KEYS = (
    "api_key",
    "budget_usd",
    "concurrency",
    "max_retries",
    "timeout_s",
    "base_url",
    "cache",
    "batch_size",
    "llamacpp_instances",
)
_RESERVED = {
    "learn": ("data", "out", "seed", "llm", "resume"),
    "eval": ("data", "out", "samples", "library", "llm", "label"),
}


@dataclass
class Step:
    id: str
    kind: str  # learn | finetune | eval | report
    out: Path
    label: str
    deps: list[str] = field(default_factory=list)
    config: Any = None  # LearnConfig | EvalConfig | dict of finetune arguments | None
    settings: dict[str, Any] = field(default_factory=dict)  # what the fingerprint hashes
    fingerprint: str = ""
    eval_set: str | None = None
    system: str | None = None  # eval steps: base | library-seed-S | finetune name
    seed: int | None = None


# Settings that may name a user's file: its content is an input too (an edited data file reruns the step).
_FILE_KEYS = ("data", "val_data", "init_library", "system_prompt")


def _file_hashes(settings: dict[str, Any]) -> dict[str, str]:
    hashes = {}
    for key in _FILE_KEYS:
        value = settings.get(key)
        if isinstance(value, str) and Path(value).is_file():
            hashes[key] = hashlib.sha256(Path(value).read_bytes()).hexdigest()
    return hashes


def _fingerprint(kind: str, settings: dict[str, Any], dep_fingerprints: list[str]) -> str:
    payload = json.dumps(
        {"kind": kind, "settings": settings, "files": _file_hashes(settings), "inputs": dep_fingerprints},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def stable_dict(data: dict[str, Any], drop: tuple[str, ...]) -> dict[str, Any]:
    """A config's JSON without `drop` and the LLM keys that cannot change a result."""
    data = json.loads(json.dumps(data))
    for key in drop:
        data.pop(key, None)
    for key in _VOLATILE_LLM_KEYS:
        (data.get("llm") or {}).pop(key, None)
    return data


def _stable_settings(config: Any, drop: tuple[str, ...]) -> dict[str, Any]:
    return stable_dict(json.loads(config.model_dump_json()), drop)


def _check_reserved(kind: str, where: str, settings: dict[str, Any]) -> None:
    taken = sorted(set(settings) & set(_RESERVED[kind]))
    if taken:
        raise ConfigError(f"recipe {where}: {', '.join(taken)}: set by the experiment itself (remove from the recipe)")


def _llm_dict(llm: LLMConfig) -> dict[str, Any]:
    return llm.model_dump()


def learn_steps(recipe: Recipe, out: Path) -> list[Step]:
    if recipe.learn is None:
        return []
    _check_reserved("learn", "learn.settings", recipe.learn.settings)
    steps = []
    for seed in recipe.learn.seeds:
        run = out / "learn" / f"seed-{seed}"
        overrides = {
            **recipe.learn.settings,
            "data": recipe.learn.data,
            "out": str(run),
            "seed": seed,
            "llm": _llm_dict(recipe.model),
        }
        config = build_config(LearnConfig, None, overrides)
        steps.append(
            Step(
                f"learn/seed-{seed}",
                "learn",
                run,
                f"learn seed {seed}",
                config=config,
                seed=seed,
                settings=_stable_settings(config, ("out", "resume")),
            )
        )
    return steps


def _finetune_data(spec: FinetuneSpec, recipe: Recipe, out: Path, name: str) -> tuple[str, list[str]]:
    if spec.data == "learn" or spec.data.startswith("learn:"):
        if recipe.learn is None:
            raise ConfigError(f"recipe finetunes.{name}.data = {spec.data!r} needs a `learn:` section")
        seed = recipe.learn.seeds[0] if spec.data == "learn" else int(spec.data.split(":", 1)[1])
        if seed not in recipe.learn.seeds:
            raise ConfigError(
                f"recipe finetunes.{name}.data: seed {seed} is not among learn.seeds {recipe.learn.seeds}"
            )
        return str(out / "learn" / f"seed-{seed}"), [f"learn/seed-{seed}"]
    return spec.data, []


def _finetune_label(name: str, spec: FinetuneSpec) -> str:
    return name if name == spec.method else f"{name} ({spec.method})"


def finetune_steps(recipe: Recipe, out: Path) -> list[Step]:
    steps = []
    for name, spec in recipe.finetunes.items():
        data, deps = _finetune_data(spec, recipe, out, name)
        arguments = {"method": spec.method, "model": spec.model, "data": data, "options": dict(spec.options)}
        settings = {
            **arguments,
            "data": spec.data,
        }  # the learn run's folder is an input (hashed via deps), not a setting
        steps.append(
            Step(
                f"finetune/{name}",
                "finetune",
                out / "finetune" / name,
                _finetune_label(name, spec),
                deps=deps,
                config=arguments,
                settings=settings,
                system=name,
            )
        )
    return steps


def _eval_systems(recipe: Recipe, out: Path) -> list[tuple[str, str, dict[str, Any], list[str]]]:
    """(system, label, eval overrides, deps) for every system of the table, in row order."""
    systems = []
    frozen = _llm_dict(recipe.eval_model or recipe.model)
    if recipe.baseline:
        systems.append(("base", "base", {"llm": frozen}, []))
    for seed in recipe.learn.seeds if recipe.learn else []:
        library = out / "learn" / f"seed-{seed}" / "library.json"
        systems.append(
            (
                f"library-seed-{seed}",
                f"library seed {seed}",
                {"library": str(library), "llm": frozen},
                [f"learn/seed-{seed}"],
            )
        )
    for name, spec in recipe.finetunes.items():
        llm = {
            "backend": "transformers",
            "model": spec.model,
            "adapter": str(out / "finetune" / name),
            **spec.eval_llm,
        }
        systems.append((name, _finetune_label(name, spec), {"llm": llm}, [f"finetune/{name}"]))
    return systems


def eval_steps(recipe: Recipe, out: Path) -> list[Step]:
    _check_reserved("eval", "eval_defaults", recipe.eval_defaults)
    steps = []
    for set_name, spec in recipe.evals.items():
        _check_reserved("eval", f"evals.{set_name}.settings", spec.settings)
        for system, label, overrides, deps in _eval_systems(recipe, out):
            run = out / "eval" / set_name / system
            merged = {
                **recipe.eval_defaults,
                **spec.settings,
                **overrides,
                "data": spec.data,
                "samples": spec.samples,
                "limit": spec.limit,
                "out": str(run),
                "label": label,
            }
            config = build_config(EvalConfig, None, merged)
            steps.append(
                Step(
                    f"eval/{set_name}/{system}",
                    "eval",
                    run,
                    f"{label} on {set_name} (K={spec.samples})",
                    deps=deps,
                    config=config,
                    settings=_stable_settings(config, ("out",)),
                    eval_set=set_name,
                    system=system,
                )
            )
    return steps


def build_plan(recipe: Recipe, out: str | Path) -> list[Step]:
    """Every step in run order with its fingerprint; bad settings fail here, before anything runs."""
    out = Path(out)
    steps = [*learn_steps(recipe, out), *finetune_steps(recipe, out), *eval_steps(recipe, out)]
    report = Step(
        "report",
        "report",
        out / "report",
        "paper-style table",
        deps=[s.id for s in steps if s.kind == "eval"],
        settings={
            "report": recipe.report.model_dump(),
            "name": recipe.name,
            "pooled_seeds": recipe.learn.seeds if recipe.learn else [],
        },
    )
    steps.append(report)
    fingerprints: dict[str, str] = {}
    for step in steps:
        step.fingerprint = _fingerprint(step.kind, step.settings, [fingerprints[d] for d in step.deps])
        fingerprints[step.id] = step.fingerprint
    return steps


__all__ = ["Step", "build_plan", "stable_dict"]
