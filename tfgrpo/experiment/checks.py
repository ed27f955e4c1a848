"""What an experiment names, checked before it plans, estimates or times anything (a dry run too).

Every finetune method must be one `tfgrpo finetune` has, every data reference a bundled set, an existing
file or (finetunes) `learn` / `learn:SEED`, and every local model path must exist: a missing folder is
refused here in one line, never handed to a backend that would look it up on the model hub.
"""

from __future__ import annotations

from pathlib import Path

from tfgrpo.core.config import ConfigError
from tfgrpo.core.datasets import resolve_dataset
from tfgrpo.core.errors import EvalError
from tfgrpo.experiment.recipe import Recipe
from tfgrpo.finetune.errors import FinetuneError
from tfgrpo.finetune.run import method_spec

LOCAL_BACKENDS = ("transformers", "llamacpp", "vllm")  # they load `model` themselves, from disk or the hub


def check_recipe_inputs(recipe: Recipe) -> None:
    """One ConfigError for the first name or reference that cannot work."""
    for name, spec in recipe.finetunes.items():
        try:
            method_spec(spec.method)
        except FinetuneError as exc:
            raise ConfigError(f"recipe finetunes.{name}.method: {exc}") from None
        if spec.data != "learn" and not spec.data.startswith("learn:"):
            _check_data(f"finetunes.{name}.data", spec.data)
        if spec.model is not None:
            _check_local_model(f"finetunes.{name}.model", spec.model)
    if recipe.learn is not None:
        _check_data("learn.data", recipe.learn.data)
    for name, eval_spec in recipe.evals.items():
        _check_data(f"evals.{name}.data", eval_spec.data)
    for where, llm in (("model", recipe.model), ("eval_model", recipe.eval_model)):
        if llm is not None and llm.backend in LOCAL_BACKENDS and llm.model:
            _check_local_model(f"{where}.model", llm.model)


def _check_data(where: str, spec: str) -> None:
    try:
        resolve_dataset(spec)
    except EvalError as exc:
        raise ConfigError(f"recipe {where}: {exc}") from None


def looks_like_a_path(model: str) -> bool:
    """`./m`, `/models/m`, `~/m`, `m.gguf`, `a/b/c`: a path; `org/name` is a hub id, left to the backend."""
    return model.startswith((".", "/", "~")) or model.endswith(".gguf") or model.count("/") >= 2 or "\\" in model


def _check_local_model(where: str, model: str) -> None:
    if looks_like_a_path(model) and not Path(model).expanduser().exists():
        raise ConfigError(
            f"recipe {where}: {model!r} is a path that does not exist (a local model is a folder or file)"
        )


__all__ = ["LOCAL_BACKENDS", "check_recipe_inputs", "looks_like_a_path"]
