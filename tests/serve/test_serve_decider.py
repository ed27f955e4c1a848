"""What the decider counts: per side, the exchanges since the test began, assigned B and served the champion
or assigned C and served the challenger; the holdout, pins, other versions and earlier exchanges never; a
failed exchange only for the guard; rewards in the order they arrived, each exchange's one current reward."""

from __future__ import annotations

import json
import time

from tfgrpo.experiences import Library
from tfgrpo.serve.decider import Decider, act, arm_data, read_test
from tfgrpo.serve.deploy_settings import DeploymentSettings
from tfgrpo.serve.deployment import Deployment
from tfgrpo.serve.live_library import Snapshot
from tfgrpo.serve.traces import TraceStore


def _row(exchange_id: str, arm: str, version: str, *, prompt: str = "p", status: int = 200, error: str | None = None):
    return {
        "id": exchange_id,
        "created_at": time.time(),
        "arm": arm,
        "library_hash": version,
        "injected_ids": json.dumps([]),
        "prompt_key": prompt,
        "messages": "[]",
        "status": status,
        "error": error,
        "stream": False,
    }


def _versions() -> tuple[tuple[Library, str], tuple[Library, str]]:
    champion, challenger = Library(), Library.from_texts(["Check the carry."])
    return (champion, Snapshot.of(champion).content_hash), (challenger, Snapshot.of(challenger).content_hash)


def test_only_the_tests_own_exchanges_count_each_on_its_side(tmp_path):
    store = TraceStore(tmp_path / "traces.sqlite")
    deployment = Deployment(store.engine)
    (champion, champion_hash), (challenger, challenger_hash) = _versions()
    deployment.start(champion, champion_hash, source="file", by="serve")
    store.add(_row("before", "B", champion_hash))  # made before the test began
    store.flush()
    time.sleep(0.01)
    state = deployment.propose(challenger, challenger_hash, source="t", by="t")
    rows = [
        _row("b1", "B", champion_hash, prompt="p1"),
        _row("b2", "B", champion_hash, prompt="p2"),
        _row("c1", "C", challenger_hash, prompt="p1"),
        _row("c-failed", "C", challenger_hash, status=502, error="upstream_unreachable"),
        _row("a1", "A", champion_hash),  # the holdout
        _row("pin1", "pin", challenger_hash),  # pinned by an admin
        _row("b-old", "B", "0" * 64),  # in flight on an earlier champion
    ]
    for row in rows:
        store.add(row)
    for exchange_id, reward in [("b2", 0.0), ("c1", 1.0), ("b1", 0.5), ("a1", 1.0), ("pin1", 1.0), ("b-old", 1.0)]:
        assert store.set_feedback(exchange_id, reward=reward)
    store.set_feedback("c1", reward=0.25)  # rated again: the latest counts, once
    store.set_feedback("before", reward=1.0)
    data = arm_data(store.engine, state)
    assert [(o.prompt_key, o.reward) for o in data.champion] == [("p2", 0.0), ("p1", 0.5)]  # in rating order
    assert [(o.prompt_key, o.reward) for o in data.challenger] == [("p1", 0.25)]
    assert data.champion_failures == [False, False] and sorted(data.challenger_failures) == [False, True]
    reading = read_test(store.engine, state, DeploymentSettings(), (0.0, 1.0))
    assert reading is not None and (reading.bounds.n_champion, reading.bounds.n_challenger) == (2, 1)
    assert reading.decision.action == "continue"  # below min_samples
    store.close()


def test_one_decision_however_many_deciders_read_the_same_moment(tmp_path):
    store = TraceStore(tmp_path / "traces.sqlite")
    deployment = Deployment(store.engine)
    (champion, champion_hash), (challenger, challenger_hash) = _versions()
    deployment.start(champion, champion_hash, source="file", by="serve")
    state = deployment.propose(challenger, challenger_hash, source="t", by="t")
    for i in range(40):
        store.add(_row(f"b{i}", "B", champion_hash, prompt=f"p{i}"))
        store.add(_row(f"c{i}", "C", challenger_hash, prompt=f"q{i}"))
    for i in range(40):
        store.set_feedback(f"b{i}", reward=0.0)
        store.set_feedback(f"c{i}", reward=1.0)
    settings = DeploymentSettings(test={"min_samples": 20})
    deciders = [Decider(Deployment(store.engine), store.engine, settings, (0.0, 1.0)) for _ in range(2)]
    readings = [read_test(store.engine, state, settings, (0.0, 1.0)) for _ in deciders]
    assert all(r is not None and r.decision.action == "promote" for r in readings)
    outcomes = [act(deployment, reading) for reading in readings if reading is not None]
    assert outcomes[0] is not None and outcomes[1] is None  # the second lost the compare-and-swap
    log = deployment.decisions()
    assert [entry["action"] for entry in log] == ["start", "propose", "promote"]
    assert log[-1]["decided_by"] == "sequential test" and log[-1]["evidence"]["n_challenger"] == 40
    assert all(decider.step() is None for decider in deciders)  # no test runs any more: nothing to decide
    store.close()
