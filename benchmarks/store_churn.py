"""The vector store under a learn run's churn: a library of L lessons of which C are replaced every step.

    OMP_NUM_THREADS=1 python benchmarks/store_churn.py [--lessons 100] [--churn 80] [--steps 100]

Each step deletes C lessons, adds C new ones (`ExperienceStore.sync`, as learn's consolidation does) and
asks for the nearest neighbours of C proposed texts (`query_many`, as dedup does). chromadb's HNSW index
keeps every deleted element in its graph, so without compaction each query walks more of them; the store
rebuilds its collection once it has replaced more ids than it holds (`tfgrpo.experiences.store.COMPACT_AFTER`).
The table compares the store as shipped with compaction switched off and with a lower threshold, on the
same steps, as the mean per step over the first, middle and last tenth of the run, with the peak RSS of
the process that ran it (each row runs in a fresh process): every rebuild leaks a few MB in chromadb 1.5
(chroma-core/chroma#3296), which is why the threshold is not lower. Vectors come from a hash of the text (unit random
vectors, 384 dimensions), so the table measures the index alone; the embedding model costs the same at every
step either way.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import tfgrpo.experiences.store as store_module  # noqa: E402
from tfgrpo.experiences.model import Experience, Library  # noqa: E402


class HashEmbedder:
    """A unit vector per text, seeded by its hash: deterministic, and free next to the index."""

    name = "hash-384"

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors = []
        for text in texts:
            seed = int(hashlib.sha1(text.encode()).hexdigest()[:8], 16)
            vector = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
            vectors.append((vector / np.linalg.norm(vector)).tolist())
        return vectors


def lesson(index: int) -> str:
    return f"Lesson {index}: when a problem of kind {index % 97} appears, check step {index % 13} twice."


def run(lessons: int, churn: int, steps: int, *, compact_after: int) -> list[tuple[float, float]]:
    """(sync seconds, query seconds) of each step."""
    saved = store_module.COMPACT_AFTER
    store_module.COMPACT_AFTER = compact_after
    try:
        with tempfile.TemporaryDirectory() as folder:
            store = store_module.ExperienceStore(Path(folder) / "library.chroma", embedder=HashEmbedder())
            library = {f"G{i}": lesson(i) for i in range(lessons)}
            made, times = lessons, []
            for _ in range(steps):
                for old in list(library)[:churn]:
                    del library[old]
                for _ in range(churn):
                    library[f"G{made}"] = lesson(made)
                    made += 1
                current = Library(experiences=[Experience(id=i, text=t) for i, t in library.items()])
                started = time.perf_counter()
                store.sync(current)
                synced = time.perf_counter()
                store.query_many([lesson(made + j) for j in range(churn)], k=5)
                times.append((synced - started, time.perf_counter() - synced))
            return times
    finally:
        store_module.COMPACT_AFTER = saved


def tenths(times: list[tuple[float, float]]) -> list[str]:
    size = max(len(times) // 10, 1)
    parts = [times[:size], times[len(times) // 2 : len(times) // 2 + size], times[-size:]]
    return [f"{1000 * statistics.fmean(s + q for s, q in part):.0f} ms" for part in parts]


def row(args: argparse.Namespace, compact_after: int) -> str:
    """One table row, measured in this process (run it in a fresh one: peak RSS is the process's)."""
    times = run(args.lessons, args.churn, args.steps, compact_after=compact_after)
    if compact_after == sys.maxsize:
        label = "compaction off"
    else:
        label = f"rebuild past {compact_after} replaced" + (
            " (as shipped)" if compact_after == store_module.COMPACT_AFTER else ""
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return f"| {label} | " + " | ".join(tenths(times)) + f" | {peak_mb:.0f} MB |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", type=int, default=100)
    parser.add_argument("--churn", type=int, default=80, help="lessons replaced (and texts queried) per step")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument(
        "--thresholds", type=int, nargs="*", default=[256], help="other COMPACT_AFTER values to compare"
    )
    parser.add_argument("--row", type=int, help=argparse.SUPPRESS)  # a child: print one row
    args = parser.parse_args()
    if args.row is not None:
        print(row(args, args.row), flush=True)
        return
    print(f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.2f} at start")
    print(f"\n{args.lessons} lessons, {args.churn} replaced and {args.churn} queried per step, {args.steps} steps")
    print("\n| store | sync + query, first tenth | middle tenth | last tenth | peak RSS |")
    print("|---|---|---|---|---|")
    common = [f"--lessons={args.lessons}", f"--churn={args.churn}", f"--steps={args.steps}"]
    for compact_after in (sys.maxsize, *args.thresholds, store_module.COMPACT_AFTER):
        subprocess.run([sys.executable, __file__, *common, f"--row={compact_after}"], check=True)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
