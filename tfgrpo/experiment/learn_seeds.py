"""`tfgrpo learn --seeds N`: one learn run per seed under one directory (a seed set, see `tfgrpo.eval.seeds`).

Seeds are `seed, seed+1, ..., seed+N-1`; run `s` lives in `OUT/seed-s` and is an ordinary learn run (resumable
on its own with `--resume`). The seed decides the order of the queries in every epoch; with a real model at
temperature > 0 the samples differ too. `tfgrpo eval --library OUT` then evaluates every seed's library.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfgrpo.eval.seeds import write_seed_set
from tfgrpo.learn.config import LearnConfig
from tfgrpo.learn.loop import LearnResult, learn
from tfgrpo.llm.client import LLMClient


def seed_list(first: int, count: int) -> list[int]:
    return [first + offset for offset in range(count)]


def learn_seeds(
    config: LearnConfig,
    count: int,
    *,
    client_for: Callable[[LearnConfig], LLMClient] | None = None,
    console: Any | None = None,
) -> list[LearnResult]:
    """Learn once per seed; stops at the first run that does not complete (its resume command is in the result)."""
    seeds = seed_list(config.seed, count)
    root = Path(config.out)
    write_seed_set(root, "learn", seeds)
    results = []
    for seed in seeds:
        member = config.model_copy(update={"seed": seed, "seeds": 1, "out": str(root / f"seed-{seed}")})
        if config.resume and not (Path(member.out) / "state.json").is_file():
            member = member.model_copy(update={"resume": False})  # this seed had not started yet
        result = learn(member, client=client_for(member) if client_for else None, console=console)
        results.append(result)
        if result.status != "completed":
            break
    return results


__all__ = ["learn_seeds", "seed_list"]
