"""The issue's "done when": `tfgrpo serve --workers 2` on the real PostgreSQL starts with an empty champion;
`tfgrpo learner` learns from the rated traffic and proposes a challenger, which the sequential test promotes;
a harmful challenger is rolled back by it; all on live traffic rated by gold answers, with no request lost
(sent = answered = traced).

The served model (a scripted upstream) answers "What is A+B?" right with probability 0.9 when its system
message carries the true lesson for that problem ("When adding A and B, check the carry.", the lesson the
learner's scripted world teaches: tests/helpers/learn_world.py), 0.05 with the harmful one (whatever else it
carries), and 0.4 with neither; a hash of the request and its repeat count decides, so a run is
reproducible. The harmful challenger is proposed with `tfgrpo deploy propose` (the world teaches no harm).
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import sqlalchemy as sa

from tests.helpers.cli import run_cli
from tests.helpers.learn_world import World, WorldServer
from tests.helpers.live_traces import learner_config
from tests.helpers.postgres_server import postgres_server
from tests.helpers.serve_fixtures import write_library
from tests.helpers.serve_upstream import ScriptedUpstream, running, serve_cli
from tfgrpo.experiences import Library
from tfgrpo.live.learner import run_learner
from tfgrpo.serve.deployment import Deployment
from tfgrpo.serve.traces import EXCHANGES

HARMFUL_LESSON = "Always answer with the larger of the two numbers."
PROBLEMS = [(12, 34), (5, 8), (21, 9)]  # no lesson names another problem's answer (the learner's leakage guard)
USERS = [f"user-{i}" for i in range(300)]


def responder(messages: list[dict[str, Any]], k: int) -> str:
    system = " ".join(m["content"] for m in messages if m["role"] == "system")
    question = messages[-1]["content"]
    a, b = (int(x) for x in question.removeprefix("What is ").removesuffix("?").split("+"))
    true_lesson = f"When adding {a} and {b}, check the carry."
    right = 0.05 if HARMFUL_LESSON in system else 0.9 if true_lesson in system else 0.4  # the harm wins
    draw = int.from_bytes(hashlib.sha256(f"{system}|{question}|{k}".encode()).digest()[:8], "big") / 2**64
    return f"\\boxed{{{a + b if draw < right else a + b + 1}}}"


class Traffic:
    """Clients asking and rating until told to stop; what was sent and answered, counted."""

    def __init__(self, url: str):
        self.url = url
        self.sent = self.answered = self.rated = 0
        self.ids: set[str] = set()
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._rng = random.Random(44)

    def one(self) -> None:
        with self._lock:
            user, (a, b) = self._rng.choice(USERS), self._rng.choice(PROBLEMS)
            self.sent += 1
        body = {"model": "m", "messages": [{"role": "user", "content": f"What is {a}+{b}?"}]}
        headers = {"x-tfgrpo-user": user, "connection": "close"}  # a new connection: both workers take some
        try:
            response = httpx.post(self.url + "/v1/chat/completions", json=body, headers=headers, timeout=30)
            feedback = {"id": response.headers["x-tfgrpo-exchange-id"], "gold": str(a + b)}
            rated = httpx.post(self.url + "/v1/feedback", json=feedback, timeout=30)
        except (httpx.HTTPError, KeyError) as exc:
            with self._lock:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            return
        with self._lock:
            if response.status_code == 200:
                self.answered += 1
                self.ids.add(response.headers["x-tfgrpo-exchange-id"])
            else:
                self.failures.append(f"{response.status_code} {response.text[:200]}")
            self.rated += rated.status_code == 200

    def batch(self, count: int) -> None:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda _i: self.one(), range(count)))

    def until(self, deployment: Deployment, action: str, *, most: int) -> dict[str, Any]:
        """Traffic, 8 clients at once, until the decision log's last entry is `action` (at most `most` requests)."""
        with ThreadPoolExecutor(8) as pool:
            for _ in range(most // 50):
                list(pool.map(lambda _i: self.one(), range(50)))
                last = deployment.decisions(limit=1)[-1]
                if last["action"] != "propose":
                    assert last["action"] == action, last
                    return last
        raise AssertionError(f"no {action} after {most} requests: {deployment.decisions(limit=3)}")


def test_the_learner_proposes_the_test_promotes_a_true_lesson_and_rolls_back_a_harmful_one(tmp_path):
    empty = write_library(tmp_path / "empty.json", {})
    log = tmp_path / "serve.log"
    with postgres_server() as database, running(ScriptedUpstream(responder=responder, record=False)) as upstream:
        args = ["--library", str(empty), "--upstream", upstream + "/v1", "--traces", database, "--holdout", "0.1"]
        args += ["--deployment", "--poll-interval-s", "0.2", "--decide-interval-s", "0.3"]
        args += ["--min-samples", "20", "--max-samples", "1500", "--no-access-log"]
        engine = sa.create_engine(database)
        deployment = Deployment(engine)
        with serve_cli(log, *args, workers=2) as url:
            empty_hash = deployment.state().champion
            traffic = Traffic(url)
            traffic.batch(30)  # rated traffic on the empty champion: what the learner learns from
            with WorldServer(World()) as model:
                learned = run_learner(learner_config(database, tmp_path / "learner", model.base_url))
            (round_,) = learned.state.rounds
            assert round_.status == "proposed" and deployment.state().challenger == round_.challenger
            promoted = traffic.until(deployment, "promote", most=6000)
            good_hash = deployment.state().champion
            assert good_hash == round_.challenger != empty_hash and promoted["decided_by"] == "sequential test"
            lessons = [e.text for e in deployment.library(good_hash).experiences]
            assert {f"When adding {a} and {b}, check the carry." for a, b in PROBLEMS} <= set(lessons)
            harmful = tmp_path / "harmful.json"
            Library.from_texts([*lessons, HARMFUL_LESSON]).save(harmful)
            assert run_cli("deploy", "propose", harmful, "--traces", database) == 0
            rolled = traffic.until(deployment, "rollback", most=6000)
            assert rolled["decided_by"] == "sequential test" and deployment.state().champion == good_hash
            traffic.until(deployment, "rollback", most=100)  # and after the decision, serving goes on
        with engine.connect() as connection:
            traced = set(connection.execute(sa.select(EXCHANGES.c.id)).scalars())
            arms = dict(
                connection.execute(sa.select(EXCHANGES.c.arm, sa.func.count()).group_by(EXCHANGES.c.arm)).all()
            )
        decisions = deployment.decisions()
        engine.dispose()
    (tmp_path / "decisions.json").write_text(json.dumps(decisions, indent=2))
    print(
        f"\nsent {traffic.sent}, answered {traffic.answered}, rated {traffic.rated}, traced {len(traced)}, arms {arms}"
    )
    for entry in decisions:
        print(
            json.dumps(
                {
                    key: entry[key]
                    for key in ("revision", "action", "champion", "challenger", "rule", "decided_by", "evidence")
                }
            )
        )
    assert traffic.failures == []
    assert traffic.sent == traffic.answered == traffic.rated == len(traced) and traffic.ids == traced  # none lost
    assert [entry["action"] for entry in decisions] == ["start", "propose", "promote", "propose", "rollback"]
    assert decisions[1]["decided_by"].startswith("learner ") and decisions[3]["decided_by"].startswith("operator ")
    for entry in (decisions[2], decisions[4]):
        evidence = entry["evidence"]
        assert min(evidence["n_champion"], evidence["n_challenger"]) >= 20
        assert evidence["lower"] <= evidence["estimate"] <= evidence["upper"]
    assert decisions[2]["evidence"]["lower"] > 0 and decisions[4]["evidence"]["upper"] < 0
    assert set(arms) == {"A", "B", "C"}
