"""Test-wide settings: one torch thread (two shared cores), everything offline."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


import pytest  # noqa: E402  (after the environment above, which must be set before any import)


@pytest.fixture(scope="module")
def llama_url():
    """llama.cpp's OpenAI-compatible server on the embedded SmolLM2, one per test module."""
    pytest.importorskip("llama_cpp", reason="needs the llamacpp extra (CI installs it)")
    from tests.helpers.servers import llama_server

    with llama_server(n_ctx=1024) as url:
        yield url


@pytest.fixture
def fault_server():
    """A scripted OpenAI-compatible server for fault injection (429, 5xx, slow, malformed, n ignored)."""
    from tests.helpers.servers import FaultServer

    with FaultServer() as server:
        yield server
