"""The deployment one worker serves: the champion and the challenger as snapshots, swapped when the database's
revision changes.

A request takes `LiveDeployment.current` once, at its start, and serves the version it found there to its
end; a poll (`watch`) reads the revision, builds the snapshots of a changed deployment off the event loop and
swaps the one reference, so no request sees half a change and none is dropped. The champion snapshot is
also put in `LiveLibrary.current`, so /health, the page and the library metric name what is served.
Versions are content hashes: a snapshot is built once per hash and kept (a promoted challenger is the
snapshot that was tested).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tfgrpo.serve.deployment import Deployment, DeploymentState
from tfgrpo.serve.errors import RequestRejected
from tfgrpo.serve.live_library import LiveLibrary, Snapshot

#: the shortest version prefix `x-tfgrpo-version` may name (12 hex characters: how versions are shown)
PIN_PREFIX_CHARS = 12


@dataclass(frozen=True)
class Served:
    revision: int
    champion: Snapshot
    challenger: Snapshot | None
    state: DeploymentState


class LiveDeployment:
    def __init__(self, deployment: Deployment, live: LiveLibrary, *, source: str):
        self.deployment = deployment
        self.live = live
        self._snapshots: dict[str, Snapshot] = {live.current.content_hash: live.current}
        seeded = live.current
        state = deployment.start(seeded.library, seeded.content_hash, source=source, by="serve")
        self.current = self._served(state)
        if self.current.champion is not seeded:  # a restart: the stored champion, not the file, serves
            self.live.serve(self.current.champion)

    def refresh(self) -> bool:
        """Read the deployment; True when its revision changed and the new versions are now served."""
        state = self.deployment.state()
        if state is None or state.revision == self.current.revision:
            return False
        self.current = self._served(state)
        if self.current.champion is not self.live.current:
            self.live.serve(self.current.champion)
        return True

    async def watch(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await asyncio.to_thread(self.refresh)

    def pinned(self, prefix: str) -> Snapshot:
        """The stored version whose content hash starts with `prefix` (RequestRejected 400 when none is)."""
        prefix = prefix.strip().lower()
        if len(prefix) < PIN_PREFIX_CHARS or any(c not in "0123456789abcdef" for c in prefix) or len(prefix) > 64:
            raise RequestRejected(
                400, f"x-tfgrpo-version: give {PIN_PREFIX_CHARS} to 64 hex characters of a content hash", "bad_version"
            )
        found = self.deployment.find_version(prefix)
        if found is None:
            raise RequestRejected(400, f"x-tfgrpo-version: no one stored version starts with {prefix}", "bad_version")
        return self._snapshot(found)

    def _served(self, state: DeploymentState) -> Served:
        challenger = self._snapshot(state.challenger) if state.challenger is not None else None
        return Served(state.revision, self._snapshot(state.champion), challenger, state)

    def _snapshot(self, content_hash: str) -> Snapshot:
        snapshot = self._snapshots.get(content_hash)
        if snapshot is None:
            snapshot = self._snapshots[content_hash] = Snapshot.of(self.deployment.library(content_hash))
        return snapshot
