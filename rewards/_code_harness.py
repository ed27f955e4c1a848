"""Runs the row's tests in their own sandboxed process; the candidate's program runs in another one.

Usage: python -I _code_harness.py REQUEST_FD REPLY_FD MEMORY_BYTES CPU_SECONDS
stdin: {"tests": [...], "nonce": "..."}; stdout: one verdict line per test, "NONCE INDEX PASS|FAIL reason".

Each name the program defined is, in the tests' namespace, either its plain value or a `CandidateObject`
whose calls go over a pipe to the candidate's process and come back as plain values (`_code_wire`). So the
tests' own code (asserts, comparisons, loops) runs here, out of the program's reach: it cannot rewrite
`assert`, print a verdict, exit early with success or read the expected values. It can only return values.
"""

import builtins
import importlib.util
import json
import os
import sys
from types import ModuleType


def _load_wire() -> ModuleType:
    """`_code_wire` from beside this file, by path: putting this folder on sys.path would let the project's
    own modules (rewards/math.py) shadow the standard library's for the code under test."""
    path = os.path.join(os.path.dirname(__file__), "_code_wire.py")
    spec = importlib.util.spec_from_file_location("_code_wire", path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wire = _load_wire()


class CandidateError(Exception):
    """An exception the program raised whose type is not one of Python's own."""


class CandidateGone(Exception):
    """The candidate's process ended or sent something that is not a reply; every later call fails too."""


class Candidate:
    """The pipe pair to the candidate's process."""

    def __init__(self, requests, replies) -> None:
        self.requests, self.replies = requests, replies
        self.objects: dict[int, CandidateObject] = {}
        self.broken: str | None = None

    def ask(self, request: dict):
        if self.broken:
            raise CandidateGone(self.broken)
        try:
            wire.send(self.requests, request)
            reply = wire.receive(self.replies)
            if "raised" in reply:
                raise _exception(reply)
            return wire.decode(reply.get("value"), self.resolve)
        except (wire.WireError, OSError, RecursionError) as exc:
            self.broken = f"the candidate's process did not answer: {exc}"
            raise CandidateGone(self.broken) from None

    def resolve(self, tag: str, payload):
        if tag == "$module":
            name = str(payload)
            if name.split(".")[0] not in sys.stdlib_module_names:
                raise wire.WireError(f"module {name[:60]!r} is not in the standard library")
            return __import__(name, fromlist=["_"])
        if not isinstance(payload, int) or isinstance(payload, bool):
            raise wire.WireError("a malformed reference")
        return self.objects.setdefault(payload, CandidateObject(self, payload))

    def encode(self, value):
        def ref(obj) -> int:
            if isinstance(obj, CandidateObject) and obj._candidate is self:
                return obj._ref
            raise wire.WireError(f"a {type(obj).__name__} cannot be passed to the candidate's program")

        return wire.encode(value, ref)


class CandidateObject:
    """A function, class or object that lives in the candidate's process.

    It compares by identity only: its own `__eq__` runs in the candidate's process, so it cannot decide a test."""

    def __init__(self, candidate: Candidate, ref: int) -> None:
        self._candidate, self._ref = candidate, ref

    def __call__(self, *args, **kwargs):
        encoded_args = self._candidate.encode(list(args))
        encoded_kwargs = self._candidate.encode(dict(kwargs))
        return self._candidate.ask({"op": "call", "ref": self._ref, "args": encoded_args, "kwargs": encoded_kwargs})

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._candidate.ask({"op": "getattr", "ref": self._ref, "name": name})

    def __iter__(self):
        return iter(self._candidate.ask({"op": "iter", "ref": self._ref}))

    def __repr__(self) -> str:
        return f"<candidate object #{self._ref}>"


def _exception(reply: dict) -> BaseException:
    name, message = str(reply.get("raised"))[:100], str(reply.get("message"))[:500]
    builtin = getattr(builtins, name, None)
    if isinstance(builtin, type) and issubclass(builtin, Exception):
        return builtin(message)
    return CandidateError(f"{name}: {message}")


def _disable_dumping() -> None:
    """No process of our uid may ptrace this one or open its /proc files (fds, memory)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        pass


def _limit(memory_bytes: int, cpu_seconds: int) -> None:
    import resource

    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def main(request_fd: str, reply_fd: str, memory: str, cpu: str) -> None:
    _disable_dumping()
    sys.set_int_max_str_digits(0)
    job = json.loads(sys.stdin.read())
    tests, nonce = job["tests"], job["nonce"]
    verdicts = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the tests' own prints cannot reach the verdicts
    _limit(int(memory), int(cpu))
    candidate = Candidate(os.fdopen(int(request_fd), "wb"), os.fdopen(int(reply_fd), "rb"))
    namespace: dict = {"__name__": "__test__"}
    try:
        hello = wire.receive(candidate.replies)
        if "error" in hello:
            raise CandidateError(f"solution: {str(hello['error'])[:300]}")
        for name, encoded in dict(hello.get("names", {})).items():
            try:
                namespace[str(name)] = wire.decode(encoded, candidate.resolve)
            except (wire.WireError, RecursionError, TypeError):
                continue
    except (wire.WireError, CandidateError) as exc:
        for index in range(len(tests)):
            verdicts.write(f"{nonce} {index} FAIL {exc}\n".replace("\n", " ").rstrip() + "\n")
        return
    for index, test in enumerate(tests):
        try:
            exec(compile(test, f"test_{index}", "exec"), dict(namespace))
            verdicts.write(f"{nonce} {index} PASS\n")
        except BaseException as exc:  # noqa: BLE001 -- a failing test is a result
            reason = f"test {index}: {type(exc).__name__}: {str(exc)[:200]!r}"
            verdicts.write(f"{nonce} {index} FAIL {reason}\n")


if __name__ == "__main__":
    main(*sys.argv[1:5])
