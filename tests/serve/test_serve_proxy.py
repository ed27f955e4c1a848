"""`tfgrpo serve` as an OpenAI-compatible proxy: real clients (openai, litellm, curl), injection, arms, errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time

import httpx
import pytest
from openai import OpenAI

from tests.helpers.serve_fixtures import LESSONS, proxy, write_library
from tests.helpers.serve_upstream import Fault, ScriptedUpstream
from tfgrpo.experiences import Library
from tfgrpo.experiences.export import export_text

QUESTION = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]


def _client(url: str) -> OpenAI:
    return OpenAI(base_url=url + "/v1", api_key="sk-client-secret", max_retries=0)


def test_openai_client_non_streaming_gets_the_library_as_first_system_message(tmp_path):
    with proxy(tmp_path) as p:
        raw = _client(p.url).chat.completions.with_raw_response.create(model="m", messages=QUESTION)
        reply = raw.parse()
        assert reply.choices[0].message.content == "scripted reply"
        assert raw.headers["x-tfgrpo-arm"] == "B" and raw.headers["x-tfgrpo-library-version"] == "3"
        sent = p.upstream.bodies[-1]["messages"]
        # the very text `tfgrpo export --format system-prompt` writes, then the client's messages unchanged
        assert sent[0] == {
            "role": "system",
            "content": export_text(Library.load(tmp_path / "library.json"), "system-prompt").strip(),
        }
        assert sent[1:] == QUESTION
        row = p.state.traces.exchange(raw.headers["x-tfgrpo-exchange-id"])
        assert row["messages"] == QUESTION and row["reply"] == "scripted reply" and row["arm"] == "B"
        assert row["injected_ids"] == ["G0", "G1", "G2"] and row["library_version"] == 3
        assert (
            row["prompt_tokens"] == 11
            and row["completion_tokens"] == 2
            and row["status"] == 200
            and row["latency_ms"] > 0
        )
        assert row["upstream"].startswith("http://127.0.0.1:")


def test_openai_client_streaming_passes_the_sse_through_and_traces_the_text(tmp_path):
    with proxy(tmp_path, ScriptedUpstream(responder=lambda m, k: "streamed answer is four")) as p:
        stream = _client(p.url).chat.completions.create(
            model="m", messages=QUESTION, stream=True, stream_options={"include_usage": True}
        )
        pieces, usage = [], None
        for chunk in stream:
            usage = chunk.usage or usage
            pieces += [c.delta.content or "" for c in chunk.choices]
        assert "".join(pieces) == "streamed answer is four"
        assert usage.completion_tokens == 4
        assert p.upstream.bodies[-1]["stream"] is True
        rows = p.traces(1)
        assert (
            rows[-1]["reply"] == "streamed answer is four"
            and rows[-1]["stream"]
            and rows[-1]["completion_tokens"] == 4
        )


def test_litellm_as_client(tmp_path):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    with proxy(tmp_path, ScriptedUpstream(responder=lambda m, k: "litellm hello")) as p:
        reply = litellm.completion(model="openai/m", api_base=p.url + "/v1", api_key="sk-x", messages=QUESTION)
        assert reply.choices[0].message.content == "litellm hello"
        chunks = litellm.completion(
            model="openai/m", api_base=p.url + "/v1", api_key="sk-x", messages=QUESTION, stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == "litellm hello"
        assert p.upstream.bodies[-1]["messages"][0]["content"].count("check the carry") == 1


def test_curl_non_streaming_streaming_models_and_health(tmp_path):
    with proxy(tmp_path) as p:
        body = json.dumps({"model": "m", "messages": QUESTION})
        out = subprocess.run(
            ["curl", "-sS", "-i", p.url + "/v1/chat/completions", "-H", "content-type: application/json", "-d", body],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "x-tfgrpo-arm: B" in out and '"scripted reply"' in out
        streamed = json.dumps({"model": "m", "messages": QUESTION, "stream": True})
        out = subprocess.run(
            [
                "curl",
                "-sS",
                "-N",
                p.url + "/v1/chat/completions",
                "-H",
                "content-type: application/json",
                "-d",
                streamed,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert out.rstrip().endswith("data: [DONE]") and out.count("data: ") == 5
        models = json.loads(
            subprocess.run(["curl", "-sS", p.url + "/v1/models"], capture_output=True, text=True, check=True).stdout
        )
        assert models["data"][0]["id"] == "scripted"
        health = json.loads(
            subprocess.run(["curl", "-sS", p.url + "/health"], capture_output=True, text=True, check=True).stdout
        )
        assert health["library_version"] == 3 and health["experiences"] == 3 and health["upstream_calls"]["calls"] == 2


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"model": "m"}', "'messages' must be a non-empty list"),
        (b'{"messages": [{"content": "hi"}]}', "messages[0] must be an object with a 'role'"),
        (b'{"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}', "'stream' must be true or false"),
    ],
)
def test_malformed_requests_get_400_with_a_clear_message(tmp_path, raw, message):
    with proxy(tmp_path) as p:
        response = httpx.post(
            p.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
        assert response.status_code == 400 and message in response.json()["error"]["message"]
        assert p.upstream.bodies == []
        assert httpx.get(p.url + "/health").status_code == 200  # still serving


def test_bad_injection_header_is_a_400_and_none_injects_nothing(tmp_path):
    with proxy(tmp_path) as p:
        url, body = p.url + "/v1/chat/completions", {"model": "m", "messages": QUESTION}
        bad = httpx.post(url, json=body, headers={"x-tfgrpo-inject": "top3"})
        assert bad.status_code == 400 and "topk:K" in bad.json()["error"]["message"]
        none = httpx.post(url, json=body, headers={"x-tfgrpo-inject": "none"})
        assert none.status_code == 200 and p.upstream.bodies[-1]["messages"] == QUESTION
        assert p.state.traces.exchange(none.headers["x-tfgrpo-exchange-id"])["injected_ids"] == []


def test_topk_injection_picks_the_nearest_experience(tmp_path):
    with proxy(tmp_path, inject="topk:1", store_dir=tmp_path / "store") as p:
        messages = [{"role": "user", "content": "When adding 57 and 68, what about the carry digit?"}]
        response = httpx.post(p.url + "/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=120)
        assert response.status_code == 200
        system = p.upstream.bodies[-1]["messages"][0]["content"]
        assert LESSONS["G2"] in system and LESSONS["G0"] not in system and LESSONS["G1"] not in system


def test_upstream_errors_come_back_with_their_status_retried_and_counted(tmp_path):
    upstream = ScriptedUpstream()
    with proxy(tmp_path, upstream, max_retries=2, timeout_s=0.5) as p:
        url, body = p.url + "/v1/chat/completions", {"model": "m", "messages": QUESTION}
        upstream.push(Fault(429, {"retry-after": "0"}), Fault(503))  # two transient failures, then success
        assert httpx.post(url, json=body).status_code == 200
        upstream.push(*[Fault(429, {"retry-after": "0"})] * 3)  # 1 try + 2 retries, all 429
        limited = httpx.post(url, json=body)
        assert (
            limited.status_code == 429
            and limited.headers["retry-after"] == "0"
            and limited.headers["x-tfgrpo-attempts"] == "3"
        )
        upstream.push(*[Fault(502)] * 3)
        assert httpx.post(url, json=body).status_code == 502
        upstream.push(Fault(400))  # the request's own fault: not retried
        refused = httpx.post(url, json=body)
        assert refused.status_code == 400 and refused.headers["x-tfgrpo-attempts"] == "1"
        upstream.push(*[Fault(200, delay_s=2.0)] * 3)  # never answers in time
        timed_out = httpx.post(url, json=body, timeout=10)
        assert timed_out.status_code == 504 and "did not answer" in timed_out.json()["error"]["message"]
        upstream.push(*[Fault(500)] * 3)
        assert httpx.post(url, json=body).status_code == 500
        stats = httpx.get(p.url + "/health").json()["upstream_calls"]
        assert stats["retries"] == 2 + 2 + 2 + 2 + 2 and stats["timeouts"] == 3 and stats["failed_calls"] == 5
        assert stats["error_statuses"] == {"429": 4, "503": 1, "502": 3, "400": 1, "500": 3}
        statuses = [row["status"] for row in p.state.traces.exchanges()]
        assert statuses == [200, 429, 502, 400, 504, 500]


def test_streaming_request_gets_the_upstream_error_status(tmp_path):
    upstream = ScriptedUpstream()
    with proxy(tmp_path, upstream, max_retries=0) as p:
        upstream.push(Fault(429, {"retry-after": "1"}))
        response = httpx.post(
            p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION, "stream": True}
        )
        assert response.status_code == 429 and response.headers["retry-after"] == "1"


def test_upstream_dying_mid_stream_ends_the_stream_without_done_and_is_traced(tmp_path):
    upstream = ScriptedUpstream()
    with proxy(tmp_path, upstream) as p:
        upstream.push(Fault(200, break_stream=True))
        body = {"model": "m", "messages": QUESTION, "stream": True}
        try:
            with httpx.stream("POST", p.url + "/v1/chat/completions", json=body) as response:
                received = b"".join(response.iter_raw())
        except httpx.HTTPError:
            received = b""  # the proxy may also cut the connection: either way no [DONE]
        assert b"[DONE]" not in received
        row = p.traces(1)[-1]
        assert row["status"] == 502 and row["reply"] in ("par", "")
        assert httpx.post(p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION}).status_code == 200


def test_holdout_arm_is_sticky_per_user_and_gets_no_library(tmp_path):
    with proxy(tmp_path, holdout=0.5) as p:
        arms: dict[str, set[str]] = {}
        for _round in range(3):
            for user in range(12):
                response = httpx.post(
                    p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION, "user": f"user-{user}"}
                )
                arm = response.headers["x-tfgrpo-arm"]
                arms.setdefault(f"user-{user}", set()).add(arm)
                injected = (
                    p.upstream.bodies[-1]["messages"][0]["role"] == "system"
                    and "check the carry" in p.upstream.bodies[-1]["messages"][0]["content"]
                )
                assert injected == (arm == "B")
        assert all(len(seen) == 1 for seen in arms.values())  # one user, one arm
        assert {next(iter(seen)) for seen in arms.values()} == {"A", "B"}
        # the header key wins over the body's user
        first = httpx.post(
            p.url + "/v1/chat/completions",
            json={"model": "m", "messages": QUESTION, "user": "user-0"},
            headers={"x-tfgrpo-user": "conv-9"},
        )
        again = httpx.post(
            p.url + "/v1/chat/completions",
            json={"model": "m", "messages": QUESTION, "user": "user-1"},
            headers={"x-tfgrpo-user": "conv-9"},
        )
        assert first.headers["x-tfgrpo-arm"] == again.headers["x-tfgrpo-arm"]
        rows = p.state.traces.exchanges()
        assert {row["arm"] for row in rows if not row["injected_ids"]} == {"A"}


def test_hot_reload_swaps_the_library_without_dropping_requests(tmp_path):
    upstream = ScriptedUpstream(latency_s=0.02)
    with proxy(tmp_path, upstream, reload_interval_s=0.05) as p:

        async def traffic() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=30) as client:
                tasks = [
                    client.post(p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION})
                    for _ in range(60)
                ]
                return await asyncio.gather(*tasks)

        async def traffic_during_reload() -> list[httpx.Response]:
            load = asyncio.create_task(traffic())
            await asyncio.sleep(0.05)
            write_library(tmp_path / "library.next.json", {"G7": "A brand new lesson."}, version=4)
            os.replace(tmp_path / "library.next.json", tmp_path / "library.json")
            return await load

        responses = asyncio.run(traffic_during_reload())
        assert [r.status_code for r in responses] == [200] * 60
        deadline = time.monotonic() + 10
        while httpx.get(p.url + "/health").json()["library_version"] != 4:
            assert time.monotonic() < deadline, "library was not reloaded"
            time.sleep(0.05)
        response = httpx.post(p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION})
        assert response.headers["x-tfgrpo-library-version"] == "4"
        assert "A brand new lesson." in upstream.bodies[-1]["messages"][0]["content"]
        # a broken file keeps version 4 serving and is reported
        (tmp_path / "library.json").write_text("{ half written", encoding="utf-8")
        while not httpx.get(p.url + "/health").json()["reload_errors"]:
            assert time.monotonic() < deadline + 10
            time.sleep(0.05)
        assert (
            httpx.post(p.url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION}).headers[
                "x-tfgrpo-library-version"
            ]
            == "4"
        )


def test_api_keys_reach_the_upstream_but_never_the_traces(tmp_path):
    with proxy(tmp_path, api_key="sk-upstream-secret-123") as p:
        _client(p.url).chat.completions.create(model="m", messages=QUESTION)
        assert p.upstream.headers[-1]["authorization"] == "Bearer sk-upstream-secret-123"
        p.state.traces.flush()
    stored = b"".join(f.read_bytes() for f in tmp_path.iterdir() if f.name.startswith("traces.sqlite"))
    assert b"sk-client-secret" not in stored and b"sk-upstream-secret-123" not in stored and b"Bearer" not in stored
    assert b"What is 2+2?" in stored  # the file does hold the trace
