"""Assignment vs treatment in `tfgrpo serve` traces: the arm a request was assigned, what it was actually
given (injected ids, library content hash), and `tfgrpo compare --traces` reporting both analyses."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from tests.helpers.postgres_server import postgres_server
from tests.helpers.serve_fixtures import LESSONS, proxy, write_library
from tfgrpo.eval.traces import compare_traces
from tfgrpo.serve.traces import TraceStore

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


def _ask(url: str, **headers: str) -> httpx.Response:
    response = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": QUESTION}, headers=headers)
    assert response.status_code == 200
    return response


def _reward(url: str, response: httpx.Response, reward: float) -> None:
    exchange_id = response.headers["x-tfgrpo-exchange-id"]
    assert httpx.post(url + "/v1/feedback", json={"id": exchange_id, "reward": reward}).status_code == 200


def test_a_request_without_the_library_is_assigned_b_but_traced_untreated(tmp_path):
    with proxy(tmp_path) as p:
        treated = _ask(p.url)
        untreated = _ask(p.url, **{"x-tfgrpo-inject": "none"})
        assert treated.headers["x-tfgrpo-arm"] == untreated.headers["x-tfgrpo-arm"] == "B"
        library_hash = treated.headers["x-tfgrpo-library-hash"]
        assert len(library_hash) == 64 and untreated.headers["x-tfgrpo-library-hash"] == library_hash
        rows = {row["id"]: row for row in p.state.traces.exchanges()}
        given = rows[treated.headers["x-tfgrpo-exchange-id"]]
        withheld = rows[untreated.headers["x-tfgrpo-exchange-id"]]
        assert given["arm"] == "B" and given["treated"] is True and given["injected_ids"] == list(LESSONS)
        assert given["library_hash"] == library_hash and given["injection"] == "all"
        assert withheld["arm"] == "B" and withheld["treated"] is False and withheld["injected_ids"] == []
        assert withheld["injection"] == "none" and withheld["library_hash"] == library_hash


def test_a_topk_injection_that_selects_nothing_is_untreated(tmp_path):
    empty = write_library(tmp_path / "empty.json", {})
    with proxy(tmp_path, library=empty, inject="topk:2") as p:
        response = _ask(p.url)
        row = p.state.traces.exchange(response.headers["x-tfgrpo-exchange-id"])
        assert row["arm"] == "B" and row["treated"] is False and row["injection"] == "topk:2"
        assert p.upstream.bodies[-1]["messages"] == QUESTION


def test_compare_separates_intention_to_treat_from_the_treated(tmp_path):
    """The audit: rewards 0, 0 for two untreated requests and 1, 1 for two treated ones."""
    with proxy(tmp_path) as p:
        for _ in range(2):
            _reward(p.url, _ask(p.url, **{"x-tfgrpo-inject": "none"}), 0.0)
            _reward(p.url, _ask(p.url), 1.0)
        p.state.traces.flush()
    (result,) = compare_traces(tmp_path / "traces.sqlite")
    assert result.arms["B"].exchanges == 4 and result.arms["B"].mean_reward == 0.5  # intention to treat
    assert result.treated.exchanges == 2 and result.treated.mean_reward == 1.0  # what the library did
    assert result.untreated == 2
    printed = subprocess.run(
        [sys.executable, "-m", "tfgrpo", "compare", "--traces", str(tmp_path / "traces.sqlite")],
        capture_output=True,
        text=True,
        env=os.environ | {"COLUMNS": "250"},
    )
    assert printed.returncode == 0, printed.stderr
    assert "intention to treat" in printed.stdout.lower() and "treated only" in printed.stdout.lower()
    assert "2 of 4 B exchanges got no library" in printed.stdout


def test_an_edited_lesson_without_a_version_bump_is_a_new_library_version(tmp_path):
    with proxy(tmp_path, reload_interval_s=0.05) as p:
        before = _ask(p.url)
        _reward(p.url, before, 1.0)
        write_library(tmp_path / "next.json", LESSONS | {"G0": "Check the units twice."}, version=3)
        os.replace(tmp_path / "next.json", tmp_path / "library.json")
        deadline = time.monotonic() + 10
        while httpx.get(p.url + "/health").json()["library_hash"] == before.headers["x-tfgrpo-library-hash"]:
            assert time.monotonic() < deadline, "the edited library was not reloaded"
            time.sleep(0.05)
        after = _ask(p.url)
        _reward(p.url, after, 0.0)
        assert after.headers["x-tfgrpo-library-version"] == before.headers["x-tfgrpo-library-version"] == "3"
        assert after.headers["x-tfgrpo-library-hash"] != before.headers["x-tfgrpo-library-hash"]
        p.state.traces.flush()
    first, second, overall = compare_traces(tmp_path / "traces.sqlite")
    assert first.library_version == second.library_version == 3
    assert first.library_hash == before.headers["x-tfgrpo-library-hash"]
    assert second.library_hash == after.headers["x-tfgrpo-library-hash"]
    assert first.version != second.version and first.version.startswith("3 ")
    assert first.arms["B"].mean_reward == 1.0 and second.arms["B"].mean_reward == 0.0
    assert overall.version == "all" and overall.arms["B"].exchanges == 2


OLD_SCHEMA = """CREATE TABLE tfgrpo_exchanges (
    id VARCHAR(40) PRIMARY KEY, created_at FLOAT NOT NULL, model TEXT, upstream TEXT, arm VARCHAR(8) NOT NULL,
    library_version INTEGER, injected_ids TEXT NOT NULL, prompt_key VARCHAR(64) NOT NULL, messages TEXT NOT NULL,
    reply TEXT, status INTEGER NOT NULL, stream BOOLEAN NOT NULL, latency_ms FLOAT, prompt_tokens INTEGER,
    completion_tokens INTEGER, reward FLOAT, gold TEXT, feedback_at FLOAT)"""


@contextlib.contextmanager
def _database(kind: str, tmp_path) -> Iterator[str]:
    if kind == "postgresql":
        with postgres_server() as url:
            yield url
    else:
        yield f"sqlite:///{tmp_path / 'old.sqlite'}"


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_trace_store_written_before_these_columns_is_upgraded_in_place(tmp_path, kind):
    with _database(kind, tmp_path) as url:
        engine = sa.create_engine(url)
        with engine.begin() as connection:
            connection.execute(sa.text(OLD_SCHEMA))
            connection.execute(
                sa.text(
                    "INSERT INTO tfgrpo_exchanges VALUES ('old1', 1.0, 'm', 'u', 'B', 2, '[\"G0\"]', 'k', '[]', 'r',"
                    " 200, true, 1.0, 1, 1, 0.5, NULL, 2.0)"
                )
            )
        engine.dispose()
        store = TraceStore(url)
        try:
            (old,) = store.exchanges()
            assert old["treated"] is True and old["library_hash"] is None and old["replies"] == ["r"]
            assert store.set_feedback("old1", reward=1.0)
            assert [entry["reward"] for entry in store.feedback_history("old1")] == [1.0]
        finally:
            store.close()
        TraceStore(url).close()  # opening an upgraded store again changes nothing
        (result,) = compare_traces(url)
        assert result.version == "2" and result.treated.mean_reward == 1.0


@pytest.mark.parametrize("injected", [["G0"], []])
def test_compare_json_keeps_both_analyses(tmp_path, injected):
    store = TraceStore(tmp_path / "t.sqlite")
    row = {
        "id": "x1",
        "created_at": 1.0,
        "arm": "B",
        "library_version": 1,
        "library_hash": "ab" * 32,
        "injected_ids": json.dumps(injected),
        "prompt_key": "k",
        "messages": "[]",
        "status": 200,
        "stream": False,
        "reward": 1.0,
    }
    store.add(row)
    store.close()
    (result,) = compare_traces(tmp_path / "t.sqlite")
    dumped = result.model_dump()
    assert dumped["version"] == f"1 {'ab' * 6}" and dumped["arms"]["B"]["exchanges"] == 1
    assert dumped["treated"]["exchanges"] == len(injected) and dumped["untreated"] == 1 - len(injected)
