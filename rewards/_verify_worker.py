"""What runs in the verifier's processes: a zygote that forks workers, and the workers' math-verify loop.

math-verify's own timeouts use `signal.alarm`, which only works in the main thread; here they are off
(`None`) and the parent enforces the deadline by killing a worker. Killed workers must come back fast,
so the parent starts ONE fresh interpreter, the zygote (`python -m tfgrpo.rewards._verify_worker CONTROL_FD
MEMORY_LIMIT_BYTES`), which imports sympy and math-verify once and then forks a worker per request
(~10 ms instead of ~0.5 s for a new interpreter). The zygote is single-threaded, so forking it is safe,
unlike forking a multi-threaded trainer; and the caller's main script is never re-imported.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import socket
import sys
from multiprocessing.connection import Connection

from math_verify import parse, verify
from sympy import Basic, Expr, Float, I, MatrixBase

from tfgrpo.rewards.verify_processes import READY

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
    if _mentions_i(gold_parsed) or _mentions_i(pred_parsed):
        # math-verify reads `i` as a plain symbol (`i^2` would not be -1); in a final answer it is the
        # imaginary unit, on both sides alike.
        gold_parsed, pred_parsed = _imaginary(gold_parsed), _imaginary(pred_parsed)
    if verify(gold_parsed, pred_parsed, timeout_seconds=None):
        if _exact_numbers_differ(gold_parsed, pred_parsed):
            return False, "not equivalent (exact values differ beyond math-verify's rounding)"
        return True, "equivalent"
    return False, "not equivalent"


def _mentions_i(parsed: list) -> bool:
    return any(isinstance(item, Basic) and any(s.name == "i" for s in item.free_symbols) for item in parsed)


def _imaginary(parsed: list) -> list:
    """Every symbol named `i` replaced by sympy's imaginary unit (the string forms stay as they are)."""
    out = []
    for item in parsed:
        if isinstance(item, Basic):
            item = item.subs({s: I for s in item.free_symbols if s.name == "i"})
        out.append(item)
    return out


EXACT_DIGITS = 40  # significant digits an exact comparison evaluates to


def _exact_numbers_differ(gold_parsed: list, pred_parsed: list) -> bool:
    """math-verify rounds numbers to 6 decimals, so 1/2004! "equals" 1/2005! (both round to 0). When both
    answers are exact numbers (no decimal was written, no symbol), they must agree to EXACT_DIGITS significant
    digits; a written decimal keeps the documented rounding."""
    gold, pred = _exact_number(gold_parsed), _exact_number(pred_parsed)
    if gold is None or pred is None or gold == pred:  # == is sympy's structural (exact) equality
        return False
    gold_value, pred_value = gold.evalf(EXACT_DIGITS), pred.evalf(EXACT_DIGITS)
    scale = max(abs(gold_value), abs(pred_value))
    if not (scale.is_number and scale.is_finite) or scale == 0:
        return False
    return bool(abs(gold_value - pred_value) > scale * 10 ** (5 - EXACT_DIGITS))


def _exact_number(parsed: list) -> Expr | None:
    first = parsed[0] if parsed else None
    if not isinstance(first, Expr) or first.free_symbols or first.has(Float) or not first.is_number:
        return None
    return first if first.is_real else None


def _parse(answer: str) -> list:
    # Wrapping in \boxed{} makes math-verify take the whole string as one answer, not search prose in it.
    parsed = parse("\\boxed{" + answer + "}", parsing_timeout=None)
    return parsed or parse(answer, parsing_timeout=None)


def serve(conn: Connection, memory_limit_bytes: int | None) -> None:
    """Answer (task_id, gold, pred) requests until the connection closes or None arrives."""
    if memory_limit_bytes:
        # A runaway sympy computation should fail with MemoryError here, not swap the machine.
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    conn.send(READY)
    while True:
        try:
            message = conn.recv()
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
        conn.send((task_id, equal, reason))


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the parent dies, so a worker stuck in sympy never outlives its owner."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def zygote(control: socket.socket, memory_limit_bytes: int | None) -> None:
    """Fork one worker per request. A request is one byte carrying the worker's socket (SCM_RIGHTS); the
    reply is the worker's pid in 8 bytes. Ends, killing its workers, when the parent closes the control socket."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps killed workers: no zombies
    children: set[int] = set()
    try:
        while True:
            try:
                _, fds, _, _ = socket.recv_fds(control, 1, 1)
            except OSError:
                return
            if not fds:
                return  # EOF: the parent is done
            pid = os.fork()
            if pid == 0:  # the worker
                control.close()
                _die_with_parent()
                try:
                    serve(Connection(fds[0]), memory_limit_bytes)
                finally:
                    os._exit(0)
            os.close(fds[0])
            children = {child for child in children if _alive(child)} | {pid}
            control.sendall(pid.to_bytes(8, "big"))
    finally:
        for child in children:
            _kill(child)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str]) -> None:
    control_fd, memory_limit = (int(value) for value in argv)
    control = socket.socket(fileno=control_fd)
    # No _die_with_parent() here: Linux sends PDEATHSIG when the *thread* that started us exits (an
    # asyncio.to_thread worker, say), which killed a pool shared by the whole process. The parent's death
    # still ends us: its end of the control socket closes, and the zygote loop returns on EOF.
    # The parent owns timeouts; math-verify's "timeout disabled" warning is expected, not news.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)
    # Warm math-verify's lazy paths once, here, so every forked worker (and every replacement of a killed
    # one) starts warm: the LaTeX parser, an equal and an unequal comparison. Cold, a worker's first unequal
    # comparison takes ~150-180 ms and its first check ~70 ms; warm, ~5 ms (docs/performance.md).
    slow_equivalent("\\frac{\\sqrt{2}}{2}", "\\sqrt{2}/2")
    slow_equivalent("x^2+1", "x^2+2")
    control.sendall(READY.encode())
    zygote(control, memory_limit or None)
    # Its workers are dead and it owns nothing else: skip the interpreter's finalisation, which walks every
    # sympy object (~0.3 s that the parent's close, and so every run's exit, would wait for).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
