"""Local servers that answer like each provider's documentation says it does (the scripted world inside).

- `openai` (gpt-4o-mini and the other chat models): 400 for a parameter the API reference does not list;
  usage carries `prompt_tokens_details.cached_tokens`.
- `openai-reasoning` (o-series, gpt-5): the same, plus 400 `unsupported_parameter` for `max_tokens` and
  400 `unsupported_value` for a temperature or top_p other than 1; no reasoning text; usage carries
  `completion_tokens_details.reasoning_tokens` (part of `completion_tokens`).
- `deepseek-chat`: `response_format` `json_schema` refused (JSON mode only); cache hits in
  `usage.prompt_cache_hit_tokens`; one choice whatever `n` says (`n` is not a DeepSeek parameter).
- `deepseek-reasoner`: the same, plus reasoning in `message.reasoning_content`; 400 when a request sends
  `reasoning_content` back in its messages; temperature accepted and ignored.
- `vllm-reasoning` (vLLM with `--reasoning-parser`, 0.10+): reasoning in `message.reasoning`; choices
  carry vLLM's own `stop_reason`.
- `llamacpp-think` (llama.cpp's server, `--reasoning-format none`): a `<think>...</think>` block at the
  head of content; `llamacpp-deepseek` (`--reasoning-format deepseek`): the reasoning in
  `message.reasoning_content`. Both add `timings` to the reply and answer `n` != 1 with llama.cpp's 500
  "Only one completion choice is allowed".
- `AnthropicServer`: Anthropic's Messages API with extended thinking, reached through litellm; 400 when
  both temperature and top_p are sent (the 4.1+ models).

The error bodies are the providers' own wording (OpenAI's API reference and DeepSeek's reasoning_model
guide): the backend must learn from them, not from our phrasing.
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

from tests.helpers.learn_world import WorldServer

THOUGHT = "Let me think. Maybe the answer is 99? No: I add the two numbers carefully and check the carry."
REASONING_TOKENS = 7
CACHED_TOKENS = 2
#: the request parameters of https://platform.openai.com/docs/api-reference/chat/create that a test may send
OPENAI_PARAMETERS = {
    *("model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "seed", "stop"),
    *("tools", "tool_choice", "response_format", "presence_penalty", "frequency_penalty", "logprobs", "user"),
}
LLAMACPP = ("llamacpp-think", "llamacpp-deepseek")


def _openai_error(message: str, param: str, code: str) -> tuple[int, dict]:
    return 400, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


class ProviderServer(WorldServer):
    """The scripted world behind one provider's documented request rules and reply shape."""

    def __init__(self, world: Any, provider: str, *, reasoning_tokens: int = REASONING_TOKENS, **kwargs: Any) -> None:
        super().__init__(world, **kwargs)
        self.provider = provider
        self.reasoning_tokens = reasoning_tokens
        self.refusals: list[str] = []

    def answer(self, body: dict) -> tuple[int, dict]:
        refusal = self._refusal(body)
        if refusal is not None:
            with self._lock:
                self.refusals.append(refusal[1]["error"]["message"])
                self.bodies.append(body)
            return refusal
        status, payload = super().answer(body)
        if status == 200:
            self._shape(payload)
        return status, payload

    def _refusal(self, body: dict) -> tuple[int, dict] | None:
        if self.provider in ("openai", "openai-reasoning"):
            unknown = sorted(set(body) - OPENAI_PARAMETERS)
            if unknown:
                return _openai_error(f"Unrecognized request argument supplied: {unknown[0]}", unknown[0], "")
        if self.provider in LLAMACPP and body.get("n", 1) != 1:
            return 500, {
                "error": {"code": 500, "message": "Only one completion choice is allowed", "type": "server_error"}
            }
        if self.provider == "openai-reasoning":
            if "max_tokens" in body:
                return _openai_error(
                    "Unsupported parameter: 'max_tokens' is not supported with this model. "
                    "Use 'max_completion_tokens' instead.",
                    "max_tokens",
                    "unsupported_parameter",
                )
            for name in ("temperature", "top_p"):
                if name in body and body[name] != 1:
                    return _openai_error(
                        f"Unsupported value: '{name}' does not support {body[name]} with this model. "
                        "Only the default (1) value is supported.",
                        name,
                        "unsupported_value",
                    )
        if self.provider == "deepseek-reasoner":
            if any("reasoning_content" in message for message in body.get("messages", [])):
                return 400, {
                    "error": {
                        "message": "The reasoning_content is an intermediate result for display purposes only "
                        "and will not be included in the context for inference. Please remove the "
                        "reasoning_content from your message to reduce network traffic.",
                        "type": "invalid_request_error",
                    }
                }
        if self.provider.startswith("deepseek"):
            if (body.get("response_format") or {}).get("type") == "json_schema":
                return 400, {
                    "error": {
                        "message": "This response_format type is unavailable now",
                        "type": "invalid_request_error",
                    }
                }
        return None

    def _shape(self, payload: dict) -> None:
        choice = payload["choices"][0]
        message, usage = choice["message"], payload["usage"]
        if self.provider in ("openai", "openai-reasoning"):
            usage["prompt_tokens_details"] = {"cached_tokens": CACHED_TOKENS}
        elif self.provider.startswith("deepseek"):
            usage["prompt_cache_hit_tokens"] = CACHED_TOKENS
            usage["prompt_cache_miss_tokens"] = usage["prompt_tokens"] - CACHED_TOKENS
        if self.provider in ("openai-reasoning", "deepseek-reasoner", "vllm-reasoning"):
            usage["completion_tokens"] += self.reasoning_tokens
            usage["total_tokens"] += self.reasoning_tokens
            usage["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        if self.provider == "deepseek-reasoner":
            message["reasoning_content"] = THOUGHT
        elif self.provider == "vllm-reasoning":
            message["reasoning"] = THOUGHT
            choice["stop_reason"] = None
        elif self.provider == "llamacpp-think":
            message["content"] = f"<think>{THOUGHT}</think>\n{message['content']}"
        elif self.provider == "llamacpp-deepseek":
            message["reasoning_content"] = THOUGHT
        if self.provider in LLAMACPP:
            payload["timings"] = {"prompt_n": usage["prompt_tokens"], "predicted_n": usage["completion_tokens"]}


BOTH = "`temperature` and `top_p` cannot both be specified for this model. Please use only one."


class AnthropicServer:
    """`POST /v1/messages` answering like Anthropic's Messages API with extended thinking: a `thinking`
    content block, then the `text` block (litellm turns the first into `reasoning_content`). Like the 4.1+
    models, it refuses a request that sets both temperature and top_p."""

    def __init__(self, thought: str = THOUGHT, answer: str = "\\boxed{3}") -> None:
        self.bodies: list[dict] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                server.bodies.append(body)
                if "temperature" in body and "top_p" in body:
                    self._send(400, {"type": "error", "error": {"type": "invalid_request_error", "message": BOTH}})
                    return
                reply = {
                    "id": "msg_local",
                    "type": "message",
                    "role": "assistant",
                    "model": body.get("model"),
                    "content": [
                        {"type": "thinking", "thinking": thought, "signature": "local"},
                        {"type": "text", "text": answer},
                    ],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 12, "output_tokens": 40},
                }
                self._send(200, reply)

            def _send(self, status: int, reply: dict) -> None:
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> AnthropicServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
