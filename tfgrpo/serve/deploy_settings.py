"""Settings of the champion/challenger deployment: a section of `ServeConfig` (`deployment:`), and of the
`tfgrpo deploy` commands that operate the same database."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tfgrpo.core.sequential import SequentialSettings


class DeploymentSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = Field(
        False,
        description="Serve the deployment kept in the trace store (champion, challenger, decision log): the "
        "library file seeds the champion on the first start only; the sequential test decides each challenger.",
    )
    challenger_share: float = Field(
        0.5,
        gt=0.0,
        lt=1.0,
        description="Share of the library arm's users (those not held out) served the challenger (arm C) while a "
        "test runs; the others get the champion (arm B).",
    )
    poll_interval_s: float = Field(
        1.0,
        gt=0,
        description="How often each worker reads the deployment's revision; a changed champion or challenger is "
        "swapped in for the requests that start after it (one in flight finishes on its version).",
    )
    decide_interval_s: float = Field(
        2.0,
        gt=0,
        description="How often each worker runs the sequential test and the error guard on the running test's "
        "rewarded exchanges; a decision is one compare-and-swap, so several workers make it once.",
    )
    guard_max_increase: float = Field(
        0.05,
        ge=0.0,
        lt=1.0,
        description="Roll a challenger back when the lower confidence bound of its upstream error/timeout rate "
        "minus the champion's exceeds this.",
    )
    test_data: list[str] = Field(
        [],
        description="Test sets (bundled names or files) whose answers or problems a challenger may not contain, "
        "besides the bundled benchmarks (aime24, aime25): such a proposal is refused.",
    )
    test: SequentialSettings = Field(
        default_factory=SequentialSettings,
        description="The sequential test that decides (alpha, min_effect, margin, min_samples, max_samples).",
    )


class DeployCommandConfig(BaseModel):
    """The settings `tfgrpo deploy` reads: where the deployment is, and the test it reports on."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    traces: str = Field(
        "traces.sqlite",
        description="The trace store holding the deployment: the SQLite file or SQLAlchemy URL serve writes to.",
    )
    reward_min: float = Field(0.0, description="Smallest reward /v1/feedback accepts (the test's lower bound).")
    reward_max: float = Field(1.0, description="Largest reward /v1/feedback accepts (the test's upper bound).")
    deployment: DeploymentSettings = Field(
        default_factory=DeploymentSettings, description="The deployment's settings, as serve has them."
    )

    @model_validator(mode="after")
    def _reward_bounds_in_order(self) -> DeployCommandConfig:
        if self.reward_min >= self.reward_max:
            raise ValueError(f"reward_min ({self.reward_min:g}) must be below reward_max ({self.reward_max:g})")
        return self
