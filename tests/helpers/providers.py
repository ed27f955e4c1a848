"""Local servers that answer like each provider's documentation says it does (the scripted world inside).

- `openai-reasoning` (o-series, gpt-5): 400 `unsupported_parameter` for `max_tokens`, 400
  `unsupported_value` for a temperature or top_p other than 1; no reasoning text; usage carries
  `completion_tokens_details.reasoning_tokens` (part of `completion_tokens`).
- `deepseek-reasoner`: reasoning in `message.reasoning_content`; 400 when a request sends
  `reasoning_content` back in its messages; `response_format` `json_schema` refused (JSON mode only);
  temperature accepted and ignored.
- `vllm-reasoning` (vLLM with `--reasoning-parser`, 0.10+): reasoning in `message.reasoning`.
- `llamacpp-think` (a model served without a parser): a `<think>...</think>` block at the head of content.
- `AnthropicServer`: Anthropic's Messages API with extended thinking, reached through litellm.

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


def _openai_error(message: str, param: str, code: str) -> tuple[int, dict]:
    return 400, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


class ProviderServer(WorldServer):
    """The scripted world behind one provider's documented request rules and reply shape."""

    def __init__(self, world: Any, provider: str, **kwargs: Any) -> None:
        super().__init__(world, **kwargs)
        self.provider = provider
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
            if (body.get("response_format") or {}).get("type") == "json_schema":
                return 400, {
                    "error": {
                        "message": "This response_format type is unavailable now",
                        "type": "invalid_request_error",
                    }
                }
        return None

    def _shape(self, payload: dict) -> None:
        message = payload["choices"][0]["message"]
        usage = payload["usage"]
        if self.provider == "openai-reasoning":
            usage["completion_tokens"] += REASONING_TOKENS
            usage["total_tokens"] += REASONING_TOKENS
            usage["completion_tokens_details"] = {"reasoning_tokens": REASONING_TOKENS}
        elif self.provider in ("deepseek-reasoner", "vllm-reasoning"):
            message["reasoning_content" if self.provider == "deepseek-reasoner" else "reasoning"] = THOUGHT
            usage["completion_tokens"] += REASONING_TOKENS
            usage["total_tokens"] += REASONING_TOKENS
            usage["completion_tokens_details"] = {"reasoning_tokens": REASONING_TOKENS}
        elif self.provider == "llamacpp-think":
            message["content"] = f"<think>{THOUGHT}</think>\n{message['content']}"


class AnthropicServer:
    """`POST /v1/messages` answering like Anthropic's Messages API with extended thinking: a `thinking`
    content block, then the `text` block (litellm turns the first into `reasoning_content`)."""

    def __init__(self, thought: str = THOUGHT, answer: str = "\\boxed{3}") -> None:
        self.bodies: list[dict] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                server.bodies.append(body)
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
                data = json.dumps(reply).encode()
                self.send_response(200)
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
