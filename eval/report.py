"""Render a `Comparison` as report.md and a self-contained report.html (PNGs inlined), plus comparison.json.

The tables are built once (`tfgrpo.eval.report_tables.build_tables`) and rendered three ways: markdown, HTML,
and the rich table the CLI prints, so the three never disagree.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from tfgrpo.eval.comparison import Comparison
from tfgrpo.eval.plots import plot_accuracy, plot_heatmap, plot_learning_curve
from tfgrpo.eval.report_tables import Table, build_tables


def draw_plots(comparison: Comparison, out_dir: Path) -> dict[str, Path]:
    names = [system.name for system in comparison.systems]
    k = max(system.k for system in comparison.systems)
    plots = {
        "accuracy": plot_accuracy(
            names,
            [s.mean_at_k for s in comparison.systems],
            [s.ci95 for s in comparison.systems],
            out_dir / "accuracy.png",
            k=k,
        ),
        "per_problem": plot_heatmap(
            names, comparison.problem_ids, list(comparison.per_problem.values()), out_dir / "per_problem.png"
        ),
    }
    if comparison.learn_steps:
        plots["learning_curve"] = plot_learning_curve(comparison.learn_steps, out_dir / "learning_curve.png")
    return plots


_PLOT_TITLES = {
    "accuracy": "Accuracy with 95% CI",
    "per_problem": "Per-problem heat map",
    "learning_curve": "Learning curve",
}


def render_markdown(comparison: Comparison, tables: list[Table], plots: dict[str, Path]) -> str:
    lines = [f"# Comparison of {len(comparison.systems)} systems", ""]
    lines.append(f"Baseline: **{comparison.baseline}**. {len(comparison.problem_ids)} problems.")
    lines.append("")
    for table in tables:
        lines += [f"## {table.title}", ""]
        if table.note:
            lines += [table.note, ""]
        lines.append("| " + " | ".join(_md_cell(h) for h in table.headers) + " |")
        lines.append("|" + "|".join("---" for _ in table.headers) + "|")
        lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
        lines.append("")
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{_PLOT_TITLES.get(key, key)}]({path.name})" for key, path in plots.items()]
        lines.append("")
    return "\n".join(lines)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


_HTML_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Comparison of {{ comparison.systems | length }} systems</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; color: #222; }
table { border-collapse: collapse; margin: 0.5rem 0 1.5rem; font-size: 0.9rem; }
th, td { border: 1px solid #ccc; padding: 0.3rem 0.6rem; text-align: left; }
th { background: #f2f2f2; }
p.note { color: #555; font-size: 0.85rem; max-width: 60rem; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5rem 0; }
</style>
</head>
<body>
<h1>Comparison of {{ comparison.systems | length }} systems</h1>
<p>Baseline: <strong>{{ comparison.baseline }}</strong>. {{ comparison.problem_ids | length }} problems.</p>
{% for table in tables %}
{% if table.key == "per_problem" %}<details><summary><strong>{{ table.title }}</strong></summary>{% else %}<h2>{{ table.title }}</h2>{% endif %}
{% if table.note %}<p class="note">{{ table.note }}</p>{% endif %}
<table id="{{ table.key }}">
<thead><tr>{% for header in table.headers %}<th>{{ header }}</th>{% endfor %}</tr></thead>
<tbody>
{% for row in table.rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</tbody>
</table>
{% if table.key == "per_problem" %}</details>{% endif %}
{% endfor %}
{% if images %}<h2>Plots</h2>{% endif %}
{% for title, data in images %}<figure><img alt="{{ title }}" src="data:image/png;base64,{{ data }}"><figcaption>{{ title }}</figcaption></figure>
{% endfor %}
</body>
</html>
"""


def render_html(comparison: Comparison, tables: list[Table], plots: dict[str, Path]) -> str:
    import jinja2

    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    images = [
        (_PLOT_TITLES.get(key, key), base64.b64encode(path.read_bytes()).decode("ascii"))
        for key, path in plots.items()
    ]
    return environment.from_string(_HTML_TEMPLATE).render(comparison=comparison, tables=tables, images=images)


def write_report(comparison: Comparison, out_dir: Path) -> dict[str, Path]:
    """Write plots, report.md, report.html and comparison.json; returns their paths by name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    tables = build_tables(comparison)
    plots = draw_plots(comparison, out_dir)
    files = dict(plots)
    files["markdown"] = _write_text(out_dir / "report.md", render_markdown(comparison, tables, plots))
    files["html"] = _write_text(out_dir / "report.html", render_html(comparison, tables, plots))
    files["json"] = _write_text(out_dir / "comparison.json", json.dumps(comparison.model_dump(mode="json"), indent=2))
    return files


def _write_text(path: Path, text: str) -> Path:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)  # atomic: a reader never sees half a report
    return path


__all__ = ["Table", "build_tables", "draw_plots", "render_html", "render_markdown", "write_report"]
