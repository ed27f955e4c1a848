"""Which library versions serve, kept in the trace store's database: the champion, the challenger under test,
every version ever deployed, and a log of every decision that changed them.

The database, not a process, holds the deployment, so every worker of `tfgrpo serve --workers N` (and the
learner beside them, and an operator's command) sees one state: each change is one transaction that
compares the deployment's `revision` and bumps it (compare-and-swap), and writes its decision in the same
transaction. Two deciders that look at the same moment cannot both promote: the second one's revision is
stale and its change is refused. A worker polls the revision and swaps the snapshot requests take at their
start, so a request in flight finishes on the version it began with and none is lost.

A version is a library's content hash (`live_library.Snapshot.content_hash`), stored with the library's JSON,
so a promoted challenger is served exactly as it was tested, whatever files change meanwhile.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from tfgrpo.experiences import Library

METADATA = sa.MetaData()
VERSIONS = sa.Table(
    "tfgrpo_versions",
    METADATA,
    sa.Column("content_hash", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),  # the library's own `version` field
    sa.Column("library", sa.Text, nullable=False),  # Library.to_json(): what is served, byte for byte
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("source", sa.Text),  # where it came from: "file PATH", "learner RUN step N", "admin"
)
DEPLOYMENT = sa.Table(
    "tfgrpo_deployment",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True),  # one row: id 1
    sa.Column("revision", sa.Integer, nullable=False),  # bumped by every change (compare-and-swap)
    sa.Column("champion", sa.String(64), nullable=False),
    sa.Column("challenger", sa.String(64)),  # NULL: no test running
    sa.Column("challenger_since", sa.Float),  # when the running test began: only exchanges after it count
    sa.Column("learning_paused", sa.Boolean, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
DECISIONS = sa.Table(
    "tfgrpo_decisions",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("revision", sa.Integer, nullable=False),  # the revision this decision made
    # start | propose | promote | rollback | stop | pause | resume | revert
    sa.Column("action", sa.String(16), nullable=False),
    sa.Column("champion", sa.String(64)),  # after the decision
    sa.Column("challenger", sa.String(64)),  # the challenger it was about
    sa.Column("rule", sa.Text),  # why, in one line ("lower bound +0.031 > min_effect 0.000", "admin")
    sa.Column("decided_by", sa.Text, nullable=False),  # "sequential test", "guard", "admin KEYHASH", "learner RUN"
    sa.Column("evidence", sa.Text),  # JSON: n per arm, the bounds at the decision
)

ROW_ID = 1


@dataclass(frozen=True)
class DeploymentState:
    revision: int
    champion: str
    challenger: str | None
    challenger_since: float | None
    learning_paused: bool


class StaleRevision(Exception):
    """The deployment changed since it was read: the change was not made (read it again and decide again)."""


class Deployment:
    """The deployment in a database; `engine`: the trace store's (`TraceStore.engine`)."""

    def __init__(self, engine: sa.Engine):
        self.engine = engine
        METADATA.create_all(engine)

    # ------------------------------------------------------------------ reading
    def state(self) -> DeploymentState | None:
        """The current deployment (None before the first `start`)."""
        with self.engine.connect() as connection:
            row = connection.execute(sa.select(DEPLOYMENT).where(DEPLOYMENT.c.id == ROW_ID)).mappings().first()
        if row is None:
            return None
        return DeploymentState(
            revision=row["revision"],
            champion=row["champion"],
            challenger=row["challenger"],
            challenger_since=row["challenger_since"],
            learning_paused=bool(row["learning_paused"]),
        )

    def library(self, content_hash: str) -> Library:
        with self.engine.connect() as connection:
            text = connection.execute(
                sa.select(VERSIONS.c.library).where(VERSIONS.c.content_hash == content_hash)
            ).scalar()
        if text is None:
            raise KeyError(f"no library version {content_hash[:12]} in the deployment store")
        return Library.from_data(json.loads(text), source=f"version {content_hash[:12]}")

    def find_version(self, prefix: str) -> str | None:
        """The content hash of the one stored version that starts with `prefix` (None: none, or several)."""
        query = sa.select(VERSIONS.c.content_hash).where(VERSIONS.c.content_hash.startswith(prefix, autoescape=True))
        with self.engine.connect() as connection:
            found = connection.execute(query.limit(2)).scalars().all()
        return found[0] if len(found) == 1 else None

    def was_rolled_back(self, content_hash: str) -> bool:
        """Whether a test of this version ended in a rollback (by the test, the guard or an operator)."""
        query = sa.select(DECISIONS.c.id).where(
            DECISIONS.c.action == "rollback", DECISIONS.c.challenger == content_hash
        )
        with self.engine.connect() as connection:
            return connection.execute(query.limit(1)).first() is not None

    def decisions(self, *, limit: int = 100) -> list[dict[str, Any]]:
        """The latest decisions, oldest first."""
        query = sa.select(DECISIONS).order_by(DECISIONS.c.id.desc()).limit(limit)
        with self.engine.connect() as connection:
            rows = [dict(row) for row in connection.execute(query).mappings()]
        for row in rows:
            row["evidence"] = json.loads(row["evidence"]) if row["evidence"] else None
        return rows[::-1]

    # ------------------------------------------------------------------ changing
    def start(self, library: Library, content_hash: str, *, source: str, by: str) -> DeploymentState:
        """The deployment as it stands, or, on the first start ever, `library` as its champion. A restart, or a
        second worker, keeps the stored deployment: the file only seeds it."""
        current = self.state()
        if current is not None:
            return current
        now = time.time()
        try:
            with self.engine.begin() as connection:
                _store_version(connection, library, content_hash, source, now)
                connection.execute(
                    DEPLOYMENT.insert().values(
                        id=ROW_ID, revision=1, champion=content_hash, learning_paused=False, updated_at=now
                    )
                )
                _log(connection, 1, "start", content_hash, None, f"first champion ({source})", by, None, now)
        except sa.exc.IntegrityError:  # another worker started it first: theirs stands
            pass
        started = self.state()
        assert started is not None
        return started

    def propose(self, library: Library, content_hash: str, *, source: str, by: str) -> DeploymentState:
        """Put `library` under test as the challenger. StaleRevision when a test is already running, or when the
        proposal is the champion itself (nothing to test)."""
        current = self._current()
        if current.challenger is not None:
            raise StaleRevision(f"a challenger ({current.challenger[:12]}) is under test; decide it first")
        if content_hash == current.champion:
            raise StaleRevision("the proposal is the champion: nothing to test")
        now = time.time()

        def change(connection: sa.Connection) -> dict[str, Any]:
            _store_version(connection, library, content_hash, source, now)
            return {"challenger": content_hash, "challenger_since": now}

        return self._change(current, "propose", change, rule=source, by=by, about=content_hash)

    def promote(
        self, expected: DeploymentState, *, rule: str, by: str, evidence: dict[str, Any] | None = None
    ) -> DeploymentState:
        """The challenger becomes the champion (StaleRevision if `expected` is no longer current)."""
        if expected.challenger is None:
            raise StaleRevision("no challenger to promote")
        update = {"champion": expected.challenger, "challenger": None, "challenger_since": None}
        return self._change(expected, "promote", lambda _c: update, rule=rule, by=by, evidence=evidence)

    def end_test(
        self, expected: DeploymentState, action: str, *, rule: str, by: str, evidence: dict[str, Any] | None = None
    ) -> DeploymentState:
        """The challenger leaves, the champion stays: `action` "rollback" (it was worse, or an operator said so)
        or "stop" (the test reached its maximum sample size undecided)."""
        if action not in ("rollback", "stop"):
            raise ValueError(f"end_test: action {action!r} is rollback or stop")
        if expected.challenger is None:
            raise StaleRevision("no challenger under test")
        update = {"challenger": None, "challenger_since": None}
        return self._change(expected, action, lambda _c: update, rule=rule, by=by, evidence=evidence)

    def revert(self, expected: DeploymentState, *, by: str) -> DeploymentState:
        """The champion before the current one serves again (an operator's rollback of a promotion)."""
        with self.engine.connect() as connection:
            previous = connection.execute(
                sa.select(DECISIONS.c.champion)
                .where(
                    DECISIONS.c.action.in_(["start", "promote", "revert"]), DECISIONS.c.champion != expected.champion
                )
                .order_by(DECISIONS.c.id.desc())
                .limit(1)
            ).scalar()
        if previous is None:
            raise StaleRevision("no earlier champion to go back to")
        update = {"champion": previous, "challenger": None, "challenger_since": None}
        rule = f"back to {previous[:12]} from {expected.champion[:12]}"
        return self._change(expected, "revert", lambda _c: update, rule=rule, by=by)

    def pause_learning(self, paused: bool, *, by: str) -> DeploymentState:
        current = self._current()
        update = {"learning_paused": paused}
        action = "pause" if paused else "resume"
        return self._change(current, action, lambda _c: update, rule=f"learning {action}d", by=by)

    def _current(self) -> DeploymentState:
        current = self.state()
        if current is None:
            raise StaleRevision("no deployment yet: serve has not started on this store")
        return current

    def _change(
        self,
        expected: DeploymentState,
        action: str,
        change: Any,
        *,
        rule: str,
        by: str,
        about: str | None = None,
        evidence: dict[str, Any] | None = None,
    ) -> DeploymentState:
        now = time.time()
        revision = expected.revision + 1
        with self.engine.begin() as connection:
            values = change(connection)
            done = connection.execute(
                DEPLOYMENT.update()
                .where(DEPLOYMENT.c.id == ROW_ID, DEPLOYMENT.c.revision == expected.revision)
                .values(**values, revision=revision, updated_at=now)
            )
            if done.rowcount != 1:
                raise StaleRevision(f"the deployment changed since revision {expected.revision}: not {action}d")
            champion = values.get("champion", expected.champion)
            _log(connection, revision, action, champion, about or expected.challenger, rule, by, evidence, now)
        changed = self.state()
        assert changed is not None
        return changed


def _store_version(connection: sa.Connection, library: Library, content_hash: str, source: str, now: float) -> None:
    known = connection.execute(
        sa.select(VERSIONS.c.content_hash).where(VERSIONS.c.content_hash == content_hash)
    ).first()
    if known is None:
        connection.execute(
            VERSIONS.insert().values(
                content_hash=content_hash,
                version=library.version,
                library=library.to_json(),
                created_at=now,
                source=source,
            )
        )


def _log(
    connection: sa.Connection,
    revision: int,
    action: str,
    champion: str,
    challenger: str | None,
    rule: str,
    by: str,
    evidence: dict[str, Any] | None,
    now: float,
) -> None:
    connection.execute(
        DECISIONS.insert().values(
            created_at=now,
            revision=revision,
            action=action,
            champion=champion,
            challenger=challenger,
            rule=rule,
            decided_by=by,
            evidence=json.dumps(evidence) if evidence is not None else None,
        )
    )
