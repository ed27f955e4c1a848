"""Latency of the dedup path (embed a new lesson, find its nearest neighbour, add it) at 100, 1k and 10k
experiences, with the offline MiniLM embedder and chromadb on disk. Target: <= 20 ms per add+query at 10k.

    OMP_NUM_THREADS=1 python benchmarks/dedup.py [--sizes 100 1000 10000] [--repeats 50]

Setup (bulk-embedding and loading N synthetic lessons) is not timed; each timed round embeds one new
lesson (embed), asks the store for its nearest neighbour (query), and adds it with its vector (add).
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import tempfile
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SUBJECTS = [
    "geometry",
    "algebra",
    "probability",
    "number theory",
    "combinatorics",
    "calculus",
    "inequality",
    "sequence",
    "polynomial",
    "trigonometry",
    "logarithm",
    "matrix",
    "graph",
    "modular arithmetic",
    "complex number",
    "recurrence",
    "optimization",
    "vector",
    "series",
    "functional equation",
]
ACTIONS = [
    "check",
    "verify",
    "simplify",
    "bound",
    "estimate",
    "factor",
    "substitute into",
    "draw",
    "tabulate",
    "recompute",
    "normalise",
    "enumerate",
    "symmetrise",
    "decompose",
    "rewrite",
    "test small cases of",
    "guess and confirm",
    "compare",
    "isolate",
    "track",
]
OBJECTS = [
    "the domain",
    "every root",
    "the final answer",
    "the boundary cases",
    "the units",
    "each constraint",
    "the parity",
    "the sign",
    "the extreme values",
    "the intersection points",
    "the denominators",
    "the invariants",
    "the edge cases",
    "the degenerate case",
    "the initial terms",
    "the period",
    "the discriminant",
    "the base case",
    "the symmetry",
    "the assumptions",
    "the largest term",
    "the integer solutions",
    "the remainders",
    "the limits",
    "the angles",
    "the area formula",
    "the counting overlap",
    "the independence",
    "the monotonicity",
    "the convergence",
]


def lessons(count: int, seed: int = 0) -> list[str]:
    combos = list(itertools.product(SUBJECTS, ACTIONS, OBJECTS))
    random.Random(seed).shuffle(combos)
    if count > len(combos):
        raise SystemExit(f"at most {len(combos)} synthetic lessons")
    return [f"In {s} problems, {a} {o} before answering." for s, a, o in combos[:count]]


def measure(size: int, repeats: int, embedder) -> dict[str, float]:
    from tfgrpo.experiences.store import ExperienceStore

    texts = lessons(size + repeats, seed=size)
    base, probes = texts[:size], texts[size:]
    with tempfile.TemporaryDirectory() as folder:
        store = ExperienceStore(folder, embedder=embedder)
        started = time.perf_counter()
        store.upsert({f"G{i}": text for i, text in enumerate(base)})
        setup_s = time.perf_counter() - started
        embed_ms, query_ms, add_ms, total_ms = [], [], [], []
        for n, text in enumerate(probes):
            t0 = time.perf_counter()
            vector = embedder.embed([text])
            t1 = time.perf_counter()
            store.query_vectors(vector, k=1)
            t2 = time.perf_counter()
            store.upsert({f"N{n}": text}, vectors=vector)
            t3 = time.perf_counter()
            embed_ms.append((t1 - t0) * 1e3)
            query_ms.append((t2 - t1) * 1e3)
            add_ms.append((t3 - t2) * 1e3)
            total_ms.append((t3 - t0) * 1e3)
        # The engine adds a step's new lessons in one call: the write cost per item when batched by 10.
        batch_ms = []
        extra = lessons(size + repeats + 100, seed=size)[size + repeats :]
        vectors = embedder.embed(extra)
        for b in range(0, 100, 10):
            t0 = time.perf_counter()
            store.upsert({f"B{b + j}": extra[b + j] for j in range(10)}, vectors=vectors[b : b + 10])
            batch_ms.append((time.perf_counter() - t0) * 1e3 / 10)
    p95 = lambda xs: sorted(xs)[max(0, int(round(0.95 * len(xs))) - 1)]  # noqa: E731
    return {
        "size": size,
        "setup_s": setup_s,
        "embed_ms": statistics.median(embed_ms),
        "query_ms": statistics.median(query_ms),
        "add_ms": statistics.median(add_ms),
        "total_ms": statistics.median(total_ms),
        "total_p95_ms": p95(total_ms),
        "check_ms": statistics.median(e + q for e, q in zip(embed_ms, query_ms, strict=False)),
        "batched_add_ms": statistics.median(batch_ms),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()

    import torch
    from rich.console import Console
    from rich.table import Table

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    from tfgrpo.experiences.embedders import LocalEmbedder

    embedder = LocalEmbedder()
    embedder.embed(["warm up the model"])
    rows = [measure(size, args.repeats, embedder) for size in args.sizes]
    table = Table(
        title=f"dedup add+query latency (median of {args.repeats}, ms; MiniLM on CPU, {torch.get_num_threads()} thread)"
    )
    columns = (
        "experiences",
        "embed",
        "query",
        "dedup check",
        "add (1, on disk)",
        "add+query",
        "p95",
        "add/item (batch 10)",
        "setup (s)",
    )
    for column in columns:
        table.add_column(column, justify="right")
    cells = [
        [
            f"{r['size']:,}",
            f"{r['embed_ms']:.1f}",
            f"{r['query_ms']:.1f}",
            f"{r['check_ms']:.1f}",
            f"{r['add_ms']:.1f}",
            f"{r['total_ms']:.1f}",
            f"{r['total_p95_ms']:.1f}",
            f"{r['batched_add_ms']:.1f}",
            f"{r['setup_s']:.1f}",
        ]
        for r in rows
    ]
    for row in cells:
        table.add_row(*row)
    Console().print(table)
    print("| " + " | ".join(columns) + " |")
    print("|" + "---:|" * len(columns))
    for row in cells:
        print("| " + " | ".join(row) + " |")
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
