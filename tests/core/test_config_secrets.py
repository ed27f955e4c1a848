"""An API key given in YAML or on the command line is used for the request and never written to config.yaml."""

from __future__ import annotations

import http.server
import json
import threading

import pytest
import yaml
from pydantic import SecretStr

from tfgrpo.core.config import build_config, dump_config
from tfgrpo.learn.config import LearnConfig
from tfgrpo.llm.factory import build_client
from tfgrpo.serve.config import ServeConfig


class _KeyRecorder(http.server.BaseHTTPRequestHandler):
    """A one-route OpenAI-compatible server that records each request's Authorization header."""

    authorizations: list[str | None] = []

    def log_message(self, format, *args):  # noqa: A002 - quiet test output
        return

    def do_POST(self):  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).authorizations.append(self.headers.get("Authorization"))
        body = json.dumps(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def key_server():
    _KeyRecorder.authorizations = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeyRecorder)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("where", ["yaml", "cli"])
def test_key_is_used_for_the_request_and_never_reaches_config_yaml(tmp_path, key_server, where):
    secret = f"sk-{where}-secret-42"
    path = tmp_path / "learn.yaml"
    llm = {"backend": "openai", "model": "m", "base_url": key_server, "max_retries": 0}
    path.write_text(yaml.safe_dump({"data": "easy", "llm": llm | ({"api_key": secret} if where == "yaml" else {})}))
    overrides = {"llm": {"api_key": secret if where == "cli" else None}}  # what `--api-key` passes (None = not given)
    config = build_config(LearnConfig, path, overrides)

    assert isinstance(config.llm.api_key, SecretStr) and secret not in repr(config) and secret not in str(config.llm)
    saved = tmp_path / "config.yaml"
    saved.write_text(dump_config(config))
    assert secret not in saved.read_text() and "api_key: '**********'" in saved.read_text()

    client = build_client(config.llm)
    try:
        client.chat_sync([{"role": "user", "content": "2+2?"}])
    finally:
        client.close_cache()
    assert _KeyRecorder.authorizations == [f"Bearer {secret}"]

    # resume from the saved file: the mask means "no key here", so --api-key (or the environment) supplies it
    resumed = build_config(LearnConfig, saved, {"llm": {"api_key": None}})
    assert resumed.llm.api_key is None
    assert build_config(LearnConfig, saved, {"llm": {"api_key": "sk-new"}}).llm.api_key.get_secret_value() == "sk-new"


def test_serve_key_is_secret_and_old_masks_read_as_unset():
    config = ServeConfig(library="lib.json", upstream=["http://127.0.0.1:1/v1"], api_key="sk-up")
    assert config.api_key.get_secret_value() == "sk-up" and "sk-up" not in dump_config(config)
    assert ServeConfig(library="lib.json", upstream=["http://127.0.0.1:1/v1"], api_key="***").api_key is None
