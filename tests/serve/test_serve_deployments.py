"""The serve suite from outside, on both deployments: one process with SQLite (in process) and
`tfgrpo serve --workers 2` on the real PostgreSQL (a subprocess, its log read from a file).

Each test speaks only HTTP to the proxy and reads the shared trace store, so the same assertions hold
whichever worker took the connection: injection, streaming, every choice of `n` traced, assigned vs
treated, a bad 200 body retried then a 502, a faulty upstream never passed on, a JSON answer to a stream request
sent as a stream, bounded inputs (a stalled body is a 408), OpenAI-style errors, feedback history and its
bounds, /metrics and /ready, client keys, CORS and a hot reload that every worker picks up.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.postgres_server import postgres_server
from tests.helpers.serve_fixtures import LESSONS, announce_a_body_and_stall, proxy, write_library
from tests.helpers.serve_upstream import Fault, ScriptedUpstream, running, serve_cli
from tfgrpo.serve.traces import TraceStore

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
CLIENT_KEY = "sk-suite-client-0001"
ORIGIN = "https://app.example.com"
AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}


@dataclass
class Deployment:
    name: str
    url: str
    upstream: ScriptedUpstream
    traces: str  # the trace store's path or URL, read with a TraceStore of our own
    library: Path

    def rows(self, ids: list[str], timeout_s: float = 15.0) -> dict[str, dict]:
        """The stored exchanges of `ids` once all are there (each worker writes every 0.1 s)."""
        deadline = time.monotonic() + timeout_s
        store = TraceStore(self.traces)
        try:
            while True:
                found = {row["id"]: row for row in store.exchanges() if row["id"] in ids}
                if len(found) == len(ids):
                    return found
                assert time.monotonic() < deadline, f"{len(found)} of {len(ids)} exchanges traced"
                time.sleep(0.1)
        finally:
            store.close()

    def feedback_history(self, exchange_id: str) -> list[dict]:
        store = TraceStore(self.traces)
        try:
            return store.feedback_history(exchange_id)
        finally:
            store.close()


def _settings(tmp: Path) -> dict:
    keys = tmp / "keys.txt"
    keys.write_text(f"{CLIENT_KEY}\n")
    return {
        "client_keys": str(keys),
        "cors_origins": [ORIGIN],
        "max_retries": 1,
        "reload_interval_s": 0.1,
        "body_timeout_s": 1.0,
    }


@contextlib.contextmanager
def _one_process(tmp: Path) -> Iterator[Deployment]:
    upstream = ScriptedUpstream(responder=lambda messages, k: f"sample {k}")
    with proxy(tmp, upstream, **_settings(tmp)) as p:
        yield Deployment("one-process-sqlite", p.url, upstream, str(tmp / "traces.sqlite"), tmp / "library.json")


@contextlib.contextmanager
def _two_workers(tmp: Path) -> Iterator[Deployment]:
    upstream = ScriptedUpstream(responder=lambda messages, k: f"sample {k}")
    library = write_library(tmp / "library.json")
    settings = _settings(tmp)
    with postgres_server() as database, running(upstream) as base:
        args = ["--library", str(library), "--upstream", base + "/v1", "--traces", database]
        args += ["--client-keys", settings["client_keys"], "--cors-origins", ORIGIN, "--backoff-s", "0"]
        args += ["--max-retries", "1", "--reload-interval-s", "0.1", "--body-timeout-s", "1"]
        with serve_cli(tmp / "serve.log", *args, workers=2) as url:
            yield Deployment("two-workers-postgresql", url, upstream, database, library)


@pytest.fixture(scope="module", params=["one-process-sqlite", "two-workers-postgresql"])
def deployment(request, tmp_path_factory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp(request.param)
    start = _one_process if request.param == "one-process-sqlite" else _two_workers
    with start(tmp) as running_deployment:
        yield running_deployment


def _chat(d: Deployment, *, headers: dict[str, str] | None = None, **fields) -> httpx.Response:
    body = {"model": "m", "messages": QUESTION, **fields}
    # a new connection each time, so with two workers the kernel spreads them over both
    sent = {**AUTH, "connection": "close", **(headers or {})}
    return httpx.post(d.url + "/v1/chat/completions", json=body, headers=sent, timeout=30)


def _is_openai_error(response: httpx.Response) -> bool:
    error = response.json().get("error", {})
    return isinstance(error.get("message"), str) and "type" in error


def test_the_library_is_injected_and_every_choice_traced(deployment):
    whole = _chat(deployment, n=3, headers={"x-tfgrpo-user": "u-inject"})
    assert whole.status_code == 200, whole.text
    system = deployment.upstream.bodies[-1]["messages"][0]
    assert system["role"] == "system" and all(text in system["content"] for text in LESSONS.values())
    streamed = _chat(deployment, stream=True, headers={"x-tfgrpo-user": "u-inject"})
    assert streamed.status_code == 200 and "data: [DONE]" in streamed.text
    ids = [whole.headers["x-tfgrpo-exchange-id"], streamed.headers["x-tfgrpo-exchange-id"]]
    rows = deployment.rows(ids)
    first, second = rows[ids[0]], rows[ids[1]]
    assert (
        first["replies"] == [c["message"]["content"] for c in whole.json()["choices"]] and len(first["replies"]) == 3
    )
    assert second["stream"] is True and second["reply"].startswith("sample ")
    assert first["library_hash"] == whole.headers["x-tfgrpo-library-hash"] and first["injected_ids"] == list(LESSONS)


def test_an_untreated_request_is_assigned_b_and_traced_untreated(deployment):
    treated = _chat(deployment, headers={"x-tfgrpo-user": "u-ab"})
    untreated = _chat(deployment, headers={"x-tfgrpo-user": "u-ab", "x-tfgrpo-inject": "none"})
    assert treated.headers["x-tfgrpo-arm"] == untreated.headers["x-tfgrpo-arm"] == "B"
    ids = [treated.headers["x-tfgrpo-exchange-id"], untreated.headers["x-tfgrpo-exchange-id"]]
    rows = deployment.rows(ids)
    assert rows[ids[0]]["treated"] is True and rows[ids[1]]["treated"] is False and rows[ids[1]]["injected_ids"] == []


def test_a_truncated_200_body_is_retried_then_a_502(deployment):
    deployment.upstream.push(Fault(200, body=b'{"choices": [{"mess'), Fault(200, body=b'{"id": "x", "cho'))
    failed = _chat(deployment)
    assert failed.status_code == 502 and _is_openai_error(failed)
    row = deployment.rows([failed.headers["x-tfgrpo-exchange-id"]])[failed.headers["x-tfgrpo-exchange-id"]]
    assert row["status"] == 502 and row["error"] == "bad_upstream_body"
    assert _chat(deployment).status_code == 200  # the next one is served


def test_a_faulty_upstream_never_passes_an_invalid_200_on(deployment):
    bad = [Fault(200, body=b'{"choices": [{"mess'), Fault(500), Fault(200, body=b"<html>busy</html>")]
    deployment.upstream.push(*bad * 3)  # nine faults among the first attempts of twelve requests
    answers = [_chat(deployment) for _ in range(12)]
    for answer in answers:
        if answer.status_code == 200:
            assert answer.json()["choices"][0]["message"]["content"].startswith("sample ")
        else:  # 502 after bad bodies, the upstream's own 500 after its errors: an OpenAI error either way
            assert answer.status_code in (500, 502) and _is_openai_error(answer), answer.text
    assert sum(a.status_code == 200 for a in answers) >= 6  # a retry gets past a single fault
    assert any(a.status_code == 502 for a in answers)  # the bad bodies were caught, not passed on


def test_a_json_answer_to_a_stream_request_reaches_the_client_as_a_stream(deployment):
    deployment.upstream.ignores_stream = True  # some servers answer JSON whatever `stream` says
    try:
        streamed = _chat(deployment, stream=True)
    finally:
        deployment.upstream.ignores_stream = False
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = [line.removeprefix("data: ") for line in streamed.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.startswith("sample ")  # the JSON answer's content, as stream chunks
    exchange = streamed.headers["x-tfgrpo-exchange-id"]
    row = deployment.rows([exchange])[exchange]
    assert row["stream"] is True and row["reply"] == text


def test_a_stalled_request_body_is_a_408(deployment):
    answer, waited = announce_a_body_and_stall(deployment.url, "/v1/chat/completions", AUTH)
    assert answer.startswith(b"HTTP/1.1 408 ") and waited < 8, answer[:200]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "body_timeout"


def test_inputs_are_bounded_with_openai_errors(deployment):
    too_big = httpx.post(
        deployment.url + "/v1/chat/completions", content=b"x" * (9 * 1024 * 1024), headers=AUTH, timeout=30
    )
    assert too_big.status_code == 413 and _is_openai_error(too_big)
    huge_header = _chat(deployment, headers={"x-tfgrpo-user": "u" * 40_000})
    assert huge_header.status_code == 431
    deep = httpx.post(
        deployment.url + "/v1/chat/completions",
        content=b'{"model": "m", "messages": ' + b"[" * 150 + b"]" * 150 + b"}",
        headers={**AUTH, "content-type": "application/json"},
        timeout=30,
    )
    assert deep.status_code == 400 and _is_openai_error(deep)
    unknown = httpx.get(deployment.url + "/v1/nothing-here", headers=AUTH)
    assert unknown.status_code == 404 and _is_openai_error(unknown)
    no_key = httpx.post(deployment.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION})
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "missing_api_key"


def test_feedback_history_is_kept_and_bounded(deployment):
    served = _chat(deployment, headers={"x-tfgrpo-user": "u-feedback"})
    exchange = served.headers["x-tfgrpo-exchange-id"]
    for reward in (0.0, 1.0):
        given = httpx.post(deployment.url + "/v1/feedback", json={"id": exchange, "reward": reward}, headers=AUTH)
        assert given.status_code == 200, given.text
    out_of_range = httpx.post(deployment.url + "/v1/feedback", json={"id": exchange, "reward": 1e9}, headers=AUTH)
    assert out_of_range.status_code == 400 and _is_openai_error(out_of_range)
    unknown = httpx.post(deployment.url + "/v1/feedback", json={"id": "x" * 60, "reward": 1.0}, headers=AUTH)
    assert unknown.status_code in (400, 404) and "x" * 60 not in unknown.text
    assert [entry["reward"] for entry in deployment.feedback_history(exchange)] == [0.0, 1.0]
    assert deployment.rows([exchange])[exchange]["reward"] == 1.0  # the latest wins


def test_metrics_readiness_and_cors(deployment):
    assert httpx.get(deployment.url + "/ready").status_code == 200
    families = {family.name for family in text_string_to_metric_families(httpx.get(deployment.url + "/metrics").text)}
    assert {"tfgrpo_serve_requests", "tfgrpo_serve_library_info"} <= families
    preflight = httpx.options(
        deployment.url + "/v1/chat/completions",
        headers={
            "origin": ORIGIN,
            "access-control-request-method": "POST",
            "access-control-request-headers": "authorization",
        },
    )
    assert preflight.status_code == 200 and preflight.headers["access-control-allow-origin"] == ORIGIN


def test_a_new_library_is_served_by_every_worker(deployment):
    write_library(deployment.library.with_name("next.json"), {"G7": "Check the units twice."}, version=5)
    os.replace(deployment.library.with_name("next.json"), deployment.library)
    deadline = time.monotonic() + 30
    while True:  # twelve answers in a row from the new library: with two workers, both reloaded
        versions = [_chat(deployment).headers["x-tfgrpo-library-version"] for _ in range(12)]
        if set(versions) == {"5"}:
            break
        assert time.monotonic() < deadline, versions
        time.sleep(0.2)
    assert "Check the units twice." in json.dumps(deployment.upstream.bodies[-1]["messages"])
