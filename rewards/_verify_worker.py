"""What runs inside a verifier worker process: math-verify parsing and comparison, with no timeout of its own.

math-verify's own timeouts use `signal.alarm`, which only works in the main thread; here they are off
(`None`) and the parent enforces the deadline by killing this process. Started as
`python -m rewards._verify_worker READ_FD WRITE_FD MEMORY_LIMIT_BYTES` (a fresh interpreter: no fork of a
multi-threaded trainer, no re-import of the caller's main script).
"""

from __future__ import annotations

import logging
import resource
import sys
from multiprocessing.connection import Connection

from math_verify import parse, verify
from sympy import Basic, MatrixBase

from rewards.verifier import READY

# Verdict wire format: (task_id, equal: bool | None, reason: str); equal=None means the gold is unusable.


def slow_equivalent(gold: str, pred: str) -> tuple[bool | None, str]:
    """Compare two normalised answers with math-verify (gold first: `verify` is asymmetric)."""
    gold_parsed = _parse(gold)
    if not any(isinstance(item, (Basic, MatrixBase)) for item in gold_parsed):
        # math-verify falls back to the raw string; a gold that is not math cannot judge a wrong answer
        if gold.strip() and gold.strip() == pred.strip():
            return True, "equivalent (same text)"
        return None, "gold answer could not be parsed as math"
    pred_parsed = _parse(pred)
    if not pred_parsed:
        return False, "answer could not be parsed as math"
    if verify(gold_parsed, pred_parsed, timeout_seconds=None):
        return True, "equivalent"
    return False, "not equivalent"


def _parse(answer: str) -> list:
    # Wrapping in \boxed{} makes math-verify take the whole string as one answer, not search prose in it.
    parsed = parse("\\boxed{" + answer + "}", parsing_timeout=None)
    return parsed or parse(answer, parsing_timeout=None)


def serve(requests: Connection, replies: Connection, memory_limit_bytes: int | None) -> None:
    """Answer (task_id, gold, pred) requests until the pipe closes or None arrives."""
    if memory_limit_bytes:
        # A runaway sympy computation should fail with MemoryError here, not swap the machine.
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    # The parent owns timeouts; math-verify's "timeout disabled" warning is expected, not news.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)
    _parse("1")  # warm up the LaTeX parser so the first real task is not slower than the rest
    replies.send(READY)
    while True:
        try:
            message = requests.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        task_id, gold, pred = message
        try:
            equal, reason = slow_equivalent(gold, pred)
        except MemoryError:
            equal, reason = False, "verification ran out of memory"
        except Exception as exc:  # noqa: BLE001 -- sympy raises anything; the reason goes back to the caller
            equal, reason = False, f"verification failed: {type(exc).__name__}"
        replies.send((task_id, equal, reason))


def main(argv: list[str]) -> None:
    read_fd, write_fd, memory_limit = (int(value) for value in argv)
    serve(Connection(read_fd, writable=False), Connection(write_fd, readable=False), memory_limit or None)


if __name__ == "__main__":
    main(sys.argv[1:])
