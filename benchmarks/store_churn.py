"""The vector store under a learn run's churn: a library of L lessons of which C are replaced every step.

    OMP_NUM_THREADS=1 python benchmarks/store_churn.py [--lessons 100] [--churn 80] [--steps 100]

Each step deletes C lessons, adds C new ones (`ExperienceStore.sync`, as learn's consolidation does) and
asks for the nearest neighbours of C proposed texts (`query_many`, as dedup does). chromadb's HNSW index
keeps every deleted element in its graph, so without compaction each query walks more of them; the store
rebuilds its collection once it has replaced more ids than it holds (`experiences.store.COMPACT_AFTER`).
The table compares the store as shipped with compaction switched off, on the same steps, as the mean per
step over the first, middle and last tenth of the run. Vectors come from a hash of the text (unit random
vectors, 384 dimensions), so the table measures the index alone; the embedding model costs the same at every
step either way.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

import experiences.store as store_module  # noqa: E402
from experiences.model import Experience, Library  # noqa: E402


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


def run(lessons: int, churn: int, steps: int, *, compact: bool) -> list[tuple[float, float]]:
    """(sync seconds, query seconds) of each step."""
    saved = store_module.COMPACT_AFTER
    store_module.COMPACT_AFTER = saved if compact else sys.maxsize
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", type=int, default=100)
    parser.add_argument("--churn", type=int, default=80, help="lessons replaced (and texts queried) per step")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.2f} at start")
    print(f"\n{args.lessons} lessons, {args.churn} replaced and {args.churn} queried per step, {args.steps} steps")
    print("\n| store | sync + query, first tenth | middle tenth | last tenth |")
    print("|---|---|---|---|")
    for label, compact in (("compaction off", False), ("as shipped (compaction)", True)):
        print(f"| {label} | " + " | ".join(tenths(run(args.lessons, args.churn, args.steps, compact=compact))) + " |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
