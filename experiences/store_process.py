"""An `ExperienceStore` served by a process of its own, so that the memory chromadb takes is that process's.

chromadb does not give back what it grows by under a learn run's churn; a caller that replaces this
process now and then (tfgrpo.learn.vector_store) keeps its own memory flat, and never imports chromadb or
onnxruntime. `StoreProcess` has the store's methods that dedup and top-k
injection call (`sync`, `embed`, `query`, `query_many`, `query_vectors`, `nearest`, `neighbours_of_all`);
each is one request over a socket pair (pickled arguments and results, one call at a time).

The child loads the embedder, then opens the collection: at once (`open_at_start`), or on the first call
that needs it, so a run whose library is still empty embeds without opening
chromadb. It exits when its parent closes the
socket, or dies: a killed learn run leaves no store process behind. Its stderr (chromadb's and
onnxruntime's warnings) goes to a log file beside the store, named in the error if the process fails.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from tfgrpo.experiences.errors import ExperienceError
from tfgrpo.experiences.model import Library
from tfgrpo.experiences.store import library_fingerprint

#: onnxruntime threads of the child's embedder (see `_serve`)
EMBEDDING_THREADS = min(2, os.cpu_count() or 1)
#: how long `close` waits for the child to exit by itself before killing it
CLOSE_TIMEOUT_S = 5.0
_PROJECT_ROOT = str(Path(__file__).parents[2])  # the folder that holds the tfgrpo package


class StoreProcess:
    """The vector store of `path` (a folder; None: in memory, for this store only), in a child process."""

    def __init__(
        self, path: str | Path | None, *, log_path: str | Path | None = None, open_at_start: bool = True
    ) -> None:
        """`open_at_start`: open the collection as part of the cold start (chromadb, ~0.7 s); False leaves it
        to the first call that needs it (a run whose library is empty may need only the embedder)."""
        self.path = Path(path) if path is not None else None
        self.log_path = Path(log_path) if log_path is not None else None
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PROJECT_ROOT, env.get("PYTHONPATH")) if p)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path or os.devnull, "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tfgrpo.experiences.store_process", str(theirs.fileno()), str(self.path or "")]
                + (["--open"] if open_at_start else []),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
            )
        theirs.close()
        self._connection = Connection(ours.detach())
        self._lock = threading.Lock()
        self._synced: str | None = None
        self.embedder = _RemoteEmbedder(self)  # what dedup needs of an embedder, for an empty library

    # -- the store's surface ------------------------------------------------------------------------------
    @property
    def holds_library(self) -> bool:
        """A library was sent (the collection is open)."""
        return self._synced is not None

    def sync(self, library: Library) -> None:
        """Make the collection hold exactly the library's experiences; a library already sent is not resent."""
        fingerprint = library_fingerprint(library)
        if fingerprint != self._synced:
            self._call("sync", library)
            self._synced = fingerprint

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        result: list[list[float]] = self._call("embed", list(texts))
        return result

    def query(self, text: str, *, k: int = 8, exclude: Sequence[str] = ()) -> Any:
        return self._call("query", text, k=k, exclude=tuple(exclude))

    def query_many(self, texts: Sequence[str], *, k: int = 8, exclude: Sequence[str] = ()) -> Any:
        return self._call("query_many", list(texts), k=k, exclude=tuple(exclude))

    def query_vectors(self, vectors: Sequence[Sequence[float]], *, k: int = 8) -> Any:
        return self._call("query_vectors", [list(v) for v in vectors], k=k)

    def nearest(self, text: str, *, exclude: Sequence[str] = ()) -> Any:
        return self._call("nearest", text, exclude=tuple(exclude))

    def neighbours_of_all(self, *, k: int = 5) -> Any:
        return self._call("neighbours_of_all", k=k)

    def __len__(self) -> int:
        count: int = self._call("__len__")
        return count

    # -- the process --------------------------------------------------------------------------------------
    def rss_mb(self) -> float | None:
        """The child's resident memory now, in MB (None where /proc does not tell, or once it has ended)."""
        try:
            with open(f"/proc/{self._process.pid}/status", encoding="ascii") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        except (OSError, ValueError):
            return None
        return None

    def wait_ready(self) -> None:
        """Block until the child has loaded its embedder (its cold start), raising if it failed."""
        self._call("ready")

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            try:
                self._connection.send((method, args, kwargs))
                ok, value = self._connection.recv()
            except (EOFError, OSError):
                raise ExperienceError(self._ended()) from None
        if not ok:
            raise ExperienceError(f"vector store: {value}")
        return value

    def _ended(self) -> str:
        try:
            code = self._process.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        where = f"; its log: {self.log_path}" if self.log_path is not None else ""
        return f"the vector store's process ended (exit {code}){where}"

    def close(self) -> None:
        """Ask the child to exit, wait for it, kill it if it does not."""
        with self._lock:
            try:
                self._connection.send(None)
            except OSError:
                pass
            self._connection.close()
        try:
            self._process.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self.log_path is not None and self.log_path.is_file() and not self.log_path.stat().st_size:
            self.log_path.unlink()  # nothing to say: no empty file in the run folder


class _RemoteEmbedder:
    """The child's embedder (`embed` only): an empty library's dedup compares adds without the collection."""

    def __init__(self, process: StoreProcess) -> None:
        self._process = process

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._process.embed(texts)


def _serve(connection: Connection, path: Path | None, *, open_at_start: bool) -> None:
    """The child: load the embedder (and the collection), then answer calls until the parent closes the socket."""
    from tfgrpo.experiences.embedders import OnnxMiniLMEmbedder
    from tfgrpo.experiences.store import ExperienceStore

    # Two threads: the calls a learn run waits on (consolidation's near-duplicate hints) come while the learn
    # process is idle, so the embedder may take both cores.
    embedder = OnnxMiniLMEmbedder(threads=EMBEDDING_THREADS)
    embedder.load()
    embedder.embed(["warm-up"])
    store = ExperienceStore(path, embedder=embedder) if open_at_start else None
    while True:
        try:
            message = connection.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        method, args, kwargs = message
        try:
            if method == "ready":
                value: Any = True
            elif method == "embed" and store is None:  # an empty library: the embedder, not the collection
                value = [list(map(float, vector)) for vector in embedder.embed(args[0])]
            else:
                store = store or ExperienceStore(path, embedder=embedder)
                value = getattr(store, method)(*args, **kwargs)
                if method == "embed":
                    value = [list(map(float, vector)) for vector in value]
            connection.send((True, value))
        except Exception as exc:  # the caller gets it as one line; the process keeps serving
            connection.send((False, f"{type(exc).__name__}: {exc}"))


def main() -> None:
    fd, path = int(sys.argv[1]), sys.argv[2]
    _serve(Connection(fd), Path(path) if path else None, open_at_start="--open" in sys.argv[3:])
    # every call was answered and each write committed: skip the interpreter's teardown of chromadb and
    # onnxruntime (~0.15 s), which the parent's close would wait for
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()


__all__ = ["StoreProcess"]
