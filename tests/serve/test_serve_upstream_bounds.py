"""Everything serve holds of an upstream's reply is bounded, and so is what it traces: an endless stream is
cut with an error event, a huge JSON reply or error body is refused, a redirect is never followed, a trace
row stores at most `max_trace_chars` of each text, and a stream cut by shutdown is traced and logged as cut."""

from __future__ import annotations

import json
import logging
import random
import signal
import threading

import httpx
import openai
import pytest
from openai import OpenAI

from tests.helpers.serve_fixtures import proxy, write_library
from tests.helpers.serve_upstream import Fault, ScriptedUpstream, events, running, serve_cli
from tfgrpo.serve.exchange import prompt_key
from tfgrpo.serve.replies import StreamText, sse_from_completion
from tfgrpo.serve.traces import TraceStore

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
COMPLETION = {
    "id": "chatcmpl-up",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "four"}, "finish_reason": "stop"}],
}


def _chat(url: str, **fields) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION, **fields}, timeout=60)


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "code"} and error["code"] == code, error
    return error["message"]


def _access(caplog: pytest.LogCaptureFixture) -> list[dict]:
    lines = [json.loads(record.getMessage()) for record in caplog.records if record.name == "tfgrpo.serve.access"]
    return [line for line in lines if line["path"] == "/v1/chat/completions"]


def test_an_endless_stream_is_cut_with_an_error_event_and_traced_as_cut(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tfgrpo.serve")
    upstream = ScriptedUpstream()
    limit = 256 * 1024
    with proxy(tmp_path, upstream, max_stream_bytes=limit, max_trace_chars=4096) as p:
        upstream.push(Fault(200, endless_stream=True))
        response = _chat(p.url, stream=True)  # returns: the stream ended
        assert response.status_code == 200 and len(response.content) <= limit + 1000
        events_sent = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
        assert events_sent[-1] == "[DONE]"
        assert json.loads(events_sent[-2])["error"]["code"] == "upstream_reply_too_large"
        row = p.traces(1)[0]
        assert (row["status"], row["error"]) == (502, "upstream_reply_too_large")
        assert len(row["reply"]) == 4096 and 4096 < row["truncated"]["reply"] <= limit  # what the client was sent
        upstream.push(Fault(200, endless_stream=True))
        client = OpenAI(base_url=p.url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.APIError, match="max_stream_bytes"):  # the SDK raises on the error event
            for _chunk in client.chat.completions.create(model="m", messages=QUESTION, stream=True):
                pass
        assert _chat(p.url).status_code == 200  # and serving goes on
    access = _access(caplog)
    assert [(line["status"], line.get("cut"), line.get("error")) for line in access[:2]] == [
        (502, True, "upstream_reply_too_large")
    ] * 2


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_json_reply_over_the_bound_is_a_502_not_retried(tmp_path, chunked):
    upstream = ScriptedUpstream()
    huge = json.dumps(COMPLETION | {"padding": "x" * 3_000_000}).encode()
    with proxy(tmp_path, upstream, max_reply_bytes=1024 * 1024, max_retries=2) as p:
        upstream.push(Fault(200, body=huge, chunked=chunked))
        failed = _chat(p.url)
        assert "max_reply_bytes" in _error(failed, 502, "upstream_reply_too_large")
        assert failed.headers["x-tfgrpo-attempts"] == "1" and len(failed.content) < 1000
        upstream.push(Fault(200, body=huge, chunked=chunked))
        _error(_chat(p.url, stream=True), 502, "upstream_reply_too_large")  # a JSON answer to a stream request
        rows = p.traces(2)
        assert [(row["status"], row["error"], row["reply"]) for row in rows] == [
            (502, "upstream_reply_too_large", None)
        ] * 2
        assert len(upstream.bodies) == 2 and _chat(p.url).status_code == 200


def test_an_error_body_over_the_bound_keeps_its_status_and_not_its_body(tmp_path):
    upstream = ScriptedUpstream()
    with proxy(tmp_path, upstream, max_error_bytes=64 * 1024) as p:
        upstream.push(Fault(400, body=b"E" * 3_000_000, chunked=True))
        failed = _chat(p.url)
        assert "max_error_bytes" in _error(failed, 400, "upstream_error_too_large")
        assert len(failed.content) < 1000
        upstream.push(Fault(400, body=b'{"error": {"message": "bad", "type": "x", "code": "y"}}'))
        assert _chat(p.url).json()["error"]["message"] == "bad"  # a small one is passed on as it came
        assert p.traces(2)[0]["error"] == "upstream_error_too_large"


def test_a_redirect_is_never_followed(tmp_path):
    elsewhere = ScriptedUpstream()
    upstream = ScriptedUpstream()
    with running(elsewhere) as other, proxy(tmp_path, upstream, max_retries=2) as p:
        for stream in (False, True):
            upstream.push(Fault(307, location=other + "/v1/chat/completions"))
            message = _error(_chat(p.url, stream=stream), 502, "upstream_redirect")
            assert "307" in message and other not in message
        assert not elsewhere.bodies  # neither the library nor the messages went anywhere else
        rows = p.traces(2)
        assert [(row["status"], row["error"], row["upstream"]) for row in rows] == [
            (502, "upstream_redirect", None)
        ] * 2
        assert len(upstream.bodies) == 2  # not retried


def test_a_redirect_of_models_is_not_followed(tmp_path):
    asked = []

    async def redirecting(scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        asked.append(scope["path"])
        await send({"type": "http.response.start", "status": 308, "headers": [(b"location", b"/elsewhere")]})
        await send({"type": "http.response.body", "body": b""})

    with proxy(tmp_path, redirecting) as p:
        _error(httpx.get(p.url + "/v1/models"), 502, "upstream_redirect")
        ready = httpx.get(p.url + "/ready")  # chat would be refused too: not ready
        assert ready.status_code == 503 and "redirect" in json.dumps(ready.json())
    assert asked == ["/v1/models", "/v1/models"]


def test_a_trace_row_stores_at_most_the_cap_of_each_text(tmp_path):
    cap = 4096
    long_question = [{"role": "system", "content": "s" * 50_000}, {"role": "user", "content": "q" * 200_000}]
    upstream = ScriptedUpstream(responder=lambda messages, k: f"{k}" + "r" * 100_000)
    with proxy(tmp_path, upstream, max_trace_chars=cap) as p:
        body = {"model": "m", "messages": long_question}
        whole = httpx.post(p.url + "/v1/chat/completions", json=body | {"n": 3}, timeout=60)
        assert whole.status_code == 200 and len(whole.json()["choices"][0]["message"]["content"]) == 100_001
        streamed = httpx.post(p.url + "/v1/chat/completions", json=body | {"stream": True}, timeout=60)
        assert streamed.status_code == 200
        assert _chat(p.url).status_code == 200
        cut, cut_stream, small = p.traces(3)
    full_messages = len(json.dumps(long_question, ensure_ascii=False))
    for row in (cut, cut_stream):
        assert len(json.dumps(row["messages"], ensure_ascii=False)) <= cap and row["messages"][1]["role"] == "user"
        assert row["truncated"]["messages"] == full_messages and row["prompt_key"] == prompt_key(long_question)
        assert row["reply"].startswith(("0r", "3r")) and len(row["reply"]) == cap
        assert row["truncated"]["reply"] == 100_001
    assert sum(map(len, cut["replies"])) <= cap and cut["truncated"]["replies"] == 3 * 100_001
    assert cut["truncated"]["choices"] == 3
    assert small["messages"] == QUESTION and small["truncated"] == {"reply": 100_001}  # only what was over


def test_a_stream_cut_by_sigterm_is_traced_and_logged_as_cut(tmp_path):
    upstream = ScriptedUpstream()
    upstream.push(Fault(200, endless_stream=True, event_delay_s=0.05))
    config = tmp_path / "serve.yaml"
    config.write_text("shutdown_grace_s: 1\n")
    log, traces = tmp_path / "serve.log", tmp_path / "traces.sqlite"
    started, received = threading.Event(), []

    def stream(url: str) -> None:
        body = {"model": "m", "messages": QUESTION, "stream": True}
        try:
            with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as response:
                for chunk in response.iter_raw():
                    received.append(chunk)
                    started.set()
        except httpx.HTTPError:
            pass  # the connection is cut: what came is what counts
        finally:
            started.set()

    with running(upstream) as base:
        arguments = ["--library", str(write_library(tmp_path / "library.json")), "--upstream", base + "/v1"]
        arguments += ["--traces", str(traces), "--config", str(config)]
        with serve_cli(log, *arguments, stop=signal.SIGTERM) as url:
            reader = threading.Thread(target=stream, args=(url,))
            reader.start()
            assert started.wait(60) and received
        reader.join(60)
    assert not reader.is_alive() and b"[DONE]" not in b"".join(received)
    last_event = b"".join(received).rstrip().rsplit(b"\n\n", 1)[-1]
    assert last_event.startswith(b"data: ") and json.loads(last_event[6:])["error"]["code"] == "cut_by_shutdown"
    [row] = TraceStore(traces).exchanges()
    assert (row["status"], row["error"]) == (503, "cut_by_shutdown") and row["reply"].startswith("x" * 1000)
    [access] = [line for line in events(log, "access") if line["path"] == "/v1/chat/completions"]
    assert (access["status"], access["cut"], access["error"]) == (503, True, "cut_by_shutdown")


def test_a_stream_s_text_is_the_same_however_it_is_split_and_a_huge_line_is_not_held():
    completion = COMPLETION | {"choices": [{"index": i, "message": {"content": f"été {i} " * 50}} for i in range(3)]}
    payload = sse_from_completion(completion, include_usage=False)
    rng = random.Random(3)
    for _ in range(50):
        text, position = StreamText(max_chars=10_000), 0
        while position < len(payload):  # split anywhere, inside a UTF-8 character too
            step = rng.randrange(1, 40)
            text.feed(payload[position : position + step])
            position += step
        assert text.texts() == [f"été {i} " * 50 for i in range(3)] and text.done
    bounded = StreamText(max_chars=100)
    bounded.feed(b'data: {"choices": [{"index": 0, "delta": {"content": "' + b"x" * 5_000_000)
    bounded.feed(b"x" * 5_000_000 + b'"}}]}\n\n' + payload)  # a 10 MB line: skipped, not held to be parsed
    assert bounded.texts() == [(f"été {i} " * 50)[:100] for i in range(3)]
    assert bounded.lengths() == [len(f"été {i} " * 50) for i in range(3)]
