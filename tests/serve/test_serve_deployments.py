"""The serve suite from outside, on both deployments: one process with SQLite (in process) and
`tfgrpo serve --workers 2` on the real PostgreSQL (a subprocess, its log read from a file).

Each test speaks only HTTP to the proxy and reads the shared trace store, so the same assertions hold
whichever worker took the connection: injection, streaming, every choice of `n` traced, assigned vs
treated, a bad 200 body retried then a 502, a faulty upstream never passed on, a JSON answer to a stream request
sent as a stream, bounded inputs (a stalled body is a 408), OpenAI-style errors, feedback history and its
bounds, /metrics and /ready, client keys, CORS and a hot reload that every worker picks up; one access-log
line per request from every worker with no key in it, and a client's own key forwarded upstream (a second
proxy of the same kind, on the same PostgreSQL) and never logged or traced.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.postgres_server import postgres_server
from tests.helpers.serve_fixtures import LESSONS, announce_a_body_and_stall, proxy, write_library
from tests.helpers.serve_upstream import Fault, ScriptedUpstream, running, serve_cli
from tfgrpo.serve.arms import assign_arm
from tfgrpo.serve.observe import LOGGER
from tfgrpo.serve.traces import TraceStore

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
CLIENT_KEY = "sk-suite-client-0001"
SERVER_KEY = "sk-suite-server-0002"  # the upstream key the proxy sends (client keys on)
OWN_KEY = "sk-suite-own-upstream-0003"  # a client's own upstream key (forward_client_auth_header on)
WRONG_KEY = "sk-suite-wrong-0004"
SECRETS = (CLIENT_KEY, SERVER_KEY, OWN_KEY, WRONG_KEY, "Bearer", "authorization")
ORIGIN = "https://app.example.com"
AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}


@dataclass
class Deployment:
    name: str
    url: str
    upstream: ScriptedUpstream
    traces: str  # the trace store's path or URL, read with a TraceStore of our own
    library: Path
    read_log: Callable[[], str]  # serve's log lines so far (a capture in process, the log file of a subprocess)
    workers: int = 1
    #: a proxy of the same kind forwarding each client's own key upstream, once started (see `_forwarding`)
    forwarding: Callable[[], Deployment] | None = None

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

    def stored_text(self) -> str:
        """Every row of every table of the trace store, as text."""
        store = TraceStore(self.traces)
        try:
            with store.engine.connect() as connection:
                tables = sa.inspect(connection).get_table_names()
                return "\n".join(
                    repr(tuple(row))
                    for table in tables
                    for row in connection.execute(sa.text(f'SELECT * FROM "{table}"'))
                )
        finally:
            store.close()

    def access(self) -> list[dict[str, Any]]:
        """The access-log lines so far, in the order written (a line still being written is skipped)."""
        lines = []
        for text in self.read_log().splitlines():
            try:
                line = json.loads(text) if text.startswith("{") else None
            except ValueError:
                continue
            if isinstance(line, dict) and line.get("event") == "access":
                lines.append(line)
        return lines

    def settled_access(self, quiet_s: float = 0.2, timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """The access-log lines once no new one came for `quiet_s` (a line is written just after its answer)."""
        deadline = time.monotonic() + timeout_s
        lines = self.access()
        while True:
            time.sleep(quiet_s)
            now = self.access()
            if len(now) == len(lines) or time.monotonic() > deadline:
                return now
            lines = now

    def access_of(self, ids: list[str], timeout_s: float = 10.0) -> list[dict[str, Any]]:
        """The access-log lines of the exchanges `ids`, once each has at least one."""
        deadline = time.monotonic() + timeout_s
        while True:
            lines = [line for line in self.access() if line.get("exchange") in ids]
            if {line["exchange"] for line in lines} == set(ids):
                return lines
            assert time.monotonic() < deadline, f"{len({line['exchange'] for line in lines})} of {len(ids)} logged"
            time.sleep(0.05)


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


def _flags(settings: dict) -> list[str]:
    """The command line of `settings` (`max_retries: 1` is `--max-retries 1`, a list one flag per item)."""
    flags: list[str] = []
    for name, value in settings.items():
        flag = "--" + name.replace("_", "-")
        if value is True:
            flags.append(flag)
        else:
            flags += [part for item in (value if isinstance(value, list) else [value]) for part in (flag, str(item))]
    return flags


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _captured_log() -> Iterator[Callable[[], str]]:
    """serve's lines (the `tfgrpo.serve` logger) while in process, as a subprocess would write them."""
    handler, level = _Lines(), LOGGER.level
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    try:
        yield lambda: "\n".join(list(handler.lines))
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(level)


@contextlib.contextmanager
def _one_process(tmp: Path, name: str, settings: dict) -> Iterator[Deployment]:
    upstream = ScriptedUpstream(responder=lambda messages, k: f"sample {k}")
    with _captured_log() as read_log, proxy(tmp, upstream, **settings) as p:
        yield Deployment(name, p.url, upstream, str(tmp / "traces.sqlite"), tmp / "library.json", read_log)


@contextlib.contextmanager
def _two_workers(tmp: Path, name: str, settings: dict, database: str) -> Iterator[Deployment]:
    upstream = ScriptedUpstream(responder=lambda messages, k: f"sample {k}")
    library, log = write_library(tmp / "library.json"), tmp / "serve.log"
    with running(upstream) as base:
        args = ["--library", str(library), "--upstream", base + "/v1", "--traces", database, "--backoff-s", "0"]
        with serve_cli(log, *args, *_flags(settings), workers=2) as url:
            yield Deployment(name, url, upstream, database, library, log.read_text, workers=2)


@contextlib.contextmanager
def _started_meanwhile(starting: contextlib.AbstractContextManager[Deployment]) -> Iterator[Callable[[], Deployment]]:
    """Enter `starting` in a thread, so a server boots while tests run; yield a call that waits for it."""
    started: Future[Deployment] = Future()
    stop = threading.Event()

    def hold() -> None:
        try:
            with starting as value:
                started.set_result(value)
                stop.wait()
        except BaseException as exc:
            if started.done():
                raise
            started.set_exception(exc)

    thread = threading.Thread(target=hold, name="forwarding-proxy", daemon=True)
    thread.start()
    try:
        yield lambda: started.result(timeout=180)
    finally:
        stop.set()
        thread.join(timeout=120)


def _forwarding(tmp: Path, name: str, database: str | None) -> contextlib.AbstractContextManager[Deployment]:
    """A second proxy of the deployment's kind that forwards each client's own key upstream instead of the
    server's (so no client keys: both read the same header), half its users held out; with two workers, on
    the deployment's running PostgreSQL."""
    settings = {"forward_client_auth_header": True, "holdout": 0.5, "max_retries": 1}
    tmp.mkdir()
    if database is None:
        return _one_process(tmp, name + "-forwarding", settings)
    return _two_workers(tmp, name + "-forwarding", settings, database)


@pytest.fixture(scope="module", params=["one-process-sqlite", "two-workers-postgresql"])
def deployment(request, tmp_path_factory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp(request.param)
    with contextlib.ExitStack() as stack:
        # the server's upstream key: sent by the deployment, never by the forwarding proxy
        stack.enter_context(pytest.MonkeyPatch.context()).setenv("TFGRPO_UPSTREAM_API_KEY", SERVER_KEY)
        database = None if request.param == "one-process-sqlite" else stack.enter_context(postgres_server())
        if database is None:
            running_deployment = stack.enter_context(_one_process(tmp, request.param, _settings(tmp)))
        else:
            running_deployment = stack.enter_context(_two_workers(tmp, request.param, _settings(tmp), database))
        # its start (seconds with two workers) overlaps the tests before the one that uses it
        forwarding = _forwarding(tmp / "forwarding", request.param, database)
        running_deployment.forwarding = stack.enter_context(_started_meanwhile(forwarding))
        yield running_deployment


def _chat(d: Deployment, *, headers: dict[str, str] | None = None, **fields) -> httpx.Response:
    body = {"model": "m", "messages": QUESTION, **fields}
    # a new connection each time, so with two workers the kernel spreads them over both
    sent = {**AUTH, "connection": "close", **(headers or {})}
    return httpx.post(d.url + "/v1/chat/completions", json=body, headers=sent, timeout=30)


def _is_openai_error(response: httpx.Response) -> bool:
    error = response.json().get("error", {})
    return isinstance(error.get("message"), str) and "type" in error


def _user_in(arm: str, holdout: float = 0.5) -> str:
    return next(f"user-{i}" for i in range(100) if assign_arm(f"user-{i}", holdout) == arm)


def _on_every_worker(d: Deployment, asks: list[dict[str, Any]], rounds: int = 5) -> list[tuple[dict, httpx.Response]]:
    """`asks` (the keyword arguments of `_chat` each) sent at once, again until every worker served some: the
    kernel hands each new connection to whichever worker accepts first. (ask, answer) pairs, every round's."""
    sent: list[tuple[dict, httpx.Response]] = []
    for _ in range(rounds):
        with ThreadPoolExecutor(len(asks)) as pool:
            sent += zip(asks, pool.map(lambda ask: _chat(d, **ask), asks), strict=True)
        ids = [answer.headers["x-tfgrpo-exchange-id"] for _, answer in sent]
        if len({line["pid"] for line in d.access_of(ids)}) == d.workers:
            return sent
    raise AssertionError(f"{rounds} rounds of {len(asks)} requests, and one worker took every connection")


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


def test_the_access_log_has_one_line_per_request_and_no_key(deployment):
    """One JSON line per request, whichever worker served it (with two, both write to the one log): none lost,
    none twice; arm, treatment, library, status, latency, upstream attempts and client as the answer and the
    trace say; errors with their code; never a key, an Authorization header or a message."""
    before = len(deployment.settled_access())
    asks = []
    for i in range(8):  # whole, streamed, untreated and n=2 chats, each from its own user
        headers = {"x-tfgrpo-user": f"u-access-{i}"} | ({"x-tfgrpo-inject": "none"} if i % 4 == 2 else {})
        asks.append({"headers": headers} | [{}, {"stream": True}, {}, {"n": 2}][i % 4])
    served = _on_every_worker(deployment, asks)
    deployment.upstream.push(Fault(502), Fault(502))  # both attempts fail: the upstream's 502 goes back
    failed = _chat(deployment, headers={"x-tfgrpo-user": "u-access-failed"})
    wrong_key = _chat(deployment, headers={"authorization": f"Bearer {WRONG_KEY}"})
    unknown = httpx.get(deployment.url + "/v1/access-log-probe", headers=AUTH)
    first = served[0][1].headers["x-tfgrpo-exchange-id"]
    feedback = httpx.post(deployment.url + "/v1/feedback", json={"id": first, "reward": 1.0}, headers=AUTH)
    assert [answer.status_code for answer in (failed, wrong_key, unknown, feedback)] == [502, 401, 404, 200]
    assert deployment.upstream.headers[-1]["authorization"] == f"Bearer {SERVER_KEY}"  # the server's key went up
    chats = [*served, ({"headers": {}}, failed)]
    ids = [answer.headers["x-tfgrpo-exchange-id"] for _, answer in chats]
    rows = deployment.rows(ids)
    deployment.access_of(ids)
    lines = deployment.settled_access()[before:]
    assert len(lines) == len(chats) + 3, lines  # each request once: none lost, none written twice
    assert Counter(line["exchange"] for line in lines if "exchange" in line) == Counter(ids)
    assert len({line["pid"] for line in lines}) == deployment.workers
    by_exchange = {line["exchange"]: line for line in lines if "exchange" in line}
    client = hashlib.sha256(CLIENT_KEY.encode()).hexdigest()[:8]
    for ask, answer in chats:
        line, row = by_exchange[answer.headers["x-tfgrpo-exchange-id"]], rows[answer.headers["x-tfgrpo-exchange-id"]]
        assert (line["method"], line["path"], line["client"]) == ("POST", "/v1/chat/completions", client)
        assert line["status"] == answer.status_code == row["status"]
        assert line["arm"] == answer.headers["x-tfgrpo-arm"] == row["arm"] == "B"  # no holdout here
        assert line["treated"] is row["treated"] is ("x-tfgrpo-inject" not in ask["headers"])
        assert line["library_version"] == int(answer.headers["x-tfgrpo-library-version"]) == row["library_version"]
        assert line["library_hash"] == answer.headers["x-tfgrpo-library-hash"][:12] == row["library_hash"][:12]
        assert line["stream"] is row["stream"] is ask.get("stream", False)
        assert isinstance(line["ms"], float) and line["ms"] > 0 and isinstance(line["pid"], int)
        assert line["attempts"] == (2 if answer is failed else 1) and line.get("error") == row["error"]
    assert by_exchange[ids[-1]]["error"] == "upstream_error"
    others = [line for line in lines if "exchange" not in line]  # the requests that got no arm
    assert sorted((line["path"], line["status"], line.get("error"), line.get("client")) for line in others) == [
        ("/v1/access-log-probe", 404, "unknown_route", client),
        ("/v1/chat/completions", 401, "invalid_api_key", None),  # no client: its key is not one of ours
        ("/v1/feedback", 200, None, client),
    ]
    logged = deployment.read_log()
    for secret in (*SECRETS, "What is 2+2?"):
        assert secret not in logged, secret


def test_a_client_key_forwarded_upstream_is_never_logged_or_traced(deployment):
    """forward_client_auth_header (a proxy of its own: it excludes client keys): each client's own
    Authorization header reaches the upstream from every worker, the server's key (in the environment here)
    never does, and the key is in no log line and no trace; arms A and B as the answers and traces say."""
    own = {"authorization": f"Bearer {OWN_KEY}"}
    in_a, in_b = _user_in("A"), _user_in("B")
    asks = [  # A whole, A streamed, B whole, B streamed, twice
        {"headers": own | {"x-tfgrpo-user": user}} | ({"stream": True} if i % 2 else {})
        for i, user in enumerate([in_a, in_a, in_b, in_b] * 2)
    ]
    forwarding = deployment.forwarding()
    before = len(forwarding.settled_access())
    served = _on_every_worker(forwarding, asks)
    models = httpx.get(forwarding.url + "/v1/models", headers=own)
    assert models.status_code == 200 and models.json()["data"][0]["id"] == "scripted"
    refused = httpx.post(forwarding.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "missing_api_key"
    sent_up = [headers.get("authorization") for headers in forwarding.upstream.headers]
    assert sent_up == [f"Bearer {OWN_KEY}"] * len(served)  # each chat with its client's key; the refused one not
    ids = [answer.headers["x-tfgrpo-exchange-id"] for _, answer in served]
    rows = forwarding.rows(ids)
    forwarding.access_of(ids)
    lines = forwarding.settled_access()[before:]
    stored, logged = forwarding.stored_text(), forwarding.read_log()
    assert Counter(line["exchange"] for line in lines if "exchange" in line) == Counter(ids)
    by_exchange = {line["exchange"]: line for line in lines if "exchange" in line}
    for ask, answer in served:
        line, row = by_exchange[answer.headers["x-tfgrpo-exchange-id"]], rows[answer.headers["x-tfgrpo-exchange-id"]]
        arm = "A" if ask["headers"]["x-tfgrpo-user"] == in_a else "B"
        assert answer.status_code == line["status"] == row["status"] == 200 and "client" not in line
        assert line["arm"] == answer.headers["x-tfgrpo-arm"] == row["arm"] == arm
        assert line["treated"] is row["treated"] is (arm == "B") and (row["injected_ids"] == []) is (arm == "A")
    assert sorted((line["path"], line["status"], line.get("error")) for line in lines if "exchange" not in line) == [
        ("/v1/chat/completions", 401, "missing_api_key"),
        ("/v1/models", 200, None),
    ]
    assert "What is 2+2?" in stored  # the dump holds the exchanges themselves
    for secret in (OWN_KEY, SERVER_KEY, "Bearer", "authorization"):
        assert secret not in logged and secret not in stored, secret


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
