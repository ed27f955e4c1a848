"""An experiment recipe: which learn runs, fine-tuning baselines and evals make one paper-style table.

A recipe is YAML validated into `Recipe` (unknown keys are errors). Step settings (`learn.settings`,
`eval_defaults`, `evals.<set>.settings`, `finetunes.<name>.options`) are the existing commands' own
config fields, validated when the plan is built, so a recipe can say anything `tfgrpo learn`, `tfgrpo eval`
or `tfgrpo finetune` can. Any key is overridable from the command line: `--set evals.aime24.samples=8`.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tfgrpo.core.config import ConfigError, format_validation_error, load_yaml_text, load_yaml_value, read_yaml
from tfgrpo.core.tracking import TrackingSettings
from tfgrpo.llm.config import LLMConfig

BUNDLED_RECIPES = (
    "paper-math",
    "quickstart",
    "quickstart-baselines",
    "baselines-local",
    "compare-methods",
    "compare-methods-quickstart",
)


class LearnSpec(BaseModel):
    """The Training-Free GRPO runs: one learn run per seed, each on the same data and settings."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    data: str = Field(description="Training problems: a bundled name (easy, dapo100, ...) or a file.")
    seeds: list[int] = Field(default_factory=lambda: [42], min_length=1, description="One learn run per seed.")
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Any `tfgrpo learn` config field (group_size, epochs, rollout_sampling, ...).",
    )
    seed_from: Literal["gepa"] | None = Field(
        None, description="'gepa' = start every learn run from GEPA's prompt as a library (gepa/library.json)."
    )


class GepaSpec(BaseModel):
    """GEPA (the `gepa` package): a system prompt evolved on the training problems, then evaluated like the rest."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    data: str | None = Field(
        None, description="Training problems; None = learn.data with learn's limit and val_data (the same split)."
    )
    seed_from: str | None = Field(
        None,
        description="'learn' (the first seed) or 'learn:SEED': start from that learn run's library, as its system "
        "prompt; None = gepa.settings.seed_prompt or the bundled seed prompt.",
    )
    settings: dict[str, Any] = Field(
        default_factory=dict,
        description="Any GEPA config field (max_metric_calls, reflection_minibatch_size, sampling, reflection_llm, ...).",
    )


class EvalSetSpec(BaseModel):
    """One eval set: every system is evaluated on it with the same K and settings."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    data: str = Field(description="A bundled eval set (aime24, aime25, amc23, easy, ...) or a file.")
    samples: int = Field(4, ge=1, description="K samples per problem (Mean@K).")
    limit: int | None = Field(None, ge=1, description="Evaluate only the first N problems.")
    settings: dict[str, Any] = Field(
        default_factory=dict, description="Any other `tfgrpo eval` config field for this set."
    )


class FinetuneSpec(BaseModel):
    """A gradient baseline trained with `tfgrpo finetune METHOD`, then evaluated with its adapter."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    method: str = Field(description="sft | dpo | ipo | cdpo | kto | orpo | ppo | grpo | gspo.")
    model: str | None = Field(None, description="Local base model (HF folder or GGUF); None = the embedded SmolLM2.")
    data: str = Field(
        "learn",
        description="'learn' = the first seed's learn run (its rollouts), 'learn:SEED', or a dataset name/file.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict, description="Any `tfgrpo finetune` config field (--set keys)."
    )
    eval_llm: dict[str, Any] = Field(
        default_factory=dict,
        description="`llm:` fields for evaluating the adapter; default: transformers backend, this model, the adapter.",
    )


class EstimateSpec(BaseModel):
    """Average tokens per call, for the cost estimate printed before anything is spent."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    rollout_completion_tokens: int = Field(1500, ge=1, description="Average completion tokens of a learn rollout.")
    eval_completion_tokens: int = Field(1500, ge=1, description="Average completion tokens of an eval sample.")
    summary_completion_tokens: int = Field(300, ge=1, description="Stage 1 summary reply.")
    advantage_completion_tokens: int = Field(400, ge=1, description="Stage 2 group-advantage reply.")
    consolidate_completion_tokens: int = Field(600, ge=1, description="Stage 3 consolidation reply.")
    template_prompt_tokens: int = Field(400, ge=0, description="Prompt tokens of a template without its inputs.")
    library_prompt_tokens: int = Field(600, ge=0, description="Prompt tokens of an injected library.")
    reflection_completion_tokens: int = Field(600, ge=1, description="GEPA's reflection reply (the new prompt).")
    tool_turns: float = Field(
        3.0, ge=1, description="Average model turns of a trajectory with tools (ceiling: max_turns)."
    )
    calibrate: bool = Field(
        True,
        description="Time each local backend for a few seconds before the run (tokens/s) and print the "
        "experiment's expected wall time; API backends get no time estimate.",
    )


class ReportSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    seed: int = Field(0, description="Bootstrap / permutation seed of the statistics.")
    pooled: bool = Field(True, description="Add a 'library (pooled)' row over all seeds when there are several.")


class Recipe(TrackingSettings):
    """One experiment: learn runs, fine-tuning baselines, evals on every set, the final table (and its trackers)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str = Field("experiment", description="Shown in the report title.")
    description: str = Field("", description="What the experiment reproduces.")
    model: LLMConfig = Field(
        default_factory=LLMConfig,
        description="The frozen model: learn runs, and base/library evals unless eval_model.",
    )
    eval_model: LLMConfig | None = Field(
        None,
        description="The frozen model as the base and library evals run it; None = `model`. Set it to the "
        "fine-tuned adapters' engine (e.g. {backend: transformers}) so every row is decoded the same way.",
    )
    learn: LearnSpec | None = Field(None, description="Training-Free GRPO runs; None = no library rows.")
    gepa: GepaSpec | None = Field(None, description="A GEPA run (the `gepa` extra); None = no GEPA row.")
    baseline: bool = Field(True, description="Evaluate the base model (the table's reference row).")
    evals: dict[str, EvalSetSpec] = Field(description="Eval sets by name (the table's columns).", min_length=1)
    eval_defaults: dict[str, Any] = Field(
        default_factory=dict,
        description="`tfgrpo eval` config fields shared by every eval set (sampling, reward, ...).",
    )
    finetunes: dict[str, FinetuneSpec] = Field(default_factory=dict, description="Fine-tuned baselines by name.")
    report: ReportSpec = Field(default_factory=ReportSpec)
    estimate: EstimateSpec = Field(default_factory=EstimateSpec)

    @model_validator(mode="after")
    def _gepa_inputs(self) -> Recipe:
        gepa, learn = self.gepa, self.learn
        if learn is not None and learn.seed_from == "gepa" and gepa is None:
            raise ValueError("learn.seed_from: gepa needs a `gepa:` section")
        if gepa is None:
            return self
        if gepa.data is None and learn is None:
            raise ValueError("gepa.data: give the training problems (there is no `learn:` section to take them from)")
        if gepa.seed_from is not None:
            if learn is None or not (gepa.seed_from == "learn" or gepa.seed_from.startswith("learn:")):
                raise ValueError(
                    f"gepa.seed_from {gepa.seed_from!r}: expected 'learn' or 'learn:SEED' with a `learn:` section"
                )
            if learn.seed_from == "gepa":
                raise ValueError("gepa.seed_from and learn.seed_from name each other: choose one direction")
        return self

    @field_validator("evals", "finetunes")
    @classmethod
    def _plain_names(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name in value:
            if not name or "/" in name or name.startswith("."):
                raise ValueError(f"name {name!r} must be a plain folder name")
        return value


def recipe_source(spec: str) -> Path | Any:
    """A bundled recipe name (`paper-math`) or a YAML path."""
    if spec in BUNDLED_RECIPES:
        return files("tfgrpo.experiment").joinpath("recipes", f"{spec}.yaml")
    path = Path(spec)
    if not path.is_file():
        raise ConfigError(f"recipe {spec!r}: no such file, and not a bundled recipe ({', '.join(BUNDLED_RECIPES)})")
    return path


def parse_overrides(items: list[str] | None) -> list[tuple[list[str], Any]]:
    """`evals.aime24.samples=8` → (["evals", "aime24", "samples"], 8); values parsed as YAML."""
    parsed = []
    for item in items or []:
        key, sep, value = item.partition("=")
        path = [part for part in key.strip().split(".") if part]
        if not sep or not path:
            raise ConfigError(f"--set {item!r}: expected KEY.PATH=VALUE, e.g. evals.aime24.samples=8")
        parsed.append((path, load_yaml_value(value, option=f"--set {item!r:.80}")))
    return parsed


def apply_overrides(data: dict[str, Any], overrides: list[tuple[list[str], Any]]) -> dict[str, Any]:
    for path, value in overrides:
        node = data
        for depth, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {'.'.join(path)}: '{'.'.join(path[: depth + 1])}' is not a mapping")
            node = child
        node[path[-1]] = value
    return data


def load_recipe(spec: str, overrides: list[str] | None = None) -> Recipe:
    source = recipe_source(spec)
    if isinstance(source, Path):
        data = read_yaml(source)
    else:
        data = load_yaml_text(source.read_text(encoding="utf-8")) or {}
    data = apply_overrides(data, parse_overrides(overrides))
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source=f"recipe {spec}")) from None


__all__ = [
    "BUNDLED_RECIPES",
    "EstimateSpec",
    "EvalSetSpec",
    "FinetuneSpec",
    "GepaSpec",
    "LearnSpec",
    "Recipe",
    "load_recipe",
]
