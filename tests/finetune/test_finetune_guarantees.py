"""Each method / adapter option is exactly what it says, or is refused in one line (issue 18, items 1-5).

PiSSA/OLoRA adapters apply to the unmodified base; LongLoRA's S2-attention really runs for every length
and every method; options a method would ignore are refused; RL runs say when a step had nothing to learn.
"""

from __future__ import annotations

import json

import pytest
import torch
from datasets import Dataset

from tests.helpers.cli import run_cli
from tests.helpers.finetune_cells import assistant, user
from tests.helpers.finetune_rows import write_jsonl
from tests.helpers.tiny_models import build_tiny_model, build_tiny_tokenizer, tiny_model_dir
from tfgrpo.finetune.errors import FinetuneError
from tfgrpo.finetune.run import run_finetune

pytestmark = pytest.mark.timeout(180)

COMMON = dict(use_cpu=True, bf16=False, report_to="none", logging_steps=1, save_strategy="no", seed=0)


# Prompts of different lengths, so batches are padded and no length is a multiple of the S2 group.
SFT_ROWS = [
    {"prompt": user(f"What is {i} + {i * 7}?" + " so" * i), "completion": assistant(f"\\boxed{{{8 * i}}}")}
    for i in range(4)
]
PAIRS = [
    {"prompt": r["prompt"], "chosen": r["completion"], "rejected": assistant(f"the answer is {i + 5}")}
    for i, r in enumerate(SFT_ROWS)
]
KTO_ROWS = [
    {"prompt": p["prompt"], "completion": p[key], "label": key == "chosen"}
    for p in PAIRS
    for key in ("chosen", "rejected")
]
PROMPTS = [{"prompt": r["prompt"], "answer": str(8 * i)} for i, r in enumerate(SFT_ROWS)]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("tiny"), "qwen2")


@pytest.fixture
def sft_data(tmp_path):
    return write_jsonl(tmp_path / "sft.jsonl", SFT_ROWS)


@pytest.fixture
def pairs_data(tmp_path):
    return write_jsonl(tmp_path / "pairs.jsonl", PAIRS)


def finetune_sft(tiny_dir, data, out, *, peft, **options):
    """One tiny SFT step (batch 2) with `peft`; returns the output folder."""
    options = {"max_steps": 1, "per_device_train_batch_size": 2, **options}
    run_finetune("sft", model=str(tiny_dir), data=data, out=out, options={"peft": peft, **options})
    return out


def eval_with_adapter(tiny_dir, tmp_path, adapter):
    """`tfgrpo eval` of the tiny model with `adapter` on one problem; returns the exit code."""
    problems = write_jsonl(tmp_path / "problems.jsonl", [{"id": "p", "problem": "1 + 1", "answer": "2"}])
    return run_cli(
        "eval",
        *("--data", problems, "--backend", "transformers", "--model", tiny_dir, "--adapter", adapter),
        *("--samples", 1, "--max-tokens", 4, "--out", tmp_path / "eval"),
    )


def one_error_line(capsys):
    """The `error:` lines the command printed to stderr."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]


# --- 1. PiSSA / OLoRA: saved as a plain LoRA delta on the unmodified base -----------------------------------
@pytest.mark.parametrize("peft_name", ["pissa", "olora"])
def test_fresh_base_changing_adapter_reloaded_on_the_base_is_the_base(tiny_dir, sft_data, tmp_path, peft_name):
    """Trained with a vanishing learning rate (the adapter stays at its init; 0 itself is refused as a
    run that trains nothing), the saved adapter on the base = the base."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = finetune_sft(tiny_dir, sft_data, tmp_path / "out", peft=peft_name, lora_r=4, learning_rate=1e-30)
    ids = torch.tensor([[5, 17, 230, 41, 99, 3, 250]])
    base = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    with torch.no_grad():
        expected = base(input_ids=ids).logits
        adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_dir), str(out)).eval()
        got = adapted(input_ids=ids).logits
    saved = json.loads((out / "adapter_config.json").read_text())
    assert saved["r"] == 8 and saved["init_lora_weights"] is True  # rank 2r delta, a plain LoRA
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_trained_pissa_adapter_on_the_base_reproduces_the_trained_model(tokenizer, tmp_path):
    from peft import PeftModel, get_peft_model

    from tfgrpo.finetune.adapters import AdapterArguments, build_peft_config, save_adapter, save_initial_adapter

    model = get_peft_model(build_tiny_model(tokenizer), build_peft_config(AdapterArguments(peft="pissa", lora_r=4)))
    initial = save_initial_adapter(model, "pissa")
    torch.manual_seed(0)
    with torch.no_grad():  # stands in for training: move both factors
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.add_(0.05 * torch.randn_like(param))
    ids = torch.randint(5, 600, (2, 11))
    with torch.no_grad():
        trained = model.eval()(input_ids=ids).logits
        save_adapter(model, tmp_path / "a", initial)
        reloaded = PeftModel.from_pretrained(build_tiny_model(tokenizer), str(tmp_path / "a")).eval()
        base = build_tiny_model(tokenizer).eval()(input_ids=ids).logits
        got = reloaded(input_ids=ids).logits
    assert (trained - base).abs().max() > 0.1
    torch.testing.assert_close(got, trained, atol=1e-4, rtol=1e-4)


# --- 2. LongLoRA S2-attention: any length, counted, every method --------------------------------------------
class _Attention(torch.nn.Module):
    def __init__(self, ratio):
        super().__init__()
        self.config = type("C", (), {"s2_group_size_ratio": ratio})()
        self.num_key_value_groups = 1


def test_s2_attention_runs_on_a_length_that_is_not_a_multiple_of_the_group():
    from tfgrpo.finetune.longlora import s2_attention_forward, s2_call_counts

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 13, 8, generator=gen) for _ in range(3))  # groups of int(13/4) = 3 tokens
    module = _Attention(0.25).train()
    out, _ = s2_attention_forward(module, q, k, v, None)
    full = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    assert out.shape == full.shape
    assert not torch.allclose(out[:, 3:], full[:, 3:])  # sparse beyond the first group
    torch.testing.assert_close(out[:, :3, :2], full[:, :3, :2])  # first group of the unshifted heads is exact
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 12], v2[:, :, 12] = 5.0, 5.0  # the last real token: no earlier token may change
    moved, _ = s2_attention_forward(module, q, k2, v2, None)
    assert (moved - out)[:, :12].abs().max() == 0
    s2_attention_forward(module.eval(), q, k, v, None)
    assert s2_call_counts(module) == {"shifted": 2, "full": 1}


def _first_loss(trainer):
    batch = next(iter(trainer.get_train_dataloader()))
    length = batch["input_ids"].shape[1]
    assert length % max(int(length * 0.25), 2) != 0  # the case that used to fall back to full attention
    trainer.model.train()
    with torch.no_grad():
        return trainer.compute_loss(trainer.model, batch).item()


def test_longlora_sft_loss_differs_from_lora_on_odd_lengths(tokenizer, tmp_path):
    from tfgrpo.finetune.longlora import s2_call_counts
    from tfgrpo.finetune.sft import SFTFinetuneConfig, build_sft_trainer

    first = {}
    for peft_name in ("lora", "longlora"):
        config = SFTFinetuneConfig(
            output_dir=str(tmp_path),
            max_steps=1,
            per_device_train_batch_size=4,
            peft=peft_name,
            max_length=64,
            **COMMON,
        )
        model = build_tiny_model(tokenizer)
        trainer = build_sft_trainer(config, model, tokenizer, Dataset.from_list(SFT_ROWS))
        first[peft_name] = _first_loss(trainer)
        counts = s2_call_counts(model)
        assert counts["shifted"] == (2 if peft_name == "longlora" else 0)  # both layers, one forward
    assert abs(first["longlora"] - first["lora"]) > 1e-4  # same weights: only the attention differs


def _build(method, tokenizer, tmp_path):
    from tfgrpo.finetune.run import METHOD_SPECS, load_method

    config_class, builder = load_method(method)
    options = dict(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, peft="longlora", **COMMON)
    kind = METHOD_SPECS[method].data
    if kind == "prompts":
        options.update(max_completion_length=6, num_generations=1 if method == "ppo" else 2, allow_no_learning=True)
    rows = {"sft": SFT_ROWS, "pairs": PAIRS, "kto": KTO_ROWS, "prompts": PROMPTS}[kind]
    if kind == "kto":
        options["per_device_train_batch_size"] = 8
    model = build_tiny_model(tokenizer)
    extra = (
        {"reward_funcs": lambda completions, **_: [float(len(str(c))) for c in completions]}
        if kind == "prompts"
        else {}
    )
    return model, builder(config_class(**options), model, tokenizer, Dataset.from_list(rows), **extra)


@pytest.mark.parametrize("method", ["dpo", "kto", "orpo", "grpo", "ppo"])
def test_longlora_runs_shifted_attention_for_every_method(tokenizer, tmp_path, method):
    from tfgrpo.finetune.longlora import s2_call_counts

    model, trainer = _build(method, tokenizer, tmp_path)
    trainer.train()
    counts = s2_call_counts(model)
    assert counts["shifted"] > 0, counts
    if method in ("grpo", "ppo"):  # rollouts are sampled with full attention, as the model will be used
        assert model.config._attn_implementation == "s2_attention"


def test_longlora_run_logs_its_attention_calls(tiny_dir, pairs_data, tmp_path):
    summary = run_finetune(
        "dpo",
        model=str(tiny_dir),
        data=pairs_data,
        out=tmp_path / "out",
        options=dict(peft="longlora", max_steps=1, per_device_train_batch_size=2),
    )
    assert summary["s2_attention_calls"]["shifted"] > 0


# --- 3. options a method would ignore are refused, naming the method to use ---------------------------------
@pytest.mark.parametrize(
    ("method", "options", "says"),
    [
        ("dpo", {"label_smoothing": 0.2}, "use method cdpo"),
        ("ipo", {"label_smoothing": 0.2}, "use method cdpo"),
        ("ppo", {"filter_homogeneous_groups": True}, "use method grpo"),
        ("ppo", {"normalize_advantages": True}, "use method grpo"),
        ("sft", {"peft": "none", "lora_r": 8}, "use peft lora"),
        ("sft", {"peft": "lora", "s2_group_size_ratio": 0.5}, "use peft longlora"),
        ("gspo", {"peft": "pissa", "num_generations": 2}, "use peft lora"),
    ],
)
def test_ignored_options_are_refused_in_one_line(tmp_path, method, options, says):
    from tfgrpo.finetune.run import build_method_config

    with pytest.raises(FinetuneError, match=says) as error:
        build_method_config(method, {"output_dir": str(tmp_path), **COMMON, **options})
    assert "\n" not in str(error.value)


def test_label_smoothing_stays_allowed_where_trl_reads_it(tmp_path):
    from tfgrpo.finetune.run import build_method_config

    config = build_method_config(
        "dpo", {"output_dir": str(tmp_path), **COMMON, "label_smoothing": 0.2, "loss_type": ["robust"]}
    )
    assert config.label_smoothing == 0.2
    assert build_method_config("cdpo", {"output_dir": str(tmp_path), **COMMON}).label_smoothing == 0.1


def test_cli_refuses_label_smoothing_on_dpo(tiny_dir, pairs_data, tmp_path, capsys):
    code = run_cli(
        "finetune",
        "dpo",
        "--model",
        tiny_dir,
        "--data",
        pairs_data,
        "--out",
        tmp_path / "o",
        "--set",
        "label_smoothing=0.2",
    )
    err = one_error_line(capsys)
    assert code == 2 and len(err) == 1 and "use method cdpo" in err[0]


# --- 4. RL steps report what they trained on ----------------------------------------------------------------
def test_grpo_run_that_learns_nothing_fails_unless_allowed(tiny_dir, tmp_path, caplog):
    """The math reward is 0 for every sample of a random tiny model: every group is filtered, every step."""
    problems = [{"problem": f"{i} * 1111", "answer": str(1111 * i + 7)} for i in range(4)]
    data = write_jsonl(tmp_path / "problems.jsonl", problems)
    options = dict(
        peft="lora",
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        reward="math",
    )
    with pytest.raises(FinetuneError, match="every step trained nothing") as error:
        run_finetune("grpo", model=str(tiny_dir), data=data, out=tmp_path / "a", options=options)
    assert "allow_no_learning" in str(error.value) and "\n" not in str(error.value)
    assert "nothing to learn: all 2 groups filtered" in caplog.text
    summary = json.loads((tmp_path / "a" / "finetune_summary.json").read_text())  # the work is still written
    assert summary["rl_batches"] == summary["rl_batches_nothing_to_learn"] == 2
    assert summary["tokens_in_loss"] == 0 and summary["groups"] == {"total": 4, "filtered": 4}
    logs = [json.loads(line) for line in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    steps = [entry for entry in logs if "tokens_in_loss" in entry]
    assert len(steps) == 2
    assert all(e["tokens_in_loss"] == 0 and e["groups_filtered"] == 2 and e["nothing_to_learn"] == 1 for e in steps)
    summary = run_finetune(
        "grpo", model=str(tiny_dir), data=data, out=tmp_path / "b", options={**options, "allow_no_learning": True}
    )
    assert summary["rl_batches_nothing_to_learn"] == 2


def test_grpo_step_with_signal_reports_its_tokens(tokenizer, tmp_path):
    from tfgrpo.finetune.grpo import GRPOFinetuneConfig, build_grpo_trainer

    config = GRPOFinetuneConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=6,
        peft="none",
        **COMMON,
    )
    trainer = build_grpo_trainer(
        config,
        build_tiny_model(tokenizer),
        tokenizer,
        Dataset.from_list(PROMPTS),
        reward_funcs=lambda completions, **_: [float(i % 2) for i in range(len(completions))],
    )
    trainer.train()
    assert trainer.batches_generated == 1 and trainer.batches_with_nothing_to_learn == 0
    entry = next(h for h in trainer.state.log_history if "tokens_in_loss" in h)
    assert entry["tokens_in_loss"] > 0 and entry["groups_filtered"] == 0 and entry["nothing_to_learn"] == 0
    assert trainer.tokens_in_loss_total == entry["tokens_in_loss"]  # the run's total, for finetune_summary.json
    assert (trainer.groups_total, trainer.groups_filtered_total) == (2, 0)


# --- 5. config errors are one line; eval of a full fine-tune; eval label --------------------------------------
def test_router_aux_loss_on_a_dense_model_is_one_line(tiny_dir, sft_data, tmp_path, capsys):
    code = run_cli(
        *("finetune", "sft", "--model", tiny_dir, "--data", sft_data, "--out", tmp_path / "o", "--max-steps", 1),
        *("--set", "router_aux_loss_coef=0.01"),
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in "\n".join(err)
    assert any("router_aux_loss_coef=0.01 needs a Mixture-of-Experts model" in line for line in err)


def test_eval_adapter_on_a_full_finetune_names_the_model_to_use(tiny_dir, sft_data, tmp_path, capsys):
    out = finetune_sft(tiny_dir, sft_data, tmp_path / "full", peft="none")
    code = eval_with_adapter(tiny_dir, tmp_path, out)
    err = one_error_line(capsys)
    assert code != 0 and len(err) == 1
    assert f"--model {out}" in err[0] and "full fine-tune" in err[0]


def test_eval_label_carries_method_adapter_and_run_name(tiny_dir, sft_data, tmp_path):
    out = finetune_sft(tiny_dir, sft_data, tmp_path / "my-run", peft="lora")
    assert eval_with_adapter(tiny_dir, tmp_path, out) == 0
    assert json.loads((tmp_path / "eval" / "metrics.json").read_text())["label"] == "sft+lora:my-run"
