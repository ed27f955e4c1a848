"""`tfgrpo eval --library SET`: evaluate every seed's library of a learn seed set into an eval seed set."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfgrpo.core.atomic import folder_target
from tfgrpo.core.errors import EvalError
from tfgrpo.eval.runner import EvalConfig, EvalResult, evaluate
from tfgrpo.eval.seeds import read_seed_set, write_seed_set
from tfgrpo.llm.client import LLMClient


def evaluate_seed_set(
    config: EvalConfig, *, client_for: Callable[[EvalConfig], LLMClient] | None = None, console: Any | None = None
) -> list[EvalResult]:
    """One eval per member of the learn seed set `config.library` into `config.out/seed-S`; same settings otherwise."""
    members = read_seed_set(config.library)
    write_seed_set(folder_target(config.out, EvalError), "eval", list(members))
    label = config.label or Path(config.library).name
    results = []
    for seed, learn_dir in members.items():
        member = config.model_copy(
            update={
                "library": str(learn_dir / "library.json"),
                "out": str(Path(config.out) / f"seed-{seed}"),
                "label": f"{label}/seed-{seed}",
            }
        )
        results.append(evaluate(member, client=client_for(member) if client_for else None, console=console))
    return results


__all__ = ["evaluate_seed_set"]
