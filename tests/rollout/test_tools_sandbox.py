"""The sandboxed Python tool: normal use, kept state, and every limit (each shown by a snippet that breaks it).

Isolation differs by machine (namespaces and a private uid need root or user namespaces); every test
runs everywhere, checks the audit-hook guarantees always, and the kernel ones where they apply.
"""

from __future__ import annotations

import asyncio
import glob
import os
import select
import socket
from pathlib import Path

import pytest

from tfgrpo.rollout.tools import sandbox_isolation
from tfgrpo.rollout.tools.base import ToolError
from tfgrpo.rollout.tools.python_sandbox import PythonSandboxConfig, PythonTool, probe_isolation

pytestmark = pytest.mark.timeout(60)

FAST = {"timeout_s": 2.0, "cpu_s": 2.0}


def live_processes(marker: str) -> int:
    """Processes whose command line carries the session id (the worker and anything it forked)."""
    count = 0
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            if marker.encode() in Path(path).read_bytes():
                count += 1
        except OSError:
            continue
    return count


@pytest.fixture(scope="module")
def isolation():
    return probe_isolation("auto")


@pytest.fixture(params=["auto", "process"])
def tool(request):
    """Every limit is checked both with the strongest isolation here and with the plain-process fallback."""
    return PythonTool(isolation=request.param, **FAST)


async def test_runs_code_prints_and_echoes_last_expression():
    result = await PythonTool(**FAST).run({"code": "import math\nprint('hi')\nmath.factorial(10)"})
    assert result.ok, result.error
    assert result.output == "hi\n3628800\n"
    assert not result.truncated and result.elapsed_s > 0


async def test_session_keeps_variables_and_files_between_calls():
    async with PythonTool(**FAST).session() as python:
        assert (await python.run({"code": "x = 6 * 7\nopen('notes.txt', 'w').write('kept')"})).ok
        result = await python.run({"code": "print(x, open('notes.txt').read())"})
    assert result.output == "42 kept\n"


async def test_one_off_run_keeps_nothing_and_cleans_its_directory():
    python = PythonTool(**FAST)
    first = await python.run({"code": "import os\ny = 1\nprint(os.getcwd())"})
    workdir = Path(first.output.strip())
    assert workdir.name.startswith("tfgrpo-sandbox-") and not workdir.exists()
    second = await python.run({"code": "y"})
    assert "NameError" in second.error


async def test_sessions_do_not_share_state():
    python = PythonTool(**FAST)
    async with python.session() as first, python.session() as second:
        await first.run({"code": "z = 'first'"})
        await second.run({"code": "z = 'second'"})
        assert (await first.run({"code": "z"})).output == "'first'\n"
        assert (await second.run({"code": "z"})).output == "'second'\n"


async def test_errors_are_reported_with_the_users_traceback_only():
    async with PythonTool(**FAST).session() as python:
        result = await python.run({"code": "def f():\n    return 1 / 0\nf()"})
        assert "ZeroDivisionError" in result.error and "return 1 / 0" in result.error
        assert "_sandbox_worker" not in result.error
        syntax = await python.run({"code": "def broken(:\n    pass"})
        assert "SyntaxError" in syntax.error
        assert (await python.run({"code": "print('still alive')"})).output == "still alive\n"


async def test_missing_code_argument_is_a_tool_error_not_an_exception():
    result = await PythonTool(**FAST).run({"source": "print(1)"})
    assert not result.ok and "code" in result.error


async def test_infinite_loop_times_out_and_state_survives(tool):
    async with tool.session() as python:
        await python.run({"code": "kept = 'yes'"})
        result = await python.run({"code": "while True:\n    pass"})
        assert not result.ok and ("timed out" in result.error or "CPU time" in result.error)
        assert (await python.run({"code": "kept"})).output == "'yes'\n"


async def test_cpu_time_limit_stops_busy_code_before_the_wall_clock():
    result = await PythonTool(timeout_s=30, cpu_s=1).run({"code": "while True:\n    pass"})
    assert "CPU time limit" in result.error
    assert result.elapsed_s < 30


async def test_code_that_ignores_the_timeout_is_killed_and_the_next_call_restarts():
    code = "import signal, time\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGXCPU})\ntime.sleep(60)"
    async with PythonTool(timeout_s=1, cpu_s=1).session() as python:
        marker = python._session.session_id
        await python.run({"code": "before = 1"})
        result = await python.run({"code": code})
        assert "did not stop" in result.error and "killed" in result.error
        assert live_processes(marker) == 0
        after = await python.run({"code": "print('fresh')\nbefore"})
    assert "restarted" in after.output and "fresh" in after.output
    assert "NameError" in after.error


async def test_ten_gigabyte_allocation_hits_the_memory_limit(tool):
    async with tool.session() as python:
        result = await python.run({"code": "block = bytearray(10 * 1024 ** 3)"})
        assert "MemoryError" in result.error and "memory limit" in result.error
        assert (await python.run({"code": "print(sum(range(10)))"})).output == "45\n"


async def test_socket_to_localhost_never_connects(tool):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'leak')\nprint('connected')"
        result = await tool.run({"code": code})
        assert not result.ok and "connected" not in result.output
        readable, _, _ = select.select([listener], [], [], 0.2)
        assert readable == [], "the sandbox reached a socket on the host"
    finally:
        listener.close()


async def test_network_namespace_has_no_interface_but_loopback(isolation):
    """The kernel layer under the audit hook: inside the namespace only `lo` exists."""
    result = await PythonTool(**FAST).run({"code": "print(open('/proc/net/dev').read())"})
    interfaces = {line.split(":")[0].strip() for line in result.output.splitlines() if ":" in line}
    if isolation.namespaces:
        assert interfaces == {"lo"}
    else:  # no namespaces on this machine: the audit hook is the network guard (other tests)
        assert "lo" in interfaces


async def test_writes_outside_the_working_directory_are_refused(tool, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    outside = tmp_path / "created.txt"
    async with tool.session() as python:
        attempts = [
            f"open({str(outside)!r}, 'w').write('x')",
            f"import os\nos.remove({str(victim)!r})",
            f"import os\nos.rename({str(victim)!r}, 'stolen.txt')",
            f"import pathlib\npathlib.Path({str(victim)!r}).write_text('changed')",
            "open('/tmp/tfgrpo-sandbox-escape.txt', 'w').write('x')",
        ]
        for code in attempts:
            result = await python.run({"code": code})
            assert not result.ok, code
            assert "PermissionError" in result.error, result.error
        inside = await python.run({"code": "open('inside.txt', 'w').write('ok')\nimport os\nsorted(os.listdir('.'))"})
        assert inside.ok and "inside.txt" in inside.output
    assert victim.read_text() == "original"
    assert not outside.exists() and not Path("/tmp/tfgrpo-sandbox-escape.txt").exists()


async def test_code_runs_under_a_private_uid_when_started_as_root(isolation):
    """The kernel layer under the write guard: a private uid owns nothing outside its directory."""
    result = await PythonTool(**FAST).run({"code": "import os\nprint(os.getuid(), os.geteuid())"})
    uids = {int(value) for value in result.output.split()}
    if isolation.private_uid:
        assert 0 not in uids and len(uids) == 1
    elif isolation.namespaces:  # an unprivileged user namespace: the caller's uid mapped to 0
        assert uids == {0}
    else:
        assert uids == {os.getuid()}


async def test_fork_loop_is_refused(tool):
    result = await tool.run({"code": "import os\nwhile True:\n    os.fork()"})
    assert "starting processes is not allowed" in result.error
    result = await tool.run({"code": "import subprocess\nsubprocess.run(['echo', 'hi'])"})
    assert "starting processes is not allowed" in result.error


async def test_forked_children_are_all_killed(isolation):
    """Process creation allowed (the hook off): a bounded fork loop whose children sleep forever.
    RLIMIT_NPROC caps it where the uid is private; closing the session leaves no process behind."""
    code = (
        "import os, time\nforked = 0\n"
        "try:\n    for _ in range(100):\n        if os.fork() == 0:\n            time.sleep(1000)\n            os._exit(0)\n"
        "        forked += 1\nexcept OSError as exc:\n    print('refused:', exc.strerror)\nprint('forked', forked)"
    )
    python_tool = PythonTool(block_processes=False, max_processes=16, **FAST)
    async with python_tool.session() as python:
        marker = python._session.session_id
        await python.run({"code": "1"})
        idle = live_processes(marker)  # the worker (and bwrap's two processes above it)
        result = await python.run({"code": code})
        forked = int(result.output.split("forked")[-1])
        if isolation.private_uid:
            assert forked < 16 and "refused" in result.output
        assert forked >= 1 and live_processes(marker) == idle  # stopped when the cell ended
    assert live_processes(marker) == 0


@pytest.mark.parametrize("level", ["auto", "process"])
async def test_processes_a_cell_started_are_killed_when_it_ends(level):
    """A busy child, a forked copy and an orphan that left the process group: none outlives its cell."""
    python_tool = PythonTool(isolation=level, block_processes=False, **FAST)
    async with python_tool.session() as python:
        marker = python._session.session_id
        await python.run({"code": "1"})
        idle = live_processes(marker)
        code = (
            f"import os, subprocess, sys\nsubprocess.Popen([sys.executable, '-c', 'while True: pass', '{marker}'])\n"
            "if os.fork() == 0:\n    if os.fork() == 0:\n        os.setsid()\n        while True:\n            pass\n"
            "    os._exit(0)\nprint('started')"
        )
        assert (await python.run({"code": code})).output == "started\n"
        assert live_processes(marker) == idle
        assert (await python.run({"code": "print('next call')"})).output == "next call\n"


BURNING_THREAD = (
    "import threading\ndef burn():\n    while True:\n        pass\nthreading.Thread(target=burn, daemon=True).start()"
)


async def test_a_thread_left_running_stops_when_its_cell_ends(tool):
    """The worker's CPU time between two calls, one second apart, after a cell left a busy thread."""
    async with tool.session() as python:
        assert (await python.run({"code": "kept = 'yes'\n" + BURNING_THREAD})).ok
        first = await python.run({"code": "import time\ntime.process_time()"})
        await asyncio.sleep(1.0)
        second = await python.run({"code": "import threading\nprint(threading.active_count())\ntime.process_time()"})
        threads, cpu = second.output.split()
        assert threads == "1"
        assert float(cpu) - float(first.output) < 0.2  # a thread left running burned ~1 s here
        assert (await python.run({"code": "kept"})).output == "'yes'\n"


async def test_a_thread_that_will_not_stop_restarts_the_interpreter():
    """A thread busy in native code (which lets go of the GIL) never reaches an instruction that could stop it."""
    code = (
        "import hashlib, threading, time\nin_native_code = threading.Event()\n"
        "def burn():\n    in_native_code.set()\n    hashlib.pbkdf2_hmac('sha256', b'key', b'salt', 10 ** 9)\n"
        "threading.Thread(target=burn, daemon=True).start()\nin_native_code.wait()\ntime.sleep(0.2)\nprint('started')"
    )
    async with PythonTool(**FAST).session() as python:
        marker = python._session.session_id
        await python.run({"code": "before = 1"})
        result = await python.run({"code": code})
        assert result.output == "started\n"
        assert "thread(s) running that did not stop" in result.error and "killed" in result.error
        assert live_processes(marker) == 0
        after = await python.run({"code": "print('fresh')\nbefore"})
    assert "restarted" in after.output and "fresh" in after.output and "NameError" in after.error


@pytest.mark.parametrize("level", ["auto", "namespace"])
async def test_disk_quota_stops_the_code_and_spares_the_host_disk(level):
    """Files each under max_file_mb, together past max_disk_mb: ENOSPC in the cell, the worker lives on."""
    python_tool = PythonTool(isolation=level, max_disk_mb=16, max_file_mb=4, timeout_s=10, cpu_s=10)
    isolation = python_tool.isolation()  # CI's machine has bubblewrap and `unshare`: a refusal here fails
    assert isolation.disk_quota, isolation.describe()
    code = (
        "written = 0\nfor i in range(100):\n    with open(f'part{i}', 'wb') as part:\n"
        "        for _ in range(4):\n            part.write(bytes(1 << 20))\n            written += 1"
    )
    async with python_tool.session() as python:
        result = await python.run({"code": code})
        host_folder = Path(python._session.workdir)
        written = await python.run({"code": "print(written)"})
        on_host = sum(path.stat().st_size for path in host_folder.rglob("part*"))
    assert "OSError" in result.error and "No space left on device" in result.error, result.error
    assert 12 <= int(written.output) <= 16
    assert on_host == 0


async def test_the_process_level_caps_each_file_and_says_it_has_no_total_cap():
    """`process` has no mount namespace for a tmpfs (docs/security.md): it says so, and RLIMIT_FSIZE still
    stops one file at max_file_mb (the write fails in the cell; the worker lives on)."""
    python_tool = PythonTool(isolation="process", max_disk_mb=16, max_file_mb=2, timeout_s=10, cpu_s=10)
    isolation = python_tool.isolation()
    assert not isolation.disk_quota and "per-file size limit only (no total cap)" in isolation.describe()
    code = "with open('big', 'wb') as big:\n    for _ in range(8):\n        big.write(bytes(1 << 20))"
    async with python_tool.session() as python:
        result = await python.run({"code": code})
        host_file = Path(python._session.workdir) / "big"
        size = host_file.stat().st_size
        after = await python.run({"code": "print('alive')"})
    assert "File too large" in result.error or "OSError" in result.error, result.error
    assert size <= 2 * 1024 * 1024
    assert after.output == "alive\n"


async def test_a_bwrap_without_size_keeps_bubblewrap_and_says_the_quota_is_missing(monkeypatch, caplog):
    """bwrap < 0.7 (no `--size`): bubblewrap's isolation stays (far stronger than a fallback), unquoted."""
    probe = sandbox_isolation.probe_bubblewrap

    def old_bwrap(python, user_namespace, *, disk_quota=False):
        return "bwrap: Unknown option --size" if disk_quota else probe(python, user_namespace)

    monkeypatch.setattr(sandbox_isolation, "probe_bubblewrap", old_bwrap)
    python_tool = PythonTool(**FAST)
    if not python_tool.isolation().bubblewrap:
        pytest.skip("no bubblewrap on this machine")
    assert not python_tool.isolation().disk_quota and "(no disk quota)" in python_tool.describe()
    assert "max_disk_mb is not enforced" in caplog.text
    assert (await python_tool.run({"code": "open('f', 'w').write('x')\nprint('ok')"})).output == "ok\n"


async def test_ctypes_cannot_reach_native_functions():
    result = await PythonTool(**FAST).run({"code": "import ctypes\nctypes.CDLL(None).fork()"})
    assert "ctypes" in result.error


async def test_long_output_is_truncated_keeping_head_and_tail():
    code = "print('START')\nfor i in range(20000):\n    print('line', i)\nprint('END')"
    result = await PythonTool(max_output_chars=1000, **FAST).run({"code": code})
    assert result.ok and result.truncated
    assert result.output.startswith("START") and result.output.rstrip().endswith("END")
    assert "omitted" in result.output and len(result.output) < 1200


async def test_output_of_a_killed_cell_is_kept():
    code = "import signal, time\nprint('partial', flush=True)\nsignal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGXCPU})\ntime.sleep(60)"
    result = await PythonTool(timeout_s=1, cpu_s=1).run({"code": code})
    assert "partial" in result.output and "killed" in result.error


async def test_hard_exit_is_reported():
    result = await PythonTool(**FAST).run({"code": "import os\nos._exit(3)"})
    assert "exited with status 3" in result.error


def test_bad_options_name_the_key():
    with pytest.raises(ToolError, match="timeout_s"):
        PythonTool(timeout_s=-1)
    with pytest.raises(ToolError, match="unknown key 'colour'"):
        PythonTool(colour="red")
    assert PythonTool(PythonSandboxConfig(memory_mb=512)).config.memory_mb == 512
    with pytest.raises(ToolError, match="raise max_disk_mb or lower max_file_mb"):
        PythonTool(max_file_mb=128, max_disk_mb=64)


async def test_a_missing_interpreter_is_a_configuration_error(tmp_path):
    with pytest.raises(ToolError, match="cannot start the interpreter"):
        await PythonTool(python=str(tmp_path / "no-python"), isolation="process").run({"code": "1"})


def test_describe_names_the_layers(isolation):
    text = PythonTool().describe()
    assert ("network namespace" in text) == isolation.namespaces
    assert ("private uid" in text) == isolation.private_uid
