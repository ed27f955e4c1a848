"""Every method trains a few steps on a tiny random-init model, and its loss / reward / value moves as expected."""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset

from tests.helpers.tiny_models import build_tiny_tokenizer, tiny_model_dir

pytestmark = pytest.mark.timeout(120)

COMMON = dict(use_cpu=True, bf16=False, report_to="none", logging_steps=1, save_strategy="no", seed=0)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {arch: tiny_model_dir(root, arch) for arch in ("qwen2", "llama", "mixtral", "qwen2_moe")}


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def load(model_dirs, arch="qwen2"):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dirs[arch], dtype=torch.float32)


def losses(trainer, key="loss"):
    return [h[key] for h in trainer.state.log_history if key in h and "train_runtime" not in h]


def user(text):
    return [{"role": "user", "content": text}]


def assistant(text):
    return [{"role": "assistant", "content": text}]


SFT_ROWS = [{"prompt": user(f"What is {i} + {i}?"), "completion": assistant(f"\\boxed{{{2 * i}}}")} for i in range(4)]
PAIRS = [
    {
        "prompt": user(f"What is {i} + {i}?"),
        "chosen": assistant(f"\\boxed{{{2 * i}}}"),
        "rejected": assistant(f"the answer is {i + 5} maybe"),
    }
    for i in range(4)
]
KTO_ROWS = [
    {"prompt": p["prompt"], "completion": p[key], "label": key == "chosen"}
    for p in PAIRS
    for key in ("chosen", "rejected")
]
PROMPTS = [{"prompt": user(f"What is {i} + {i}?"), "answer": str(2 * i)} for i in range(4)]


@pytest.mark.parametrize("peft", ["none", "lora", "dora", "longlora"])
def test_sft_loss_decreases(model_dirs, tokenizer, tmp_path, peft):
    from tfgrpo.finetune.sft import SFTFinetuneConfig, build_sft_trainer

    config = SFTFinetuneConfig(
        output_dir=str(tmp_path),
        max_steps=6,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        peft=peft,
        max_length=64,
        **COMMON,
    )
    trainer = build_sft_trainer(config, load(model_dirs), tokenizer, Dataset.from_list(SFT_ROWS))
    trainer.train()
    history = losses(trainer)
    assert history[-1] < history[0] - 0.5


@pytest.mark.parametrize("method", ["dpo", "ipo", "cdpo"])
def test_preference_losses_decrease_and_margin_grows(model_dirs, tokenizer, tmp_path, method):
    from tfgrpo.finetune.dpo import CDPOFinetuneConfig, DPOFinetuneConfig, IPOFinetuneConfig, build_dpo_trainer

    config_class = {"dpo": DPOFinetuneConfig, "ipo": IPOFinetuneConfig, "cdpo": CDPOFinetuneConfig}[method]
    config = config_class(
        output_dir=str(tmp_path), max_steps=5, per_device_train_batch_size=4, learning_rate=1e-2, peft="lora", **COMMON
    )
    trainer = build_dpo_trainer(config, load(model_dirs), tokenizer, Dataset.from_list(PAIRS))
    trainer.train()
    assert losses(trainer)[-1] < losses(trainer)[0]
    assert losses(trainer, "rewards/margins")[-1] > 0


def _first_batch_loss(trainer):
    batch = next(iter(trainer.get_train_dataloader()))
    trainer.model.train()  # metrics go to the "train" bucket (the tiny model has no dropout)
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, batch).item()
    margin = trainer._metrics["train"]["rewards/margins"][-1]  # beta * delta (batch of one pair)
    return loss, margin


def test_cdpo_applies_label_smoothing_that_trl_ignores(model_dirs, tokenizer, tmp_path):
    """cDPO loss = -(1-eps)·logσ(βΔ) - eps·logσ(-βΔ); TRL's own sigmoid loss stays plain DPO."""
    from tfgrpo.finetune.dpo import CDPOFinetuneConfig, DPOFinetuneConfig, build_dpo_trainer

    eps = 0.2
    results = {}
    for name, config_class in (("trl", DPOFinetuneConfig), ("cdpo", CDPOFinetuneConfig)):
        config = config_class(
            output_dir=str(tmp_path),
            max_steps=1,
            per_device_train_batch_size=1,
            peft="none",
            label_smoothing=eps if name == "cdpo" else 0.0,
            beta=0.5,
            **COMMON,
        )
        config.label_smoothing = eps  # method dpo refuses it (test_finetune_guarantees); set past the check
        trainer = build_dpo_trainer(config, load(model_dirs), tokenizer, Dataset.from_list(PAIRS[:1]))
        torch.manual_seed(1)
        with torch.no_grad():  # move the policy away from its frozen reference so Δ != 0
            trainer.model.lm_head.weight.add_(0.5 * torch.randn_like(trainer.model.lm_head.weight))
        results[name] = _first_batch_loss(trainer)
    (trl_loss, margin), (cdpo_loss, cdpo_margin) = results["trl"], results["cdpo"]
    assert abs(margin) > 0.1 and cdpo_margin == pytest.approx(margin, rel=1e-4)
    log_sigmoid = torch.nn.functional.logsigmoid
    m = torch.tensor(margin)
    assert trl_loss == pytest.approx(-log_sigmoid(m).item(), rel=1e-4)  # label_smoothing silently ignored
    expected = (-(1 - eps) * log_sigmoid(m) - eps * log_sigmoid(-m)).item()
    assert cdpo_loss == pytest.approx(expected, rel=1e-4)
    assert abs(cdpo_loss - trl_loss) > 1e-3


def test_kto_loss_decreases(model_dirs, tokenizer, tmp_path):
    from tfgrpo.finetune.kto import KTOFinetuneConfig, build_kto_trainer

    config = KTOFinetuneConfig(
        output_dir=str(tmp_path), max_steps=5, per_device_train_batch_size=8, learning_rate=1e-2, peft="lora", **COMMON
    )
    trainer = build_kto_trainer(config, load(model_dirs), tokenizer, Dataset.from_list(KTO_ROWS))
    trainer.train()
    assert losses(trainer)[-1] < losses(trainer)[0]
    with pytest.raises(ValueError, match="both desirable and undesirable"):
        build_kto_trainer(config, load(model_dirs), tokenizer, Dataset.from_list(KTO_ROWS[::2]))


def test_orpo_loss_decreases(model_dirs, tokenizer, tmp_path):
    from tfgrpo.finetune.orpo import ORPOFinetuneConfig, build_orpo_trainer

    config = ORPOFinetuneConfig(
        output_dir=str(tmp_path), max_steps=5, per_device_train_batch_size=4, learning_rate=1e-2, peft="lora", **COMMON
    )
    trainer = build_orpo_trainer(config, load(model_dirs), tokenizer, Dataset.from_list(PAIRS))
    trainer.train()
    assert losses(trainer)[-1] < losses(trainer)[0] - 0.5


def digit_reward(completions, **_):
    """Share of digits in the completion: easy to climb from a random model."""
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    return [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in texts]


def rl_config(config_class, tmp_path, **overrides):
    options = dict(
        output_dir=str(tmp_path),
        max_steps=8,
        per_device_train_batch_size=8,
        learning_rate=3e-2,
        max_completion_length=8,
        **COMMON,
    )
    options.update(overrides)
    return config_class(**options)


def mean(xs):
    return sum(xs) / len(xs)


@pytest.mark.parametrize("group_size", [1, 4])
def test_grpo_reward_rises(model_dirs, tokenizer, tmp_path, group_size):
    from tfgrpo.finetune.grpo import GRPOFinetuneConfig, build_grpo_trainer

    config = rl_config(GRPOFinetuneConfig, tmp_path, num_generations=group_size, peft="none")
    trainer = build_grpo_trainer(
        config, load(model_dirs), tokenizer, Dataset.from_list(PROMPTS * 4), reward_funcs=digit_reward
    )
    trainer.train()
    rewards = losses(trainer, "reward")
    assert mean(rewards[-3:]) > mean(rewards[:3])


def test_grpo_filters_homogeneous_groups(model_dirs, tokenizer, tmp_path):
    from tfgrpo.finetune.grpo import GRPOFinetuneConfig, build_grpo_trainer

    def half_constant(completions, answer, **_):  # groups of answer "0" all score 1; others alternate 0/1
        return [1.0 if a == "0" else float(i % 2) for i, a in enumerate(answer)]

    rows = [{"prompt": user("a"), "answer": "0"}, {"prompt": user("b"), "answer": "1"}] * 2
    for filtering in (True, False):
        config = rl_config(
            GRPOFinetuneConfig,
            tmp_path,
            num_generations=2,
            per_device_train_batch_size=8,
            filter_homogeneous_groups=filtering,
            peft="none",
            max_steps=1,
        )
        trainer = build_grpo_trainer(
            config, load(model_dirs), tokenizer, Dataset.from_list(rows), reward_funcs=half_constant
        )
        batch = next(iter(trainer.get_train_dataloader()))
        trainer.model.train()
        output = trainer._generate_and_score_completions(batch)
        kept = output["completion_mask"].sum(dim=1) > 0
        constant = torch.tensor([row["answer"] == "0" for row in batch])
        if filtering:
            assert not kept[constant].any() and kept[~constant].all()
            assert output["num_items_in_batch"] == output["completion_mask"].sum()
            assert trainer._metrics["train"]["frac_groups_filtered"][-1] == 0.5
        else:
            assert kept.all()


def test_grpo_advantage_normalisation_toggle(tmp_path):
    from tfgrpo.finetune.grpo import GRPOFinetuneConfig

    assert (
        rl_config(GRPOFinetuneConfig, tmp_path, normalize_advantages=False, num_generations=2).scale_rewards == "none"
    )
    assert (
        rl_config(GRPOFinetuneConfig, tmp_path, normalize_advantages=True, num_generations=2).scale_rewards == "group"
    )
    with pytest.raises(ValueError, match="1..16"):
        rl_config(GRPOFinetuneConfig, tmp_path, num_generations=17)


@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe"])
def test_gspo_on_moe_uses_sequence_ratios_kl_and_router_aux_loss(model_dirs, tokenizer, tmp_path, arch):
    from tfgrpo.finetune.grpo import GSPOFinetuneConfig, build_grpo_trainer

    config = rl_config(GSPOFinetuneConfig, tmp_path, num_generations=2, peft="none", max_steps=3)
    assert config.importance_sampling_level == "sequence" and config.beta > 0
    model = load(model_dirs, arch)
    router = next(p for n, p in model.named_parameters() if n.endswith("mlp.gate.weight"))
    before = router.detach().clone()
    trainer = build_grpo_trainer(config, model, tokenizer, Dataset.from_list(PROMPTS), reward_funcs=digit_reward)
    assert trainer.aux_loss_enabled and trainer.router_aux_loss_coef == pytest.approx(0.02)
    assert trainer.ref_model is not None  # the KL term's frozen reference
    trainer.train()
    aux = losses(trainer, "aux_loss")
    assert aux and all(a > 0 for a in aux)
    assert not torch.equal(before, router.detach())  # the router learns (load balancing + policy)
    with pytest.raises(ValueError, match="beta must be > 0"):
        rl_config(GSPOFinetuneConfig, tmp_path, beta=0.0, num_generations=2)


def test_gae_matches_hand_computation():
    from tfgrpo.finetune.ppo import compute_gae

    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    values = torch.tensor([[0.5, 0.4, 0.3, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])  # last token is padding
    advantages, returns = compute_gae(rewards, values, mask, gamma=0.9, lam=0.5)
    d2 = 1.0 - 0.3
    d1 = 0.0 + 0.9 * 0.3 - 0.4
    d0 = 0.0 + 0.9 * 0.4 - 0.5
    a2, a1 = d2, d1 + 0.45 * d2
    a0 = d0 + 0.45 * a1
    torch.testing.assert_close(advantages, torch.tensor([[a0, a1, a2, 0.0]]))
    torch.testing.assert_close(returns, torch.tensor([[a0 + 0.5, a1 + 0.4, a2 + 0.3, 0.0]]))


@pytest.mark.parametrize("peft", ["none", "lora"])
def test_ppo_value_head_learns_and_reward_rises(model_dirs, tokenizer, tmp_path, peft):
    from tfgrpo.finetune.ppo import VALUE_HEAD, PPOFinetuneConfig, build_ppo_trainer

    config = rl_config(PPOFinetuneConfig, tmp_path, peft=peft, max_steps=10, vf_coef=1.0)
    assert config.num_generations == 1 and config.beta == 0.0
    trainer = build_ppo_trainer(
        config, load(model_dirs, "llama"), tokenizer, Dataset.from_list(PROMPTS * 4), reward_funcs=digit_reward
    )
    head = trainer._value_head()
    before = {n: p.detach().clone() for n, p in head.named_parameters() if p.requires_grad}
    assert before, "the value head must be trainable"
    trainer.train()
    assert any(not torch.equal(p, before[n]) for n, p in head.named_parameters() if n in before)
    value_losses = losses(trainer, "ppo/value_loss")
    assert mean(value_losses[-3:]) < mean(value_losses[:3])
    kls = losses(trainer, "ppo/kl")
    assert kls[0] == pytest.approx(0.0, abs=1e-5) and any(k != 0 for k in kls[1:])  # policy drifts from its ref
    if peft == "none":  # full fine-tuning moves the tiny policy enough in 10 steps to see the reward climb
        rewards = losses(trainer, "reward")
        assert mean(rewards[-3:]) > mean(rewards[:3])
    else:
        trainer.save_model(str(tmp_path / "adapter"))
        import json

        saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
        assert VALUE_HEAD in saved["modules_to_save"]
    with pytest.raises(ValueError, match="kl_coef, not beta"):
        rl_config(PPOFinetuneConfig, tmp_path, beta=0.1)
    assert not math.isnan(losses(trainer)[-1])
