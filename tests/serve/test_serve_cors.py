"""CORS of `tfgrpo serve` (Starlette's middleware): off by default, the listed origins only when set,
preflights answered before the client-key check, our headers readable by a browser script."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from tests.helpers.serve_fixtures import proxy
from tfgrpo.core.config import ConfigError, build_config
from tfgrpo.serve.config import ServeConfig

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
APP = "https://app.example.com"
PREFLIGHT = {
    "origin": APP,
    "access-control-request-method": "POST",
    "access-control-request-headers": "authorization, content-type, x-tfgrpo-user",
}


def _chat(url: str, **headers: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION}, headers=headers)


def test_without_origins_no_cors_header_is_sent(tmp_path):
    with proxy(tmp_path) as p:
        answer = _chat(p.url, origin=APP)
        assert answer.status_code == 200
        assert "access-control-allow-origin" not in answer.headers
        preflight = httpx.options(p.url + "/v1/chat/completions", headers=PREFLIGHT)
        assert "access-control-allow-origin" not in preflight.headers


def test_a_listed_origin_is_allowed_and_reads_our_headers_another_is_not(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tfgrpo.serve")
    keys = tmp_path / "keys.txt"
    keys.write_text("sk-browser-client-0001\n")
    with proxy(tmp_path, cors_origins=[APP], client_keys=str(keys)) as p:
        # the preflight carries no key: answered before the key check, never a 401
        preflight = httpx.options(p.url + "/v1/chat/completions", headers=PREFLIGHT)
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == APP
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()

        answer = _chat(p.url, origin=APP, authorization="Bearer sk-browser-client-0001")
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == APP
        exposed = answer.headers["access-control-expose-headers"].lower()
        assert "x-tfgrpo-exchange-id" in exposed and "x-tfgrpo-arm" in exposed

        refused = _chat(p.url, origin=APP)  # no key: the 401 still reaches the browser, with the CORS header
        assert refused.status_code == 401 and refused.headers["access-control-allow-origin"] == APP

        stranger = httpx.options(
            p.url + "/v1/chat/completions", headers={**PREFLIGHT, "origin": "https://evil.example.net"}
        )
        assert stranger.status_code == 400 and "access-control-allow-origin" not in stranger.headers
        other = _chat(p.url, origin="https://evil.example.net", authorization="Bearer sk-browser-client-0001")
        assert "access-control-allow-origin" not in other.headers

    # every request, the preflights too, is one access-log line
    access = [json.loads(r.getMessage()) for r in caplog.records if r.name.startswith("tfgrpo.serve")]
    statuses = [(line["method"], line["status"]) for line in access if line["event"] == "access"]
    assert statuses == [("OPTIONS", 200), ("POST", 200), ("POST", 401), ("OPTIONS", 400), ("POST", 200)]


@pytest.mark.parametrize("origin", ["app.example.com", "https://app.example.com/page", "ftp://x"])
def test_an_origin_that_is_not_one_is_refused_in_one_line(tmp_path, origin):
    with pytest.raises(ConfigError, match="cors origin"):
        overrides = {"library": str(tmp_path / "l.json"), "upstream": ["http://127.0.0.1:1/v1"]}
        build_config(ServeConfig, None, {**overrides, "cors_origins": [origin]})
