"""`tfgrpo learner` on a trace store: rewarded exchanges picked up, a learn round from the champion, the
challenger proposed into the deployment, a restart that reads nothing twice, paused learning, bad rows.

The learner's model is a scripted world (tests/helpers/learn_world.py): its rollouts of "What is A+B?" are
right on even samples and wrong on odd ones, and its group analysis proposes "When adding A and B, check
the carry.", so a round that runs the engine changes the library in a way the test can name.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from tests.helpers.cli import run_cli
from tests.helpers.learn_world import World, WorldServer, read_jsonl
from tests.helpers.live_traces import (
    CHAMPION_LESSON,
    add_exchange,
    learner_config,
    rewarded,
    rollout_requests,
    seed_deployment,
)
from tests.helpers.postgres_server import postgres_server
from tests.helpers.serve_fixtures import proxy, write_library
from tests.helpers.serve_upstream import ScriptedUpstream
from tfgrpo.cli.app import app
from tfgrpo.core.datasets import load_dataset_rows
from tfgrpo.experiences import Library
from tfgrpo.live.learner import run_learner
from tfgrpo.serve.live_library import Snapshot

PAIRS = [(12, 34), (5, 8), (21, 9)]


def _lessons(deployment, content_hash: str) -> set[str]:
    return {e.text for e in deployment.library(content_hash).experiences}


@pytest.mark.timeout(240)
def test_served_and_rated_exchanges_become_a_challenger_learned_from_the_champion(tmp_path):
    """A real `tfgrpo serve` (client keys on) fills the store; the learner proposes a library that keeps the
    champion's lesson and adds the ones the engine learned, and no key reaches its run directory."""
    traces = tmp_path / "traces.sqlite"
    deployment, store = seed_deployment(traces)
    store.close()
    (tmp_path / "clients.txt").write_text("sk-client-secret-1\n")
    world = World()
    served = ScriptedUpstream(responder=world.reply_for)
    library = write_library(tmp_path / "library.json", {"G0": CHAMPION_LESSON}, version=1)
    settings = {"traces": str(traces), "library": library, "client_keys": tmp_path / "clients.txt"}
    headers = {"authorization": "Bearer sk-client-secret-1"}
    with proxy(tmp_path, served, api_key="sk-upstream-secret", **settings) as p:
        for a, b in PAIRS:
            body = {"model": "m", "messages": [{"role": "user", "content": f"What is {a}+{b}?"}]}
            reply = httpx.post(p.url + "/v1/chat/completions", json=body, headers=headers)
            assert reply.status_code == 200
            rated = {"id": reply.headers["x-tfgrpo-exchange-id"], "gold": str(a + b)}
            assert httpx.post(p.url + "/v1/feedback", json=rated, headers=headers).status_code == 200
    with WorldServer(World()) as model:
        config = learner_config(traces, tmp_path / "learner", model.base_url, learn={})  # dedup on: the engine's
        result = run_learner(config)
        asked = Counter(rollout_requests(model.bodies))

    (entry,) = result.state.rounds
    assert (result.status, entry.status, entry.problems, entry.rewarded) == ("stopped", "proposed", 3, 3)
    now = deployment.state()
    assert now.challenger == entry.challenger and now.champion == entry.champion
    last = deployment.decisions()[-1]
    assert (last["action"], last["challenger"], last["decided_by"]) == ("propose", entry.challenger, "learner learner")
    learned = _lessons(deployment, entry.challenger)
    assert CHAMPION_LESSON in learned  # learned FROM the champion
    assert {f"When adding {a} and {b}, check the carry." for a, b in PAIRS} <= learned
    assert asked == {f"What is {a}+{b}?": 4 for a, b in PAIRS}  # G fresh rollouts of each rated prompt
    # the ledger: the round's learn run accounted its calls, and the learner's state carries them
    run = tmp_path / "learner" / "rounds" / "0001" / "learn"
    totals = json.loads((run / "metrics.json").read_text())["totals"]
    assert entry.usage["rollouts"] == totals["rollouts"] == 12 and entry.usage["completion_tokens"] > 0
    assert entry.cost_usd == totals["cost_usd"]
    for path in (tmp_path / "learner").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".jsonl", ".yaml", ".log"):
            text = path.read_text(errors="replace")
            for secret in ("sk-client-secret-1", "sk-upstream-secret", "sk-learner-test-key"):
                assert secret not in text, (path, secret)


@contextlib.contextmanager
def _store_url(kind: str, tmp_path) -> Iterator[str]:
    if kind == "postgresql":
        with postgres_server() as url:
            yield url
    else:
        yield str(tmp_path / "traces.sqlite")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_restart_resumes_from_the_cursor_and_from_the_begun_round(tmp_path, kind):
    with _store_url(kind, tmp_path) as traces:
        _restart_scenario(tmp_path, traces)


def _restart_scenario(tmp_path, traces: str) -> None:
    deployment, store = seed_deployment(traces)
    for a, b in PAIRS[:2]:
        rewarded(store, a, b)
    out = tmp_path / "learner"
    with WorldServer(World()) as model:
        first = run_learner(learner_config(traces, out, model.base_url))
        assert (first.state.read, first.state.pending_rewarded, first.state.rounds) == (2, 2, [])
        rewarded(store, *PAIRS[2])
        # the model is down for the round: it stays begun, its rewarded prompts consumed
        down = learner_config(traces, out, "http://127.0.0.1:9/v1").model_copy()
        down.llm.max_retries = 0
        failed = run_learner(down)
        assert failed.status == "failed" and failed.state.read == 3
        assert [r.status for r in failed.state.rounds] == ["learning"] and failed.state.pending == {}
        assert deployment.state().challenger is None
        resumed = run_learner(learner_config(traces, out, model.base_url))
        again = run_learner(learner_config(traces, out, model.base_url))
        asked = Counter(rollout_requests(model.bodies))
    assert [r.status for r in resumed.state.rounds] == ["proposed"] and resumed.state.read == 3
    assert again.state.read == 3 and len(again.state.rounds) == 1  # nothing read twice, no second round
    assert asked == {f"What is {a}+{b}?": 4 for a, b in PAIRS}
    assert deployment.state().challenger == resumed.state.rounds[0].challenger
    assert sum(d["action"] == "propose" for d in deployment.decisions()) == 1
    assert "resumed at step 0" in (out / "rounds" / "0001" / "learn" / "events.log").read_text()
    store.close()
    deployment.engine.dispose()


@pytest.mark.timeout(240)
def test_paused_learning_and_a_running_test_propose_nothing(tmp_path):
    traces = tmp_path / "traces.sqlite"
    deployment, store = seed_deployment(traces)
    for a, b in PAIRS:
        rewarded(store, a, b)
    deployment.pause_learning(True, by="admin test")
    with WorldServer(World()) as model:
        paused = run_learner(learner_config(traces, tmp_path / "learner", model.base_url))
        assert paused.state.rounds == [] and paused.state.pending_rewarded == 3
        assert model.bodies == []  # nothing learned while paused: nothing paid
        assert [d["action"] for d in deployment.decisions()] == ["start", "pause"]
        deployment.pause_learning(False, by="admin test")
        proposed = run_learner(learner_config(traces, tmp_path / "learner", model.base_url))
        assert [r.status for r in proposed.state.rounds] == ["proposed"]
        for a, b in [(40, 2), (7, 7), (30, 3)]:
            rewarded(store, a, b)
        calls = len(model.bodies)
        testing = run_learner(learner_config(traces, tmp_path / "learner", model.base_url))
    assert len(testing.state.rounds) == 1 and testing.state.pending_rewarded == 3 and len(model.bodies) == calls
    assert [d["action"] for d in deployment.decisions()] == ["start", "pause", "resume", "propose"]
    log = (tmp_path / "learner" / "events.log").read_text()
    assert "learning is paused" in log and "is under test" in log


def test_malformed_cut_unlabelled_and_locked_out_rows_are_skipped_and_recorded(tmp_path):
    traces = tmp_path / "traces.sqlite"
    _, store = seed_deployment(traces)
    test_problem = load_dataset_rows("aime24")[0]
    bad = {
        add_exchange(store, messages="[{not json"): "malformed row: not JSON",
        add_exchange(store, messages='{"role": "user"}'): "malformed row: messages are not a list",
        add_exchange(store, "What is 1+1?", truncated={"messages": 2_000_000}): "cut at max_trace_chars",
        add_exchange(store, "   "): "no user message",
        add_exchange(store, test_problem.problem): f"locked out: the prompt is aime24:{test_problem.id}",
    }
    for exchange_id in bad:
        assert store.set_feedback(exchange_id, reward=1.0, gold="2")
    unlabelled = add_exchange(store, "What is 2+2?", reply="\\boxed{4}")
    store.set_feedback(unlabelled, reward=1.0)  # a bare reward: no gold, and no rated_threshold
    good = rewarded(store, 3, 4)
    config = learner_config(traces, tmp_path / "learner", "http://127.0.0.1:9/v1", propose_every=100)
    state = run_learner(config).state
    skipped = {row["exchange_id"]: row for row in read_jsonl(tmp_path / "learner" / "skipped.jsonl")}
    assert set(skipped) == {*bad, unlabelled}
    for exchange_id, reason in bad.items():
        assert reason in skipped[exchange_id]["reason"]
    kinds = Counter(row["kind"] for row in skipped.values())
    assert kinds == {"malformed": 2, "locked_out": 1, "unusable": 3}
    assert "without a gold answer" in skipped[unlabelled]["reason"]
    assert (state.read, state.skipped, state.malformed, state.locked_out) == (7, 6, 2, 1)
    assert [p["extra"]["exchange_id"] for p in state.pending.values()] == [good]
    # the same store again: nothing is read or recorded twice
    again = run_learner(config).state
    assert again.read == 7 and len(read_jsonl(tmp_path / "learner" / "skipped.jsonl")) == 6


@pytest.mark.timeout(240)
@pytest.mark.parametrize("source", ["rated", "majority"])
def test_a_rated_reply_or_the_majority_of_fresh_rollouts_labels_the_prompts(tmp_path, source):
    traces = tmp_path / "traces.sqlite"
    deployment, store = seed_deployment(traces)
    for a, b in PAIRS:
        exchange_id = add_exchange(store, f"What is {a}+{b}?", reply=f"So \\boxed{{{a + b}}}")
        if source == "rated":
            store.set_feedback(exchange_id, reward=0.9)
    settings = {"rated_threshold": 0.8} if source == "rated" else {"ground_truth": False, "group_size": 3}
    with WorldServer(World()) as model:
        state = run_learner(learner_config(traces, tmp_path / "learner", model.base_url, **settings)).state
    (entry,) = state.rounds
    assert entry.status == "proposed" and entry.problems == 3
    problems = read_jsonl(tmp_path / "learner" / "rounds" / "0001" / "problems.jsonl")
    if source == "rated":
        assert sorted(p["answer"] for p in problems) == sorted(str(a + b) for a, b in PAIRS)
    else:
        assert all("answer" not in p for p in problems)
    assert {f"When adding {a} and {b}, check the carry." for a, b in PAIRS} <= _lessons(deployment, entry.challenger)


def test_the_command_runs_once_and_refuses_bad_settings_in_one_line(tmp_path, capsys):
    traces = tmp_path / "traces.sqlite"
    seed_deployment(traces)[1].close()
    out = tmp_path / "learner"
    base = ["learner", "--traces", str(traces), "--out", str(out), "--once", "--settle-s", "0"]
    model = ["--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]
    result = CliRunner().invoke(app, [*base, *model])
    assert result.exit_code == 0, result.output
    assert "0 round(s)" in result.output and (out / "state.json").is_file()
    (tmp_path / "bad.yaml").write_text("learn:\n  data: easy\n")
    cases = [
        ([*base, "--config", str(tmp_path / "bad.yaml")], "learn.data: set by the learner"),
        ([*base, "--no-ground-truth"], "learns with ground_truth=true"),
    ]
    for args, message in cases:
        capsys.readouterr()
        code = run_cli(*args)
        error = capsys.readouterr().err
        assert code == 2 and message in error and "Traceback" not in error, error
        assert len(error.strip().splitlines()) == 1, error


@pytest.mark.timeout(240)
def test_a_round_begun_from_a_champion_that_no_longer_serves_is_stale_and_its_prompts_wait_again(tmp_path):
    traces = tmp_path / "traces.sqlite"
    deployment, store = seed_deployment(traces)
    for a, b in PAIRS:
        rewarded(store, a, b)
    down = learner_config(traces, tmp_path / "learner", "http://127.0.0.1:9/v1")
    down.llm.max_retries = 0
    assert [r.status for r in run_learner(down).state.rounds] == ["learning"]
    other = Library.from_texts(["Write the final answer in a box."])
    other_hash = Snapshot.of(other).content_hash
    promoted = deployment.promote(deployment.propose(other, other_hash, source="admin", by="admin"), rule="t", by="t")
    with WorldServer(World()) as model:
        state = run_learner(learner_config(traces, tmp_path / "learner", model.base_url)).state
        calls = [body for body in model.bodies if "Read the whole question" in json.dumps(body)]
    assert [r.status for r in state.rounds] == ["stale", "proposed"] and calls == []  # the old champion cost nothing
    assert (state.rounds[1].champion, state.rounds[1].problems) == (promoted.champion, 3)
    assert "Write the final answer in a box." in _lessons(deployment, state.rounds[1].challenger)


def test_at_most_max_problems_wait_the_oldest_dropped_and_counted(tmp_path):
    traces = tmp_path / "traces.sqlite"
    _, store = seed_deployment(traces)
    for a, b in PAIRS:
        rewarded(store, a, b)
    config = learner_config(traces, tmp_path / "learner", "http://127.0.0.1:9/v1", propose_every=100, max_problems=2)
    state = run_learner(config).state
    assert [p["problem"] for p in state.pending.values()] == ["What is 5+8?", "What is 21+9?"]
    assert (state.dropped, state.pending_rewarded) == (1, 3)


@pytest.mark.timeout(240)
def test_a_round_runs_after_propose_interval_min_with_fewer_than_propose_every_waiting(tmp_path):
    traces = tmp_path / "traces.sqlite"
    deployment, store = seed_deployment(traces)
    rewarded(store, *PAIRS[0])
    with WorldServer(World()) as model:
        config = learner_config(traces, tmp_path / "learner", model.base_url, propose_every=100)
        by_count = run_learner(config.model_copy(update={"propose_interval_min": None})).state
        assert by_count.rounds == [] and by_count.pending_rewarded == 1
        time.sleep(0.1)
        by_time = run_learner(config.model_copy(update={"propose_interval_min": 0.001})).state  # 0.06 s
    assert [(r.status, r.problems) for r in by_time.rounds] == [("proposed", 1)]
    assert deployment.state().challenger == by_time.rounds[0].challenger


@pytest.mark.timeout(240)
def test_the_learner_process_waits_for_the_deployment_follows_the_store_and_stops_on_sigint(tmp_path):
    traces, out = tmp_path / "traces.sqlite", tmp_path / "learner"
    with WorldServer(World()) as model:
        command = [sys.executable, "-m", "tfgrpo", "learner", "--traces", str(traces), "--out", str(out)]
        command += ["--settle-s", "0", "--poll-interval-s", "0.1", "--propose-every", "3", "-G", "4"]
        command += ["--backend", "openai", "--model", "m", "--base-url", model.base_url]
        with open(tmp_path / "learner.log", "w") as log:
            process = subprocess.Popen(command, stderr=log, stdout=subprocess.DEVNULL)
        try:
            _wait_for(lambda: "waiting for `tfgrpo serve`" in _read(out / "events.log"), process)
            deployment, store = seed_deployment(traces)
            for a, b in PAIRS:
                rewarded(store, a, b)
            _wait_for(lambda: deployment.state().challenger is not None, process)
        finally:
            process.send_signal(signal.SIGINT)
            code = process.wait(timeout=60)
    state = json.loads((out / "state.json").read_text())
    assert code == 130 and [r["status"] for r in state["rounds"]] == ["proposed"]
    assert deployment.state().challenger == state["rounds"][0]["challenger"]
    assert "Traceback" not in (tmp_path / "learner.log").read_text()


def _read(path) -> str:
    return path.read_text() if path.is_file() else ""


def _wait_for(condition, process, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, "the learner exited"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.timeout(240)
def test_the_budget_caps_all_rounds_and_a_learner_given_more_resumes_the_round(tmp_path):
    traces = tmp_path / "traces.sqlite"
    deployment, store = seed_deployment(traces)
    for a, b in PAIRS:
        rewarded(store, a, b)
    with WorldServer(World()) as model:
        config = learner_config(traces, tmp_path / "learner", model.base_url)
        config.llm.price_input_per_1m = config.llm.price_output_per_1m = 1000.0  # the rollouts alone cost ~$0.5
        config.llm.budget_usd = 0.01
        capped = run_learner(config)
        assert capped.status == "budget_exceeded" and [r.status for r in capped.state.rounds] == ["learning"]
        assert capped.state.cost_usd >= 0.01 and deployment.state().challenger is None  # calls in flight finish
        config.llm.budget_usd = 10.0
        more = run_learner(config)
    assert more.status == "stopped" and [r.status for r in more.state.rounds] == ["proposed"]
    assert more.state.cost_usd > capped.state.cost_usd
    assert deployment.state().challenger == more.state.rounds[0].challenger


@pytest.mark.timeout(240)
def test_a_round_whose_library_carries_test_set_material_is_refused_not_proposed(tmp_path):
    traces = tmp_path / "traces.sqlite"
    copied = load_dataset_rows("aime24", require_answer=False)[0].problem  # a lesson that copies an aime24 problem
    deployment, store = seed_deployment(traces, Library.from_texts([CHAMPION_LESSON, copied]))
    for a, b in PAIRS:
        rewarded(store, a, b)
    with WorldServer(World()) as model:
        result = run_learner(learner_config(traces, tmp_path / "learner", model.base_url))
    assert [r.status for r in result.state.rounds] == ["refused"]
    assert "test-set material" in (result.state.rounds[0].message or "")
    assert [d["action"] for d in deployment.decisions()] == ["start"]  # nothing reached the deployment


@pytest.mark.timeout(240)
def test_a_library_already_rolled_back_is_not_proposed_again(tmp_path):
    traces = tmp_path / "traces.sqlite"
    deployment, store = seed_deployment(traces)
    for a, b in PAIRS:
        rewarded(store, a, b)
    with WorldServer(World()) as model:
        first = run_learner(learner_config(traces, tmp_path / "first", model.base_url))
        [proposed] = first.state.rounds
        assert proposed.status == "proposed"
        state = deployment.state()
        deployment.end_test(state, "rollback", rule="upper bound below -margin", by="sequential test")
        # the same rated traffic learned again from the same champion gives the same library
        again = run_learner(learner_config(traces, tmp_path / "second", model.base_url))
    [refused] = again.state.rounds
    assert refused.challenger == proposed.challenger and refused.status == "refused"
    assert "rolled back before" in (refused.message or "")
    assert [d["action"] for d in deployment.decisions()] == ["start", "propose", "rollback"]
