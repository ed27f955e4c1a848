"""`GET /metrics`: the proxy's counters in the Prometheus text format, through `prometheus_client`.

One process: the metrics live in a registry of this app's own (two apps in one process, as in the tests,
do not mix). Several workers (`--workers N`): prometheus_client's multiprocess mode. Every worker writes
its values to files in one folder (`PROMETHEUS_MULTIPROC_DIR`, set by the runner before the workers
start, since prometheus_client reads it when imported), and a scrape, whichever worker answers it, adds
up the counters and histograms of all workers, those that exited included. `tfgrpo_serve_library_info`
is reported per live worker (a `pid` label), so a scrape shows which library each worker serves.

A configured multiprocess folder is claimed with a marker file: serve empties only a folder it marked,
and only of prometheus_client's own per-process files, so pointing `metrics_dir` at a folder of other
files is refused at start instead of deleting them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

from tfgrpo import __version__
from tfgrpo.serve.errors import ServeStartupError

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: request latency buckets, in seconds: a proxied LLM call takes from tens of milliseconds to minutes
#: the file that marks a folder as serve's own metrics folder
MARKER = ".tfgrpo-serve-metrics"
#: prometheus_client's per-process files: TYPE[_MODE]_PID.db (values.py names them)
PROCESS_FILE = re.compile(r"(counter|histogram|summary|gauge(_[a-z]+)?)_\d+\.db")
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class ServeMetrics:
    def __init__(self, *, multiprocess_dir: Path | None = None):
        self.multiprocess_dir = multiprocess_dir
        if multiprocess_dir is not None and os.environ.get(MULTIPROCESS_ENV) != str(multiprocess_dir):
            raise RuntimeError(f"{MULTIPROCESS_ENV} must be {multiprocess_dir} before prometheus_client is imported")
        # Multiprocess: values go to the files whatever the registry, and a scrape reads the files.
        self.registry = CollectorRegistry() if multiprocess_dir is None else None
        registry = self.registry
        labels = ["route", "arm", "status"]
        self.requests = Counter(
            "tfgrpo_serve_requests",
            "Requests answered, by route, arm assigned (- off the chat route) and status.",
            labels,
            registry=registry,
        )
        self.latency = Histogram(
            "tfgrpo_serve_request_duration_seconds",
            "Time from the request's arrival to its last byte sent.",
            labels,
            buckets=BUCKETS,
            registry=registry,
        )
        self.upstream_errors = Counter(
            "tfgrpo_serve_upstream_errors",
            "Chat requests the upstream failed, after retries, by error code.",
            ["code"],
            registry=registry,
        )
        self.upstream_retries = Counter(
            "tfgrpo_serve_upstream_retries", "Upstream attempts retried, by cause.", ["cause"], registry=registry
        )
        self.trace_write_errors = Counter(
            "tfgrpo_serve_trace_write_errors",
            "Trace rows the store refused (dropped, each logged).",
            registry=registry,
        )
        self.reloads = Counter("tfgrpo_serve_library_reloads", "Library reloads.", registry=registry)
        self.reload_errors = Counter(
            "tfgrpo_serve_library_reload_errors",
            "Library files that did not load (the old one kept serving).",
            registry=registry,
        )
        self.library = Gauge(
            "tfgrpo_serve_library_info",
            "1 for the library served (file version, content hash), 0 for earlier ones.",
            ["version", "hash"],
            multiprocess_mode="liveall",
            registry=registry,
        )
        self.test_bound = Gauge(
            "tfgrpo_serve_test_bound",
            "Each test's latest bounds, by challenger: on challenger minus champion reward (side: lower, upper, "
            "estimate) and on its increase in upstream failures (side: guard_lower, guard_upper).",
            ["side", "challenger"],
            multiprocess_mode="livemostrecent",
            registry=registry,
        )
        self.test_samples = Gauge(
            "tfgrpo_serve_test_samples",
            "Rewarded exchanges each test counted at its latest reading, per arm (B: champion, C: challenger).",
            ["arm", "challenger"],
            multiprocess_mode="livemostrecent",
            registry=registry,
        )
        self.decisions = Counter(
            "tfgrpo_serve_decisions",
            "Deployment decisions this server made, by action (promote, rollback, stop) and decider.",
            ["action", "decided_by"],
            registry=registry,
        )
        build = Gauge(
            "tfgrpo_build_info", "The tfgrpo version serving.", ["version"], multiprocess_mode="max", registry=registry
        )
        build.labels(__version__).set(1)
        self._served: tuple[str, str] | None = None
        self._children: dict[tuple[str, str, str], tuple[Counter, Histogram]] = {}

    def observe(self, route: str, arm: str, status: int, seconds: float) -> None:
        key = (route, arm, str(status))
        children = self._children.get(key)
        if children is None:  # labels() takes a lock and builds a key: done once per label set
            children = self._children[key] = (self.requests.labels(*key), self.latency.labels(*key))
        count, latency = children
        count.inc()
        latency.observe(seconds)

    def serving(self, version: int, content_hash: str) -> None:
        """The library now served: its series 1, the one it replaced 0."""
        served = (str(version), content_hash[:12])
        if self._served is not None and self._served != served:
            self.library.labels(*self._served).set(0)
        self.library.labels(*served).set(1)
        self._served = served

    def test_reading(self, challenger: str, bounds: dict[str, float], samples: dict[str, int]) -> None:
        """The latest bounds and sample counts of the test of `challenger` (its content hash, shortened)."""
        for side, value in bounds.items():
            self.test_bound.labels(side, challenger).set(value)
        for arm, count in samples.items():
            self.test_samples.labels(arm, challenger).set(count)

    def exposition(self) -> bytes:
        if self.registry is not None:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(self.multiprocess_dir))
        return generate_latest(registry)

    def close(self) -> None:
        """A worker that stops: its per-process gauges leave the scrape (counters stay in the totals)."""
        if self.multiprocess_dir is not None:
            multiprocess.mark_process_dead(os.getpid(), str(self.multiprocess_dir))


def claim_multiprocess_dir(folder: Path) -> Path:
    """`folder` ready for a run: created and marked, or, marked by an earlier run, emptied of that run's
    per-process files. A folder that holds anything and is not marked is refused (ServeStartupError)."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / MARKER
    if not marker.exists():
        others = sorted(entry.name for entry in folder.iterdir())
        if others:
            raise ServeStartupError(
                f"metrics_dir {folder} already holds files serve did not create ({len(others)}, e.g. {others[0]!r}): "
                "give serve an empty folder of its own"
            )
        marker.write_text("metrics of tfgrpo serve: its *.db files are removed when serve starts again\n")
        return folder
    for stale in folder.iterdir():
        if PROCESS_FILE.fullmatch(stale.name) and stale.is_file():
            stale.unlink()
    return folder
