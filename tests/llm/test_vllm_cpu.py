"""vLLM's CPU build, for real (slow): one OpenAI server and one in-process engine on the embedded SmolLM2.

The server (`python -m vllm.entrypoints.openai.api_server` from `.venv-vllm`, made by
scripts/install_vllm.sh) starts once for this module (~50-80 s) with a LoRA adapter that `tfgrpo finetune`
trains first; `tfgrpo chat`, `learn`, `eval` (base and adapter, then `compare`) and `serve --upstream`
run through it, and the openai backend checks `n` > 1 with seeds and cached prompt tokens read from usage.
The in-process `vllm` backend runs in a child process with the vLLM venv's Python (vLLM is importable only
there), once (~60-80 s). CI installs the venv, so nothing here is skipped there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.helpers.cli import run_cli
from tests.helpers.finetune_rows import rollout, write_jsonl
from tests.helpers.serve_fixtures import write_library
from tests.helpers.servers import ask, free_port
from tests.helpers.vllm_cpu import ROOT, SERVED_NAME, vllm_env, vllm_python, vllm_server
from tfgrpo.llm.backends.openai_backend import OpenAIBackend
from tfgrpo.llm.embedded import embedded_model_dir
from tfgrpo.llm.factory import default_cache_dir
from tfgrpo.llm.types import Message, SamplingParams

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

LORA_NAME = "smollm2-lora"
LORA_RANK = 8


@pytest.fixture(scope="module")
def vllm_py() -> Path:
    python = vllm_python()
    if python is None:
        message = "vLLM's CPU build is not installed: run `bash scripts/install_vllm.sh` (it makes .venv-vllm)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI's scripts/install.sh should have")
        pytest.skip(message)
    return python


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    """The dequantised embedded model (built once into the user cache, which the CLI uses too)."""
    return embedded_model_dir(default_cache_dir())


@pytest.fixture(scope="module")
def lora_adapter(tmp_path_factory, smollm2_dir) -> Path:
    """`tfgrpo finetune sft` on the embedded model: 4 steps at a high rate, so the adapter changes answers."""
    root = tmp_path_factory.mktemp("lora")
    run = root / "learn-run"
    run.mkdir()
    write_jsonl(
        run / "rollouts.jsonl",
        [rollout(q, s, float((s + i) % 2 == 0)) for i, q in enumerate("abcd") for s in range(4)],
    )
    out = root / "adapter"
    code = run_cli(
        *("finetune", "sft", "--data", run, "--out", out, "--max-steps", 4, "--batch-size", 2),
        *("--lora-r", LORA_RANK, "--lr", "1e-3"),
    )
    assert code == 0 and (out / "adapter_model.safetensors").is_file()
    return out


@pytest.fixture(scope="module")
def vllm_url(vllm_py, smollm2_dir, lora_adapter, tmp_path_factory):
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with vllm_server(
        vllm_py, smollm2_dir, lora={LORA_NAME: lora_adapter}, max_lora_rank=LORA_RANK, log_path=log
    ) as url:
        yield url


def llm_options(url: str, model: str = SERVED_NAME) -> list[str]:
    return ["--backend", "openai", "--model", model, "--base-url", url, "--api-key", "local"]


# -- in process ------------------------------------------------------------------------------------------


@pytest.mark.timeout(900)
def test_in_process_vllm_backend_on_the_cpu(vllm_py, lora_adapter, tmp_path):
    """tfgrpo's `vllm` backend, built as the CLI builds it, with the adapter: CPU defaults, seeds, schema, cache,
    then a learn step and an eval through the same in-process engine."""
    result = subprocess.run(
        [str(vllm_py), "-m", "tests.helpers.vllm_in_process", "--adapter", str(lora_adapter), "--out", str(tmp_path)],
        cwd=ROOT,
        env=vllm_env() | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=720,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    report = json.loads(lines[-1].removeprefix("REPORT "))

    assert report["engine_options"] == {
        "enforce_eager": True,
        "gpu_memory_utilization": 0.1,
        "enable_lora": True,
        "device": "cpu",
    }
    assert report["model_name"].endswith(f"+lora:{lora_adapter.resolve()}")
    assert report["chat"]["text"].strip() and report["chat"]["prompt_tokens"] > 10
    first, again = report["seeded"]["first"], report["seeded"]["again"]
    assert first == again and len(set(first)) >= 2  # seeded: reproducible, and the 3 samples differ
    structured = json.loads(report["structured"]["text"])  # strict JSON, as generated under the schema
    assert set(structured) == {"answer"} and isinstance(structured["answer"], int) and report["structured"]["enforced"]
    cold, warm = report["prefix"]
    assert cold["prompt"] == warm["prompt"] > 256 and warm["cached"] >= 256  # vLLM's prefix cache, 16-token blocks

    learned = report["learn"]  # learn on the in-process engine: every stage reply generated under the schema
    assert learned["status"] == "completed" and learned["rollouts"] == 16 and learned["stage_replies_lost"] == 0
    for stage, counts in learned["stage_replies"].items():
        assert counts["enforced"] == counts["replies"], (stage, learned)
    evaluated = report["eval"]  # eval on the same engine, the adapter named in its provenance
    assert evaluated["samples"] == 4 and all(text.strip() for text in evaluated["completions"])
    assert evaluated["metrics"]["provenance"]["model"].endswith("+lora:" + str(lora_adapter.resolve()))


# -- through the OpenAI server ----------------------------------------------------------------------------


def test_chat_through_the_vllm_server(vllm_url, capsys):
    assert run_cli("chat", "What is the capital of France?", *llm_options(vllm_url), "--temperature", 0) == 0
    assert "Paris" in capsys.readouterr().out


async def test_n_samples_with_a_seed_come_back_in_one_call_and_reproduce(vllm_url):
    backend = OpenAIBackend(SERVED_NAME, base_url=vllm_url, api_key="local")
    sampling = SamplingParams(temperature=1.0, max_tokens=24, seed=11)
    try:
        first = await backend.forward(ask("Name a colour.", n=3, sampling=sampling))
        again = await backend.forward(ask("Name a colour.", n=3, sampling=sampling))
    finally:
        await backend.aclose()
    assert not backend.ignores_n  # vLLM answered n choices in one reply
    assert [c.text for c in first] == [c.text for c in again] and len({c.text for c in first}) >= 2


async def test_cached_prompt_tokens_are_read_from_usage(vllm_url):
    backend = OpenAIBackend(SERVED_NAME, base_url=vllm_url, api_key="local")
    system = f"[{time.time_ns()}] You are a careful assistant; check every step. " * 20  # unseen by the server
    request = ask("Say hello.", sampling=SamplingParams(temperature=0.0, max_tokens=4))
    request.messages.insert(0, Message(role="system", content=system))
    try:
        [cold] = await backend.forward(request)
        [warm] = await backend.forward(request)
    finally:
        await backend.aclose()
    assert cold.usage.cached_prompt_tokens == 0
    assert warm.usage.prompt_tokens == cold.usage.prompt_tokens and warm.usage.cached_prompt_tokens >= 256


def test_learn_through_the_vllm_server_enforces_every_stage_reply(vllm_url, tmp_path):
    # Sums a 135M model gets right about 40 % of the time at temperature 0.7 with room to finish (at
    # temperature 1 or 64 tokens it rambles: 2 right of 16), so groups of 4 come out mixed.
    problems = [("What is 2 + 3?", "5"), ("What is 4 + 4?", "8"), ("What is 6 - 1?", "5"), ("What is 3 + 3?", "6")]
    data = tmp_path / "sums.jsonl"
    write_jsonl(data, [{"id": f"s{i}", "problem": p, "answer": a} for i, (p, a) in enumerate(problems)])
    config = tmp_path / "learn.yaml"
    config.write_text(
        "rollout_sampling: {temperature: 0.7, max_tokens: 96, seed: 3}\n"
        "stage_sampling: {temperature: 0.0, max_tokens: 192}\n"  # one lesson fits, even at its longest
    )
    out = tmp_path / "run"
    code = run_cli(
        *("learn", "--config", config, "--data", data, "--out", out, *llm_options(vllm_url)),
        *("--group-size", 4, "--epochs", 1, "--batch-size", 2, "--max-ops", 1, "--summary-max-tokens", 64),
        *("--dedup", "off"),
    )
    assert code == 0
    totals = json.loads((out / "metrics.json").read_text())["totals"]
    group, consolidate = totals["stage_replies"]["group"], totals["stage_replies"]["consolidate"]
    assert group["replies"] >= 1 and group["enforced"] == group["replies"], totals  # vLLM's structured outputs
    assert consolidate["enforced"] == consolidate["replies"]
    assert totals["stage_replies_lost"] == 0 and totals["parse_failures"] == 0
    assert totals["cached_prompt_tokens"] > 0  # the shared prompt prefix, reported with the server's usage


def test_a_finetuned_adapter_served_by_vllm_is_compared_with_the_base(vllm_url, tmp_path):
    runs = {}
    for label, model in (("base", SERVED_NAME), ("lora", LORA_NAME)):
        runs[label] = tmp_path / label
        code = run_cli(
            *("eval", "--data", "easy", "--limit", 4, "--samples", 2, "--temperature", 0, "--max-tokens", 48),
            *("--label", label, "--out", runs[label], *llm_options(vllm_url, model)),
        )
        assert code == 0
    completions = {
        label: [json.loads(line)["completion"] for line in (run / "samples.jsonl").read_text().splitlines()]
        for label, run in runs.items()
    }
    assert len(completions["base"]) == len(completions["lora"]) == 8
    assert completions["base"] != completions["lora"]  # the adapter is applied, not the base model twice
    assert run_cli("compare", runs["base"], runs["lora"], "--out", tmp_path / "report") == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "base" in report and "lora" in report


def test_serve_upstream_proxies_to_the_vllm_server(vllm_url, tmp_path):
    port = free_port()
    library = write_library(tmp_path / "library.json")
    process = subprocess.Popen(
        [sys.executable, "-m", "tfgrpo", "serve", "--library", library, "--upstream", vllm_url, "--port", str(port)]
        + ["--traces", str(tmp_path / "traces.sqlite")],  # never the default ./traces.sqlite in the checkout
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base + "/health")
                break
            except httpx.TransportError:
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
                time.sleep(0.2)
        body = {"model": SERVED_NAME, "messages": [{"role": "user", "content": "What is 2 + 3?"}], "max_tokens": 24}
        reply = httpx.post(base + "/v1/chat/completions", json=body | {"temperature": 0}, timeout=120)
    finally:
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-tfgrpo-library-version"] == "3"
    data = reply.json()
    assert data["choices"][0]["message"]["content"].strip() and data["system_fingerprint"].startswith("vllm-")
    assert data["usage"]["prompt_tokens"] > 20  # the library went into the prompt
    assert process.returncode == 0, err
    assert (tmp_path / "traces.sqlite").is_file()  # the exchange was traced where it was told to be
