"""The garbage collector during start-up (tfgrpo.core.collector): the `tfgrpo` program runs its start-up
with the collector paused and resumes it, start-up's objects frozen, once learn's first wave is on the wire;
a program that calls the CLI in-process, or disabled the collector itself, keeps its collector as it was."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

from tests.helpers.serve_upstream import ScriptedUpstream, running
from tfgrpo.cli.app import main
from tfgrpo.core.collector import pause_for_startup, paused_for_startup, resume_after_startup

#: `python -m tfgrpo ...` with the collector's state written when the first wave of requests starts (the
#: warm-up's idle watch is created) and when the run returns. Not at the first connect: the SDK's first
#: requests wait on a thread (its platform detection) with the loop idle, and on a loaded host the collector
#: may resume then, before any connection (seen in CI).
RECORDING = """
import gc, json, runpy, sys
from tfgrpo.rollout import warmup
out = sys.argv.pop(1)
seen = {}
start_watch = warmup.WhenIdle.__init__
def at_first_wave(self, *args):
    seen.setdefault("first_wave", {"enabled": gc.isenabled(), "full_collections": gc.get_stats()[2]["collections"]})
    start_watch(self, *args)
warmup.WhenIdle.__init__ = at_first_wave
sys.argv[0] = "tfgrpo"
try:
    runpy.run_module("tfgrpo", run_name="__main__", alter_sys=True)
finally:
    seen["end"] = {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}
    with open(out, "w") as handle:
        json.dump(seen, handle)
"""


def test_learn_starts_without_the_collector_and_resumes_it_with_start_up_frozen(tmp_path):
    upstream = ScriptedUpstream(responder=lambda messages, k: "The answer is \\boxed{4}.")
    record = tmp_path / "collector.json"
    with running(upstream) as base:
        command = [sys.executable, "-c", RECORDING, str(record), "learn", "--data", "easy_train", "--limit", "2"]
        command += ["-G", "2", "--epochs", "1", "--out", str(tmp_path / "run"), "--backend", "openai", "--model", "m"]
        command += ["--base-url", base + "/v1", "--api-key", "x"]
        finished = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-2000:]
    seen = json.loads(record.read_text())
    assert seen["first_wave"] == {"enabled": False, "full_collections": 0}
    assert seen["end"]["enabled"] is True
    assert seen["end"]["frozen"] > 100_000  # the SDK, the CLI and the configs, out of the collector's view


def test_a_command_without_a_wave_resumes_the_collector_when_it_loads(tmp_path):
    code = (
        "import gc, sys\nfrom tfgrpo.core.collector import pause_for_startup\nfrom tfgrpo.cli import lazy\n"
        "pause_for_startup()\nseen = []\nlazy.resume_after_startup = lambda: seen.append(gc.isenabled()) or "
        "__import__('tfgrpo.core.collector', fromlist=['x']).resume_after_startup()\n"
        "from tfgrpo.cli.app import main\nmain(['library', 'show', sys.argv[1]])\n"
        "print(seen, gc.isenabled(), gc.get_freeze_count() > 0)\n"
    )
    library = tmp_path / "lib.json"
    library.write_text('{"version": 1, "experiences": [{"id": "G0", "text": "Check the carry."}]}')
    finished = subprocess.run([sys.executable, "-c", code, str(library)], capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr[-2000:]
    assert finished.stdout.strip().splitlines()[-1] == "[False] True True"


def test_in_process_calls_leave_the_collector_alone(tmp_path):
    library = tmp_path / "lib.json"
    library.write_text('{"version": 1, "experiences": [{"id": "G0", "text": "Check the carry."}]}')
    frozen = gc.get_freeze_count()
    main(["library", "show", str(library)])
    assert gc.isenabled() and gc.get_freeze_count() == frozen and not paused_for_startup()


def test_a_collector_the_program_disabled_stays_disabled():
    gc.disable()
    try:
        pause_for_startup()
        assert not paused_for_startup()
        resume_after_startup()
        assert not gc.isenabled()
    finally:
        gc.enable()
