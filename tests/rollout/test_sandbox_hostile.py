"""Hostile model code against the bubblewrap sandbox (the python tool and the code reward).

A host process stands in for `tfgrpo learn --api-key sk-...` (the secret on its command line and in
its environment); files stand in for ~/.netrc, a token under ~/.cache and a run directory. The hostile
code lists every /proc/*/cmdline and environ, reads those files and /etc/shadow, and signals its parent
and the host process: nothing may come back. Under the old unshare design (host /proc) these fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tfgrpo.rewards.code import CodeReward, resolve_sandbox
from tfgrpo.rewards.isolation import bwrap_command
from tfgrpo.rollout.tools.python_sandbox import PythonTool, probe_isolation

pytestmark = pytest.mark.timeout(120)

SECRET = "sk-test-hostile-0123456789abcdef"


@pytest.fixture()
def secrets_on_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A live process with the secret in argv and environ, a fake home and a run directory."""
    monkeypatch.setenv("TFGRPO_TEST_API_KEY", SECRET)
    home = tmp_path / "home"
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".netrc").write_text(f"machine api.example.com login me password {SECRET}\n")
    (home / ".netrc").chmod(0o600)
    (home / ".cache" / "huggingface" / "token").write_text(SECRET)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(f"model: m\napi_key: {SECRET}\n")
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)", "--api-key", SECRET],
        env={"OPENAI_API_KEY": SECRET, "PATH": "/usr/bin"},
    )
    try:
        yield {
            "files": [
                home / ".netrc",
                home / ".cache" / "huggingface" / "token",
                run_dir / "config.yaml",
                Path("/etc/shadow"),
            ],
            "dirs": [home, run_dir],
            "pid": process.pid,
            "process": process,
        }
    finally:
        process.kill()
        process.wait()


def hostile_code(target: dict) -> str:
    return textwrap.dedent(f"""
        import glob, os, signal
        found = []
        for path in glob.glob('/proc/*/cmdline') + glob.glob('/proc/*/environ') + glob.glob('/proc/*/task/*/environ'):
            try:
                found.append(open(path, 'rb').read().decode('utf-8', 'replace'))
            except OSError as exc:
                found.append('denied ' + path)
        for path in {[str(p) for p in target["files"]]!r}:
            try:
                found.append(open(path).read())
            except OSError as exc:
                found.append('unreadable ' + type(exc).__name__)
        for folder in {[str(p) for p in target["dirs"]]!r} + [os.path.expanduser('~')]:
            try:
                found.append(' '.join(os.listdir(folder)))
            except OSError as exc:
                found.append('unlistable ' + type(exc).__name__)
        for pid, sig in ((os.getppid(), signal.SIGKILL), ({target["pid"]}, signal.SIGKILL)):
            try:
                os.kill(pid, sig)
                found.append(f'signalled {{pid}}')
            except OSError as exc:
                found.append('kill refused ' + type(exc).__name__)
        print('\\n'.join(found))
    """)


def test_bubblewrap_is_what_auto_picks_here():
    """CI installs bubblewrap (scripts/install.sh): auto must not fall back there."""
    assert probe_isolation("auto").level == "bubblewrap"
    assert resolve_sandbox("auto") == "bubblewrap"


async def test_python_tool_leaks_no_secret_and_cannot_signal(secrets_on_host):
    tool = PythonTool(isolation="bubblewrap", block_processes=False, timeout_s=20, cpu_s=20)
    async with tool.session() as python:
        result = await python.run({"code": hostile_code(secrets_on_host)})
        output = (result.output or "") + (result.error or "")
        assert "kill refused" in output, output  # the code ran to the end
        assert SECRET not in output
        assert "api-key" not in output and "OPENAI_API_KEY" not in output
        assert f"signalled {secrets_on_host['pid']}" not in output
        # only the sandbox's own processes exist: its init (pid 1) and the worker
        listing = await python.run({"code": "import os\nsorted(int(p) for p in os.listdir('/proc') if p.isdigit())"})
        assert eval(listing.output) == [1, 2]
        alive = await python.run({"code": "print('still here')"})
        assert alive.output == "still here\n"
    assert secrets_on_host["process"].poll() is None, "the sandbox killed a host process"


async def test_python_tool_sees_no_home_run_dir_or_etc(secrets_on_host):
    code = (
        "import os, json\nprint(json.dumps([sorted(os.listdir('/')), sorted(os.listdir('/etc')), os.environ['HOME']]))"
    )
    result = await PythonTool(isolation="bubblewrap", timeout_s=20, cpu_s=20).run({"code": code})
    assert result.ok, result.error
    top, etc, home = json.loads(result.output)
    assert "home" not in top and set(etc) <= {"ld.so.cache", "ld.so.conf"}
    assert home.startswith("/tmp/tfgrpo-sandbox-")


def test_code_reward_leaks_no_secret_and_cannot_signal(secrets_on_host):
    # the candidate raises with what it found: the failure reason is what reaches the logs
    code = hostile_code(secrets_on_host).replace("print('\\n'.join(found))", "raise RuntimeError('|'.join(found))")
    reward = CodeReward(sandbox="bubblewrap", timeout_s=20)
    [score] = reward.score([f"```python\n{code}\n```"], tests=[["assert True"]])
    assert score.value == 0.0 and "RuntimeError" in score.reason, score.reason
    assert SECRET not in score.reason and "api-key" not in score.reason
    assert secrets_on_host["process"].poll() is None, "the sandbox killed a host process"


def test_code_reward_reports_what_it_found_in_full(secrets_on_host):
    """The same probe, one target per candidate, so no cut of the failure reason hides a leak."""
    targets = [f"open({str(p)!r}).read()" for p in secrets_on_host["files"]]
    targets += [
        f"open('/proc/{secrets_on_host['pid']}/cmdline').read()",
        f"open('/proc/{secrets_on_host['pid']}/environ').read()",
        "[open(p).read() for p in __import__('glob').glob('/proc/*/cmdline')]",
    ]
    reward = CodeReward(sandbox="bubblewrap", timeout_s=20)
    scores = reward.score(
        ["```python\nx = 1\n```"] * len(targets),
        tests=[[f"assert False, repr({target})[-150:]"] for target in targets],
    )
    for target, score in zip(targets, scores, strict=False):
        assert score.value == 0.0, target
        assert SECRET not in score.reason and "api-key" not in score.reason, (target, score.reason)


def test_code_reward_still_scores_honest_code_under_bubblewrap():
    reward = CodeReward(sandbox="bubblewrap", timeout_s=20)
    [score] = reward.score(
        ["```python\ndef add(a, b):\n    return a + b\n```"],
        tests=[["assert add(1, 2) == 3", "assert add(2, 2) == 5"]],
    )
    assert score.value == 0.5, score.reason


@pytest.mark.parametrize("user_namespace", [False, True], ids=["root", "user-namespace"])
def test_disk_quota_leaves_only_the_capped_work_dir_writable(tmp_path: Path, user_namespace: bool):
    """The kernel layer, no audit hook (a shell does the writing): with a quota, bwrap's own root, /tmp
    and /dev/shm (writable by the sandbox uid under a user namespace) refuse writes, the work dir takes
    4 MiB and then ENOSPC, and the host folder of that path receives nothing."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    quota = 4 * 1024 * 1024
    command = bwrap_command(
        sys.executable, workdir=str(workdir), user_namespace=user_namespace, disk_quota_bytes=quota
    )
    script = (
        "for d in / /tmp /dev /dev/shm /usr; do touch $d/probe 2>/dev/null && echo writable $d; done; "
        f"cd {workdir} && dd if=/dev/zero of=fill bs=1M count=16 2>&1 | head -1; wc -c < fill"
    )
    result = subprocess.run([*command, "/bin/sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert "writable" not in result.stdout, result.stdout
    assert "No space left on device" in result.stdout, result.stdout + result.stderr
    assert int(result.stdout.split()[-1]) == quota
    assert list(workdir.iterdir()) == []
