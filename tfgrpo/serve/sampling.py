"""The sampling fields of a chat request, each held to a documented range before anything goes upstream.

A client's numbers are forwarded to a model server that may take them at face value: `"n": 1000000` asks
for a million choices (the proxy would hold and trace every one), NaN or an infinity is not even JSON
the upstream can read back. The ranges are the OpenAI API's; `n` (and vLLM's `best_of`) are bounded by
serve's `max_choices`. A field left out, or sent as null, is the upstream's default. Non-finite numbers
anywhere in the body are refused while it is parsed (`limits.load_json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfgrpo.serve.errors import RequestRejected

INT32_MAX = 2**31 - 1
INT64 = 2**63
#: OpenAI's bounds on `stop` and `logit_bias`
MAX_STOP_SEQUENCES = 4
MAX_LOGIT_BIAS_ENTRIES = 300


@dataclass(frozen=True)
class Range:
    low: float
    high: float
    integer: bool = False

    def check(self, name: str, value: Any, *, setting: str = "") -> None:
        kinds = (int,) if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds) or not self.low <= value <= self.high:
            kind = "an integer" if self.integer else "a number"
            where = f" ({setting})" if setting else ""
            raise invalid(name, f"must be {kind} in [{self.low:g}, {self.high:g}]{where} (got {_shown(value)})")


RANGES = {
    "temperature": Range(0, 2),
    "top_p": Range(0, 1),
    "presence_penalty": Range(-2, 2),
    "frequency_penalty": Range(-2, 2),
    "max_tokens": Range(1, INT32_MAX, integer=True),
    "max_completion_tokens": Range(1, INT32_MAX, integer=True),
    "seed": Range(-INT64, INT64 - 1, integer=True),
    "top_logprobs": Range(0, 20, integer=True),
    "top_k": Range(-1, INT32_MAX, integer=True),  # vLLM and llama.cpp; -1 (or 0): no limit
    "min_p": Range(0, 1),  # vLLM and llama.cpp
}


def check_sampling(body: dict[str, Any], *, max_choices: int) -> None:
    """400 `invalid_sampling_parameter` for the first sampling field of `body` outside its range."""
    for name, bounds in RANGES.items():
        value = body.get(name)
        if value is not None:
            bounds.check(name, value)
    choices = Range(1, max_choices, integer=True)
    for name in ("n", "best_of"):
        if body.get(name) is not None:
            choices.check(name, body[name], setting="max_choices")
    if body.get("logprobs") is not None and not isinstance(body["logprobs"], bool):
        raise invalid("logprobs", "must be true or false")
    _check_stop(body.get("stop"))
    _check_logit_bias(body.get("logit_bias"))


def _check_stop(stop: Any) -> None:
    if stop is None or isinstance(stop, str):
        return
    if not isinstance(stop, list) or len(stop) > MAX_STOP_SEQUENCES or not all(isinstance(s, str) for s in stop):
        raise invalid("stop", f"must be a string or a list of at most {MAX_STOP_SEQUENCES} strings")


def _check_logit_bias(bias: Any) -> None:
    if bias is None:
        return
    if not isinstance(bias, dict) or len(bias) > MAX_LOGIT_BIAS_ENTRIES:
        raise invalid("logit_bias", f"must be an object of at most {MAX_LOGIT_BIAS_ENTRIES} token ids")
    for token, value in bias.items():
        Range(-100, 100).check(f"logit_bias[{_shown(token)}]", value)


def invalid(name: str, problem: str) -> RequestRejected:
    return RequestRejected(400, f"'{name}' {problem}", "invalid_sampling_parameter")


def _shown(value: Any) -> str:
    """The value as the client sent it, cut short: an error line never echoes a long input back."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
