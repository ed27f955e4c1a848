"""uvicorn's httptools protocol with the request head bounded while it arrives: bytes and time.

uvicorn hands a request to the app only once its headers are complete, and bounds neither how many bytes
a head may take to get there (header lines without the blank line that ends them are parsed and kept,
hundreds of megabytes of them) nor how long (a header line every few seconds holds the connection
forever). The app's own check (`limits.check_head`) sees only complete heads; this protocol refuses a head
as soon as it passes `max_header_bytes` (431) or has not been completed within `header_timeout_s` of the
connection being ready for it (408), in serve's OpenAI error shape, and closes the connection. A
connection that sends nothing within the deadline is closed without an answer.

The limits travel on the uvicorn config (`BoundedHeadConfig`), which is what uvicorn hands each protocol
and what it pickles into spawned workers.
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tfgrpo.serve.errors import error_bytes


class BoundedHeadConfig(uvicorn.Config):
    def __init__(self, app: Any, *, max_header_bytes: int, header_timeout_s: float, **kwargs: Any):
        super().__init__(app, http=BoundedHeadProtocol, **kwargs)
        self.max_header_bytes = max_header_bytes
        self.header_timeout_s = header_timeout_s


class BoundedHeadProtocol(HttpToolsProtocol):
    def __init__(self, config: BoundedHeadConfig, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.max_head_bytes = config.max_header_bytes
        self.head_timeout_s = config.header_timeout_s
        self.head_bytes = 0
        self.reading_head = False
        self.head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_clock()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.reading_head:
            super().data_received(data)
            return
        room = self.max_head_bytes - self.head_bytes
        self.head_bytes += min(len(data), room + 1)
        # Only the head's share is fed while the head is incomplete: the parser never holds more of it.
        super().data_received(data[: room + 1])
        if self.transport.is_closing():  # the parser refused the head (400) and closed
            return
        if self.reading_head and self.head_bytes > self.max_head_bytes:
            message = f"request line and headers over {self.max_head_bytes} bytes (max_header_bytes)"
            self._refuse(431, message, "headers_too_large")
        elif not self.reading_head and len(data) > room + 1:
            super().data_received(data[room + 1 :])  # the body's first bytes, after a head that fit

    def on_headers_complete(self) -> None:
        self._stop_head_clock()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)  # a next request whose head already came: uvicorn starts it now
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._expect_head()  # keep-alive: the next request's head is bounded the same way

    def _expect_head(self) -> None:
        self._stop_head_clock()
        self.reading_head, self.head_bytes = True, 0
        self.head_deadline = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _stop_head_clock(self) -> None:
        self.reading_head = False
        if self.head_deadline is not None:
            self.head_deadline.cancel()
            self.head_deadline = None

    def _head_timed_out(self) -> None:
        self.head_deadline = None
        if self.transport.is_closing():
            return
        if self.head_bytes == 0:  # an idle connection: nothing to answer
            self.transport.close()
            return
        message = f"request line and headers not received within {self.head_timeout_s:g}s"
        self._refuse(408, message + " (header_timeout_s)", "header_timeout")

    def _refuse(self, status: int, message: str, code: str) -> None:
        self._stop_head_clock()
        body = error_bytes(status, message, code)
        reason = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}[status]
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, reason, len(body), body)
        )
        self.transport.close()
