"""What the Python sandbox's worker printed during one call: capped (head + tail), sentinel-aware."""

from __future__ import annotations

import asyncio


class OutputCapture:
    """Collects one call's output from the worker's output pipe, up to a size limit (head + tail),
    and notices the end-of-cell sentinel even when the output around it is being dropped."""

    def __init__(self, max_chars: int):
        self.head_cap = max_chars * 3 // 4
        self.tail_cap = max_chars - self.head_cap
        self.done = asyncio.Event()
        self.begin("")

    def begin(self, sentinel: str) -> None:
        self.sentinel = sentinel.encode("ascii")
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.carry = b""
        self.done.clear()

    def feed(self, chunk: bytes) -> None:
        data = self.carry + chunk
        index = data.find(self.sentinel) if self.sentinel else -1
        if index >= 0:
            self._keep(data[:index])
            self.carry = b""
            self.done.set()
            return
        hold = max(len(self.sentinel) - 1, 0)
        if len(data) <= hold:
            self.carry = data
            return
        self._keep(data[: len(data) - hold])
        self.carry = data[len(data) - hold :] if hold else b""

    def flush(self) -> None:
        """End of stream: whatever was held back for sentinel matching is output too."""
        self._keep(self.carry)
        self.carry = b""

    def _keep(self, data: bytes) -> None:
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > self.tail_cap:
            excess = len(self.tail) - self.tail_cap
            self.dropped += excess
            del self.tail[:excess]

    def text(self) -> tuple[str, bool]:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.dropped:
            return head + tail, False
        return f"{head}\n...[{self.dropped} bytes of output omitted]...\n{tail}", True


__all__ = ["OutputCapture"]
