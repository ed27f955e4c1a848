"""The deployment in the database: champion, challenger, versions and the decision log, changed only by
compare-and-swap, on SQLite and on the real PostgreSQL."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.helpers.postgres_server import postgres_server
from tfgrpo.experiences import Library
from tfgrpo.serve.deployment import Deployment, StaleRevision
from tfgrpo.serve.live_library import Snapshot


def _version(*lessons: str) -> tuple[Library, str]:
    library = Library.from_texts(lessons) if lessons else Library()
    return library, Snapshot.of(library).content_hash


@contextlib.contextmanager
def _engine(kind: str, tmp_path) -> Iterator[sa.Engine]:
    if kind == "postgresql":
        with postgres_server() as url:
            engine = sa.create_engine(url)
            yield engine
            engine.dispose()
    else:
        engine = sa.create_engine(f"sqlite:///{tmp_path / 'traces.sqlite'}")
        yield engine
        engine.dispose()


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_challenger_is_promoted_rolled_back_and_reverted_each_as_one_logged_decision(tmp_path, kind):
    with _engine(kind, tmp_path) as engine:
        deployment = Deployment(engine)
        empty, empty_hash = _version()
        started = deployment.start(empty, empty_hash, source="file library.json", by="serve")
        assert (started.champion, started.challenger, started.revision) == (empty_hash, None, 1)
        # a restart (or a second worker) with another file keeps the stored champion
        other, other_hash = _version("Check the carry when adding.")
        assert deployment.start(other, other_hash, source="file b.json", by="serve").champion == empty_hash

        good, good_hash = _version("Check the carry when adding.")
        testing = deployment.propose(good, good_hash, source="learner run1 step 2", by="learner run1")
        assert testing.challenger == good_hash and testing.challenger_since is not None
        with pytest.raises(StaleRevision, match="under test"):
            deployment.propose(*_version("Another lesson to test."), source="x", by="learner")
        promoted = deployment.promote(
            testing,
            rule="lower bound +0.120 > min_effect 0.000",
            by="sequential test",
            evidence={"n_champion": 40, "n_challenger": 41, "lower": 0.12},
        )
        assert (promoted.champion, promoted.challenger) == (good_hash, None)
        assert deployment.library(good_hash).experiences[0].text == "Check the carry when adding."

        bad, bad_hash = _version("Always answer 0.")
        testing = deployment.propose(bad, bad_hash, source="learner run1 step 4", by="learner run1")
        rolled = deployment.end_test(
            testing, "rollback", rule="upper bound -0.200 < -margin 0.000", by="sequential test"
        )
        assert (rolled.champion, rolled.challenger) == (good_hash, None)

        reverted = deployment.revert(rolled, by="admin 1a2b")
        assert reverted.champion == empty_hash
        log = deployment.decisions()
        assert [entry["action"] for entry in log] == ["start", "propose", "promote", "propose", "rollback", "revert"]
        assert [entry["revision"] for entry in log] == [1, 2, 3, 4, 5, 6]
        assert log[2]["evidence"]["n_challenger"] == 41 and log[2]["decided_by"] == "sequential test"
        assert log[4]["challenger"] == bad_hash and log[4]["champion"] == good_hash


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_two_deciders_looking_at_the_same_moment_make_one_decision(tmp_path, kind):
    with _engine(kind, tmp_path) as engine:
        deciders = [Deployment(engine) for _ in range(8)]
        deciders[0].start(*_version(), source="file", by="serve")
        testing = deciders[0].propose(*_version("Check the carry when adding."), source="learner", by="learner")
        outcomes: list[str] = []
        barrier = threading.Barrier(len(deciders))

        def decide(deployment: Deployment) -> None:
            seen = deployment.state()
            assert seen == testing
            barrier.wait()
            try:
                deployment.promote(seen, rule="lower bound clears", by="sequential test")
                outcomes.append("promoted")
            except StaleRevision:
                outcomes.append("stale")

        threads = [threading.Thread(target=decide, args=(deployment,)) for deployment in deciders]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["promoted"] + ["stale"] * 7
        assert [entry["action"] for entry in deciders[0].decisions()].count("promote") == 1


def test_a_stale_state_changes_nothing_and_pausing_is_logged(tmp_path):
    with _engine("sqlite", tmp_path) as engine:
        deployment = Deployment(engine)
        first = deployment.start(*_version(), source="file", by="serve")
        with pytest.raises(StaleRevision, match="no challenger"):
            deployment.promote(first, rule="-", by="admin")
        with pytest.raises(StaleRevision, match="no earlier champion"):
            deployment.revert(first, by="admin")
        with pytest.raises(StaleRevision, match="is the champion"):
            deployment.propose(*_version(), source="file", by="learner")
        testing = deployment.propose(*_version("Check the carry when adding."), source="learner", by="learner")
        paused = deployment.pause_learning(True, by="admin 1a2b")
        assert paused.learning_paused and paused.challenger == testing.challenger
        with pytest.raises(StaleRevision, match="changed since revision"):
            deployment.end_test(testing, "rollback", rule="-", by="admin")  # read before the pause
        assert deployment.state() == paused
        assert [entry["action"] for entry in deployment.decisions()] == ["start", "propose", "pause"]
