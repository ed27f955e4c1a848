"""Errors as the OpenAI API writes them: `{"error": {"message", "type", "param", "code"}}`, on every route.

`type` is the broad class a client branches on (`invalid_request_error` for its own mistakes,
`upstream_error` when the model server failed, `server_error` for the proxy's own); `code` says exactly
what happened (`json_too_deep`, `bad_upstream_body`, ...). Messages never carry a URL: the upstream's
address is internal, and the client is told what failed, not where.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from starlette.responses import JSONResponse

from tfgrpo.core.config import ConfigError

URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"]+", re.IGNORECASE)


class ServeStartupError(ConfigError):
    """serve cannot start (trace store unreachable, port in use, unreadable client keys): one line, exit 2."""


class RequestRejected(Exception):
    """A request the proxy answers with an error of its own (status, one-line message, code)."""

    def __init__(self, status: int, message: str, code: str, *, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        return error_response(self.status, str(self), self.code, headers=self.headers)


def error_type(status: int) -> str:
    if status in (502, 503, 504):
        return "upstream_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def error_payload(status: int, message: str, code: str) -> dict[str, dict[str, str | None]]:
    return {"error": {"message": message, "type": error_type(status), "param": None, "code": code}}


def error_bytes(status: int, message: str, code: str) -> bytes:
    return json.dumps(error_payload(status, message, code)).encode()


def error_response(status: int, message: str, code: str, *, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_payload(status, message, code), status_code=status, headers=headers)


def internal_error(exc: BaseException, hidden: list[str]) -> JSONResponse:
    """A 500 naming the exception and the first line of its message, URLs and `hidden` strings removed."""
    detail = redact(str(exc).splitlines()[0] if str(exc) else "", hidden)
    return error_response(500, f"internal error: {type(exc).__name__}: {detail}", "internal_error")


def redact(text: str, hidden: list[str]) -> str:
    """`text` without URLs and without any of `hidden` (the upstreams' host:port, say)."""
    text = URL.sub("<url>", text)
    for secret in hidden:
        if secret:
            text = text.replace(secret, "<upstream>")
    return text
