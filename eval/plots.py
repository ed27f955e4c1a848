"""PNG plots of a comparison: accuracy with CI bars, per-problem heat map, learning curve of a learn run.

matplotlib is imported inside each function and drawn through its Agg canvas directly (no pyplot), so
nothing global changes and no display is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_DPI = 120


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=_DPI)
    FigureCanvasAgg(figure)
    return figure


def _save(figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.tight_layout()
    figure.savefig(path, format="png")
    return path


def plot_accuracy(
    systems: Sequence[str], means: Sequence[float], cis: Sequence[Sequence[float]], path: Path, *, k: int | None = None
) -> Path:
    """Bar per system: Mean@K with its 95 % CI."""
    figure = _figure(max(4.0, 1.3 * len(systems) + 1.5), 3.6)
    axes = figure.add_subplot()
    positions = range(len(systems))
    lower = [max(0.0, m - ci[0]) for m, ci in zip(means, cis, strict=False)]
    upper = [max(0.0, ci[1] - m) for m, ci in zip(means, cis, strict=False)]
    bars = axes.bar(positions, means, yerr=[lower, upper], capsize=6, color="#4C72B0", alpha=0.85)
    for bar, mean, ci in zip(bars, means, cis, strict=False):
        axes.annotate(
            f"{100 * mean:.1f}%",
            (bar.get_x() + bar.get_width() / 2, min(0.93, max(mean, ci[1]) + 0.02)),
            ha="center",
            va="bottom",
            fontsize=9,
        )
    axes.set_xticks(list(positions), [_short(s) for s in systems], rotation=15 if len(systems) > 3 else 0)
    axes.set_ylim(0.0, 1.0)
    axes.set_ylabel(f"Mean@{k}" if k else "Mean@K")
    axes.set_title("Accuracy with 95% bootstrap CI")
    axes.grid(axis="y", alpha=0.3)
    return _save(figure, path)


def plot_heatmap(
    systems: Sequence[str], problem_ids: Sequence[str], matrix: Sequence[Sequence[float]], path: Path
) -> Path:
    """Rows = problems, columns = systems, colour = share of correct samples."""
    import numpy as np

    values = np.asarray(matrix, dtype=np.float64).reshape(len(problem_ids), len(systems))
    height = min(40.0, max(3.0, 0.22 * len(problem_ids) + 1.2))
    figure = _figure(max(4.0, 1.2 * len(systems) + 2.5), height)
    axes = figure.add_subplot()
    image = axes.imshow(values, aspect="auto", cmap="RdYlGn", vmin=0.0, vmax=1.0, interpolation="nearest")
    axes.set_xticks(range(len(systems)), [_short(s) for s in systems], rotation=30, ha="right")
    if len(problem_ids) <= 80:  # beyond that, labels would overlap into a black bar
        axes.set_yticks(range(len(problem_ids)), list(problem_ids), fontsize=7)
    else:
        axes.set_ylabel(f"{len(problem_ids)} problems")
    figure.colorbar(image, ax=axes, fraction=0.05, label="share of samples correct")
    axes.set_title("Per-problem accuracy")
    return _save(figure, path)


def plot_learning_curve(steps: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Rollout accuracy (left axis) and library size (right axis) per learn step."""
    x = [row.get("step", index) for index, row in enumerate(steps)]
    accuracy = [row.get("accuracy") for row in steps]
    size = [row.get("library_size") for row in steps]
    figure = _figure(6.0, 3.6)
    axes = figure.add_subplot()
    axes.plot(
        x, [float("nan") if v is None else v for v in accuracy], marker="o", color="#4C72B0", label="rollout accuracy"
    )
    axes.set_xlabel("step")
    axes.set_ylabel("rollout accuracy", color="#4C72B0")
    axes.set_ylim(0.0, 1.0)
    axes.grid(alpha=0.3)
    if any(v is not None for v in size):
        twin = axes.twinx()
        twin.plot(
            x,
            [float("nan") if v is None else v for v in size],
            marker="s",
            markersize=4,
            color="#DD8452",
            label="library size",
        )
        twin.set_ylabel("library size (experiences)", color="#DD8452")
        twin.set_ylim(bottom=0)
    axes.set_title("Learning curve")
    return _save(figure, path)


def _short(name: str, width: int = 22) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


__all__ = ["plot_accuracy", "plot_heatmap", "plot_learning_curve"]
