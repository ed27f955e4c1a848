"""Any of litellm's 100+ providers through one model string (`openai/NAME`, `anthropic/...`, `hosted_vllm/...`).

litellm is imported only when the backend is built (~3 s), after setting `LITELLM_LOCAL_MODEL_COST_MAP`
so that importing it never fetches the price table from the internet. Its own retries are off
(`num_retries=0`): the client layer retries. Unsupported parameters (e.g. `seed` on a provider without
one) are dropped by litellm (`drop_params=True`) rather than failing the call.
"""

from __future__ import annotations

import os
from typing import Any

from tfgrpo.llm.backends.errors_map import map_litellm_error
from tfgrpo.llm.backends.openai_backend import ChatCompletionsBackend
from tfgrpo.llm.errors import BackendUnavailableError


def import_litellm() -> Any:
    """litellm, imported offline-safe."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import litellm
    except ImportError as exc:
        raise BackendUnavailableError("the litellm backend needs litellm: pip install litellm") from exc
    # Our typed errors already say what failed; litellm's "Give Feedback" banner per error is noise.
    litellm.suppress_debug_info = True
    return litellm


class LiteLLMBackend(ChatCompletionsBackend):
    """`litellm.acompletion` with a model string, optional `api_base` and `api_key`."""

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if not model:
            raise BackendUnavailableError(
                "the litellm backend needs a model string (--model), e.g. openai/gpt-4o-mini"
            )
        super().__init__(model, endpoint=(api_base or f"litellm:{model}").rstrip("/"), extra_body=extra_body)
        self.api_base = api_base
        self.api_key = api_key
        self.timeout_s = timeout_s
        self._litellm = import_litellm()

    async def _create(self, arguments: dict[str, Any]) -> Any:
        import openai

        litellm = self._litellm
        call = dict(arguments)
        if self.api_base:
            call["api_base"] = self.api_base
        if self.api_key:
            call["api_key"] = self.api_key
        try:
            return await litellm.acompletion(**call, timeout=self.timeout_s, num_retries=0, drop_params=True)
        except (openai.OpenAIError, ValueError) as exc:  # litellm's exceptions subclass openai's
            raise map_litellm_error(exc) from exc


__all__ = ["LiteLLMBackend", "import_litellm"]
