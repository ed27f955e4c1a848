"""GRPO and GSPO over `trl.GRPOTrainer`, fed by our reward functions (`tfgrpo.rewards.get_reward`).

What we add to TRL's trainer, each a few lines in `GroupFilteredGRPOTrainer`:
- **group size 1-16**: TRL requires >= 2 generations per prompt. With 1, the group baseline is
  meaningless (every advantage would be 0), so the baseline is the batch mean instead
  (REINFORCE with a batch baseline); 2-16 are ordinary GRPO groups.
- **advantage normalisation toggle**: `normalize_advantages` (divide by the group std, or not, as
  Dr. GRPO recommends) sets TRL's `scale_rewards`.
- **homogeneous-group filtering** (DAPO's dynamic sampling): a group whose ground-truth rewards are all
  equal (all right or all wrong) carries no signal; its completions are masked out of the loss, the
  KL term and the token count, instead of diluting the batch with zero-advantage tokens.
- **what a step trained on**: every generation batch logs `groups_filtered`, `tokens_in_loss` and
  `nothing_to_learn` (1 when no loss token carries a non-zero advantage, e.g. every group filtered),
  and warns; `run_finetune` fails a run in which no batch had anything to learn unless
  `allow_no_learning` is set.
- **multi-turn rollouts**: `tools: [python]` gives every rollout our sandboxed interpreter through TRL's
  own tool loop (`environment_factory=`, see finetune/tools.py); `max_turns` bounds the model turns
  (TRL's `max_tool_calling_iterations` = max_turns - 1). Callers may also pass TRL's `tools=` /
  `environment_factory=` directly.

GSPO (Zheng et al., 2025) is GRPO with sequence-level importance ratios
(`importance_sampling_level="sequence"`), tight clipping, a KL term to the reference model (beta > 0)
and, for Mixture-of-Experts models, the router load-balancing auxiliary loss added to the objective
(TRL's `router_aux_loss_coef`; None = the model config's own coefficient).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import trl
from trl.trainer.utils import nanstd

from tfgrpo.core.secrets import masked
from tfgrpo.finetune.adapters import BASE_CHANGING_INITS, AdapterArguments, build_peft_config
from tfgrpo.finetune.errors import FinetuneError
from tfgrpo.finetune.longlora import enable_for_config
from tfgrpo.finetune.tools import build_tool_environment, check_tool_calling_tokenizer
from tfgrpo.rewards import get_reward
from tfgrpo.rollout.tools import parse_tool_names

logger = logging.getLogger(__name__)

MAX_GROUP_SIZE = 16


@dataclass
class GRPOFinetuneConfig(trl.GRPOConfig, AdapterArguments):
    """`trl.GRPOConfig` plus adapter settings, group size 1-16, normalisation toggle and group filtering."""

    reward: str = field(
        default="math",
        metadata={
            "help": "Reward name for tfgrpo.rewards.get_reward (math, exact, "
            "choice, numeric, format, ...) or a path to a reward model."
        },
    )
    normalize_advantages: bool | None = field(
        default=None,
        metadata={
            "help": "Divide advantages by the group's reward std (True = TRL scale_rewards 'group'; False = "
            "'none', as Dr. GRPO recommends). None keeps scale_rewards as given."
        },
    )
    filter_homogeneous_groups: bool = field(
        default=True,
        metadata={"help": "Drop groups whose rewards are all equal (all correct or all wrong) from the loss."},
    )
    allow_no_learning: bool = field(
        default=False,
        metadata={
            "help": "Accept a run in which no step had anything to learn (every group filtered or every "
            "advantage 0); by default such a run ends with a warning and an error."
        },
    )
    tools: list[str] | None = field(
        default=None,
        metadata={
            "help": "Tools for multi-turn rollouts: tfgrpo.rollout.tools names (python, web_search) or "
            "'package.module:Class'. Each rollout gets its own sessions (the python tool: its own sandboxed "
            "interpreter). Needs a chat template with tool calling (Qwen2.5/3, Llama 3.1, ...)."
        },
    )
    tool_options: dict[str, Any] | None = field(
        default=None,
        metadata={
            "help": "Keyword arguments per tool, e.g. {python: {timeout_s: 5, memory_mb: 1024}} (the sandbox "
            "limits in docs/agent.md)."
        },
    )
    max_turns: int | None = field(
        default=None,
        metadata={
            "help": "Model turns per trajectory with tools, the final answer included (sets TRL's "
            "max_tool_calling_iterations = max_turns - 1). None: until no tool call or the length limit."
        },
    )

    def __post_init__(self) -> None:
        group_size = self.num_generations
        if group_size is None or not 1 <= group_size <= MAX_GROUP_SIZE:
            raise ValueError(f"num_generations (group size) must be in 1..{MAX_GROUP_SIZE} (got {group_size})")
        if self.normalize_advantages is not None:
            self.scale_rewards = "group" if self.normalize_advantages else "none"
        # TRL refuses a group of 1; we replace its zero advantages with a batch baseline, so let it validate
        # the batch arithmetic with 2 and restore 1 afterwards.
        if group_size == 1:
            self.num_generations = 2
            try:
                super().__post_init__()
            finally:
                self.num_generations = 1
        else:
            super().__post_init__()
        self.check_adapter_arguments()
        if self.peft in BASE_CHANGING_INITS and self.beta > 0:
            raise ValueError(
                f"peft={self.peft} with a KL term (beta={self.beta}): TRL's reference would be the "
                "adapter-off residual weights, not the base model; use peft lora, or beta 0 with method grpo"
            )
        self._check_tool_arguments()

    def _check_tool_arguments(self) -> None:
        self.tools = parse_tool_names(self.tools) or None  # "python,web_search", a list, or none
        if self.tool_options and not self.tools:
            raise ValueError("tool_options given but no tools enabled (set tools, e.g. tools: [python])")
        if self.max_turns is not None:
            if self.max_turns < 1:
                raise ValueError(f"max_turns must be >= 1 (got {self.max_turns})")
            if self.max_tool_calling_iterations not in (None, self.max_turns - 1):
                raise ValueError("set max_turns or max_tool_calling_iterations, not both")
            self.max_tool_calling_iterations = self.max_turns - 1


@dataclass
class GSPOFinetuneConfig(GRPOFinetuneConfig):
    """GSPO: sequence-level importance ratios, GSPO's clip range, KL to the reference, MoE router aux loss."""

    importance_sampling_level: str = field(default="sequence", metadata={"help": "GSPO: one ratio per sequence."})
    loss_type: str = field(default="grpo", metadata={"help": "Per-sequence mean, as in the GSPO paper."})
    beta: float = field(default=0.04, metadata={"help": "Weight of the KL term to the frozen reference model."})
    epsilon: float = field(default=3e-4, metadata={"help": "Lower clip of the sequence ratio (paper: 3e-4)."})
    epsilon_high: float | None = field(default=4e-4, metadata={"help": "Upper clip (paper: 4e-4)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.importance_sampling_level != "sequence":
            raise ValueError("GSPO uses importance_sampling_level='sequence'; use method grpo for token-level ratios")
        if self.beta <= 0:
            raise ValueError(f"GSPO keeps a KL term to the reference model: beta must be > 0 (got {self.beta})")


class LearningSignalMixin:
    """Counts, per generation batch, the tokens the policy loss really learns from, and says when there are none."""

    batches_generated = 0
    batches_with_nothing_to_learn = 0
    #: training totals over every generation batch (all processes): what `finetune_summary.json` reports
    tokens_in_loss_total = 0
    groups_total = 0
    groups_filtered_total = 0

    def _record_learning_signal(self, output: dict[str, Any], mode: str, groups_filtered: int | None) -> None:
        loss_mask = output["completion_mask"] * output.get("tool_mask", 1)
        advantages = output["advantages"]
        if advantages.dim() == 1:  # one advantage per sequence (GRPO); PPO has one per token
            advantages = advantages.unsqueeze(1)
        tokens = self.accelerator.gather(loss_mask.sum()).sum().item()
        learnable = self.accelerator.gather((loss_mask * (advantages != 0)).sum()).sum().item()
        metrics = self._metrics[mode]
        metrics["tokens_in_loss"].append(float(tokens))
        metrics["nothing_to_learn"].append(float(learnable == 0))
        if groups_filtered is not None:
            metrics["groups_filtered"].append(float(groups_filtered))
        if mode != "train":
            return
        self.batches_generated += 1
        self.tokens_in_loss_total += int(tokens)
        self.groups_filtered_total += groups_filtered or 0
        if learnable == 0:
            self.batches_with_nothing_to_learn += 1
            why = (
                f"all {groups_filtered} groups filtered (every sample of a group scored the same)"
                if groups_filtered
                else f"{int(tokens)} tokens in the loss, none with a non-zero advantage"
            )
            logger.warning("step %d: nothing to learn: %s", self.state.global_step + 1, why)


class GroupFilteredGRPOTrainer(LearningSignalMixin, trl.GRPOTrainer):
    """`trl.GRPOTrainer` with group size 1 (batch baseline), homogeneous-group filtering and learning-signal logs."""

    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        rewards = (rewards_per_func * weights).nansum(dim=1)
        rewards[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan  # unscorable: no reward at all
        self._last_rewards = rewards  # all processes' rewards, in generation order
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        rewards = self._last_rewards
        local = output["advantages"].shape[0]
        local_slice = slice(self.accelerator.process_index * local, (self.accelerator.process_index + 1) * local)

        groups_filtered = None
        if mode == "train":
            self.groups_total += rewards.numel() // group_size
        if group_size == 1:
            advantages = rewards - torch.nanmean(rewards)
            if self.scale_rewards != "none" and rewards.numel() > 1:
                advantages = advantages / (nanstd(rewards) + 1e-4)
            output["advantages"] = torch.nan_to_num(advantages, nan=0.0)[local_slice]
        elif self.args.filter_homogeneous_groups:
            grouped = rewards.view(-1, group_size)
            spread = torch.nan_to_num(grouped.nan_to_num(nan=0.0).amax(1) - grouped.nan_to_num(nan=0.0).amin(1))
            keep = (spread > 0).repeat_interleave(group_size)[local_slice]
            output["completion_mask"] = output["completion_mask"] * keep.unsqueeze(1).to(
                output["completion_mask"].dtype
            )
            loss_mask = output["completion_mask"] * output.get("tool_mask", 1)
            output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
            self._metrics[mode]["frac_groups_filtered"].append((spread == 0).float().mean().item())
            groups_filtered = int((spread == 0).sum().item())
        self._record_learning_signal(output, mode, groups_filtered)
        return output


def resolve_reward_funcs(reward: str | Any) -> list[Any]:
    """Our reward by name (`tfgrpo.rewards.get_reward`), a reward model path, or callables passed as they are."""
    if not isinstance(reward, str):
        return list(reward) if isinstance(reward, (list, tuple)) else [reward]
    if Path(reward).is_dir():  # a sequence-classification reward model: TRL loads and scores with it
        return [reward]
    return [get_reward(reward)]


def check_conversational_prompts(train_dataset: Any) -> None:
    """TRL's tool loop reads tool calls from chat messages: prompts must be lists of messages, not strings."""
    if train_dataset is not None and len(train_dataset) and not isinstance(train_dataset[0]["prompt"], list):
        raise FinetuneError("tools need conversational prompts (a list of chat messages per row), not plain strings")


def build_grpo_trainer(
    config: GRPOFinetuneConfig,
    model: Any,
    tokenizer: Any,
    train_dataset: Any,
    callbacks: list[Any] | None = None,
    *,
    reward_funcs: Any = None,
    tools: list[Any] | None = None,
    environment_factory: Any = None,
) -> GroupFilteredGRPOTrainer:
    """GRPO or GSPO (by config class). `config.tools` (or TRL's own `tools` / `environment_factory`) enable
    multi-turn rollouts with tool calls."""
    if config.tools and tools is None and environment_factory is None:
        check_tool_calling_tokenizer(tokenizer)
        check_conversational_prompts(train_dataset)
        environment_factory = build_tool_environment(config.tools, options=config.tool_options)
        # the tools hold the clear values now; the config is pickled into training_args.bin and logged
        config.tool_options = masked(config.tool_options)
    enable_for_config(model, config)
    return GroupFilteredGRPOTrainer(
        model=model,
        reward_funcs=resolve_reward_funcs(reward_funcs if reward_funcs is not None else config.reward),
        args=config,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=build_peft_config(config),
        callbacks=callbacks,
        tools=tools,
        environment_factory=environment_factory,
    )
