"""What each provider accepts and how it answers, from its documentation: one place, per model family.

A profile is chosen from the model name (and the base URL) where that is unambiguous, and otherwise
learned from the server's first refusal, the way the structured-output forms are: a 400 that names
`max_tokens` switches to `max_completion_tokens`, one that names `temperature`/`top_p` stops sending
sampling parameters. The backend keeps what it learned for its endpoint; the run records it
(`providers` in the session and the summary line).

| profile | models | documented rules |
|---|---|---|
| openai-reasoning | o1, o3, o4-*, gpt-5* (not gpt-5-chat) | `max_completion_tokens` only; temperature/top_p at their defaults only (400 otherwise); no reasoning text, `reasoning_tokens` in usage |
| openai | other models on api.openai.com | `max_completion_tokens` (`max_tokens` is deprecated there) |
| deepseek-reasoner | deepseek-reasoner | temperature/top_p "have no effect" (not sent); JSON mode only (`json_object`); reasoning in `reasoning_content`, which must not be sent back |
| deepseek-chat | deepseek-chat | JSON mode only (`json_object`) |
| openai-compatible | everything else (vLLM, llama.cpp, Ollama, proxies) | `max_tokens`, all sampling parameters, strict JSON schema first |
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from tfgrpo.llm.errors import InvalidRequestError

TokenLimitField = Literal["max_tokens", "max_completion_tokens"]


@dataclass(frozen=True)
class ProviderProfile:
    """What one endpoint takes. `learned` says which rules came from a refusal instead of the model name."""

    name: str = "openai-compatible"
    token_limit_field: TokenLimitField = "max_tokens"
    #: temperature and top_p are sent (False: the provider refuses or ignores any non-default value)
    sends_sampling: bool = True
    #: the first form of the openai backend's RESPONSE_FORMATS tried for a structured reply
    first_response_format: str = "json_schema"
    learned: tuple[str, ...] = ()

    def describe(self) -> str:
        rules: list[str] = [self.token_limit_field]
        rules.append("sampling sent" if self.sends_sampling else "default sampling only")
        text = f"{self.name} ({', '.join(rules)})"
        return text + (f"; learned from the server: {', '.join(self.learned)}" if self.learned else "")


_OPENAI_REASONING = re.compile(r"^(o\d+(-.*)?|gpt-5(?!-chat)(-.*|\.\d.*)?)$")


def profile_for(model: str, base_url: str) -> ProviderProfile:
    """The documented profile of `model` at `base_url` (the generic one when neither names a provider)."""
    name = model.rsplit("/", 1)[-1].lower()  # litellm-style "openai/o3-mini"
    on_openai = "api.openai.com" in base_url
    if _OPENAI_REASONING.match(name) and (on_openai or model.lower().startswith("openai/") or "/" not in model):
        return ProviderProfile("openai-reasoning", "max_completion_tokens", sends_sampling=False)
    if on_openai:
        return ProviderProfile("openai", "max_completion_tokens")
    if name == "deepseek-reasoner":
        return ProviderProfile("deepseek-reasoner", sends_sampling=False, first_response_format="json_object")
    if name == "deepseek-chat":
        return ProviderProfile("deepseek-chat", first_response_format="json_object")
    return ProviderProfile()


def learn_from_refusal(profile: ProviderProfile, error: Exception) -> ProviderProfile | None:
    """The profile corrected by a 400 that names a parameter this one sends; None when it names none."""
    if not isinstance(error, InvalidRequestError):
        return None
    message = str(error).lower()
    if (
        profile.token_limit_field == "max_tokens"
        and "max_tokens" in message
        and ("max_completion_tokens" in message or "not supported" in message or "unsupported" in message)
    ):
        return replace(
            profile, token_limit_field="max_completion_tokens", learned=(*profile.learned, "max_completion_tokens")
        )
    refuses_value = any(
        word in message for word in ("unsupported", "not supported", "does not support", "only the default")
    )
    if profile.sends_sampling and refuses_value and ("temperature" in message or "top_p" in message):
        return replace(profile, sends_sampling=False, learned=(*profile.learned, "default sampling only"))
    return None


__all__ = ["ProviderProfile", "learn_from_refusal", "profile_for"]
