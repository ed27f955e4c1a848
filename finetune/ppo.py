"""PPO with a value head, GAE and a per-token KL penalty, built on `trl.GRPOTrainer`'s machinery.

Why this design: TRL 1.16 deleted PPO (`trl.experimental.ppo` lived in 1.10-1.15). Pinning TRL 1.12 for one
method would freeze every other method on an old TRL; OpenRLHF / veRL need Ray and GPUs. GRPOTrainer
already does everything PPO needs except the critic: sampling (transformers or vLLM), our reward
functions or a reward model, PEFT/QLoRA, the clipped surrogate with per-token advantages, logging,
DeepSpeed. So `PPOTrainer` subclasses it and adds only what PPO has and GRPO lacks (~150 lines):

- a **value head** (`Linear(hidden, 1)`) on the policy's last hidden state (shared backbone, like
  TRL's former `AutoModelForCausalLMWithValueHead`), read with a forward hook so no extra pass is
  needed; trainable and saved with the adapter (`modules_to_save`) under PEFT;
- **per-token rewards**: `-kl_coef * (log pi - log pi_ref)` at every token plus the sequence score at
  the last token (the KL penalty of Ziegler et al. / InstructGPT, with a frozen reference);
- **GAE** (gamma, lambda) advantages and returns, optionally whitened;
- a **clipped value loss** `vf_coef * 0.5 * max((V-R)², (V_clip-R)²)` added to GRPO's clipped
  policy loss, which receives the (B, T) advantages unchanged.

The reward is our reward functions (`--reward math`, default) or an external reward model directory
(`AutoModelForSequenceClassification`, scored by TRL).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
import trl
from trl.trainer.utils import add_fused_lm_head, use_adapter

from tfgrpo.finetune.adapters import BASE_CHANGING_INITS, build_peft_config
from tfgrpo.finetune.grpo import GRPOFinetuneConfig, LearningSignalMixin, resolve_reward_funcs
from tfgrpo.finetune.longlora import enable_for_config

VALUE_HEAD = "v_head"


@dataclass
class PPOFinetuneConfig(GRPOFinetuneConfig):
    """PPO hyper-parameters on top of GRPOConfig (sampling, clipping `epsilon`, `num_iterations` = PPO epochs)."""

    num_generations: int | None = field(
        default=1, metadata={"help": "Samples per prompt (PPO needs no group; the value head is the baseline)."}
    )
    loss_type: str = field(default="bnpo", metadata={"help": "Policy loss averaged over all completion tokens."})
    filter_homogeneous_groups: bool = field(default=False, metadata={"help": "Not used by PPO (refused if set)."})
    kl_coef: float = field(default=0.05, metadata={"help": "Per-token KL penalty to the reference, in the reward."})
    gamma: float = field(default=1.0, metadata={"help": "Discount factor of GAE."})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda (bias/variance trade-off)."})
    vf_coef: float = field(default=0.1, metadata={"help": "Weight of the value loss."})
    cliprange_value: float = field(default=0.2, metadata={"help": "Clip range of the value update."})
    whiten_advantages: bool = field(default=True, metadata={"help": "Normalise GAE advantages over the batch."})

    def __post_init__(self) -> None:
        if self.beta != 0.0:
            raise ValueError(
                f"PPO puts the KL penalty into the per-token reward; set kl_coef, not beta (got {self.beta})"
            )
        if self.filter_homogeneous_groups:
            raise ValueError(
                "PPO has no groups to filter (the value head is the baseline); use method grpo for "
                "filter_homogeneous_groups"
            )
        if self.normalize_advantages is not None:
            raise ValueError(
                "PPO normalises its GAE advantages with whiten_advantages; normalize_advantages is a "
                "GRPO option (use method grpo, or set whiten_advantages)"
            )
        super().__post_init__()
        if self.kl_coef < 0 or self.vf_coef <= 0 or self.cliprange_value <= 0:
            raise ValueError("kl_coef must be >= 0, vf_coef and cliprange_value > 0")
        if not (0.0 <= self.gamma <= 1.0 and 0.0 <= self.lam <= 1.0):
            raise ValueError(f"gamma and lam must lie in [0, 1] (got gamma={self.gamma}, lam={self.lam})")


def add_value_head(model: Any) -> Any:
    """Attach `v_head = Linear(hidden, 1)` (small init, float32) to a causal LM; returns the model."""
    hidden = model.config.get_text_config().hidden_size
    head = torch.nn.Linear(hidden, 1)
    torch.nn.init.normal_(head.weight, std=1.0 / (hidden + 1))
    torch.nn.init.zeros_(head.bias)
    setattr(model, VALUE_HEAD, head.to(next(model.parameters()).device))
    return model


def compute_gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over right-padded (B, T) tensors; returns (advantages, returns)."""
    rewards, values = rewards * mask, values * mask
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    length = rewards.shape[1]
    for t in reversed(range(length)):
        next_value = values[:, t + 1] if t + 1 < length else torch.zeros_like(last)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last = delta + gamma * lam * last
        advantages[:, t] = last
    advantages = advantages * mask
    return advantages, (advantages + values) * mask


def _masked_whiten(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mean = (x * mask).sum() / mask.sum().clamp(min=1)
    var = (((x - mean) * mask) ** 2).sum() / mask.sum().clamp(min=1)
    return (x - mean) * torch.rsqrt(var + 1e-8) * mask


class PPOTrainer(LearningSignalMixin, trl.GRPOTrainer):
    """Actor-critic PPO on GRPOTrainer: value head, GAE, KL-penalised per-token rewards, clipped value loss."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        model = kwargs["model"]
        self._ppo_ref_model = None
        # Full fine-tuning, or PiSSA/OLoRA (adapter off = residual weights): a frozen copy of the start is the
        # reference.
        if kwargs.get("peft_config") is None or kwargs["args"].peft in BASE_CHANGING_INITS:
            self._ppo_ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        super().__init__(*args, **kwargs)
        if self._ppo_ref_model is not None:
            self._ppo_ref_model.to(self.accelerator.device)
            add_fused_lm_head(self._ppo_ref_model)  # TRL's log-prob helper expects its fused head on every model
        self._hidden: list[torch.Tensor] = []
        final_norm = self.accelerator.unwrap_model(self.model).get_decoder().norm
        final_norm.register_forward_hook(lambda _module, _inputs, output: self._hidden.append(output))

    # --- helpers -------------------------------------------------------------------------------------------
    def _value_head(self) -> torch.nn.Module:
        unwrapped = self.accelerator.unwrap_model(self.model)
        base = unwrapped.get_base_model() if hasattr(unwrapped, "get_base_model") else unwrapped
        return getattr(base, VALUE_HEAD)  # under PEFT: the ModulesToSaveWrapper, i.e. the trainable copy

    def _values_from_hidden(self, completion_length: int) -> torch.Tensor:
        hidden = torch.cat(self._hidden, dim=0)  # (B, P+T, H): hidden state *before* each completion token
        self._hidden.clear()
        states = hidden[:, -completion_length - 1 : -1]
        head = self._value_head()
        return head(states.to(head.weight.dtype if hasattr(head, "weight") else states.dtype)).squeeze(-1).float()

    def _logps(self, model: Any, output: dict[str, Any]) -> torch.Tensor:
        input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
        attention_mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        logps, _, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, output["completion_ids"].size(1), batch_size=None
        )
        return logps

    # --- rollout: rewards -> per-token rewards -> GAE ------------------------------------------------------
    def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        weights = self.reward_weights.to(rewards_per_func.device).unsqueeze(0)
        self._last_rewards = (rewards_per_func * weights).nansum(dim=1)  # unscorable -> 0
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        mask = output["completion_mask"].float()
        local = mask.shape[0]
        start = self.accelerator.process_index * local
        scores = self._last_rewards[start : start + local].float()
        with torch.no_grad():
            self._hidden.clear()
            policy_logps = self._logps(self.model, output)
            values = self._values_from_hidden(mask.shape[1])
            if self._ppo_ref_model is not None:
                ref_logps = self._logps(self._ppo_ref_model, output)
            else:
                with use_adapter(self.accelerator.unwrap_model(self.model), adapter_name=None):
                    ref_logps = self._logps(self.model, output)
            self._hidden.clear()
        kl = (policy_logps - ref_logps) * mask
        token_rewards = -self.args.kl_coef * kl
        last = (mask.sum(dim=1).long() - 1).clamp(min=0)
        token_rewards[torch.arange(local), last] += scores
        advantages, returns = compute_gae(token_rewards, values, mask, self.args.gamma, self.args.lam)
        if self.args.whiten_advantages:
            advantages = _masked_whiten(advantages, mask)
        output.update(advantages=advantages, returns=returns, old_values=values)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["ppo/kl"].append((kl.sum(1)).mean().item())
        self._metrics[mode]["ppo/score"].append(scores.mean().item())
        self._metrics[mode]["ppo/value_mean"].append(((values * mask).sum() / mask.sum().clamp(min=1)).item())
        self._record_learning_signal(output, mode, None)
        return output

    # --- loss: GRPO's clipped surrogate with our advantages + clipped value loss ---------------------------
    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        self._hidden.clear()
        policy_loss = super()._compute_loss(model, inputs)
        mask = inputs["completion_mask"].float()
        values = self._values_from_hidden(mask.shape[1])
        old_values, returns = inputs["old_values"], inputs["returns"]
        clipped = old_values + (values - old_values).clamp(-self.args.cliprange_value, self.args.cliprange_value)
        per_token = torch.max((values - returns) ** 2, (clipped - returns) ** 2)
        value_loss = 0.5 * (per_token * mask).sum() / mask.sum().clamp(min=1)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["ppo/value_loss"].append(value_loss.item())
        normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        return policy_loss + self.args.vf_coef * value_loss / normalizer


def build_ppo_trainer(
    config: PPOFinetuneConfig,
    model: Any,
    tokenizer: Any,
    train_dataset: Any,
    callbacks: list[Any] | None = None,
    *,
    reward_funcs: Any = None,
) -> PPOTrainer:
    add_value_head(model)
    enable_for_config(model, config)
    peft_config = build_peft_config(config)
    if peft_config is not None:
        peft_config.modules_to_save = [*(peft_config.modules_to_save or []), VALUE_HEAD]
    return PPOTrainer(
        model=model,
        reward_funcs=resolve_reward_funcs(reward_funcs if reward_funcs is not None else config.reward),
        args=config,
        train_dataset=train_dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )


__all__ = ["PPOFinetuneConfig", "PPOTrainer", "add_value_head", "build_ppo_trainer", "compute_gae"]
