"""Options shared by every command that talks to a model, so `--backend ...` means one thing everywhere."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tfgrpo.llm.config import LLMConfig

ConfigOpt = Annotated[
    str | None,
    typer.Option("--config", "-c", help="YAML file with any of the options; the command line overrides it."),
]
BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="transformers | llamacpp | openai | litellm | vllm (default: transformers on the embedded SmolLM2).",
    ),
]
ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="Model name (API) or local path / GGUF file.")]
BaseUrlOpt = Annotated[
    list[str] | None,
    typer.Option("--base-url", help="OpenAI-compatible base URL; repeat for several replicas (least-busy routing)."),
]
ApiKeyOpt = Annotated[
    str | None, typer.Option("--api-key", help="API key (else OPENAI_API_KEY or the provider's usual variable).")
]
AdapterOpt = Annotated[
    str | None, typer.Option("--adapter", help="LoRA adapter directory (transformers / vllm backends).")
]
ConcurrencyOpt = Annotated[int | None, typer.Option("--concurrency", help="Requests in flight at once per endpoint.")]
CacheOpt = Annotated[str | None, typer.Option("--cache", help="SQLite response-cache file.")]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        help="Per-request timeout in seconds (llm.timeout_s; default 600). A timed-out request is retried and counted as a timeout retry.",
    ),
]
BudgetOpt = Annotated[float | None, typer.Option("--budget-usd", help="Stop cleanly once this many USD were spent.")]
StructuredOutputOpt = Annotated[
    str | None,
    typer.Option(
        "--structured-output", help=f"auto | on | off. {LLMConfig.model_fields['structured_output'].description}"
    ),
]
TemperatureOpt = Annotated[float | None, typer.Option("--temperature", help="Sampling temperature.")]
TopPOpt = Annotated[float | None, typer.Option("--top-p", help="Nucleus sampling mass.")]
MaxTokensOpt = Annotated[int | None, typer.Option("--max-tokens", help="Maximum new tokens per completion.")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Random seed.")]


def llm_overrides(
    backend: str | None = None,
    model: str | None = None,
    base_url: list[str] | None = None,
    api_key: str | None = None,
    adapter: str | None = None,
    concurrency: int | None = None,
    cache: str | None = None,
    budget_usd: float | None = None,
    timeout_s: float | None = None,
    structured_output: str | None = None,
) -> dict[str, Any]:
    """The `llm:` section of a config from command-line values (None = not given)."""
    return {
        "backend": backend,
        "model": model,
        "base_url": base_url,
        "api_key": api_key,
        "adapter": adapter,
        "concurrency": concurrency,
        "cache": cache,
        "budget_usd": budget_usd,
        "timeout_s": timeout_s,
        "structured_output": structured_output,
    }


def sampling_overrides(
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    return {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens, "seed": seed}
