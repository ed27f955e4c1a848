"""What each provider accepts and how it answers, from its documentation: one place, per model family.

A profile says, for one endpoint, which request parameters are sent (the token-limit field; temperature,
top_p, seed and `n`; the first `response_format` form; tools), where usage reports cached and reasoning
tokens, and where the reasoning text comes back. A parameter the profile says is unsupported is never
sent: `n` > 1 becomes one request per sample, sampling parameters and `seed` are left out (logged once),
and a request that needs tools from a profile without them is refused in one line.

It is chosen from the model name (and the base URL) where that is unambiguous (`profile_for`), then
corrected from what the server says: its first refusal of a parameter (`learn_from_refusal`: a 400 that
names `max_tokens`, `temperature`/`top_p`, `n` or `seed`) or its first reply, whose shape names
llama.cpp's and vLLM's servers (`recognise_from_reply`). The backend keeps what it learned for its
endpoint; a learn run records it (`providers` and `provider_profiles` in state.json) and a resumed run
starts from it (`ProviderProfile.from_record`). docs/backends.md has the table of families.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from tfgrpo.llm.errors import InvalidRequestError, ServerError

TokenLimitField = Literal["max_tokens", "max_completion_tokens"]
#: The forms of `response_format` tried in order, strongest first: OpenAI's strict JSON schema; JSON mode
#: with the schema attached (llama-cpp-python's server, which turns it into a grammar); plain JSON mode.
RESPONSE_FORMATS = ("json_schema", "json_object+schema", "json_object")
SAMPLING_FIELDS = ("temperature", "top_p")
_OPTIONAL_FIELDS = ("first_response_format", "reasoning_tokens_field")


@dataclass(frozen=True)
class ProviderProfile:
    """What one endpoint takes and how it answers. `learned` names the rules that came from the server."""

    name: str = "openai-compatible"
    token_limit_field: TokenLimitField = "max_tokens"
    #: which of temperature / top_p are sent (empty: the provider refuses or ignores non-default values)
    sampling_fields: tuple[str, ...] = SAMPLING_FIELDS
    #: `seed` is sent
    sends_seed: bool = True
    #: `n` > 1 is sent in one request (False: one request per sample)
    sends_n: bool = True
    #: the first form of RESPONSE_FORMATS tried for a structured reply; None: no structured output
    first_response_format: str | None = "json_schema"
    #: native tool calling (`tools`) is accepted
    tools: bool = True
    #: where usage reports prompt tokens served from the provider's cache (dotted path in `usage`)
    cached_tokens_field: str = "prompt_tokens_details.cached_tokens"
    #: where usage reports reasoning tokens (a part of completion_tokens); None: not reported
    reasoning_tokens_field: str | None = "completion_tokens_details.reasoning_tokens"
    #: message fields that carry reasoning text, read in this order
    reasoning_fields: tuple[str, ...] = ("reasoning_content", "reasoning")
    #: a `<think>...</think>` block at the head of the content is reasoning, not answer
    think_in_content: bool = True
    #: the documentation these rules come from
    source: str = ""
    learned: tuple[str, ...] = ()

    @property
    def sends_sampling(self) -> bool:
        return bool(self.sampling_fields)

    def describe(self) -> str:
        """One line for the run summary, e.g. `openai-reasoning (max_completion_tokens, default sampling only)`."""
        rules: list[str] = [self.token_limit_field]
        if self.sampling_fields == SAMPLING_FIELDS:
            rules.append("sampling sent")
        else:
            rules.append(
                f"{' / '.join(self.sampling_fields)} only" if self.sampling_fields else "default sampling only"
            )
        unsent = ((self.sends_n, "one request per sample"), (self.sends_seed, "no seed"), (self.tools, "no tools"))
        rules += [text for sent, text in unsent if not sent]
        text = f"{self.name} ({', '.join(rules)})"
        return text + (f"; learned from the server: {', '.join(self.learned)}" if self.learned else "")

    def learn(self, rule: str, **changes: Any) -> ProviderProfile:
        """This profile with `changes`, `rule` added to what was learned."""
        return replace(self, **changes, learned=(*self.learned, rule))

    def to_record(self) -> dict[str, Any]:
        """A JSON-able dict (state.json) that `from_record` reads back."""
        return dataclasses.asdict(self)

    @classmethod
    def from_record(cls, record: Any) -> ProviderProfile | None:
        """The profile saved by `to_record`; None when the record is not one (an older or edited state file)."""
        if not isinstance(record, dict):
            return None
        defaults = {f.name: getattr(cls(), f.name) for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in record.items()}
        # every saved value has its field's type (None only where the field allows it), and the enum-like
        # fields one of their values: an edited or foreign record is ignored, never half-applied
        for key, value in values.items():
            if key not in defaults or value is None and key not in _OPTIONAL_FIELDS:
                return None
            if value is not None and not isinstance(value, type(defaults[key])):
                return None
            if isinstance(value, tuple) and not all(isinstance(item, str) for item in value):
                return None
        if values.get("token_limit_field") not in ("max_tokens", "max_completion_tokens"):
            return None
        if values.get("first_response_format", "json_schema") not in (*RESPONSE_FORMATS, None):
            return None
        return cls(**values)


# -- the families, each from its provider's documentation -------------------------------------------------

GENERIC = ProviderProfile(source="no provider named: every parameter sent, every reasoning place read")

# https://platform.openai.com/docs/api-reference/chat/create: `max_tokens` is deprecated in favour of
# `max_completion_tokens`; `n`, `seed`, tools and `json_schema` are documented; usage carries
# prompt_tokens_details.cached_tokens and completion_tokens_details.reasoning_tokens. No reasoning text.
OPENAI = ProviderProfile(
    name="openai",
    token_limit_field="max_completion_tokens",
    reasoning_fields=(),
    think_in_content=False,
    source="https://platform.openai.com/docs/api-reference/chat/create",
)
# https://platform.openai.com/docs/guides/reasoning: `max_completion_tokens` only (400 for `max_tokens`),
# temperature / top_p at their defaults only (400 `unsupported_value` otherwise).
OPENAI_REASONING = replace(
    OPENAI, name="openai-reasoning", sampling_fields=(), source="https://platform.openai.com/docs/guides/reasoning"
)
# https://api-docs.deepseek.com/api/create-chat-completion: no `n` and no `seed` among the request
# parameters; `response_format` is `text` or `json_object` only (https://api-docs.deepseek.com/guides/json_mode);
# cache hits in usage.prompt_cache_hit_tokens (https://api-docs.deepseek.com/guides/kv_cache).
DEEPSEEK_CHAT = ProviderProfile(
    name="deepseek-chat",
    sends_n=False,
    sends_seed=False,
    first_response_format="json_object",
    cached_tokens_field="prompt_cache_hit_tokens",
    reasoning_fields=("reasoning_content",),
    think_in_content=False,
    source="https://api-docs.deepseek.com/api/create-chat-completion",
)
# https://api-docs.deepseek.com/guides/reasoning_model: temperature / top_p "will not trigger an error but
# will also have no effect" (not sent); Function Calling not supported; the reasoning in
# message.reasoning_content, a 400 if it is sent back.
DEEPSEEK_REASONER = replace(
    DEEPSEEK_CHAT,
    name="deepseek-reasoner",
    sampling_fields=(),
    tools=False,
    source="https://api-docs.deepseek.com/guides/reasoning_model",
)
# https://docs.vllm.ai/en/latest/features/reasoning_outputs.html: the reasoning parser's text in
# message.reasoning (message.reasoning_content up to 0.9); `n`, `seed` and `json_schema` supported;
# cached tokens reported only with --enable-prompt-tokens-details; no reasoning-token count.
VLLM = ProviderProfile(
    name="vllm",
    reasoning_fields=("reasoning", "reasoning_content"),
    reasoning_tokens_field=None,
    source="https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html",
)
# https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md: any `n` other than 1 is refused
# ("Only one completion choice is allowed", tools/server/utils.hpp); the reasoning in
# message.reasoning_content with --reasoning-format deepseek, a <think> block in the content with `none`.
LLAMACPP = ProviderProfile(
    name="llama.cpp",
    sends_n=False,
    reasoning_tokens_field=None,
    source="https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md",
)
# https://docs.claude.com/en/api/messages: no `n` and no `seed`; "You should either alter temperature or
# top_p, but not both" (the 4.1+ models answer 400 when both are sent). litellm maps max_tokens, the
# thinking block to message.reasoning_content and cache reads to prompt_tokens_details.cached_tokens.
ANTHROPIC = ProviderProfile(
    name="anthropic",
    sampling_fields=("temperature",),
    sends_n=False,
    sends_seed=False,
    reasoning_fields=("reasoning_content",),
    think_in_content=False,
    source="https://docs.claude.com/en/api/messages",
)
PROFILES = (OPENAI_REASONING, OPENAI, DEEPSEEK_REASONER, DEEPSEEK_CHAT, VLLM, LLAMACPP, ANTHROPIC, GENERIC)

_OPENAI_REASONING = re.compile(r"^(o\d+(-.*)?|gpt-5(?!-chat)(-.*|\.\d.*)?)$")
# OpenAI's own chat models: a bare name like these is theirs wherever it is served (Azure, a proxy); with a
# prefix ("openai/gpt-4o" on OpenRouter, litellm's "openai/" for any compatible server) it says nothing.
_OPENAI_CHAT = re.compile(r"^(gpt-4o|gpt-4\.1|gpt-4-|gpt-4$|gpt-3\.5-|chatgpt-|gpt-5-chat)")


def profile_for(model: str, base_url: str) -> ProviderProfile:
    """The documented profile of `model` at `base_url` (the generic one when neither names a provider)."""
    lowered = model.lower()
    prefix, _, name = lowered.rpartition("/")  # litellm-style "openai/o3-mini"
    on_openai = "api.openai.com" in base_url or base_url.lower().startswith("litellm:openai/")
    if _OPENAI_REASONING.match(name) and (on_openai or prefix in ("", "openai")):
        return OPENAI_REASONING
    if on_openai or (prefix == "" and _OPENAI_CHAT.match(name)):
        return OPENAI
    if name == "deepseek-reasoner":
        return DEEPSEEK_REASONER
    if name == "deepseek-chat":
        return DEEPSEEK_CHAT
    if prefix.startswith("anthropic") or name.startswith("claude-"):
        return ANTHROPIC
    if prefix.startswith("hosted_vllm"):
        return VLLM
    return GENERIC


def recognise_from_reply(profile: ProviderProfile, reply: Any) -> ProviderProfile | None:
    """A generic profile named after the server its first reply comes from; None when it says nothing.

    llama.cpp's server adds `timings` to every chat reply (tools/server/server.cpp, to_json_oaicompat_chat);
    vLLM's choices carry `stop_reason`, "not part of the OpenAI spec but included in vLLM"
    (vllm/entrypoints/openai/protocol.py). What the generic profile learned from refusals is kept.
    """
    if profile.name != GENERIC.name or not isinstance(reply, dict):
        return None
    choices = reply.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    if isinstance(reply.get("timings"), dict):
        family, rule = LLAMACPP, "llama.cpp server (its reply)"
    elif "stop_reason" in first:
        family, rule = VLLM, "vLLM server (its reply)"
    else:
        return None
    return profile.learn(
        rule,
        name=family.name,
        sends_n=profile.sends_n and family.sends_n,
        reasoning_fields=family.reasoning_fields,
        reasoning_tokens_field=family.reasoning_tokens_field,
        source=family.source,
    )


_REFUSES = (
    "unsupported",
    "not supported",
    "does not support",
    "only the default",
    "not allowed",
    "cannot both",
    "not permitted",  # pydantic's "Extra inputs are not permitted" (strict OpenAI-compatible servers)
    "unrecognized",
)


def learn_from_refusal(profile: ProviderProfile, error: Exception) -> ProviderProfile | None:
    """The profile corrected by a refusal that names a parameter this one sends; None when it names none.

    A 400 (InvalidRequestError) in every case; llama.cpp's server answers its `n` refusal with a 500."""
    if not isinstance(error, InvalidRequestError | ServerError):
        return None
    message = str(error).lower()
    refuses = any(word in message for word in _REFUSES)
    if "only one completion choice" in message or ("'n'" in message and refuses):
        return profile.learn("one request per sample", sends_n=False) if profile.sends_n else None
    if isinstance(error, ServerError):
        return None
    # each token-limit rule at most once: a server refusing both fields must not make the call loop
    if (
        profile.token_limit_field == "max_tokens"
        and "max_tokens" not in profile.learned
        and "max_tokens" in message
        and ("max_completion_tokens" in message or "not supported" in message or "unsupported" in message)
    ):
        return profile.learn("max_completion_tokens", token_limit_field="max_completion_tokens")
    if not refuses:
        return None
    if (
        profile.token_limit_field == "max_completion_tokens"
        and "max_completion_tokens" not in profile.learned
        and "max_completion_tokens" in message
        and "max_tokens" not in message
    ):
        return profile.learn("max_tokens", token_limit_field="max_tokens")  # a server that predates the field
    if "cannot both" in message:  # Anthropic's 4.1+ models: one of the two, never neither
        both = {"temperature", "top_p"} <= set(profile.sampling_fields)
        return profile.learn("temperature only", sampling_fields=("temperature",)) if both else None
    if profile.sampling_fields and ("temperature" in message or "top_p" in message):
        return profile.learn("default sampling only", sampling_fields=())
    if profile.sends_seed and "seed" in message:
        return profile.learn("no seed", sends_seed=False)
    return None


def read_count(usage: Any, path: str | None, read: Any) -> int:
    """The positive integer at dotted `path` of a usage object or dict (`read(container, name)`); 0 if none."""
    if not path:
        return 0
    value = usage
    for name in path.split("."):
        value = read(value, name)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


__all__ = [
    "ANTHROPIC",
    "DEEPSEEK_CHAT",
    "DEEPSEEK_REASONER",
    "GENERIC",
    "LLAMACPP",
    "OPENAI",
    "OPENAI_REASONING",
    "PROFILES",
    "RESPONSE_FORMATS",
    "VLLM",
    "ProviderProfile",
    "learn_from_refusal",
    "profile_for",
    "read_count",
    "recognise_from_reply",
]
