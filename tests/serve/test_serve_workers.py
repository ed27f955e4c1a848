"""`tfgrpo serve --workers 2`: two processes on one port, arms sticky across them, traces from both in the
shared store, feedback wherever it lands, every worker hot-reloading, /metrics adding up both."""

from __future__ import annotations

import os
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.postgres_server import postgres_server
from tests.helpers.serve_fixtures import write_library
from tests.helpers.serve_upstream import ScriptedUpstream, events, running, serve_cli
from tfgrpo.serve.traces import TraceStore

QUESTION = [{"role": "user", "content": "What is 2+2?"}]
USERS = [f"user-{i}" for i in range(12)]


def _ask(url: str, user: str) -> httpx.Response:
    # a new connection per request, so the kernel spreads them over both workers' accept()
    response = httpx.post(
        url + "/v1/chat/completions",
        json={"model": "m", "messages": QUESTION},
        headers={"x-tfgrpo-user": user, "connection": "close"},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response


def _burst(url: str, rounds: int = 6) -> list[tuple[str, httpx.Response]]:
    """Every user `rounds` times, 16 at once."""
    users = USERS * rounds
    with ThreadPoolExecutor(16) as pool:
        return list(zip(users, pool.map(lambda user: _ask(url, user), users), strict=True))


def _served_by_both(url: str, log) -> list[tuple[str, httpx.Response]]:
    """Bursts until both workers answered some (the kernel hands connections to whichever accepts first)."""
    served: list[tuple[str, httpx.Response]] = []
    for _ in range(5):
        served += _burst(url, rounds=3)
        if len({line["pid"] for line in events(log, "access") if "exchange" in line}) == 2:
            return served
    raise AssertionError("one worker took every connection")


def _library_served(url: str) -> dict[str, set[str]]:
    """tfgrpo_serve_library_info from /metrics: the library hashes at 1, per worker pid."""
    served: dict[str, set[str]] = defaultdict(set)
    for family in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for sample in family.samples:
            if sample.name == "tfgrpo_serve_library_info" and sample.value == 1:
                served[sample.labels["pid"]].add(sample.labels["hash"])
    return served


def _requests_counted(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "tfgrpo_serve_requests_total" and sample.labels["route"] == "chat"
    )


def _wait_for(condition, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.2)
    return value


def _pids_of(log, served: list[tuple[str, httpx.Response]]) -> dict[str, int]:
    """exchange id -> the worker that served it, from the access log (a line follows its response)."""
    ids = {response.headers["x-tfgrpo-exchange-id"] for _user, response in served}

    def logged() -> dict[str, int] | None:
        pid_of = {line["exchange"]: line["pid"] for line in events(log, "access") if "exchange" in line}
        return pid_of if ids <= pid_of.keys() else None

    return _wait_for(logged)


def test_two_workers_against_postgresql(tmp_path):
    library = write_library(tmp_path / "library.json")
    log = tmp_path / "serve.log"
    with postgres_server() as database, running(ScriptedUpstream(record=False)) as upstream:
        args = ["--library", str(library), "--upstream", upstream + "/v1", "--traces", database, "--holdout", "0.5"]
        with serve_cli(log, *args, workers=2) as url:
            served = _served_by_both(url, log)
            pid_of = _pids_of(log, served)  # each request's access line names the worker that served it
            by_user: dict[str, set[tuple[str, int]]] = defaultdict(set)
            for user, response in served:
                by_user[user].add((response.headers["x-tfgrpo-arm"], pid_of[response.headers["x-tfgrpo-exchange-id"]]))
            assert len({pid for pairs in by_user.values() for _arm, pid in pairs}) == 2, "both workers served"
            # sticky: one arm per user, whichever worker answered (a hash of the user, not per-process state)
            assert all(len({arm for arm, _pid in pairs}) == 1 for pairs in by_user.values())
            assert any(len({pid for _arm, pid in pairs}) == 2 for pairs in by_user.values())
            assert {arm for pairs in by_user.values() for arm, _pid in pairs} == {"A", "B"}

            # feedback right after the reply, wherever it lands: found (the other worker may not have written yet)
            ids = [response.headers["x-tfgrpo-exchange-id"] for _user, response in served[:16]]
            with ThreadPoolExecutor(8) as pool:
                given = list(pool.map(lambda i: httpx.post(url + "/v1/feedback", json={"id": i, "reward": 1.0}), ids))
            assert [response.status_code for response in given] == [200] * 16

            # /metrics, whichever worker answers it, counts the requests of both
            _wait_for(lambda: _requests_counted(url) == len(served))
            old = {pid: hashes for pid, hashes in _library_served(url).items()}
            assert len(old) == 2 and all(len(hashes) == 1 for hashes in old.values())

            # hot reload: a new library, atomically; both workers pick it up
            write_library(tmp_path / "next.json", {"G9": "Always show the units."}, version=4)
            os.replace(tmp_path / "next.json", library)
            new_served = _wait_for(lambda: (s := _library_served(url)) and all(s[pid] - old[pid] for pid in old) and s)
            assert len(new_served) == 2 and all(len(hashes) == 1 for hashes in new_served.values())
            reloaded = {line["pid"] for line in events(log, "library_reloaded")}
            assert len(reloaded) == 2 and all(line["version"] == 4 for line in events(log, "library_reloaded"))
            after = _burst(url, rounds=2)
            assert {response.headers["x-tfgrpo-library-version"] for _user, response in after} == {"4"}
        # every exchange of both workers is in the shared database (written by the time they stopped)
        store = TraceStore(database)
        rows = store.exchanges()
        store.close()
    pid_of = _pids_of(log, served + after)
    assert len(rows) == len(served) + len(after) and {row["id"] for row in rows} == set(pid_of)
    assert len({pid_of[row["id"]] for row in rows}) == 2
    assert sum(row["reward"] == 1.0 for row in rows) == 16
    assert {row["library_version"] for row in rows} == {3, 4}


def test_two_workers_share_a_sqlite_file(tmp_path):
    """SQLite is made safe for several workers (WAL, a busy timeout, tables created once before they start)."""
    library = write_library(tmp_path / "library.json")
    log, traces = tmp_path / "serve.log", tmp_path / "traces.sqlite"
    with running(ScriptedUpstream(record=False)) as upstream:
        args = ["--library", str(library), "--upstream", upstream + "/v1", "--traces", str(traces)]
        with serve_cli(log, *args, workers=2) as url:
            served = _served_by_both(url, log)
    store = TraceStore(traces)
    rows = store.exchanges()
    store.close()
    pid_of = _pids_of(log, served)
    assert len(rows) == len(served) and len({pid_of[row["id"]] for row in rows}) == 2
    assert not events(log, "trace_dropped") and all(row["messages"] == QUESTION for row in rows)
