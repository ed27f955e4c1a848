"""Client authentication of `tfgrpo serve`: client API keys (plain or sha256-hashed) and forwarding each
client's own Authorization header upstream instead of the server's key."""

from __future__ import annotations

import hashlib
import logging
import subprocess
import sys

import httpx
import openai
import pytest
from openai import OpenAI

from tests.helpers.serve_fixtures import proxy, write_library
from tfgrpo.core.config import ConfigError
from tfgrpo.serve.auth import ClientKeys
from tfgrpo.serve.config import ServeConfig

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
PLAIN, HASHED = "sk-team-a-0123456789", "sk-team-b-9876543210"


def _keys(tmp_path) -> str:
    path = tmp_path / "keys.txt"
    digest = hashlib.sha256(HASHED.encode()).hexdigest()
    path.write_text(f"# one key per line\n{PLAIN}\n\nsha256:{digest}   # team b, stored hashed\n")
    return str(path)


def _chat(url: str, headers: dict[str, str] | None = None, **fields) -> httpx.Response:
    body = {"model": "m", "messages": QUESTION, **fields}
    return httpx.post(url + "/v1/chat/completions", json=body, headers=headers or {})


def test_client_keys_let_in_known_keys_and_answer_401_otherwise(tmp_path):
    with proxy(tmp_path, client_keys=_keys(tmp_path)) as p:
        for headers, code in [
            ({}, "missing_api_key"),
            ({"authorization": "Bearer sk-wrong"}, "invalid_api_key"),
            ({"authorization": PLAIN}, "invalid_api_key"),  # no Bearer scheme
            ({"authorization": f"Bearer sha256:{hashlib.sha256(HASHED.encode()).hexdigest()}"}, "invalid_api_key"),
        ]:
            refused = _chat(p.url, headers)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
            error = refused.json()["error"]
            assert error["type"] == "invalid_request_error" and error["code"] == code
            assert "sk-" not in error["message"]  # the key presented is not echoed
        assert not p.upstream.bodies  # nothing unauthenticated reached the upstream
        assert httpx.post(p.url + "/v1/feedback", json={"id": "x", "reward": 1}).status_code == 401
        assert httpx.get(p.url + "/v1/models").status_code == 401
        for key in (PLAIN, HASHED):
            reply = OpenAI(base_url=p.url + "/v1", api_key=key, max_retries=0).chat.completions.create(
                model="m", messages=QUESTION
            )
            assert reply.choices[0].message.content == "scripted reply"
        with pytest.raises(openai.AuthenticationError):
            OpenAI(base_url=p.url + "/v1", api_key="sk-nope", max_retries=0).chat.completions.create(
                model="m", messages=QUESTION
            )
        # service routes stay open to probes and scrapers
        for route in ("/health", "/ready", "/metrics"):
            assert httpx.get(p.url + route).status_code == 200, route
        # the client keys never reach the upstream: it gets the server's key (none here)
        assert all("authorization" not in headers for headers in p.upstream.headers)


def test_forwarded_authorization_reaches_the_upstream_and_nothing_else(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="tfgrpo.serve")
    monkeypatch.setenv("TFGRPO_UPSTREAM_API_KEY", "sk-server-key-never-sent")
    own = "sk-client-own-upstream-key"
    with proxy(tmp_path, forward_client_auth_header=True) as p:
        client = OpenAI(base_url=p.url + "/v1", api_key=own, max_retries=0)
        assert client.chat.completions.create(model="m", messages=QUESTION).choices[0].message.content
        list(client.chat.completions.create(model="m", messages=QUESTION, stream=True))
        assert client.models.list().data[0].id == "scripted"
        assert [headers.get("authorization") for headers in p.upstream.headers] == [f"Bearer {own}"] * 2
        refused = _chat(p.url)  # no key of its own: refused here, the server's key is never used instead
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "missing_api_key"
        assert len(p.upstream.bodies) == 2
        p.state.traces.flush()
    stored = b"".join(f.read_bytes() for f in tmp_path.iterdir() if f.name.startswith("traces.sqlite"))
    assert own.encode() not in stored and b"Bearer" not in stored and b"What is 2+2?" in stored
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert own not in logged and "Bearer" not in logged and "sk-server-key" not in logged


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"forward_client_auth_header": True, "client_keys": "keys.txt"}, "choose one"),
        ({"forward_client_auth_header": True, "api_key": "sk-x"}, "api_key would never be used"),
        ({"forward_client_auth_header": True, "upstream": "llm:llamacpp"}, "needs an HTTP upstream"),
    ],
)
def test_authentication_settings_that_contradict_each_other_are_refused(tmp_path, settings, message):
    base = {"library": write_library(tmp_path / "library.json"), "upstream": "http://127.0.0.1:9/v1"}
    with pytest.raises(ValueError, match=message):
        ServeConfig(**(base | settings))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "no key in the file"),
        ("sha256:abc\n", "line 1: sha256: must be followed by 64 hex digits"),
        ("# header\nsk one two\n", "line 2: a key cannot contain spaces"),
    ],
)
def test_a_bad_client_keys_file_is_one_line(tmp_path, content, message):
    (tmp_path / "keys.txt").write_text(content)
    with pytest.raises(ConfigError, match=message):
        ClientKeys.load(tmp_path / "keys.txt")


def test_client_keys_from_the_command_line_and_a_missing_file(tmp_path):
    library = write_library(tmp_path / "library.json")
    command = [sys.executable, "-m", "tfgrpo", "serve", "--library", str(library), "--upstream"]
    missing = subprocess.run(
        [*command, "http://127.0.0.1:9/v1", "--client-keys", str(tmp_path / "none.txt"), "--traces", "x.sqlite"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert missing.stderr.strip().splitlines() == [
        f"error: client_keys {tmp_path / 'none.txt'}: cannot read it (FileNotFoundError)"
    ]
