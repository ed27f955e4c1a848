"""`tfgrpo learn` end to end: the CLI through the `openai` backend against a local OpenAI-compatible
server answering from the scripted world, the example configs, bad input, and the real SmolLM2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.helpers.learn_world import World, WorldServer, read_jsonl, write_problems
from tfgrpo.cli.app import app, main
from tfgrpo.core.config import build_config
from tfgrpo.learn.config import LearnConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.timeout(180)
def test_cli_learn_through_the_openai_backend(tmp_path):
    data = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4)])
    out = tmp_path / "run"
    with WorldServer(World()) as server:
        options = ("-G", "2", "--epochs", "1", "--batch-size", "1", "--concurrency", "8", "--max-tokens", "64")
        result = CliRunner().invoke(app, server.learn_args(data, out, *options, api_key="sk-test-secret"))
        assert result.exit_code == 0, result.output
        requests_made = len(server.bodies)
        assert requests_made > 0 and {b["model"] for b in server.bodies} == {"world-model"}
        assert {b["max_tokens"] for b in server.bodies if b["temperature"] == 0.7} == {64}

        library = json.loads((out / "library.json").read_text())
        assert sorted(e["text"] for e in library["experiences"]) == [
            "When adding 1 and 2, check the carry.",
            "When adding 3 and 4, check the carry.",
        ]
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["status"] == "completed" and metrics["totals"]["rollouts"] == 4
        assert metrics["totals"]["prompt_tokens"] > 0
        assert "sk-test-secret" not in (out / "config.yaml").read_text()
        assert "tfgrpo learn" in result.output and "library" in result.output  # the summary table

        # --resume of a finished run with one more epoch: only the new epoch's calls reach the server
        more = CliRunner().invoke(
            app, ["learn", "--out", str(out), "--resume", "--epochs", "2", "--api-key", "sk-test-secret"]
        )
        assert more.exit_code == 0, more.output
        assert json.loads((out / "metrics.json").read_text())["totals"]["steps"] == 4
        rollout_bodies = [b for b in server.bodies[requests_made:] if b["temperature"] == 0.7]
        assert len(rollout_bodies) == 4  # epoch 2: G=2 fresh samples for each of the 2 problems
    rows = read_jsonl(out / "rollouts.jsonl")
    assert len(rows) == 8 and [r["epoch"] for r in rows] == [1] * 4 + [2] * 4


@pytest.mark.timeout(180)
def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path):
    data = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4), (5, 6)])
    out = tmp_path / "run"
    with WorldServer(World(), delay_s=0.3) as server:
        options = ("-G", "2", "--epochs", "2", "--batch-size", "1", "--concurrency", "4", "--dedup", "off")
        command = [sys.executable, "-m", "tfgrpo", *server.learn_args(data, out, *options, model="m")]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (out / "steps" / "0001" / "library.json").is_file():
            time.sleep(0.1)
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGINT)  # in the middle of step 2
        stdout, stderr = process.communicate(timeout=60)
        assert process.returncode == 130, stderr
        assert "tfgrpo learn --out" in stderr and "--resume" in stderr and "Traceback" not in stderr
        state = json.loads((out / "state.json").read_text())
        assert state["status"] == "interrupted" and 1 <= state["completed_step"] < 6

        resumed = CliRunner().invoke(app, ["learn", "--out", str(out), "--resume", "--api-key", "k"])
        assert resumed.exit_code == 0, resumed.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "completed" and metrics["totals"]["steps"] == 6
    assert [s["status"] for s in metrics["sessions"]] == ["interrupted", "completed"]
    steps = [r["step"] for r in read_jsonl(out / "rollouts.jsonl")]
    assert steps == sorted(steps) and len(steps) == 3 * 2 * 2  # no row of the interrupted step was kept twice


def test_bad_row_fails_before_any_llm_call(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"problem": "What is 1+1?", "answer": "2"}\n{"problem": "What is 2+2?"}\n')
    with WorldServer(World()) as server:
        with pytest.raises(SystemExit) as exit_info:
            main(
                [
                    "learn",
                    "--data",
                    str(bad),
                    "--out",
                    str(tmp_path / "run"),
                    "--backend",
                    "openai",
                    "--model",
                    "m",
                    "--base-url",
                    server.base_url,
                    "--api-key",
                    "k",
                ]
            )
        assert exit_info.value.code == 2
        assert server.bodies == []
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and "answer" in err and "Traceback" not in err


def test_cli_needs_data(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["learn", "--out", str(tmp_path / "run")])
    assert exit_info.value.code == 2 and "--data" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["learn.yaml", "learn_smollm2.yaml"])
def test_example_configs_are_valid(name):
    config = build_config(LearnConfig, EXAMPLES / name, {})
    assert config.group_size >= 1 and config.data


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_real_run_on_the_embedded_smollm2(tmp_path):
    """SmolLM2-135M rarely writes valid operations; the run must still complete and report what happened."""
    from rich.console import Console

    from tfgrpo.learn.loop import learn

    config = build_config(LearnConfig, EXAMPLES / "learn_smollm2.yaml", {"out": str(tmp_path / "run"), "limit": 2})
    result = learn(config, console=Console(file=open(tmp_path / "progress.txt", "w")))
    assert result.status == "completed"
    totals = result.metrics["totals"]
    assert totals["rollouts"] == 2 * 2 and totals["rollouts_failed"] == 0
    assert totals["groups_total"] == 2
    assert totals["groups_kept"] + totals["groups_skipped_homogeneous"] == 2
    rows = read_jsonl(tmp_path / "run" / "rollouts.jsonl")
    assert all(r["completion"] for r in rows) and all(r["reward"] is not None for r in rows)
    assert (tmp_path / "run" / "library.json").is_file()


def test_library_history_commands_work_on_a_learn_run(tmp_path):
    """A learn run's library carries its op log: `tfgrpo library history / diff` read it."""
    import io

    from rich.console import Console
    from typer.testing import CliRunner

    from tests.helpers.learn_world import World, write_problems
    from tfgrpo.cli.app import app
    from tfgrpo.learn.config import LearnConfig
    from tfgrpo.learn.loop import learn
    from tfgrpo.llm.backends.scripted import ScriptedBackend
    from tfgrpo.llm.factory import build_client

    data = write_problems(tmp_path / "train.jsonl", [(1, 2), (3, 4)])
    config = LearnConfig(data=str(data), out=str(tmp_path / "run"), group_size=3, epochs=1, dedup=False)
    client = build_client(
        config.llm, backends=[ScriptedBackend(World().respond)], cache_path=tmp_path / "run" / "cache.sqlite"
    )
    result = learn(config, client=client, console=Console(file=io.StringIO()))
    assert len(result.library) > 0
    runner = CliRunner()
    history = runner.invoke(app, ["library", "history", str(tmp_path / "run" / "library.json")])
    assert history.exit_code == 0, history.output
    assert "applied" in history.output or "add" in history.output
    diff = runner.invoke(
        app,
        [
            "library",
            "diff",
            str(tmp_path / "run" / "library.json"),
            "--from",
            "0",
            "--to",
            str(result.library.version),
        ],
    )
    assert diff.exit_code == 0, diff.output
    assert result.library.experiences[0].text[:30] in diff.output.replace("\n", " ")
    # the learn run feeds the compare report's learning curve and cost table
    from tfgrpo.eval.compare import load_learn_run

    steps, totals = load_learn_run(tmp_path / "run")
    assert steps and "accuracy" in steps[0] and totals["rollouts"] == 6
