"""What the upstream answers, as the client sees it and as it is traced: unusable 200 bodies, a JSON answer
to a stream request, several choices, error messages that do not name the upstream, and no cookie kept."""

from __future__ import annotations

import json
import random
import socket

import httpx
from openai import OpenAI

from tests.helpers.serve_fixtures import proxy, write_library
from tests.helpers.serve_upstream import Fault, ScriptedUpstream, running
from tfgrpo.serve.app import create_app
from tfgrpo.serve.config import ServeConfig

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
GOOD = json.dumps(
    {
        "id": "chatcmpl-up",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "four"}, "finish_reason": "stop"}],
    }
).encode()


def _chat(url: str, **fields) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION, **fields}, timeout=30)


def _is_openai_error(response: httpx.Response) -> bool:
    error = response.json().get("error")
    return isinstance(error, dict) and {"message", "type", "code"} <= set(error)


def test_a_truncated_200_body_is_retried_then_a_502_and_counted(tmp_path):
    upstream = ScriptedUpstream()
    with proxy(tmp_path, upstream, max_retries=2) as p:
        upstream.push(Fault(200, body=GOOD[:40]))  # one bad body, then a good reply
        recovered = _chat(p.url)
        assert (
            recovered.status_code == 200 and recovered.json()["choices"][0]["message"]["content"] == "scripted reply"
        )
        upstream.push(*[Fault(200, body=GOOD[:40])] * 3)  # 1 try + 2 retries, all bad
        failed = _chat(p.url)
        assert failed.status_code == 502 and _is_openai_error(failed)
        assert failed.json()["error"]["code"] == "bad_upstream_body" and failed.headers["x-tfgrpo-attempts"] == "3"
        upstream.push(Fault(200, body=b"[1, 2]"))  # JSON, but not a completion object
        assert _chat(p.url).status_code == 200
        stats = httpx.get(p.url + "/health").json()["upstream_calls"]
        assert stats["retries_bad_body"] == 1 + 2 + 1 and stats["failed_calls"] == 1
        rows = p.traces(3)
        assert [(row["status"], row["error"]) for row in rows] == [
            (200, None),
            (502, "bad_upstream_body"),
            (200, None),
        ]
        assert rows[1]["reply"] is None


def test_a_30_percent_faulty_upstream_never_passes_on_an_invalid_200(tmp_path):
    rng = random.Random(7)
    upstream = ScriptedUpstream()
    faults = [Fault(200, body=GOOD[: rng.randrange(1, len(GOOD) - 1)] if rng.random() < 0.3 else GOOD)]
    faults += [
        Fault(200, body=GOOD[: rng.randrange(1, len(GOOD) - 1)] if rng.random() < 0.3 else GOOD) for _ in range(400)
    ]
    upstream.push(*faults)
    with proxy(tmp_path, upstream, max_retries=2) as p:
        outcomes = []
        for _ in range(100):
            response = _chat(p.url)
            if response.status_code == 200:
                outcomes.append(response.json()["choices"][0]["message"]["content"] == "four")
            else:
                assert response.status_code == 502 and _is_openai_error(response)
        assert outcomes and all(outcomes)  # every 200 the client got is a whole completion
        assert httpx.get(p.url + "/health").json()["upstream_calls"]["retries_bad_body"] > 10


def test_a_json_answer_to_a_stream_request_reaches_the_client_as_a_stream(tmp_path):
    upstream = ScriptedUpstream(ignores_stream=True, responder=lambda m, k: f"answer {k}")
    with proxy(tmp_path, upstream) as p:
        client = OpenAI(base_url=p.url + "/v1", api_key="x", max_retries=0)
        stream = client.chat.completions.create(
            model="m", messages=QUESTION, stream=True, n=2, stream_options={"include_usage": True}
        )
        texts: dict[int, str] = {}
        usage = None
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
        assert texts == {0: "answer 0", 1: "answer 1"} and usage.completion_tokens == 4
        raw = _chat(p.url, stream=True)
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert raw.text.rstrip().endswith("data: [DONE]")
        rows = p.traces(2)
        assert rows[0]["stream"] and rows[0]["reply"] == "answer 0" and rows[0]["replies"] == ["answer 0", "answer 1"]


def test_every_choice_of_n_is_traced(tmp_path):
    upstream = ScriptedUpstream(responder=lambda m, k: f"sample {k}")
    with proxy(tmp_path, upstream) as p:
        whole = _chat(p.url, n=3)
        assert [c["message"]["content"] for c in whole.json()["choices"]] == ["sample 0", "sample 1", "sample 2"]
        streamed = _chat(p.url, n=3, stream=True)
        assert streamed.status_code == 200
        single = _chat(p.url)
        rows = p.traces(3)
        assert rows[0]["replies"] == ["sample 0", "sample 1", "sample 2"] and rows[0]["reply"] == "sample 0"
        assert rows[1]["replies"] == ["sample 3", "sample 4", "sample 5"] and rows[1]["reply"] == "sample 3"
        assert rows[2]["replies"] == ["sample 6"] and single.status_code == 200


def test_error_messages_do_not_name_the_upstream(tmp_path):
    upstream = ScriptedUpstream()
    with proxy(tmp_path, upstream, max_retries=0, timeout_s=0.3) as p:
        internal = p.state.config.upstream[0]
        upstream.push(Fault(200, delay_s=1.0))
        timed_out = _chat(p.url)
        assert timed_out.status_code == 504 and _is_openai_error(timed_out)
        assert internal not in timed_out.text and "127.0.0.1" not in timed_out.text
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    config = ServeConfig(
        library=write_library(tmp_path / "library.json"),
        upstream=[f"http://127.0.0.1:{port}/v1"],
        traces=str(tmp_path / "down.sqlite"),
        max_retries=0,
    )
    with running(create_app(config)) as url:
        for response in (_chat(url), _chat(url, stream=True), httpx.get(url + "/v1/models")):
            assert response.status_code == 502 and _is_openai_error(response)
            assert str(port) not in response.text and "127.0.0.1" not in response.text


def test_cookies_the_upstream_sets_are_not_kept_for_the_next_client(tmp_path):
    """A proxy holds no cookie jar: one client's session cookie must not travel with another's request
    (aiohttp's default jar keeps cookies of named hosts, not of IP addresses: hence `localhost`)."""
    upstream = ScriptedUpstream(reply_headers={"set-cookie": "session=client-a; Path=/"})
    with running(upstream) as base:
        config = ServeConfig(
            library=write_library(tmp_path / "library.json"),
            upstream=[base.replace("127.0.0.1", "localhost") + "/v1"],
            traces=str(tmp_path / "t.sqlite"),
        )
        with running(create_app(config)) as url:
            assert _chat(url).status_code == 200 and _chat(url).status_code == 200
    assert len(upstream.headers) == 2 and all("cookie" not in headers for headers in upstream.headers)
