"""Settings of one `tfgrpo learn` run: a pydantic model filled from YAML and the command line.

Defaults follow the Training-Free GRPO paper: G = 5 rollouts per query, 3 epochs, rollouts at
temperature 0.7, the three learning stages (summaries, group advantage, consolidation) at temperature 0.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tfgrpo.core.datasets import DATASET_CACHE_HELP, DATASET_MEMORY_MB, DatasetCache
from tfgrpo.core.textfile import MAX_ROW_BYTES
from tfgrpo.core.tracking import TrackingSettings
from tfgrpo.experiences.credit import DEFAULT_LEVEL, DEFAULT_MIN_GROUPS
from tfgrpo.llm.config import LLMConfig
from tfgrpo.llm.types import SamplingParams
from tfgrpo.rollout.agent import AgentConfig

_TOPK = re.compile(r"^topk:[1-9]\d*$")


class StageTemplates(BaseModel):
    """Jinja templates: a bundled name (in tfgrpo/prompts) or a path to your own file."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    rollout_system: str | None = Field(
        None,
        description="System prompt of a rollout (receives `experiences`); None = experiences' system-prompt template, the one export ships.",
    )
    rollout_user: str = Field("rollout_user", description="User prompt of a rollout; receives `problem`.")
    summarize: str = Field("summarize", description="Stage 1: summarise one trajectory step by step.")
    group_advantage: str = Field("group_advantage", description="Stage 2: compare a group's rollouts → operations.")
    consolidate: str = Field(
        "consolidate", description="Stage 3: merge a batch's proposed operations → final operations."
    )


class LearnConfig(TrackingSettings):
    """Everything one learn run needs (and the trackers it logs to). Unknown keys are errors (`extra="forbid"`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # -- data ---------------------------------------------------------------------------------------
    data: str = Field(
        description="Training problems: a bundled name (easy, dapo100, ...) or a JSONL/JSON/CSV/parquet file."
    )
    val_data: str | None = Field(
        None, description="Validation problems; after each epoch Mean@k picks the best library."
    )
    out: str = Field(
        "runs/learn", description="Run directory (library.json, steps/, rollouts.jsonl, metrics.json, ...)."
    )
    problem_key: str = Field("problem", description="Column holding the problem text.")
    answer_key: str = Field("answer", description="Column holding the gold answer.")
    id_key: str = Field("id", description="Column holding the problem id (optional in the data; row-NNNN otherwise).")
    limit: int | None = Field(None, ge=1, description="Use only the first N training problems.")
    max_row_bytes: int = Field(
        MAX_ROW_BYTES,
        ge=1024,
        description="Longest dataset row accepted, in bytes (a longer row is an error naming its line).",
    )
    max_dataset_mb: int = Field(
        DATASET_MEMORY_MB,
        ge=1,
        description="Memory budget of each dataset, in MB: rows count their text plus ~8 KB each as they load; "
        "past it the run stops before its first request (use --limit, or raise this).",
    )
    init_library: str | None = Field(None, description="Start from this library JSON instead of an empty library.")
    dataset_cache: DatasetCache = Field("default", description=DATASET_CACHE_HELP)

    # -- model --------------------------------------------------------------------------------------
    llm: LLMConfig = Field(default_factory=LLMConfig)

    # -- the algorithm ------------------------------------------------------------------------------
    group_size: int = Field(
        5, ge=1, description="G: rollouts per query (1 works, as an ablation: no group to compare)."
    )
    epochs: int = Field(3, ge=1, description="Passes over the training data; reshuffled each epoch with the seed.")
    batch_size: int | None = Field(
        None, ge=1, description="Queries per step (one consolidation + library update each). None = the whole dataset."
    )
    seed: int = Field(42, description="Shuffling seed; a rerun with the same seed replays the same requests.")
    reward: str = Field("math", description="Reward name from rewards.get_reward.")
    ground_truth: bool = Field(
        True, description="False = score against each group's majority answer (no gold labels)."
    )
    std_threshold: float = Field(
        0.0,
        ge=0.0,
        description="A group whose reward std is <= this is homogeneous and skipped (0 = all rewards equal).",
    )
    max_ops_per_group: int = Field(
        3, ge=1, description="K: at most this many operations proposed per group (stage 2)."
    )
    max_words: int = Field(32, ge=1, description="Longest experience, in words; longer proposals are rejected.")
    require_sentences: bool = Field(
        True,
        description="Reject a proposed lesson that does not read as one: fewer than two words, mostly digits "
        "and symbols, no sentence end (cut off by the token limit), or the prompt's placeholder.",
    )
    trajectory_token_budget: int = Field(
        2048, ge=64, description="Trajectories longer than this (approx. tokens) are cut in the middle before stage 1."
    )
    inject: str = Field("all", description="'all' or 'topk:K' (the K experiences nearest to each problem).")
    dedup_threshold: float = Field(
        # 0.75: precision 0.86, recall 0.62 on tests/data/lesson_pairs.jsonl; at 0.90 MiniLM flags 5% of real
        # paraphrases (benchmarks/embedders.py). A false hint costs one prompt line; stage 3 decides.
        0.75,
        gt=0.0,
        le=1.0,
        description="Cosine similarity above which library items are shown to stage 3 as near-duplicates.",
    )
    max_experiences: int | None = Field(
        None, ge=1, description="Library size cap; beyond it the lowest-value experiences are evicted (None = no cap)."
    )
    max_library_tokens: int | None = Field(
        None,
        ge=1,
        description="Library budget in prompt tokens (≈ chars/4); the lowest-value experiences are evicted beyond it.",
    )
    dedup: Literal["enforce", "hint", "off"] = Field(
        "enforce",
        description="Near-duplicate lessons and the vector store: enforce = an add (or modify) that is a "
        "near-duplicate of an experience or of an earlier add of the step becomes a modify / merge of it or is "
        "dropped (dedup_enforce_threshold), and near-duplicates are shown to stage 3; hint = only shown to "
        "stage 3; off = no store lookups. true/false in old configs mean enforce/off.",
    )
    dedup_enforce_threshold: float = Field(
        # experiences.dedup.DEFAULT_ENFORCE_THRESHOLD: the rule and its measurement are documented there.
        0.70,
        gt=0.0,
        le=1.0,
        description="Cosine similarity from which a proposed lesson is the same lesson as another (dedup: "
        "enforce), when no word-level difference (a number, an operator, a negation, a contrast word, a term "
        "one side lacks) tells them apart.",
    )
    rollout_sampling: SamplingParams = Field(default_factory=lambda: SamplingParams(temperature=0.7, max_tokens=2048))
    stage_sampling: SamplingParams = Field(default_factory=lambda: SamplingParams(temperature=0.0, max_tokens=2048))
    summary_max_tokens: int | None = Field(
        None,
        ge=1,
        description="Max new tokens of a stage-1 summary (free text); None = stage_sampling.max_tokens, which "
        "also bounds the operation replies and their schema.",
    )
    templates: StageTemplates = Field(default_factory=StageTemplates)
    system_prompt: str | None = Field(
        None, description="A fixed system-prompt file instead of the rollout_system template."
    )

    # -- credit: each experience's measured effect on the reward (tfgrpo.learn.credit) ------------------
    credit_leave_out: float = Field(
        # benchmarks/credit_world.py --sweep: on the tuning seeds no harmful rule survived from 0.1 on; 0.2 keeps a
        # margin for 0.12 of the rollouts' reward where every lesson helps (docs/learn.md#credit)
        0.2,
        ge=0.0,
        lt=1.0,
        description="Probability that a rollout leaves each experience out of its prompt, so that rollouts of "
        "the same query with and without it measure its effect (credit); no extra call. 0 = off.",
    )
    credit_retire: bool = Field(
        True,
        description="Retire an experience whose effect's interval lies below 0 (a delete with reason credit, in "
        "the history, undone by `library rollback`); its text is refused from then on.",
    )
    credit_min_groups: int = Field(
        DEFAULT_MIN_GROUPS, ge=2, description="Queries with rollouts with and without an experience before a verdict."
    )
    credit_level: float = Field(DEFAULT_LEVEL, gt=0.5, lt=1.0, description="Confidence level of the credit interval.")

    # -- tools, validation --------------------------------------------------------------------------
    agent: AgentConfig = Field(
        default_factory=AgentConfig, description="Multi-turn tool use (tools: [python], max_turns, protocol)."
    )
    val_samples: int = Field(4, ge=1, description="k of the validation Mean@k.")

    # -- trust: leakage and test-set guards (docs/trust.md) ---------------------------------------
    leakage: Literal["reject", "flag", "off"] = Field(
        "reject",
        description="Operations whose text contains a gold answer of a training, validation or test problem: reject, flag (apply and list) or off.",
    )
    leakage_copy: Literal["reject", "flag", "off"] = Field(
        "flag",
        description="Operations whose text copies a training, validation or test problem (word n-gram overlap): reject, flag or off.",
    )
    leakage_ngram: int = Field(6, ge=3, description="n of the word n-grams compared for copied problems.")
    leakage_copy_threshold: float = Field(
        0.5, gt=0.0, le=1.0, description="Shared n-gram fraction from which a text copies a problem."
    )
    test_data: list[str] = Field(
        default_factory=list,
        description="Your test sets (names or files): learn refuses data sharing problems with them or the bundled aime24/aime25.",
    )
    allow_test_overlap: bool = Field(
        False, description="Learn even when --data / --val-data share problems with a test set."
    )
    seeds: int = Field(
        1,
        ge=1,
        description="Learn once per seed (seed, seed+1, ...) into out/seed-S, a seed set for eval and compare.",
    )
    select_by: Literal["epoch", "step"] = Field(
        "epoch",
        description="With --val-data: validate and pick the best library per epoch, or per step (every step validated).",
    )
    gate: bool = Field(
        False,
        description="With --val-data: keep a step's library only if validation does not drop beyond noise (bootstrap CI of Δ below 0).",
    )

    # -- run control --------------------------------------------------------------------------------
    resume: bool = Field(False, description="Continue an interrupted run in `out` from its last completed step.")
    allow_config_change: bool = Field(
        False,
        description="With --resume: carry on although settings that decide the requests (group size, data, model, "
        "...) differ from those the completed steps ran with; the change is recorded in state.json.",
    )
    on_consolidation_failure: Literal["skip", "apply_proposed"] = Field(
        "skip", description="When stage 3 fails twice: apply nothing (skip) or the stage-2 proposals as they are."
    )

    @model_validator(mode="after")
    def _selection_needs_validation(self) -> LearnConfig:
        if (self.gate or self.select_by == "step") and not self.val_data:
            raise ValueError("gate and select_by: step validate on --val-data: add it")
        return self

    @field_validator("dedup", mode="before")
    @classmethod
    def _dedup_from_bool(cls, value: object) -> object:
        if isinstance(value, bool):  # configs written before dedup had modes
            return "enforce" if value else "off"
        return value

    @field_validator("inject")
    @classmethod
    def _inject_spec(cls, value: str) -> str:
        value = value.strip().lower()
        if value != "all" and not _TOPK.match(value):
            raise ValueError("must be 'all' or 'topk:K' with K >= 1, e.g. 'topk:5'")
        return value


# Settings whose change would make a resumed run differ from an uninterrupted one.
RESUME_LOCKED_KEYS = (
    "data",
    "problem_key",
    "answer_key",
    "id_key",
    "limit",
    "init_library",
    "group_size",
    "batch_size",
    "seed",
    "reward",
    "ground_truth",
    "std_threshold",
    "max_ops_per_group",
    "max_words",
    "require_sentences",
    "trajectory_token_budget",
    "inject",
    "dedup_threshold",
    "dedup",
    "dedup_enforce_threshold",
    "rollout_sampling",
    "stage_sampling",
    "summary_max_tokens",
    "templates",
    "system_prompt",
    "agent",
    "on_consolidation_failure",
    "credit_leave_out",
    "credit_retire",
    "credit_min_groups",
    "credit_level",
    "max_experiences",
    "max_library_tokens",
    "leakage",
    "leakage_copy",
    "leakage_ngram",
    "leakage_copy_threshold",
    "test_data",
    "gate",
    "llm.backend",
    "llm.model",
    "llm.adapter",
)


__all__ = ["LearnConfig", "RESUME_LOCKED_KEYS", "StageTemplates"]
