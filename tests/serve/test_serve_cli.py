"""`tfgrpo serve` from the command line and YAML: start-up, options, one-line errors, clean shutdown."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import yaml

from tests.helpers.serve_fixtures import write_library
from tests.helpers.serve_upstream import ScriptedUpstream, running
from tests.helpers.servers import free_port
from tfgrpo.core.config import build_config
from tfgrpo.serve.config import ServeConfig
from tfgrpo.serve.traces import TraceStore


def test_cli_start_does_not_import_the_server_stack():
    code = "import sys, tfgrpo.cli.app; print(sorted({m.split('.')[0] for m in sys.modules} & {'fastapi', 'uvicorn', 'starlette', 'sqlalchemy', 'httpx'}))"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    )


def test_serve_help_lists_the_options_from_the_config():
    env = os.environ | {"COLUMNS": "400", "TERM": "dumb"}
    result = subprocess.run(
        [sys.executable, "-m", "tfgrpo", "serve", "--help"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0
    for option in ("--library", "--upstream", "--port", "--holdout", "--traces", "--inject", "--config"):
        assert option in result.stdout
    assert "Share of users served WITHOUT the library" in result.stdout


def test_serve_from_yaml_answers_and_traces_then_stops_cleanly(tmp_path):
    port = free_port()
    library = write_library(tmp_path / "library.json")
    with running(ScriptedUpstream()) as upstream:
        config = {
            "library": str(library),
            "upstream": [upstream + "/v1"],
            "holdout": 0.25,
            "traces": str(tmp_path / "t.sqlite"),
            "inject": "all",
        }
        (tmp_path / "serve.yaml").write_text(yaml.safe_dump(config))
        process = subprocess.Popen(
            [sys.executable, "-m", "tfgrpo", "serve", "--config", str(tmp_path / "serve.yaml"), "--port", str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    health = httpx.get(base + "/health").json()
                    break
                except httpx.TransportError:
                    assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1]
                    time.sleep(0.2)
            assert health["holdout"] == 0.25 and health["library_version"] == 3
            reply = httpx.post(
                base + "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            )
            assert reply.status_code == 200 and reply.headers["x-tfgrpo-library-version"] == "3"
        finally:
            process.send_signal(signal.SIGINT)
            _out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "serving library v3 (3 experiences)" in err and "Traceback" not in err
    store = TraceStore(tmp_path / "t.sqlite")
    assert len(store.exchanges()) == 1  # flushed on shutdown
    store.close()


def test_serve_refuses_bad_settings_with_one_line(tmp_path):
    library = write_library(tmp_path / "library.json")
    cases = [
        (["--upstream", "http://127.0.0.1:9/v1"], "--library and --upstream are required"),
        (["--library", str(tmp_path / "missing.json"), "--upstream", "http://127.0.0.1:9/v1"], "missing.json"),
        (["--library", str(library), "--upstream", "http://127.0.0.1:9/v1", "--holdout", "2"], "holdout"),
        (["--library", str(library), "--upstream", "127.0.0.1:9"], "neither an http(s) URL nor llm:BACKEND"),
        (["--library", str(library), "--upstream", "llm:nosuch"], "backend 'nosuch' is not one of"),
        (["--library", str(library), "--upstream", "http://127.0.0.1:9/v1", "--inject", "top5"], "topk:K"),
    ]
    for args, message in cases:
        result = subprocess.run(
            [sys.executable, "-m", "tfgrpo", "serve", *args], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)


def test_start_up_failures_are_one_line_and_never_announce_serving(tmp_path):
    """PostgreSQL unreachable (was a 153-line traceback) and a port in use (was "serving ... on :PORT", then
    uvicorn's bind error), with one process or two workers."""
    library = write_library(tmp_path / "library.json")
    closed = free_port()  # nothing listens there
    unreachable = f"postgresql+psycopg://tfgrpo:pw-SECRET@127.0.0.1:{closed}/postgres"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        in_use = f"cannot listen on 127.0.0.1:{port}: the port is in use"
        sqlite = ["--traces", str(tmp_path / "t.sqlite")]
        cases = [
            (["--traces", unreachable], "cannot open it (OperationalError: connection failed"),
            (["--traces", unreachable, "--workers", "2"], "cannot open it (OperationalError: connection failed"),
            ([*sqlite, "--port", str(port)], in_use),
            ([*sqlite, "--port", str(port), "--workers", "2"], in_use),
        ]
        for args, message in cases:
            result = subprocess.run(
                [sys.executable, "-m", "tfgrpo", "serve", "--library", str(library), "--upstream"]
                + ["http://127.0.0.1:9/v1", *args],
                capture_output=True,
                text=True,
                timeout=60,
            )
            lines = result.stderr.strip().splitlines()
            assert result.returncode == 2 and len(lines) == 1, (args, result.stderr)
            assert message in lines[0] and "SECRET" not in lines[0] and "serving" not in result.stderr, lines


def test_the_new_settings_read_from_yaml_and_the_command_line_wins(tmp_path):
    library = write_library(tmp_path / "library.json")
    settings = {
        "library": str(library),
        "upstream": "http://127.0.0.1:9/v1",
        "workers": 2,
        "metrics_dir": str(tmp_path / "metrics"),
        "access_log": False,
        "ready_timeout_s": 3.5,
        "feedback_wait_s": 0.5,
        "forward_client_auth_header": True,
    }
    (tmp_path / "serve.yaml").write_text(yaml.safe_dump(settings))
    config = build_config(ServeConfig, tmp_path / "serve.yaml", {"workers": 4})
    assert (config.workers, config.access_log, config.ready_timeout_s, config.feedback_wait_s) == (4, False, 3.5, 0.5)
    assert config.forward_client_auth_header and config.metrics_dir == tmp_path / "metrics"
    result = subprocess.run(
        [sys.executable, "-m", "tfgrpo", "serve", "--config", str(tmp_path / "serve.yaml"), "--workers", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "workers: Input should be greater than or equal to 1" in result.stderr
