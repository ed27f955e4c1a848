"""What `tfgrpo serve` tells its operator: /metrics, the access log, a line for every failure and reload,
readiness that follows the upstream and the trace store, /health that names no internal address."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import time

import httpx
import pytest
import sqlalchemy as sa
from openai import OpenAI
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.postgres_server import postgres_server
from tests.helpers.serve_fixtures import proxy, write_library
from tests.helpers.serve_upstream import Fault, ScriptedUpstream, events, running, serve_cli
from tfgrpo import __version__
from tfgrpo.serve.app import create_app
from tfgrpo.serve.arms import assign_arm
from tfgrpo.serve.config import ServeConfig
from tfgrpo.serve.live_library import LiveLibrary

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


def _chat(url: str, **headers: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION}, headers=headers)


def _metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels`."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def _user_in(arm: str) -> str:
    return next(f"user-{i}" for i in range(100) if assign_arm(f"user-{i}", 0.5) == arm)


def _logged(caplog: pytest.LogCaptureFixture, event: str) -> list[dict]:
    lines = [json.loads(record.getMessage()) for record in caplog.records if record.name.startswith("tfgrpo.serve")]
    return [line for line in lines if line["event"] == event]


def _closed_port() -> int:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        return closed.getsockname()[1]


def test_metrics_are_scraped_in_the_prometheus_format(tmp_path):
    upstream = ScriptedUpstream()
    with proxy(tmp_path, upstream, holdout=0.5, max_retries=1) as p:
        in_a, in_b = _user_in("A"), _user_in("B")
        assert _chat(p.url, **{"x-tfgrpo-user": in_b}).status_code == 200
        exchange = _chat(p.url, **{"x-tfgrpo-user": in_a}).headers["x-tfgrpo-exchange-id"]
        upstream.push(Fault(503), Fault(503))  # both attempts fail: one retry, then the 503 goes back
        assert _chat(p.url, **{"x-tfgrpo-user": in_b}).status_code == 503
        assert httpx.post(p.url + "/v1/feedback", json={"id": exchange, "reward": 1.0}).status_code == 200
        scraped = httpx.get(p.url + "/metrics")
        assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
        text = scraped.text
        assert _metric(text, "tfgrpo_serve_requests_total", route="chat", arm="B", status="200") == 1
        assert _metric(text, "tfgrpo_serve_requests_total", route="chat", arm="A", status="200") == 1
        assert _metric(text, "tfgrpo_serve_requests_total", route="chat", arm="B", status="503") == 1
        assert _metric(text, "tfgrpo_serve_requests_total", route="feedback", arm="-", status="200") == 1
        assert _metric(text, "tfgrpo_serve_request_duration_seconds_count", route="chat", arm="A") == 1
        assert _metric(text, "tfgrpo_serve_request_duration_seconds_sum", route="chat", arm="A") > 0
        assert _metric(text, "tfgrpo_serve_upstream_errors_total", code="upstream_error") == 1
        assert _metric(text, "tfgrpo_serve_upstream_retries_total", cause="server_error") == 1
        assert _metric(text, "tfgrpo_serve_trace_write_errors_total") == 0
        served = p.state.live.current
        assert _metric(text, "tfgrpo_serve_library_info", version="3", hash=served.content_hash[:12]) == 1
        assert _metric(text, "tfgrpo_build_info", version=__version__) == 1


def test_the_access_log_names_each_request_and_no_secret(tmp_path, monkeypatch):
    """One JSON line per request, from the command line as deployed: arm, library, status, latency, attempts,
    the client's key hash; never a key, an Authorization header, the user key or a message."""
    client_key, upstream_key = "sk-client-SECRET-1", "sk-upstream-SECRET-2"
    (tmp_path / "keys.txt").write_text(f"# team a\n{client_key}\n")
    monkeypatch.setenv("TFGRPO_UPSTREAM_API_KEY", upstream_key)
    library, log = write_library(tmp_path / "library.json"), tmp_path / "serve.log"
    upstream = ScriptedUpstream()
    with running(upstream) as base:
        args = ["--library", str(library), "--upstream", base + "/v1", "--traces", str(tmp_path / "t.sqlite")]
        with serve_cli(log, *args, "--client-keys", str(tmp_path / "keys.txt")) as url:
            client = OpenAI(base_url=url + "/v1", api_key=client_key, max_retries=0)
            secret_question = [{"role": "user", "content": "my password is hunter2"}]
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=secret_question, extra_headers={"x-tfgrpo-user": "alice@example.com"}
            )
            list(client.chat.completions.create(model="m", messages=QUESTION, stream=True))
            refused = _chat(url)
            assert refused.status_code == 401
            assert upstream.headers[-1]["authorization"] == f"Bearer {upstream_key}"  # the server's key went up
    lines = events(log, "access")
    chat = [line for line in lines if line["path"] == "/v1/chat/completions"]
    assert len(chat) == 3
    whole, streamed, unauthorized = chat
    assert whole["exchange"] == raw.headers["x-tfgrpo-exchange-id"] and whole["status"] == 200
    assert whole["arm"] == "B" and whole["treated"] is True and whole["library_version"] == 3
    assert whole["library_hash"] == raw.headers["x-tfgrpo-library-hash"][:12] and whole["attempts"] == 1
    assert whole["ms"] > 0 and whole["method"] == "POST" and whole["stream"] is False and whole["pid"] > 0
    assert whole["client"] == hashlib.sha256(client_key.encode()).hexdigest()[:8]
    assert streamed["stream"] is True and streamed["status"] == 200
    assert unauthorized["status"] == 401 and unauthorized["error"] == "missing_api_key"
    assert "exchange" not in unauthorized and "client" not in unauthorized
    text = log.read_text()
    for secret in ("SECRET", "Bearer", "authorization", "alice", "hunter2"):
        assert secret not in text, secret
    assert text.count("serving library v3") == 1


def test_serve_lines_follow_stderr_after_the_stream_they_started_on_is_closed(monkeypatch):
    """An in-process `serve` under a capture (the bad-input table) configures logging on the capture's
    stream; once that stream is closed and swapped back, later lines go to the stderr of the moment."""
    import io

    from tfgrpo.serve.observe import LOGGER, configure_logging, log_event

    saved = (LOGGER.handlers[:], LOGGER.level, LOGGER.propagate)
    try:
        first = io.StringIO()
        monkeypatch.setattr("sys.stderr", first)
        configure_logging()
        log_event("first")
        first.close()
        second = io.StringIO()
        monkeypatch.setattr("sys.stderr", second)
        log_event("second")
        assert json.loads(second.getvalue())["event"] == "second"
    finally:
        LOGGER.handlers[:], LOGGER.level, LOGGER.propagate = saved


def test_a_library_file_caught_mid_write_is_one_failure_line(tmp_path):
    """The watcher can stat a file while it is being written (truncated, then filled): the same broken
    content seen under two stamps is one error line; a different failure, or one after a good reload, is new."""
    path = write_library(tmp_path / "library.json")
    errors: list[str] = []
    live = LiveLibrary(path, on_reload_error=errors.append)
    path.write_text("{ half written", encoding="utf-8")
    assert live.reload_if_changed() is False and len(errors) == 1
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a new stamp, the same content
    assert live.reload_if_changed() is False and len(errors) == 1
    path.write_text("[1, 2", encoding="utf-8")  # broken another way: a new line
    assert live.reload_if_changed() is False and len(errors) == 2
    write_library(path, {"G5": "Read twice."}, version=4)
    assert live.reload_if_changed() is True and live.current.version == 4
    path.write_text("{ half written", encoding="utf-8")  # after a good reload the first failure is news again
    assert live.reload_if_changed() is False and len(errors) == 3


def test_every_failure_and_reload_leaves_one_log_line(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="tfgrpo.serve")
    upstream = ScriptedUpstream()
    with proxy(tmp_path, upstream, max_retries=1, reload_interval_s=0.05) as p:
        upstream.push(Fault(502), Fault(502))
        failed = _chat(p.url)
        assert failed.status_code == 502
        [line] = _logged(caplog, "upstream_failed")
        assert line["exchange"] == failed.headers["x-tfgrpo-exchange-id"]
        assert (line["status"], line["error"], line["attempts"]) == (502, "upstream_error", 2)

        # a broken library file: one line (not one per check), the old version keeps serving
        (tmp_path / "library.json").write_text("{ half written", encoding="utf-8")
        deadline = time.monotonic() + 10
        while not _logged(caplog, "library_reload_failed"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.5)  # ten more checks of the same broken file
        assert len(_logged(caplog, "library_reload_failed")) == 1
        write_library(tmp_path / "next.json", {"G5": "Read twice."}, version=4)
        os.replace(tmp_path / "next.json", tmp_path / "library.json")
        while not _logged(caplog, "library_reloaded"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [reloaded] = _logged(caplog, "library_reloaded")
        assert reloaded["version"] == 4 and reloaded["experiences"] == 1
        text = httpx.get(p.url + "/metrics").text
        assert _metric(text, "tfgrpo_serve_library_reloads_total") == 1
        assert _metric(text, "tfgrpo_serve_library_reload_errors_total") == 1
        assert _metric(text, "tfgrpo_serve_library_info", version="4") == 1
        assert _metric(text, "tfgrpo_serve_library_info", version="3") == 0

        # a dropped trace row (its table gone): logged with its exchange id, counted
        with p.state.traces.engine.begin() as connection:
            connection.execute(sa.text("DROP TABLE tfgrpo_exchanges"))
        lost = _chat(p.url)
        assert lost.status_code == 200  # serving goes on
        p.state.traces.flush()
        [dropped] = _logged(caplog, "trace_dropped")
        assert dropped["exchange"] == lost.headers["x-tfgrpo-exchange-id"] and "no such table" in dropped["error"]
        assert _metric(httpx.get(p.url + "/metrics").text, "tfgrpo_serve_trace_write_errors_total") == 1

        # an internal error: its traceback in the log, one line to the client
        def broken(*_args, **_kwargs):
            raise RuntimeError("boom")

        monkeypatch.setattr("tfgrpo.serve.chat.prepare", broken)
        assert _chat(p.url).status_code == 500
        [crash] = _logged(caplog, "internal_error")
        assert crash["error"] == "RuntimeError: boom" and "Traceback" in crash["traceback"]
    access = _logged(caplog, "access")
    assert [line["status"] for line in access if line["path"] == "/v1/chat/completions"] == [502, 200, 500]


def test_readiness_follows_the_upstream_and_hides_its_address(tmp_path):
    port = _closed_port()
    config = ServeConfig(
        library=write_library(tmp_path / "library.json"),
        upstream=[f"http://127.0.0.1:{port}/v1"],
        traces=str(tmp_path / "t.sqlite"),
        ready_timeout_s=1.0,
    )
    with running(create_app(config)) as url:
        ready = httpx.get(url + "/ready")
        assert ready.status_code == 503 and ready.json()["ready"] is False
        assert ready.json()["upstream"] == {
            "ok": False,
            "replicas": [{"ok": False, "detail": "unreachable: ClientConnectorError"}],
        }
        assert ready.json()["trace_store"]["ok"] is True
        health = httpx.get(url + "/health")
        assert health.status_code == 200  # alive: a liveness probe must not restart it
        assert health.json()["status"] == "degraded" and health.json()["ready"] is False
        for text in (ready.text, health.text):
            assert str(port) not in text and "127.0.0.1" not in text and str(tmp_path) not in text
    with proxy(tmp_path) as p:
        ready = httpx.get(p.url + "/ready")
        assert ready.status_code == 200 and ready.json()["upstream"]["replicas"][0]["detail"] == "answered 200"
        assert httpx.get(p.url + "/health").json()["status"] == "ok"


def test_readiness_follows_the_trace_store(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tfgrpo.serve")
    with contextlib.ExitStack() as database:
        url = database.enter_context(postgres_server())
        with proxy(tmp_path, traces=url, ready_timeout_s=5.0) as p:
            assert httpx.get(p.url + "/ready").status_code == 200
            database.close()  # PostgreSQL stops while serve runs
            time.sleep(1.1)  # past the cached answer
            ready = httpx.get(p.url + "/ready", timeout=30)
            assert ready.status_code == 503 and ready.json()["trace_store"]["ok"] is False
            assert ready.json()["upstream"]["ok"] is True
            answered = _chat(p.url)  # still answered; its trace is dropped, logged and counted
            assert answered.status_code == 200
            p.state.traces.flush()
            [dropped] = _logged(caplog, "trace_dropped")
            assert dropped["exchange"] == answered.headers["x-tfgrpo-exchange-id"]
            assert _metric(httpx.get(p.url + "/metrics").text, "tfgrpo_serve_trace_write_errors_total") == 1
