"""Settings of the champion/challenger deployment: a section of `ServeConfig` (`deployment:`), and of the
`tfgrpo deploy` commands that operate the same database."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tfgrpo.core.sequential import SequentialSettings


class DeploymentSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = Field(
        False,
        description="Serve the deployment kept in the trace store's database instead of the library file alone: "
        "the file seeds the champion on the first start only; a challenger proposed with `tfgrpo deploy propose` "
        "is tested on live rewards and promoted or rolled back by the sequential test (docs/serving.md).",
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
