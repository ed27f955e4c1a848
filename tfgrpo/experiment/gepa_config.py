"""`GepaConfig`: one GEPA run (the `gepa` package's reflective prompt search) on tfgrpo's client, data and reward.

GEPA evolves one text, the system prompt, on the training problems: it samples each candidate on a
minibatch of them, lets a reflection model read the answers with the reward's feedback and rewrite the
prompt, keeps a rewrite that does better on the minibatch, and scores the kept ones on its validation set
(its Pareto set). Every call it makes goes through tfgrpo's `LLMClient`; its metric is tfgrpo's reward.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.types import SamplingParams

#: the name of the one text GEPA evolves (GEPA's candidate is a dict of named texts)
COMPONENT = "system_prompt"


class GepaConfig(BaseModel):
    """Everything one GEPA run needs. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    data: str = Field(description="Training problems: a bundled name (easy_train, dapo100, ...) or a file.")
    val_data: str | None = Field(
        None,
        description="GEPA's validation (Pareto) set; None = the training problems themselves, GEPA's own "
        "default without one (the run then sees no problem beyond the training set).",
    )
    limit: int | None = Field(None, ge=1, description="Use only the first N training problems.")
    out: str = Field("runs/gepa", description="Run directory: system_prompt.txt, library.json, metrics.json, ...")
    problem_key: str = Field("problem", description="Column holding the problem text.")
    answer_key: str = Field("answer", description="Column holding the gold answer.")
    id_key: str = Field("id", description="Column holding the problem id.")
    llm: LLMConfig = Field(default_factory=LLMConfig, description="The task model (the frozen model GEPA prompts).")
    reflection_llm: LLMConfig | None = Field(
        None, description="The model that reads the feedback and rewrites the prompt; None = `llm`."
    )
    seed_prompt: str | None = Field(
        None, description="A text file with the starting system prompt; None = the bundled `gepa_seed` template."
    )
    seed_library: str | None = Field(
        None,
        description="Start from this library JSON instead: its exported system prompt (what `tfgrpo export "
        "--format system-prompt` writes) is GEPA's first candidate.",
    )
    user_template: str = Field("rollout_user", description="User prompt of a rollout (the eval's); gets `problem`.")
    reward: str = Field("math", description="Reward name from tfgrpo.rewards.get_reward: GEPA's metric.")
    feedback_gold: bool = Field(
        True,
        description="Show the gold answer in the feedback the reflection model reads (training problems only; "
        "GEPA reflects on training minibatches, never on its validation set).",
    )
    max_metric_calls: int = Field(
        150, ge=1, description="GEPA's budget: rollouts scored by the reward (minibatches and validations)."
    )
    reflection_minibatch_size: int = Field(3, ge=1, description="Training problems per reflection.")
    candidate_selection: Literal["pareto", "current_best", "epsilon_greedy"] = Field(
        "pareto", description="Which kept candidate GEPA mutates next."
    )
    use_merge: bool = Field(False, description="Also merge two Pareto candidates (GEPA's merge proposer).")
    seed: int = Field(0, description="GEPA's random seed (minibatch order, candidate choice).")
    sampling: SamplingParams = Field(
        default_factory=lambda: SamplingParams(temperature=0.7, max_tokens=2048),
        description="Sampling of the task model's answers.",
    )
    reflection_sampling: SamplingParams = Field(
        default_factory=lambda: SamplingParams(temperature=0.7, max_tokens=2048),
        description="Sampling of the reflection model's rewrites.",
    )
    test_data: list[str] = Field(
        default_factory=list,
        description="Test sets (names or files) no training or validation problem may be in; the bundled "
        "benchmarks (aime24, aime25) always are.",
    )
    allow_test_overlap: bool = Field(False, description="Run even when the data shares problems with a test set.")


__all__ = ["COMPONENT", "GepaConfig"]
