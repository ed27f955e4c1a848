"""Runs inside the candidate's sandbox: load the completion's program, then answer the test harness's calls.

Usage: python -I _code_candidate.py SOLUTION.py REQUEST_FD REPLY_FD MEMORY_BYTES CPU_SECONDS MAX_PROCESSES [UID]

Nothing this process says is a verdict: it only returns values (`_code_wire`) for the calls the harness
asks for, and the harness, a process this one cannot reach, runs the tests on them. Whatever the program
does to this process (rewrite builtins, write to its pipes, exit early) changes only the values it returns.
"""

import importlib
import importlib.util
import itertools
import os
import resource
import sys
from types import ModuleType
from typing import Any


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

#: most items a returned iterator is read for (an endless generator must not hang the harness)
MAX_ITEMS = 1_000_000


def _drop_to(uid: int) -> None:
    """Root under bubblewrap without a user namespace: become a private uid, so RLIMIT_NPROC counts only ours."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def _limit(memory_bytes: int, cpu_seconds: int, max_processes: int) -> None:
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 1024 * 1024, 16 * 1024 * 1024))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if max_processes > 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (max_processes, max_processes))


class Objects:
    """What the harness holds by reference: the program's functions, classes and the objects they return."""

    def __init__(self) -> None:
        self.items: list[object] = []

    def ref(self, value: object) -> int:
        self.items.append(value)
        return len(self.items) - 1

    def resolve(self, tag: str, payload: object) -> object:
        if tag == "$module":
            return importlib.import_module(str(payload))
        if not isinstance(payload, int) or not 0 <= payload < len(self.items):
            raise wire.WireError("an unknown reference")
        return self.items[payload]


def _answer(request: dict, objects: Objects) -> dict:
    target: Any = objects.resolve("$ref", request.get("ref"))
    operation = request.get("op")
    if operation == "call":
        args = wire.decode(request.get("args", []), objects.resolve)
        kwargs = dict(wire.decode(request.get("kwargs", {"$dict": []}), objects.resolve))
        value = target(*args, **kwargs)
    elif operation == "getattr":
        value = getattr(target, str(request.get("name")))
    elif operation == "iter":
        value = list(itertools.islice(target, MAX_ITEMS + 1))
        if len(value) > MAX_ITEMS:
            raise ValueError(f"the iterator yields more than {MAX_ITEMS} items")
    else:
        raise wire.WireError(f"an unknown operation {operation!r}")
    return {"value": wire.encode(value, objects.ref)}


def _program_names(namespace: dict, objects: Objects) -> dict:
    names = {}
    for name, value in namespace.items():
        if name.startswith("__"):
            continue
        try:
            names[name] = wire.encode(value, objects.ref)
        except (wire.WireError, RecursionError):
            continue
    return names


def main(solution_path: str, request_fd: str, reply_fd: str, memory: str, cpu: str, processes: str, *uid: str) -> None:
    sys.set_int_max_str_digits(0)
    if uid:
        _drop_to(int(uid[0]))
    os.chdir(os.path.dirname(solution_path))  # the private working directory (only its uid may enter it)
    with open(solution_path, encoding="utf-8") as f:
        solution = f.read()
    requests = os.fdopen(int(request_fd), "rb")
    replies = os.fdopen(int(reply_fd), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # the program's prints go nowhere; its replies go only through `replies`
    _limit(int(memory), int(cpu), int(processes))
    objects = Objects()
    namespace: dict = {"__name__": "__solution__"}
    try:
        exec(compile(solution, "solution.py", "exec"), namespace)
        hello: dict[str, Any] = {"names": _program_names(namespace, objects)}
    except BaseException as exc:  # noqa: BLE001 -- any failure of untrusted code is a result, not a crash
        hello = {"error": f"{type(exc).__name__}: {str(exc)[:200]!r}"}
    wire.send(replies, hello)
    if "error" in hello:
        return
    while True:
        try:
            request = wire.receive(requests)
        except wire.WireError:
            return  # the harness is done
        try:
            reply = _answer(request, objects)
        except BaseException as exc:  # noqa: BLE001
            reply = {"raised": type(exc).__name__, "message": str(exc)[:500]}
        wire.send(replies, reply)


if __name__ == "__main__":
    main(*sys.argv[1:])
