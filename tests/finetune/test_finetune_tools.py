"""Multi-turn GRPO with our sandboxed `python` tool through TRL's own tool loop (finetune/tools.py).

A random-init model never writes a tool call by itself, so `script_tool_calls` replaces the model's
`generate` for the turns it scripts (the rows' prompts tell which turn it is: one `<tool_response>` per
earlier tool round) and hands every later turn to the real model. Everything else is TRL's: parsing the
tool call from the generated tokens, calling our environment, appending the tool result, generating
again, scoring and the training step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from tests.helpers.tiny_models import build_tiny_model, build_tiny_tokenizer, tiny_model_dir
from tfgrpo.cli.app import main
from tfgrpo.finetune.errors import FinetuneError

pytestmark = pytest.mark.timeout(120)

COMMON = dict(use_cpu=True, bf16=False, report_to="none", logging_steps=1, save_strategy="no", seed=0)
# Turn 1 shows the interpreter is fresh for every trajectory (TRL reuses environments across batches);
# turn 2 shows variables survive between the calls of one trajectory.
FIRST_CODE = "print('seen' if 'x' in globals() else 'fresh'); x = 6 * 7"
SECOND_CODE = "print(x)"


def tool_call_text(code: str) -> str:
    return f"<tool_call>\n{json.dumps({'name': 'python', 'arguments': {'code': code}})}\n</tool_call><|im_end|>"


def script_tool_calls(model, tokenizer, codes: list[str]) -> list[int]:
    """Turn k (k < len(codes)) of every row calls python with codes[k]; later turns are the model's own."""
    real_generate = model.generate
    scripted_rounds: list[int] = []

    def generate(input_ids, attention_mask=None, **kwargs):
        rounds = {text.count("<tool_response>") for text in tokenizer.batch_decode(input_ids)}
        assert len(rounds) == 1, "every row of a batch is at the same turn here"
        turn = rounds.pop()
        if turn >= len(codes):
            return real_generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        scripted_rounds.append(turn)
        script = tokenizer(tool_call_text(codes[turn]), add_special_tokens=False)["input_ids"]
        completion = torch.tensor([script] * input_ids.shape[0], dtype=input_ids.dtype)
        return torch.cat([input_ids, completion], dim=1)

    model.generate = generate
    return scripted_rounds


@pytest.fixture(scope="module")
def tool_tokenizer():
    return build_tiny_tokenizer(tools=True)


def test_environment_exposes_the_sandbox_as_a_typed_tool_with_per_trajectory_state():
    from transformers.utils import get_json_schema

    from tfgrpo.finetune.tools import build_tool_environment
    from tfgrpo.rollout.tools.python_sandbox import PythonTool

    environment_class = build_tool_environment(["python"], options={"python": {"timeout_s": 1}})
    env = environment_class()
    try:
        schema = get_json_schema(env.python)["function"]
        assert schema["name"] == "python" and schema["parameters"] == PythonTool.parameters
        assert schema["description"] == " ".join(PythonTool.description.split())
        env.reset(prompt=[], answer="42")
        assert env.python(code="import os; x = 6 * 7; print(os.getcwd())") != ""
        workdir = Path(env.calls[0]["output"].strip())
        assert workdir.is_dir() and workdir.name.startswith("tfgrpo-sandbox-")
        assert env.python(code="print(x + 1)") == "43"
        assert "ZeroDivisionError" in env.python(code="1 / 0")  # the model's error comes back as text
        assert "timed out after 1 s" in env.python(code="while True: pass")  # the configured limit applies
        env.reset()  # next trajectory: the interpreter and its directory are gone
        assert not workdir.exists() and env.calls == []
        assert "NameError" in env.python(code="print(x)")
    finally:
        env._close()


def test_misconfigurations_fail_in_words(tmp_path):
    from tfgrpo.finetune.grpo import GRPOFinetuneConfig
    from tfgrpo.finetune.tools import build_tool_environment, check_tool_calling_tokenizer

    with pytest.raises(FinetuneError, match="unknown tool 'calculator'"):
        build_tool_environment(["calculator"])
    with pytest.raises(FinetuneError, match="timeout_s"):
        build_tool_environment(["python"], options={"python": {"timeout_s": -1}})
    with pytest.raises(FinetuneError, match="cannot render tool calls"):
        check_tool_calling_tokenizer(build_tiny_tokenizer())  # the plain ChatML template drops tool_calls
    check_tool_calling_tokenizer(build_tiny_tokenizer(tools=True))
    options = dict(output_dir=str(tmp_path), num_generations=2, per_device_train_batch_size=2, **COMMON)
    config = GRPOFinetuneConfig(tools="python", max_turns=3, **options)
    assert config.tools == ["python"] and config.max_tool_calling_iterations == 2
    assert GRPOFinetuneConfig(tools="none", **options).tools is None
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        GRPOFinetuneConfig(tools=["python"], max_turns=0, **options)
    with pytest.raises(ValueError, match="no tools enabled"):
        GRPOFinetuneConfig(tool_options={"python": {"timeout_s": 1}}, **options)


def test_grpo_rollouts_call_the_sandbox_and_train_on_the_trajectory(tool_tokenizer, tmp_path):
    from tfgrpo.finetune.grpo import GRPOFinetuneConfig, build_grpo_trainer

    model = build_tiny_model(tool_tokenizer)
    scripted = script_tool_calls(model, tool_tokenizer, [FIRST_CODE, SECOND_CODE])
    scored: list[dict] = []

    def record_and_score(completions, completion_ids, environments, **_):
        for messages, ids, env in zip(completions, completion_ids, environments, strict=True):
            scored.append({"messages": messages, "text": tool_tokenizer.decode(ids), "calls": list(env.calls)})
        return [float(len(m[-1]["content"]) % 5) for m in completions]  # varies within a group

    rows = [{"prompt": [{"role": "user", "content": f"What is {i} times 7?"}], "answer": str(7 * i)} for i in (6, 7)]
    config = GRPOFinetuneConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        num_generations=2,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        max_completion_length=320,
        peft="none",
        tools=["python"],
        max_turns=3,
        tool_options={"python": {"timeout_s": 5}},
        filter_homogeneous_groups=False,
        **COMMON,
    )
    trainer = build_grpo_trainer(config, model, tool_tokenizer, Dataset.from_list(rows), reward_funcs=record_and_score)
    trainer.train()

    assert trainer.state.global_step == 2 and scripted == [0, 1, 0, 1]
    assert len(scored) == 8  # 2 steps x 4 rollouts
    for rollout in scored:
        # the sandbox ran both calls, in one interpreter per trajectory, fresh for every trajectory
        assert [(c["arguments"]["code"], c["output"], c["error"]) for c in rollout["calls"]] == [
            (FIRST_CODE, "fresh\n", None),
            (SECOND_CODE, "42\n", None),
        ]
        roles = [m["role"] for m in rollout["messages"]]
        assert roles[:4] == ["assistant", "tool", "assistant", "tool"]
        first_call = rollout["messages"][0]["tool_calls"][0]["function"]
        assert first_call == {"name": "python", "arguments": {"code": FIRST_CODE}}
        assert [m["content"] for m in rollout["messages"] if m["role"] == "tool"] == ["fresh", "42"]
        # ... and its output is inside the token sequence that was scored and trained on
        assert "<tool_response>\nfresh\n</tool_response>" in rollout["text"]
        assert "<tool_response>\n42\n</tool_response>" in rollout["text"]
    logged = [h for h in trainer.state.log_history if "loss" in h and "train_runtime" not in h]
    assert len(logged) == 2 and all(math.isfinite(h["loss"]) for h in logged)
    assert all(h["tools/call_frequency"] == 2.0 and h["tools/failure_frequency"] == 0.0 for h in logged)


def run_cli(*args):
    try:
        main(list(args))
    except SystemExit as exc:
        return exc.code
    return 0


def test_cli_grpo_with_tools_end_to_end(tmp_path, monkeypatch, capsys):
    import tfgrpo.finetune.models
    import tfgrpo.finetune.run

    model_dir = tiny_model_dir(tmp_path, tools=True)
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        "".join(json.dumps({"id": str(i), "problem": f"{i} * 7 = ?", "answer": str(7 * i)}) + "\n" for i in range(2))
    )
    real_load_model = tfgrpo.finetune.models.load_model
    scripted: list[list[int]] = []

    def load_scripted_model(source, **kwargs):
        model = real_load_model(source, **kwargs)
        scripted.append(script_tool_calls(model, build_tiny_tokenizer(tools=True), ["print(sum(range(10)))"]))
        return model

    monkeypatch.setattr(tfgrpo.finetune.run, "load_model", load_scripted_model)
    out = tmp_path / "out"
    code = run_cli(
        "finetune",
        "grpo",
        "--model",
        str(model_dir),
        "--data",
        str(problems),
        "--out",
        str(out),
        "--tools",
        "python",
        "--max-turns",
        "2",
        "--max-steps",
        "1",
        "--batch-size",
        "4",
        "--group-size",
        "2",
        "--set",
        "max_completion_length=160",
        "--set",
        "tool_options={python: {timeout_s: 5}}",
        "--set",
        "allow_no_learning=true",
    )
    assert code == 0, capsys.readouterr().err
    assert scripted == [[0]]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["tools/call_frequency"] == 1.0 and metrics[0]["tools/failure_frequency"] == 0.0
    assert json.loads((out / "finetune_summary.json").read_text())["steps"] == 1
    assert (out / "adapter_model.safetensors").is_file()

    plain_dir = tiny_model_dir(tmp_path)  # ChatML without tool calls
    assert (
        run_cli(
            "finetune",
            "grpo",
            "--model",
            str(plain_dir),
            "--data",
            str(problems),
            "--out",
            str(tmp_path / "o2"),
            "--tools",
            "python",
            "--group-size",
            "2",
        )
        == 2
    )
    assert "cannot render tool calls" in capsys.readouterr().err
    assert (
        run_cli(
            "finetune",
            "kto",
            "--model",
            str(model_dir),
            "--data",
            str(problems),
            "--out",
            str(tmp_path / "o3"),
            "--tools",
            "python",
        )
        == 2
    )
    assert "grpo and gspo only" in capsys.readouterr().err


def test_a_tool_key_never_reaches_the_pickled_training_arguments(tool_tokenizer, tmp_path):
    """TRL pickles its arguments into training_args.bin: the tools keep the key, the config keeps the mask."""
    import pickle

    from tfgrpo.finetune.grpo import GRPOFinetuneConfig, build_grpo_trainer

    secret = "sk-planted-finetune-0123456789"
    rows = [{"prompt": [{"role": "user", "content": "Search for seven."}], "answer": "7"}] * 2
    config = GRPOFinetuneConfig(
        output_dir=str(tmp_path),
        max_steps=1,
        num_generations=2,
        per_device_train_batch_size=2,
        peft="none",
        tools=["web_search"],
        tool_options={"web_search": {"endpoint": "http://127.0.0.1:9/search", "api_key": secret}},
        **COMMON,
    )
    model = build_tiny_model(tool_tokenizer)
    trainer = build_grpo_trainer(
        config, model, tool_tokenizer, Dataset.from_list(rows), reward_funcs=lambda **_: [0.0]
    )
    assert secret not in repr(trainer.args.tool_options)
    assert secret.encode() not in pickle.dumps(trainer.args)
