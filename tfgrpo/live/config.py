"""Settings of `tfgrpo learner`: one pydantic model, read from the command line and YAML alike.

The learner's own settings (which store it follows, when it proposes) sit beside the learn settings each
round runs with: the model (`llm`), the common algorithm knobs as fields, and any other `tfgrpo learn` key
under `learn:` (YAML only). The keys a round owns (its data, run directory, starting library) are refused
there, so a setting never means something the learner does not do.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tfgrpo.core.config import format_validation_error
from tfgrpo.learn.config import LearnConfig
from tfgrpo.llm.config import LLMConfig

#: LearnConfig keys each round sets itself: `learn:` may not give them
ROUND_OWNED = (
    "data",
    "out",
    "init_library",
    "resume",
    "allow_config_change",
    "seeds",
    "val_data",
    "select_by",
    "gate",
    "limit",
    "llm",
    "group_size",
    "epochs",
    "batch_size",
    "reward",
    "ground_truth",
    "test_data",
    "allow_test_overlap",
)


class LearnerConfig(BaseModel):
    """Everything one learner needs. Unknown keys are errors (`extra="forbid"`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # -- what it follows --------------------------------------------------------------------------------
    traces: str = Field(
        "traces.sqlite",
        description="The trace store `tfgrpo serve` writes: a SQLite file path or a SQLAlchemy URL "
        "(postgresql+psycopg://...); the learner only reads it, on its own connection, and writes its proposals "
        "to the deployment kept there.",
    )
    out: str = Field(
        "runs/learner",
        description="The learner's run directory (state.json with its cursor, rounds/NNNN/ with each round's "
        "learn run, skipped.jsonl); a restart resumes from it.",
    )
    ground_truth: bool = Field(
        True,
        description="True: learn from exchanges whose feedback carries a gold answer (or a reward at or above "
        "rated_threshold); False: from every served prompt, each group scored against its majority answer.",
    )
    rated_threshold: float | None = Field(
        None,
        description="A feedback reward (without a gold answer) at or above this makes the rated reply's final "
        "answer the gold answer of its prompt; None: such feedback is not used (a bare reward scores only the old "
        "reply, not new rollouts).",
    )
    settle_s: float = Field(
        5.0,
        ge=0.0,
        description="Seconds a feedback (or, without ground truth, an exchange) must be old before it is read, so "
        "rows other workers commit late are never passed by the cursor.",
    )
    poll_interval_s: float = Field(5.0, gt=0.0, description="Seconds between two reads of the trace store.")

    # -- when it proposes -------------------------------------------------------------------------------
    propose_every: int = Field(
        32, ge=1, description="Run a round and propose its library once this many rewarded exchanges came in."
    )
    propose_interval_min: float | None = Field(
        60.0,
        gt=0.0,
        description="Also run a round when this many minutes passed since the last one and any rewarded exchange "
        "waits; None: only by count.",
    )
    max_problems: int = Field(
        64,
        ge=1,
        description="Most distinct prompts waiting for a round, and so learned from in one (the newest; an older one "
        "is dropped, and counted, when a newer one arrives).",
    )
    once: bool = Field(
        False,
        description="Read what the store holds now, run at most one round (when one is due), and exit: for cron.",
    )

    # -- each round: a `tfgrpo learn` run from the champion ----------------------------------------------
    llm: LLMConfig = Field(default_factory=LLMConfig)
    group_size: int = Field(5, ge=1, description="G: fresh rollouts per prompt in each round.")
    epochs: int = Field(1, ge=1, description="Passes of a round over its prompts.")
    batch_size: int | None = Field(
        None, ge=1, description="Prompts per step of a round (None: all of them, one step)."
    )
    reward: str = Field("math", description="Verifiable reward that scores the rollouts against the gold answer.")
    test_data: list[str] = Field(
        default_factory=list,
        description="Your test sets (names or files): their prompts are locked out of learning (skipped and "
        "recorded), besides the bundled aime24/aime25; lessons holding their answers are refused.",
    )
    learn: dict[str, Any] = Field(
        default_factory=dict,
        description="Any other `tfgrpo learn` setting for every round (dedup, credit_leave_out, leakage, "
        "rollout_sampling, ...); the keys a round sets itself are refused.",
    )

    @field_validator("learn")
    @classmethod
    def _valid_learn_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        owned = sorted(set(value) & set(ROUND_OWNED))
        if owned:
            raise ValueError(f"learn.{', learn.'.join(owned)}: set by the learner (or its own option), not here")
        try:
            LearnConfig.model_validate({**value, "data": "easy"})
        except ValidationError as exc:
            raise ValueError(format_validation_error(exc, source="learn")) from None
        return value

    @model_validator(mode="after")
    def _reward_known(self) -> LearnerConfig:
        from tfgrpo.rewards.registry import REWARD_NAMES  # here: the config module stays light to import

        if self.reward not in REWARD_NAMES:
            raise ValueError(f"unknown reward {self.reward!r}; choose one of: {', '.join(REWARD_NAMES)}")
        return self

    def round_config(
        self, *, data: str, out: str, init_library: str, budget_usd: float | None, resume: bool
    ) -> LearnConfig:
        """The settings of one round: a learn run on `data` from the champion `init_library`, in `out`."""
        llm = self.llm.model_copy(update={"budget_usd": budget_usd})
        return LearnConfig.model_validate(
            {
                **self.learn,
                "data": data,
                "out": out,
                "init_library": init_library,
                "llm": llm,
                "group_size": self.group_size,
                "epochs": self.epochs,
                "batch_size": self.batch_size,
                "reward": self.reward,
                "ground_truth": self.ground_truth,
                "test_data": self.test_data,
                "resume": resume,
            }
        )


__all__ = ["ROUND_OWNED", "LearnerConfig"]
