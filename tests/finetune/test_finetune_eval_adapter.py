"""A saved adapter is evaluated by `tfgrpo eval --adapter` on the transformers backend, with its provenance.

SFT (LoRA) and PPO (LoRA + a value head in `modules_to_save`) are trained for a few steps on a tiny
random-init model through the real `tfgrpo finetune` command, then `tfgrpo eval` loads them; the adapter
must change what the backend generates, and `metrics.json` must name the method and training time.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.helpers.finetune_rows import rollout
from tests.helpers.tiny_models import tiny_model_dir
from tfgrpo.cli.app import main
from tfgrpo.llm.backends.transformers_backend import TransformersBackend
from tfgrpo.llm.types import ChatRequest, Message, SamplingParams

pytestmark = pytest.mark.timeout(180)

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
PROBLEMS = [{"id": f"p{i}", "problem": f"Problem {q}", "answer": "4"} for i, q in enumerate("abcd")]


def run_cli(*args):
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return exc.code
    return 0


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny"), "qwen2")


@pytest.fixture(scope="module")
def problems_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "problems.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    return path


@pytest.fixture(scope="module")
def sft_adapter(tiny_dir, tmp_path_factory):
    """LoRA SFT on the correct rollouts of a learn run: completions "<q>-0-<s> \\boxed{4}"."""
    root = tmp_path_factory.mktemp("sft")
    run = root / "learn-run"
    run.mkdir()
    rows = [rollout(q, s, float((s + i) % 2 == 0)) for i, q in enumerate("abcd") for s in range(4)]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = root / "adapter"
    assert (
        run_cli(
            "finetune",
            "sft",
            "--model",
            tiny_dir,
            "--data",
            run,
            "--out",
            out,
            "--max-steps",
            6,
            "--lr",
            "1e-2",
            "--batch-size",
            4,
            "--peft",
            "lora",
        )
        == 0
    )
    return out


def evaluate(tiny_dir, problems_file, adapter, out):
    code = run_cli(
        "eval",
        "--data",
        problems_file,
        "--backend",
        "transformers",
        "--model",
        tiny_dir,
        "--adapter",
        adapter,
        "--samples",
        2,
        "--max-tokens",
        8,
        "--out",
        out,
    )
    assert code == 0
    return json.loads((out / "metrics.json").read_text())


async def greedy_answers(backend, prompts):
    try:
        results = await asyncio.gather(
            *(
                backend.forward(ChatRequest(messages=[Message(role="user", content=p)], sampling=GREEDY))
                for p in prompts
            )
        )
    finally:
        await backend.aclose()
    return [r[0].text for r in results]


def completion_nll(model, tokenizer, prompt, completion):
    """Mean negative log-likelihood of `completion`'s tokens after the chat-formatted `prompt`."""
    import torch

    user = [{"role": "user", "content": prompt}]
    head = tokenizer.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
    full = tokenizer.apply_chat_template(user + [{"role": "assistant", "content": completion}], tokenize=False)
    head_ids = tokenizer(head, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([tokenizer(full, add_special_tokens=False)["input_ids"]])
    assert ids[0, : len(head_ids)].tolist() == head_ids
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(head_ids) - 1 : -1]
    return torch.nn.functional.cross_entropy(logits, ids[0, len(head_ids) :]).item()


def test_sft_adapter_is_evaluated_with_its_provenance(tiny_dir, problems_file, sft_adapter, tmp_path):
    summary = json.loads((sft_adapter / "finetune_summary.json").read_text())
    metrics = evaluate(tiny_dir, problems_file, sft_adapter, tmp_path / "eval")
    provenance = metrics["provenance"]
    assert provenance["adapter"] == str(sft_adapter)
    assert provenance["backend"] == "transformers" and "+lora:" in provenance["model"]
    assert provenance["finetune_method"] == "sft"
    assert provenance["finetune_wall_s"] == summary["wall_time_s"] > 0
    assert provenance["train_samples"] == summary["samples"] == 8
    # what the training did, for the report's training table: the loss is on the completions only
    assert provenance["finetune_steps"] == summary["steps"] > 0
    assert provenance["finetune_tokens_in_loss"] == summary["tokens_in_loss"]
    assert 0 < summary["tokens_in_loss"] < summary["tokens_processed"] == provenance["finetune_tokens_processed"]
    assert metrics["num_problems"] == len(PROBLEMS) and metrics["k"] == 2
    samples = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * len(PROBLEMS)


def test_sft_adapter_changes_generation_towards_its_training_data(tiny_dir, sft_adapter):
    from tfgrpo.finetune.data import render_prompt

    prompts = [render_prompt(p["problem"]) for p in PROBLEMS]  # the prompts it was trained (and is evaluated) on
    base = TransformersBackend(str(tiny_dir))
    adapted = TransformersBackend(str(tiny_dir), adapter=str(sft_adapter))
    assert asyncio.run(greedy_answers(adapted, prompts)) != asyncio.run(greedy_answers(base, prompts))

    # and in the right direction: the adapted model (as the backend loads it) finds the trained answers likelier
    base.load()
    adapted.load()
    trained = [
        (render_prompt(f"Problem {q}"), f"{q}-0-{s} \\boxed{{4}}")
        for i, q in enumerate("abcd")
        for s in range(4)
        if (s + i) % 2 == 0
    ]
    for prompt, completion in trained[:3]:
        before = completion_nll(base._loaded.model, base._loaded.tokenizer, prompt, completion)
        after = completion_nll(adapted._loaded.model, adapted._loaded.tokenizer, prompt, completion)
        assert after < before - 0.5


def test_ppo_adapter_with_value_head_loads_and_is_evaluated(tiny_dir, problems_file, tmp_path):
    """PPO saves its value head in the adapter (`modules_to_save`); generation ignores it, the policy applies."""
    from safetensors.torch import load_file

    out = tmp_path / "ppo"
    assert (
        run_cli(
            "finetune",
            "ppo",
            "--model",
            tiny_dir,
            "--data",
            "easy",
            "--out",
            out,
            "--reward",
            "math",
            "--max-steps",
            2,
            "--lr",
            "5e-2",
            "--batch-size",
            4,
            "--set",
            "max_completion_length=8",
        )
        == 0
    )
    assert "v_head" in json.loads((out / "adapter_config.json").read_text())["modules_to_save"]
    assert any("v_head" in key for key in load_file(str(out / "adapter_model.safetensors")))
    assert json.loads((out / "finetune_summary.json").read_text())["samples"] == 16  # bundled `easy`

    import torch

    base = TransformersBackend(str(tiny_dir))
    adapted = TransformersBackend(str(tiny_dir), adapter=str(out))
    base.load()
    adapted.load()
    assert not hasattr(adapted._loaded.model, "v_head")  # a plain causal LM, merged
    ids = torch.tensor([[1, 5, 9, 13, 17]])
    with torch.no_grad():
        shift = (adapted._loaded.model(input_ids=ids).logits - base._loaded.model(input_ids=ids).logits).abs().max()
    assert shift > 1e-3  # the trained policy adapter is applied

    metrics = evaluate(tiny_dir, problems_file, out, tmp_path / "eval")
    assert metrics["provenance"]["finetune_method"] == "ppo" and metrics["provenance"]["finetune_wall_s"] > 0
