"""Persistent response cache: one SQLite row per sample, so a resumed run never pays for a call twice.

Keyed by `ChatRequest.sample_key` (model, messages, sampling, tools, sample index; never the API key or
URL). WAL mode lets several processes share one file; a lock serialises this process's writers.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from tfgrpo.core.config import ConfigError
from tfgrpo.llm.types import Completion

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    payload TEXT NOT NULL,
    created REAL NOT NULL
)
"""


class ResponseCache:
    """SQLite store of completions. `":memory:"` keeps it in memory (tests, one-off chats)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._lock = threading.Lock()
        try:
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0)
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(_SCHEMA)
            self._conn.commit()
        except (OSError, sqlite3.Error) as exc:  # a folder, no permission, not a database: the user's to fix
            raise ConfigError(f"response cache {self.path}: cannot open it ({exc})") from None

    def get(self, key: str) -> Completion | None:
        with self._lock:
            row = self._conn.execute("SELECT payload FROM completions WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        return Completion.model_validate_json(row[0])

    def put(self, key: str, model: str, completion: Completion) -> None:
        self.put_many(model, [(key, completion)])

    def put_many(self, model: str, items: Sequence[tuple[str, Completion]]) -> None:
        """Store samples in one transaction, committed before returning: a sample handed to a caller
        is already on disk (WAL), so a crash or Ctrl-C never makes a resumed run pay for it twice."""
        self._insert([(key, model, completion) for key, completion in items])

    def _insert(self, items: Sequence[tuple[str, str, Completion]]) -> None:
        if not items:
            return
        now = time.time()
        rows = [(key, model, completion.model_dump_json(), now) for key, model, completion in items]
        with self._lock:
            self._conn.executemany(
                "INSERT OR REPLACE INTO completions (key, model, payload, created) VALUES (?, ?, ?, ?)", rows
            )
            self._conn.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM completions").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._conn.close()
