"""The plan of an experiment: its steps in run order, each with a fingerprint of its settings and inputs.

Steps are the existing commands on the existing run directories under the experiment folder:

    learn/seed-S          tfgrpo learn   (one per seed)
    gepa                  GEPA's prompt search (the `gepa` package) on the same training split
    finetune/NAME         tfgrpo finetune METHOD (on a learn run's rollouts or a dataset)
    eval/SET/SYSTEM       tfgrpo eval    (base, library-seed-S, gepa with its system prompt, each fine-tuned adapter)
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
from tfgrpo.experiment.gepa_config import GepaConfig
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
    "gepa": ("data", "out", "llm", "seed_library"),
}
GEPA_STEP = "gepa"


@dataclass
class Step:
    id: str
    kind: str  # learn | gepa | finetune | eval | report
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
    from_gepa = recipe.learn.seed_from == "gepa"
    for seed in recipe.learn.seeds:
        run = out / "learn" / f"seed-{seed}"
        overrides = {
            **recipe.learn.settings,
            "data": recipe.learn.data,
            "out": str(run),
            "seed": seed,
            "llm": _llm_dict(recipe.model),
            **({"init_library": str(out / GEPA_STEP / "library.json")} if from_gepa else {}),
        }
        config = build_config(LearnConfig, None, overrides)
        settings = _stable_settings(config, ("out", "resume"))
        if from_gepa:
            settings["init_library"] = GEPA_STEP  # an output of the gepa step, hashed through its fingerprint
        steps.append(
            Step(
                f"learn/seed-{seed}",
                "learn",
                run,
                f"learn seed {seed}" + (" (from GEPA's prompt)" if from_gepa else ""),
                deps=[GEPA_STEP] if from_gepa else [],
                config=config,
                seed=seed,
                settings=settings,
            )
        )
    return steps


def _gepa_source(recipe: Recipe) -> dict[str, Any]:
    """GEPA's training split: its own `data`, or the learn runs' (data, limit, val_data), the same problems."""
    spec, learn = recipe.gepa, recipe.learn
    assert spec is not None
    if spec.data is not None or learn is None:
        return {"data": spec.data}
    shared = {key: learn.settings[key] for key in ("limit", "val_data") if learn.settings.get(key) is not None}
    return {"data": learn.data, **shared}


def gepa_steps(recipe: Recipe, out: Path) -> list[Step]:
    """The GEPA run: on the training split, locked out of every eval set, optionally seeded from a library."""
    spec = recipe.gepa
    if spec is None:
        return []
    _check_reserved("gepa", "gepa.settings", spec.settings)
    deps, seed_library = [], None
    if spec.seed_from is not None:
        assert recipe.learn is not None
        seed = recipe.learn.seeds[0] if spec.seed_from == "learn" else int(spec.seed_from.split(":", 1)[1])
        if seed not in recipe.learn.seeds:
            raise ConfigError(f"recipe gepa.seed_from: seed {seed} is not among learn.seeds {recipe.learn.seeds}")
        deps, seed_library = [f"learn/seed-{seed}"], str(out / "learn" / f"seed-{seed}" / "library.json")
    run = out / GEPA_STEP
    test_sets = [*spec.settings.get("test_data", []), *(e.data for e in recipe.evals.values())]
    overrides = {
        **spec.settings,
        **_gepa_source(recipe),
        "out": str(run),
        "llm": _llm_dict(recipe.model),
        "test_data": list(dict.fromkeys(test_sets)),
        "seed_library": seed_library,
    }
    config = build_config(GepaConfig, None, overrides)
    settings = _stable_settings(config, ("out",))
    settings["seed_library"] = spec.seed_from  # the learn run's library: hashed through its fingerprint
    label = "GEPA prompt search" + (f" (from the {spec.seed_from} library)" if spec.seed_from else "")
    return [Step(GEPA_STEP, "gepa", run, label, deps=deps, config=config, settings=settings, system=GEPA_STEP)]


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
    if recipe.gepa is not None:
        prompt = str(out / GEPA_STEP / "system_prompt.txt")
        systems.append((GEPA_STEP, "GEPA", {"system_prompt": prompt, "llm": frozen}, [GEPA_STEP]))
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
            settings = _stable_settings(config, ("out",))
            if system == GEPA_STEP:
                settings["system_prompt"] = GEPA_STEP  # GEPA's output, hashed through its fingerprint
            steps.append(
                Step(
                    f"eval/{set_name}/{system}",
                    "eval",
                    run,
                    f"{label} on {set_name} (K={spec.samples})",
                    deps=deps,
                    config=config,
                    settings=settings,
                    eval_set=set_name,
                    system=system,
                )
            )
    return steps


def build_plan(recipe: Recipe, out: str | Path) -> list[Step]:
    """Every step in run order with its fingerprint; bad settings fail here, before anything runs."""
    out = Path(out)
    training = [*learn_steps(recipe, out), *gepa_steps(recipe, out)]
    if recipe.learn is not None and recipe.learn.seed_from == GEPA_STEP:
        training = [*training[-1:], *training[:-1]]  # the learn runs start from GEPA's prompt: GEPA first
    steps = [*training, *finetune_steps(recipe, out), *eval_steps(recipe, out)]
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


__all__ = ["GEPA_STEP", "Step", "build_plan", "stable_dict"]
