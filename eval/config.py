"""`EvalConfig`: every setting of `tfgrpo eval`, light to import (the CLI builds its options from it)."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from tfgrpo.core.datasets import DATASET_CACHE_HELP, DatasetCache
from tfgrpo.core.textfile import MAX_ROW_BYTES
from tfgrpo.core.tracking import TrackingSettings
from tfgrpo.experiences import Injection
from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.types import SamplingParams
from tfgrpo.rollout.agent import AgentConfig


class EvalConfig(TrackingSettings):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    data: str = Field("aime24", description="A bundled dataset name (aime24, aime25, amc23, easy, ...) or a file.")
    out: str = Field("runs/eval", description="Run directory: metrics.json, samples.jsonl, cache.sqlite.")
    library: str | None = Field(None, description="An experience library JSON to inject.")
    system_prompt: str | None = Field(None, description="A system-prompt file used instead of the library template.")
    inject: str = Field("all", description="'all' or 'topk:K' (the K experiences nearest to each problem).")
    samples: int = Field(4, ge=1, description="K samples per problem (Mean@K).")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N problems.")
    max_row_bytes: int = Field(
        MAX_ROW_BYTES,
        ge=1024,
        description="Longest dataset row accepted, in bytes (a longer row is an error naming its line).",
    )
    reward: str = Field("math", description="Reward name from tfgrpo.rewards.get_reward.")
    dataset_cache: DatasetCache = Field("default", description=DATASET_CACHE_HELP)
    problem_key: str = "problem"
    answer_key: str = "answer"
    id_key: str = "id"
    seed: int = Field(0, description="Seed of the bootstrap confidence interval; `--seed` also sets sampling.seed.")
    sampling: SamplingParams = Field(
        default_factory=lambda: SamplingParams(temperature=0.6, top_p=0.95, max_tokens=2048)
    )
    llm: LLMConfig = Field(default_factory=LLMConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig, description="Multi-turn tool use (tools: [python]).")
    system_template: str | None = Field(None, description="Rollout system template; None = the one export ships.")
    user_template: str = "rollout_user"
    label: str | None = Field(None, description="Name of this system in compare reports.")

    @model_validator(mode="after")
    def _one_injection(self) -> EvalConfig:
        if self.library and self.system_prompt:
            raise ValueError(
                "give --library or --system-prompt, not both (the system prompt would replace the library)"
            )
        if self.inject != "all" and not self.library:
            raise ValueError(f"inject {self.inject!r} selects from a library: add --library")
        Injection.parse(self.inject)
        return self


__all__ = ["EvalConfig"]
