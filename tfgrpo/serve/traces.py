"""Every served exchange, stored through SQLAlchemy: a SQLite file by default, PostgreSQL by URL.

Writes never block a request: rows go to a deque and one writer thread inserts them in batches.
`flush()` waits until everything queued is written (feedback, reads and shutdown call it).
What is stored: the client's messages and model, the reply, arm, library version, injected ids,
latency, tokens, the upstream URL, the HTTP status. Never request headers, so never an API key
or an Authorization header.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

import sqlalchemy as sa

METADATA = sa.MetaData()
EXCHANGES = sa.Table(
    "tfgrpo_exchanges",
    METADATA,
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("model", sa.Text),
    sa.Column("upstream", sa.Text),
    sa.Column("arm", sa.String(8), nullable=False),
    sa.Column("library_version", sa.Integer),
    sa.Column("injected_ids", sa.Text, nullable=False),  # JSON list
    sa.Column("prompt_key", sa.String(64), nullable=False, index=True),  # sha256 of the client's messages: pairs arms
    sa.Column("messages", sa.Text, nullable=False),  # JSON: the client's messages, as sent (no library)
    sa.Column("reply", sa.Text),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("stream", sa.Boolean, nullable=False),
    sa.Column("latency_ms", sa.Float),
    sa.Column("prompt_tokens", sa.Integer),
    sa.Column("completion_tokens", sa.Integer),
    sa.Column("reward", sa.Float),
    sa.Column("gold", sa.Text),
    sa.Column("feedback_at", sa.Float),
)


def database_url(traces: str | Path) -> str:
    """A SQLAlchemy URL as given, or `sqlite:///PATH` for a plain file path."""
    text = str(traces)
    return text if "://" in text else f"sqlite:///{Path(text).resolve()}"


class TraceStore:
    def __init__(self, traces: str | Path, *, batch_size: int = 512, interval_s: float = 0.1):
        url = database_url(traces)
        self.engine = sa.create_engine(url, pool_pre_ping=not url.startswith("sqlite"))
        if url.startswith("sqlite"):
            sa.event.listen(self.engine, "connect", _sqlite_wal)
        METADATA.create_all(self.engine)
        # A deque, not a queue.Queue: append/popleft are atomic and take no lock, so `add` costs the request
        # nothing but an append; the writer wakes every `interval_s` (or at once for `flush`).
        self._pending: deque[dict[str, Any]] = deque()
        self._added = 0
        self._written = 0  # rows taken off `_pending` and stored (or counted as write errors)
        self._progress = threading.Condition()
        self._wake = threading.Event()
        self._stopping = False
        self._batch_size = batch_size
        self._interval_s = interval_s
        self._writer: threading.Thread | None = None
        self.write_errors = 0

    # ------------------------------------------------------------------ writing
    def start(self) -> None:
        self._stopping = False
        self._writer = threading.Thread(target=self._write_loop, name="trace-writer", daemon=True)
        self._writer.start()

    def add(self, row: dict[str, Any]) -> None:
        if self._writer is None:
            self.start()
        self._added += 1  # only the event loop's thread adds
        self._pending.append(row)

    def flush(self) -> None:
        """Return once every row added before this call is stored."""
        target = self._added
        if self._writer is None:
            self._drain()
            return
        with self._progress:
            while self._written < target:
                self._wake.set()
                self._progress.wait(timeout=0.1)

    def close(self) -> None:
        if self._writer is not None:
            self._stopping = True
            self._wake.set()
            self._writer.join(timeout=30)
            self._writer = None
        self._drain()
        self.engine.dispose()

    def set_feedback(self, exchange_id: str, *, reward: float, gold: str | None = None) -> bool:
        """Attach a reward (and the gold answer it came from); False when no such exchange exists."""
        self.flush()
        values = {"reward": float(reward), "gold": gold, "feedback_at": time.time()}
        with self.engine.begin() as connection:
            result = connection.execute(EXCHANGES.update().where(EXCHANGES.c.id == exchange_id).values(**values))
        return result.rowcount > 0

    def _write_loop(self) -> None:
        while not self._stopping:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            self._drain()

    def _drain(self) -> None:
        while self._pending:
            batch = []
            while self._pending and len(batch) < self._batch_size:
                batch.append(self._pending.popleft())
            try:
                self._insert(batch)
            finally:
                with self._progress:
                    self._written += len(batch)
                    self._progress.notify_all()

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        try:
            with self.engine.begin() as connection:
                connection.execute(EXCHANGES.insert(), rows)
            return
        except Exception:  # noqa: BLE001 - one bad row must not cost the batch: retried one by one below
            pass
        for row in rows:
            try:
                with self.engine.begin() as connection:
                    connection.execute(EXCHANGES.insert(), [row])
            except Exception:  # noqa: BLE001 - a database outage must not kill serving; counted in /health
                self.write_errors += 1

    # ------------------------------------------------------------------ reading
    def exchange(self, exchange_id: str) -> dict[str, Any] | None:
        self.flush()
        with self.engine.connect() as connection:
            row = connection.execute(sa.select(EXCHANGES).where(EXCHANGES.c.id == exchange_id)).mappings().first()
        return _decoded(row) if row else None

    def exchanges(self, *, with_feedback: bool = False) -> list[dict[str, Any]]:
        self.flush()
        query = sa.select(EXCHANGES).order_by(EXCHANGES.c.created_at)
        if with_feedback:
            query = query.where(EXCHANGES.c.reward.is_not(None))
        with self.engine.connect() as connection:
            return [_decoded(row) for row in connection.execute(query).mappings()]

    def summary(self) -> dict[str, Any]:
        """Arm counts, mean reward per (library version, arm), and how often each experience was injected."""
        self.flush()
        by_group = sa.select(
            EXCHANGES.c.library_version,
            EXCHANGES.c.arm,
            sa.func.count(),
            sa.func.count(EXCHANGES.c.reward),
            sa.func.avg(EXCHANGES.c.reward),
        ).group_by(EXCHANGES.c.library_version, EXCHANGES.c.arm)
        usage: Counter[str] = Counter()
        arms: Counter[str] = Counter()
        versions: dict[int | None, dict[str, Any]] = {}
        with self.engine.connect() as connection:
            for version, arm, count, rewarded, mean in connection.execute(by_group):
                arms[arm] += count
                versions.setdefault(version, {})[arm] = {
                    "exchanges": count,
                    "rewarded": rewarded,
                    "mean_reward": None if mean is None else float(mean),
                }
            for (ids,) in connection.execute(sa.select(EXCHANGES.c.injected_ids)):
                usage.update(json.loads(ids))
        return {"arms": dict(arms), "versions": versions, "usage": dict(usage)}


def _decoded(row: Any) -> dict[str, Any]:
    out = dict(row)
    out["messages"] = json.loads(out["messages"])
    out["injected_ids"] = json.loads(out["injected_ids"])
    return out


def _sqlite_wal(connection: Any, _record: Any) -> None:
    # WAL: `tfgrpo compare` and `learn --from-traces` read while serve writes.
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
