"""Every served exchange, stored through SQLAlchemy: a SQLite file by default, PostgreSQL by URL.

Writes never block a request: rows go to a deque and one writer thread inserts them in batches.
`flush()` waits until everything queued is written (feedback, reads and shutdown call it).
What is stored: the client's messages and model, the reply (every choice), the arm assigned, the library
version and content hash, the injection asked for and the ids actually injected, latency, tokens, the
upstream URL, the HTTP status and the error code of a failed exchange. Never request headers, so never
an API key or an Authorization header. Feedback is appended to its own table (every reward ever given,
in order); the exchange row holds the latest, which is what comparisons use.

A store written by an older version is upgraded in place on open: missing (nullable) columns are added.
A store that cannot be opened (server down, bad URL, no driver) is a `TraceStoreError`, one line naming the
URL without its password. Several processes may share a store: PostgreSQL as it is, a SQLite file in WAL
mode with a 30 s busy timeout (writers wait for each other's short batch transactions; local disk only).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tfgrpo.core.config import ConfigError
from tfgrpo.core.secrets import mask_url

#: the longest exchange id the store can hold (ids it hands out are 32 hex characters)
ID_CHARS = 40

METADATA = sa.MetaData()
EXCHANGES = sa.Table(
    "tfgrpo_exchanges",
    METADATA,
    sa.Column("id", sa.String(ID_CHARS), primary_key=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("model", sa.Text),
    sa.Column("upstream", sa.Text),
    sa.Column("arm", sa.String(8), nullable=False),  # the arm ASSIGNED
    # sha256 (hex) of the client key that made it, never the key: only it may rate it; NULL in open mode
    sa.Column("owner", sa.String(64)),
    sa.Column("library_version", sa.Integer),  # the library file's `version` field
    sa.Column("library_hash", sa.String(64)),  # sha256 of the library as served: the version that counts
    sa.Column("injection", sa.Text),  # asked for: all | none | topk:K
    sa.Column("injected_ids", sa.Text, nullable=False),  # JSON list: what was GIVEN ([] = untreated)
    sa.Column("prompt_key", sa.String(64), nullable=False, index=True),  # sha256 of the client's messages: pairs arms
    sa.Column("messages", sa.Text, nullable=False),  # JSON: the client's messages, as sent (no library)
    sa.Column("reply", sa.Text),  # choice 0
    sa.Column("replies", sa.Text),  # JSON list of every choice when there are several (`n` > 1)
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("error", sa.Text),  # the error code of a failed exchange (bad_upstream_body, upstream_timeout...)
    sa.Column("stream", sa.Boolean, nullable=False),
    sa.Column("latency_ms", sa.Float),
    sa.Column("prompt_tokens", sa.Integer),
    sa.Column("completion_tokens", sa.Integer),
    sa.Column("reward", sa.Float),
    sa.Column("gold", sa.Text),
    sa.Column("feedback_at", sa.Float),
    # JSON {"messages" | "reply" | "replies": full length in characters} of each text cut at max_trace_chars
    # (and "choices": how many there were); NULL: nothing was cut
    sa.Column("truncated", sa.Text),
)
FEEDBACK = sa.Table(
    "tfgrpo_feedback",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),  # append order
    sa.Column("exchange_id", sa.String(ID_CHARS), nullable=False, index=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("reward", sa.Float, nullable=False),
    sa.Column("gold", sa.Text),
    sa.Column("rated_by", sa.String(64)),  # sha256 (hex) of the key that sent it; NULL in open mode
)


#: seconds to wait for PostgreSQL to accept a connection, and for a locked SQLite file
CONNECT_TIMEOUT_S = 10
SQLITE_BUSY_TIMEOUT_S = 30
#: called (from the writer thread) for each row the store refused: the row, and why
OnDrop = Callable[[dict[str, Any], BaseException], None]


class TraceStoreError(ConfigError):
    """The trace store cannot be opened: one line naming it (password masked) and the database's reason."""


def database_url(traces: str | Path) -> str:
    """A SQLAlchemy URL as given, or `sqlite:///PATH` for a plain file path."""
    text = str(traces)
    return text if "://" in text else f"sqlite:///{Path(text).resolve()}"


class TraceStore:
    def __init__(
        self, traces: str | Path, *, batch_size: int = 512, interval_s: float = 0.1, on_drop: OnDrop | None = None
    ):
        url = database_url(traces)
        try:
            self.engine = _engine(url)
            METADATA.create_all(self.engine)
            _add_missing_columns(self.engine, EXCHANGES)
            _add_missing_columns(self.engine, FEEDBACK)
        except (sa.exc.SQLAlchemyError, ImportError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            raise TraceStoreError(
                f"trace store {mask_url(url)}: cannot open it "
                f"({type(exc).__name__}: {mask_url(reason[0]) if reason else ''})"
            ) from None
        self.on_drop = on_drop
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

    @property
    def pending(self) -> int:
        """Rows queued and not written yet."""
        return len(self._pending)

    def ping(self) -> None:
        """Raise unless the database answers a query (readiness)."""
        with self.engine.connect() as connection:
            connection.execute(sa.text("SELECT 1"))

    def set_feedback(
        self, exchange_id: str, *, reward: float, gold: str | None = None, rated_by: str | None = None
    ) -> bool:
        """Append a reward (and the gold answer it came from, and who sent it) to the exchange's history and
        make it the exchange's current reward, replacing any earlier one; False when no such exchange exists.
        Who may rate is `feedback.py`'s to decide."""
        self.flush()
        values = {"reward": float(reward), "gold": gold}
        now = time.time()
        with self.engine.begin() as connection:
            found = connection.execute(
                EXCHANGES.update().where(EXCHANGES.c.id == exchange_id).values(**values, feedback_at=now)
            )
            if found.rowcount == 0:
                return False
            connection.execute(
                FEEDBACK.insert().values(**values, exchange_id=exchange_id, created_at=now, rated_by=rated_by)
            )
        return True

    def feedback_history(self, exchange_id: str) -> list[dict[str, Any]]:
        """Every feedback given for the exchange, oldest first."""
        query = sa.select(FEEDBACK).where(FEEDBACK.c.exchange_id == exchange_id).order_by(FEEDBACK.c.id)
        with self.engine.connect() as connection:
            return [dict(row) for row in connection.execute(query).mappings()]

    def _write_loop(self) -> None:
        while not self._stopping:
            self._wake.wait(self._interval_s)
            self._wake.clear()
            self._drain()

    def _drain(self) -> None:
        while self._pending:
            batch: list[dict[str, Any]] = []
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
            except Exception as exc:  # noqa: BLE001 - a database outage must not kill serving; counted, logged
                self.write_errors += 1
                if self.on_drop is not None:
                    self.on_drop(row, exc)

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
        """Arm counts, mean reward per (library version, arm) newest version first, and how often each
        experience was injected."""
        self.flush()
        by_group = sa.select(
            EXCHANGES.c.library_version,
            EXCHANGES.c.library_hash,
            EXCHANGES.c.arm,
            sa.func.count(),
            sa.func.count(EXCHANGES.c.reward),
            sa.func.avg(EXCHANGES.c.reward),
            sa.func.min(EXCHANGES.c.created_at),
        ).group_by(EXCHANGES.c.library_version, EXCHANGES.c.library_hash, EXCHANGES.c.arm)
        usage: Counter[str] = Counter()
        arms: Counter[str] = Counter()
        versions: dict[str, dict[str, Any]] = {}
        first_seen: dict[str, float] = {}
        with self.engine.connect() as connection:
            for version, digest, arm, count, rewarded, mean, first in connection.execute(by_group):
                label = version_label(version, digest)
                arms[arm] += count
                versions.setdefault(label, {})[arm] = {
                    "exchanges": count,
                    "rewarded": rewarded,
                    "mean_reward": None if mean is None else float(mean),
                }
                first_seen[label] = min(first_seen.get(label, first), first)
            for (ids,) in connection.execute(sa.select(EXCHANGES.c.injected_ids)):
                usage.update(json.loads(ids))
        newest_first = sorted(versions, key=first_seen.__getitem__, reverse=True)
        return {
            "arms": dict(arms),
            "versions": {label: versions[label] for label in newest_first},
            "usage": dict(usage),
        }


def version_label(version: int | None, digest: str | None) -> str:
    """How a served library is named: its file version and the start of its content hash ("3 1a2b3c4d5e6f";
    just "3" for exchanges traced before content hashes were)."""
    number = "?" if version is None else str(version)
    return f"{number} {digest[:12]}" if digest else number


def _decoded(row: Any) -> dict[str, Any]:
    out = dict(row)
    out["messages"] = json.loads(out["messages"])
    out["injected_ids"] = json.loads(out["injected_ids"])
    out["treated"] = bool(out["injected_ids"])  # given the library, whatever the arm assigned
    replies = json.loads(out["replies"]) if out["replies"] else None
    out["replies"] = replies or ([] if out["reply"] is None else [out["reply"]])
    out["truncated"] = json.loads(out["truncated"]) if out.get("truncated") else {}
    return out


def _add_missing_columns(engine: sa.Engine, table: sa.Table) -> None:
    """Add the columns a store written by an older version lacks (all nullable, so old rows stay valid)."""
    present = {column["name"] for column in sa.inspect(engine).get_columns(table.name)}
    for column in table.columns:
        if column.name in present:
            continue
        if not column.nullable:
            raise RuntimeError(f"{table.name}.{column.name} is missing and cannot be added to existing rows")
        kind = column.type.compile(dialect=engine.dialect)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN {column.name} {kind}"))
        except sa.exc.DBAPIError:  # another process added it meanwhile (several servers, one database)
            if column.name not in {c["name"] for c in sa.inspect(engine).get_columns(table.name)}:
                raise


def _engine(url: str) -> sa.Engine:
    if url.startswith("sqlite"):
        engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})
        sa.event.listen(engine, "connect", _sqlite_wal)
        return engine
    # libpq's connect_timeout: an unreachable host fails in seconds, not after the OS's TCP timeout
    arguments = {"connect_timeout": CONNECT_TIMEOUT_S} if url.startswith("postgresql") else {}
    return sa.create_engine(url, pool_pre_ping=True, connect_args=arguments)


def _sqlite_wal(connection: Any, _record: Any) -> None:
    # WAL: `tfgrpo compare` and `learn --from-traces` read while serve writes.
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
