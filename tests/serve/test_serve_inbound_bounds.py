"""What a client can make `tfgrpo serve` hold or spend before a route runs (issue 43): request heads bounded
in bytes and time while they arrive, sampling fields within their documented ranges, top-k injection that
never embeds the library per request, and a metrics folder of other files left alone."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.helpers.serve_fixtures import proxy, write_library
from tests.helpers.serve_upstream import ScriptedUpstream, running, serve_cli
from tfgrpo.experiences.onnx_embedder import OnnxMiniLMEmbedder
from tfgrpo.serve.metrics import MARKER

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
HEADER_TIMEOUT_S = 1.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """`tfgrpo serve` as a process, as deployed (its own HTTP protocol): (base URL, its pid)."""
    tmp_path = tmp_path_factory.mktemp("served")
    library = write_library(tmp_path / "library.json")
    args = ["--library", str(library), "--traces", str(tmp_path / "t.sqlite")]
    args += ["--header-timeout-s", str(HEADER_TIMEOUT_S)]
    with (
        running(ScriptedUpstream()) as upstream,
        serve_cli(tmp_path / "serve.log", *args, "--upstream", upstream + "/v1") as url,
    ):
        yield url, httpx.get(url + "/health").json()["pid"]


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)))


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _answer(connection: socket.socket, wait_s: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (or `wait_s` without a byte)."""
    connection.settimeout(wait_s)
    answer = b""
    while True:
        try:
            chunk = connection.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return answer
        if not chunk:
            return answer
        answer += chunk


def _error_code(answer: bytes, status: int) -> str:
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:300]
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"]


def test_header_lines_without_their_end_are_refused_while_they_arrive(served):
    url, pid = served
    before = _rss_kb(pid)
    line = b"x-pad: " + b"a" * 1000 + b"\r\n"
    sent, flood = 0, 20_000_000  # 20 MB of header lines, never the blank line that ends them
    with _connect(url) as connection:
        connection.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        try:
            while sent < flood:
                connection.sendall(line * 100)
                sent += len(line) * 100
        except OSError:  # refused and closed: the server stopped reading
            pass
        answer = _answer(connection)
    assert _error_code(answer, 431) == "headers_too_large"
    assert sent < flood
    assert _rss_kb(pid) - before < 10_000  # kB: the flood was never held
    assert httpx.get(url + "/health").status_code == 200


def test_headers_that_trickle_in_are_a_408_and_an_idle_connection_is_closed(served):
    url, _pid = served
    with _connect(url) as connection:
        connection.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        lines = 0
        try:
            while lines < 100:  # one line every 0.2 s: 20 s unless the server ends it
                time.sleep(0.2)
                connection.sendall(b"x-slow: 1\r\n")
                lines += 1
        except OSError:
            pass
        answer = _answer(connection)
    assert _error_code(answer, 408) == "header_timeout" and lines < 100
    with _connect(url) as idle:
        assert _answer(idle, wait_s=HEADER_TIMEOUT_S * 10) == b""  # closed, not held open
    assert httpx.get(url + "/health").status_code == 200


def test_a_body_in_the_heads_packet_and_keep_alive_still_work(served):
    url, _pid = served
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 200_000}]}
    with httpx.Client(base_url=url) as client:  # one connection: each request's head bounded anew
        for _ in range(3):
            assert client.post("/v1/chat/completions", json=body).status_code == 200
        with _connect(url) as connection:  # head and body in one write, larger than the head bound
            raw = json.dumps(body).encode()
            connection.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(raw), raw)
            )
            assert _answer(connection).startswith(b"HTTP/1.1 200 ")
        with _connect(url) as connection:  # pipelined: the second head came with the first
            head = b"GET /health HTTP/1.1\r\nhost: x\r\n"
            connection.sendall(head + b"\r\n" + head + b"connection: close\r\n\r\n")
            assert _answer(connection).count(b"HTTP/1.1 200 ") == 2


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b'"n": 1000000', "invalid_sampling_parameter"),
        (b'"n": 17', "invalid_sampling_parameter"),  # max_choices: 16
        (b'"n": true', "invalid_sampling_parameter"),
        (b'"best_of": 1000', "invalid_sampling_parameter"),
        (b'"temperature": NaN', "invalid_number"),
        (b'"temperature": 1e400', "invalid_number"),
        (b'"top_p": -Infinity', "invalid_number"),
        (b'"temperature": 2.5', "invalid_sampling_parameter"),
        (b'"temperature": "hot"', "invalid_sampling_parameter"),
        (b'"top_p": 1.5', "invalid_sampling_parameter"),
        (b'"presence_penalty": -3', "invalid_sampling_parameter"),
        (b'"max_tokens": 0', "invalid_sampling_parameter"),
        (b'"max_tokens": 1.5', "invalid_sampling_parameter"),
        (b'"top_logprobs": 21', "invalid_sampling_parameter"),
        (b'"logprobs": 1', "invalid_sampling_parameter"),
        (b'"stop": ["a", "b", "c", "d", "e"]', "invalid_sampling_parameter"),
        (b'"logit_bias": {"50256": 101}', "invalid_sampling_parameter"),
        (b'"user": "\\ud800"', "invalid_text"),
    ],
)
def test_sampling_fields_outside_their_range_are_a_400(tmp_path, raw, code):
    with proxy(tmp_path) as p:
        body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], ' + raw + b"}"
        response = httpx.post(p.url + "/v1/chat/completions", content=body)
        assert response.status_code == 400, response.text[:300]
        error = response.json()["error"]
        assert error["code"] == code and error["type"] == "invalid_request_error" and len(error["message"]) < 200
        assert p.upstream.bodies == []


def test_a_lone_surrogate_in_a_message_is_a_400_and_a_pair_is_text(tmp_path):
    with proxy(tmp_path) as p:
        lone = b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}'
        response = httpx.post(p.url + "/v1/chat/completions", content=lone)
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_text"
        pair = b'{"model": "m", "messages": [{"role": "user", "content": "\\ud83d\\ude00"}], "n": 2, "temperature": 0}'
        assert httpx.post(p.url + "/v1/chat/completions", content=pair).status_code == 200
        assert p.upstream.bodies[-1]["messages"][-1]["content"] == "\N{GRINNING FACE}"
        assert p.upstream.bodies[-1]["n"] == 2 and p.upstream.bodies[-1]["temperature"] == 0


class EmbeddedTexts:
    """Counts the texts the real embedder embeds (each call still embeds them)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.count = 0
        embed = OnnxMiniLMEmbedder.embed

        def counting(embedder: OnnxMiniLMEmbedder, texts):  # type: ignore[no-untyped-def]
            self.count += len(texts)
            return embed(embedder, texts)

        monkeypatch.setattr(OnnxMiniLMEmbedder, "embed", counting)


def test_a_topk_request_embeds_its_query_only_whatever_the_library_size(tmp_path, monkeypatch):
    lessons = {f"L{i}": f"Lesson {i}: when the problem mentions item {i}, check case {i % 7}." for i in range(300)}
    lessons["carry"] = "When adding numbers, check the carry digit."
    library = write_library(tmp_path / "library.json", lessons)
    embedded = EmbeddedTexts(monkeypatch)
    with proxy(tmp_path, library=library, topk_index=True, reload_interval_s=0.1) as p:
        assert embedded.count >= len(lessons)  # the index is built at load, before the first request
        messages = [{"role": "user", "content": "When adding 57 and 68, what about the carry digit?"}]
        before = embedded.count
        response = httpx.post(
            p.url + "/v1/chat/completions",
            json={"model": "m", "messages": messages},
            headers={"x-tfgrpo-inject": "topk:3"},
            timeout=120,
        )
        assert response.status_code == 200 and embedded.count - before == 1  # the query, nothing of the library
        injected = p.state.traces.exchange(response.headers["x-tfgrpo-exchange-id"])["injected_ids"]
        assert len(injected) == 3 and "carry" in injected
        del lessons["carry"]
        lessons["new"] = "When adding numbers, write the carry above the next column."
        before = embedded.count
        write_library(tmp_path / "library.json", lessons, version=4)
        deadline = time.monotonic() + 60
        while p.state.live.current.version != 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert p.state.live.current.version == 4 and embedded.count - before == 1  # the new lesson only
        before = embedded.count
        messages = [{"role": "user", "content": "When adding 19 and 23, where does the carry digit go?"}]
        response = httpx.post(
            p.url + "/v1/chat/completions",
            json={"model": "m", "messages": messages},
            headers={"x-tfgrpo-inject": "topk:3"},
            timeout=120,
        )
        assert response.status_code == 200 and embedded.count - before == 1
        injected = p.state.traces.exchange(response.headers["x-tfgrpo-exchange-id"])["injected_ids"]
        assert len(injected) == 3 and "new" in injected and "carry" not in injected  # the removed one is gone


def test_topk_without_an_index_is_refused_not_built_per_request(tmp_path, monkeypatch):
    embedded = EmbeddedTexts(monkeypatch)
    with proxy(tmp_path) as p:  # inject all, no --topk-index
        response = httpx.post(
            p.url + "/v1/chat/completions",
            json={"model": "m", "messages": QUESTION},
            headers={"x-tfgrpo-inject": "topk:1"},
        )
        assert response.status_code == 400 and response.json()["error"]["code"] == "topk_unavailable"
        assert embedded.count == 0 and p.upstream.bodies == []


def test_one_store_folder_for_several_workers_indexes_is_refused_in_one_line(tmp_path):
    library = write_library(tmp_path / "library.json")
    command = [sys.executable, "-m", "tfgrpo", "serve", "--library", str(library), "--upstream"]
    command += ["http://127.0.0.1:9/v1", "--workers", "2", "--inject", "topk:2", "--store-dir", str(tmp_path / "s")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "store_dir" in lines[0], result.stderr
    assert not (tmp_path / "s").exists()


def _serve_with_metrics_dir(tmp_path: Path, metrics: Path) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "serve.yaml"
    settings = {
        "library": str(write_library(tmp_path / "library.json")),
        "upstream": "http://127.0.0.1:9/v1",
        "traces": str(tmp_path / "t.sqlite"),
        "metrics_dir": str(metrics),
        "workers": 2,
        "port": 0,
    }
    config.write_text(yaml.safe_dump(settings))
    command = [sys.executable, "-m", "tfgrpo", "serve", "--config", str(config)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_a_metrics_dir_of_other_files_is_refused_and_left_as_it_was(tmp_path):
    metrics = tmp_path / "shared"
    metrics.mkdir()
    (metrics / "notes.db").write_text("someone else's")
    (metrics / "counter_1.db").write_text("named like a metric file, not serve's")
    result = _serve_with_metrics_dir(tmp_path, metrics)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "metrics_dir" in lines[0], result.stderr
    assert sorted(path.name for path in metrics.iterdir()) == ["counter_1.db", "notes.db"]


def test_serve_empties_only_its_own_metrics_files(tmp_path):
    metrics = tmp_path / "metrics"
    with running(ScriptedUpstream()) as upstream:
        args = ["--library", str(write_library(tmp_path / "library.json")), "--upstream", upstream + "/v1"]
        settings = {"metrics_dir": str(metrics), "traces": str(tmp_path / "t.sqlite")}
        (tmp_path / "serve.yaml").write_text(yaml.safe_dump(settings))
        with serve_cli(tmp_path / "serve.log", *args, "--config", str(tmp_path / "serve.yaml"), workers=2) as url:
            assert httpx.get(url + "/metrics").status_code == 200
        assert (metrics / MARKER).exists()
        earlier = sorted(path.name for path in metrics.glob("*.db"))
        assert earlier  # the run's own files, left for the next start to clear
        (metrics / "notes.db").write_text("put there later by someone else")
        stale = metrics / "counter_4999999.db"  # an earlier run's worker (above any pid this run can have)
        stale.write_bytes((metrics / earlier[0]).read_bytes())
        with serve_cli(tmp_path / "serve.log", *args, "--config", str(tmp_path / "serve.yaml"), workers=2):
            pass
        assert (metrics / "notes.db").read_text() == "put there later by someone else" and not stale.exists()
