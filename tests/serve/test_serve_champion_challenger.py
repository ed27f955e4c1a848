"""Champion, challenger and holdout in one `tfgrpo serve` process: arm C sticky and traced with its version,
no client choosing its arm or version, admin routes and pins for admin keys only, the guard rolling back a
failing challenger, a leaking challenger refused, and /metrics and the page showing the running test."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.cli import run_cli
from tests.helpers.serve_fixtures import proxy, write_library
from tests.helpers.serve_upstream import ScriptedUpstream, _send_json
from tfgrpo.core.datasets import load_dataset_rows
from tfgrpo.experiences import Library
from tfgrpo.serve import operations
from tfgrpo.serve.deployment import Deployment
from tfgrpo.serve.live_library import Snapshot

LESSON = "When adding two numbers, check the carry."
BROKEN = "Answer in the broken format."
ADMIN, PLAIN = "sk-admin-0001", "sk-plain-0001"


def _deployment(**test: Any) -> dict[str, Any]:
    return {
        "enabled": True,
        "poll_interval_s": 0.05,
        "decide_interval_s": 0.1,
        "test": {"min_samples": 5, "max_samples": 400, **test},
    }


def _propose(p: Any, *lessons: str) -> str:
    library = Library.from_texts(lessons)
    state = operations.propose(Deployment(p.state.traces.engine), library, source="test", by="test", test_data=[])
    assert state.challenger is not None
    _wait(lambda: p.state.deployment.current.challenger is not None)
    return state.challenger


def _wait(condition: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)
    return value


def _chat(
    url: str, user: str, *, headers: dict[str, str] | None = None, prompt: str = "What is 2+2?"
) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
    return httpx.post(url + "/v1/chat/completions", json=body, headers={"x-tfgrpo-user": user, **(headers or {})})


def test_the_challenger_gets_its_share_sticky_per_user_and_is_traced_with_its_version(tmp_path):
    empty = write_library(tmp_path / "empty.json", {})
    with proxy(tmp_path, library=empty, holdout=0.2, deployment=_deployment()) as p:
        champion = p.state.deployment.current.champion.content_hash
        challenger = _propose(p, LESSON)
        health = httpx.get(p.url + "/health").json()["deployment"]
        assert (health["champion"], health["challenger"], health["revision"]) == (champion, challenger, 2)
        answers = [(f"user-{i}", _chat(p.url, f"user-{i}")) for i in range(60) for _ in range(2)]
        arms: dict[str, set[str]] = {}
        for user, response in answers:
            assert response.status_code == 200
            arms.setdefault(user, set()).add(response.headers["x-tfgrpo-arm"])
        assert all(len(seen) == 1 for seen in arms.values())  # sticky
        counts = {arm: sum(seen == {arm} for seen in arms.values()) for arm in "ABC"}
        assert all(counts[arm] > 0 for arm in "ABC"), counts
        assert 0.2 < counts["C"] / (counts["B"] + counts["C"]) < 0.8, counts  # challenger_share 0.5
        rows = {row["id"]: row for row in p.traces(len(answers))}
        for _user, response in answers:
            row = rows[response.headers["x-tfgrpo-exchange-id"]]
            expected = challenger if row["arm"] == "C" else champion
            assert row["library_hash"] == response.headers["x-tfgrpo-library-hash"] == expected
            assert row["treated"] is (row["arm"] == "C")  # the empty champion injects nothing
        systems = [
            body["messages"][0]["content"] for body in p.upstream.bodies if body["messages"][0]["role"] == "system"
        ]
        assert len(systems) == 2 * counts["C"] and all(LESSON in system for system in systems)


def _keys(tmp_path: Path) -> dict[str, str]:
    clients, admins = tmp_path / "keys.txt", tmp_path / "admins.txt"
    clients.write_text(f"{PLAIN}\n")
    admins.write_text(f"sha256:{hashlib.sha256(ADMIN.encode()).hexdigest()}\n")
    return {"client_keys": str(clients), "admin_keys": str(admins)}


def test_a_plain_key_chooses_neither_its_arm_nor_its_version_and_cannot_operate(tmp_path):
    with proxy(tmp_path, deployment=_deployment(), **_keys(tmp_path)) as p:
        challenger = _propose(p, LESSON)
        plain = {"authorization": f"Bearer {PLAIN}"}
        seen = {_chat(p.url, f"user-{i}", headers=plain).headers["x-tfgrpo-arm"] for i in range(20)}
        assert len(seen) == 1  # the key decides, not the user header it varies
        pinned = _chat(p.url, "u", headers=plain | {"x-tfgrpo-version": challenger[:12]})
        assert pinned.status_code == 403 and pinned.json()["error"]["code"] == "pin_needs_admin"
        for route in ("", "/log"):
            assert httpx.get(p.url + "/v1/admin/deployment" + route, headers=plain).status_code == 403
        refused = httpx.post(p.url + "/v1/admin/deployment/promote", headers=plain)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "admin_only"

        admin = {"authorization": f"Bearer {ADMIN}"}
        pinned = _chat(p.url, "u", headers=admin | {"x-tfgrpo-version": challenger[:12]})
        assert pinned.status_code == 200 and pinned.headers["x-tfgrpo-arm"] == "pin"
        assert pinned.headers["x-tfgrpo-library-hash"] == challenger and LESSON in str(p.upstream.bodies[-1])
        unknown = _chat(p.url, "u", headers=admin | {"x-tfgrpo-version": "0" * 12})
        assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "bad_version"
        status = httpx.get(p.url + "/v1/admin/deployment", headers=admin).json()
        assert status["challenger"] == challenger and status["test"]["n_challenger"] == 0  # the pin never counts
        promoted = httpx.post(p.url + "/v1/admin/deployment/promote", headers=admin)
        assert promoted.status_code == 200 and promoted.json()["champion"] == challenger
        assert _chat(p.url, "v", headers=admin).headers["x-tfgrpo-library-hash"] == challenger  # served at once
        again = httpx.post(p.url + "/v1/admin/deployment/promote", headers=admin)
        assert again.status_code == 409 and again.json()["error"]["code"] == "deployment_refused"
        log = httpx.get(p.url + "/v1/admin/deployment/log", headers=admin).json()
        assert [entry["action"] for entry in log] == ["start", "propose", "promote"]
        assert log[-1]["decided_by"] == f"admin {hashlib.sha256(ADMIN.encode()).hexdigest()[:8]}"


class FailingForOneLesson(ScriptedUpstream):
    """A 500 for every request whose system message carries BROKEN; the scripted reply otherwise."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].endswith("/chat/completions"):
            raw = b""
            while True:
                message = await receive()
                raw += message.get("body", b"")
                if not message.get("more_body"):
                    break
            if BROKEN in json.dumps(json.loads(raw)["messages"]):
                await _send_json(send, 500, {"error": {"message": "scripted failure", "type": "scripted"}})
                return

            async def replay() -> dict[str, Any]:
                return {"type": "http.request", "body": raw, "more_body": False}

            receive = replay
        await super().__call__(scope, receive, send)


def test_the_guard_rolls_back_a_challenger_whose_upstream_fails(tmp_path):
    with proxy(tmp_path, FailingForOneLesson(), deployment=_deployment(), max_retries=0) as p:
        challenger = _propose(p, BROKEN)
        sent = 0
        while p.state.deployment.current.challenger is not None:
            assert sent < 2000, "the guard never fired"
            response = _chat(p.url, f"user-{sent}")
            if response.status_code == 200:
                feedback = {"id": response.headers["x-tfgrpo-exchange-id"], "reward": 1.0}
                assert httpx.post(p.url + "/v1/feedback", json=feedback).status_code == 200
            else:
                assert response.headers["x-tfgrpo-arm"] == "C"
            sent += 1
        entry = p.state.deployment.deployment.decisions()[-1]
        assert (entry["action"], entry["decided_by"], entry["challenger"]) == ("rollback", "guard", challenger)
        assert entry["evidence"]["guard"]["lower"] > 0.05
        metrics = httpx.get(p.url + "/metrics").text
        assert 'tfgrpo_serve_decisions_total{action="rollback",decided_by="guard"} 1.0' in metrics
        assert f'tfgrpo_serve_test_bound{{challenger="{challenger[:12]}",side="guard_lower"}}' in metrics
        assert 'tfgrpo_serve_requests_total{arm="C"' in metrics


def test_the_page_plots_the_running_test_and_lists_the_decisions(tmp_path):
    def responder(messages: list[dict[str, Any]], k: int) -> str:
        return "right" if LESSON in json.dumps(messages) else "wrong"

    undecided = _deployment(min_samples=1000, max_samples=2000)  # the test runs on, to be drawn
    with proxy(tmp_path, ScriptedUpstream(responder=responder), deployment=undecided) as p:
        challenger = _propose(p, LESSON)
        for i in range(30):
            response = _chat(p.url, f"user-{i}", prompt=f"What is {i}+1?")
            reward = 1.0 if response.json()["choices"][0]["message"]["content"] == "right" else 0.0
            feedback = {"id": response.headers["x-tfgrpo-exchange-id"], "reward": reward}
            assert httpx.post(p.url + "/v1/feedback", json=feedback).status_code == 200
        page = httpx.get(p.url + "/").text
        assert '<svg xmlns="http://www.w3.org/2000/svg" id="confidence-sequence"' in page
        assert page.count("<polygon points=") == 1 and page.count("<polyline points=") == 1
        assert f"<code>{challenger[:12]}</code> under test" in page and 'id="decisions"' in page
        deployment = p.state.deployment.deployment  # the page's numbers are the operations' status
        status = operations.status(deployment, p.state.traces.engine, p.state.config.deployment, (0.0, 1.0))
        assert f"after {status['test']['n_champion']} + {status['test']['n_challenger']} rewards" in page
        assert status["test"]["estimate"] > 0.5  # the lesson turns every answer right


def _aime_copy() -> str:
    return load_dataset_rows("aime24", require_answer=False)[0].problem


def test_a_challenger_holding_test_set_material_is_refused(tmp_path):
    with proxy(tmp_path, deployment=_deployment()) as p:
        deployment = Deployment(p.state.traces.engine)
        with pytest.raises(operations.DeploymentRefused, match="test-set material"):
            operations.propose(deployment, Library.from_texts([_aime_copy()]), source="t", by="t", test_data=[])
        assert [entry["action"] for entry in deployment.decisions()] == ["start"]
        leaking = tmp_path / "leaking.json"
        Library.from_texts([_aime_copy()]).save(leaking)
        assert run_cli("deploy", "propose", leaking, "--traces", tmp_path / "traces.sqlite") == 2
        assert deployment.state().challenger is None


def test_the_deploy_commands_operate_the_stored_deployment(tmp_path, capsys):
    with proxy(tmp_path, deployment=_deployment()) as p:
        traces = tmp_path / "traces.sqlite"
        first = p.state.deployment.current.champion.content_hash
        good = write_library(tmp_path / "good.json", {"L1": LESSON})
        assert run_cli("deploy", "propose", good, "--traces", traces) == 0
        challenger = Snapshot.of(Library.load(good)).content_hash
        _wait(lambda: p.state.deployment.current.challenger is not None)
        capsys.readouterr()
        assert run_cli("deploy", "status", "--traces", traces, "--json") == 0
        status = json.loads(capsys.readouterr().out)
        assert status["challenger"] == challenger and status["test"]["decision"]["action"] == "continue"
        assert run_cli("deploy", "promote", "--traces", traces) == 0
        _wait(lambda: p.state.deployment.current.champion.content_hash == challenger)
        assert _chat(p.url, "u").headers["x-tfgrpo-library-hash"] == challenger  # no holdout: arm B, the champion
        assert run_cli("deploy", "rollback", "--traces", traces) == 0  # no test running: the previous champion
        _wait(lambda: p.state.deployment.current.champion.content_hash == first)
        assert (
            run_cli("deploy", "pause", "--traces", traces) == 0
            and run_cli("deploy", "resume", "--traces", traces) == 0
        )
        assert run_cli("deploy", "promote", "--traces", traces) == 2  # nothing under test: one line, exit 2
        capsys.readouterr()
        assert run_cli("deploy", "log", "--traces", traces, "--json") == 0
        log = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert [entry["action"] for entry in log] == ["start", "propose", "promote", "revert", "pause", "resume"]
        assert all(entry["decided_by"].startswith("operator ") for entry in log[1:])
