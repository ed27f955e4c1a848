"""The math reward passed straight into TRL's GRPOTrainer trains one step on a tiny random model."""

from __future__ import annotations

import pytest

from tfgrpo.rewards import MathReward, combine, get_reward


@pytest.mark.timeout(240)
def test_math_reward_in_grpo_trainer_one_step(tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from tests.helpers.tiny_models import build_tiny_model, build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, arch="qwen2")
    dataset = Dataset.from_list(
        [
            {"prompt": "What is 2 + 2? Put the answer in \\boxed{}.", "answer": "4"},
            {"prompt": "What is 3 + 4? Put the answer in \\boxed{}.", "answer": "7"},
        ]
    )
    calls = []
    math_reward = MathReward()

    class Recording(MathReward):  # same reward, recording what TRL hands it
        def score(self, completions, prompts=None, **columns):
            calls.append((list(completions), list(columns["answer"])))
            return super().score(completions, prompts=prompts, **columns)

    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=8,
        max_steps=1,
        learning_rate=1e-4,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[math_reward, Recording(), combine({get_reward("format", require_think=False): 1.0})],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    assert trainer.state.global_step == 1
    logged = {key for entry in trainer.state.log_history for key in entry}
    assert "rewards/math/mean" in logged
    assert calls and len(calls[0][0]) == len(calls[0][1]) == 4
    assert set(calls[0][1]) <= {"4", "7"}
    step_log = next(entry for entry in trainer.state.log_history if "rewards/math/mean" in entry)
    assert 0.0 <= step_log["rewards/math/mean"] <= 1.0 and "loss" in step_log
