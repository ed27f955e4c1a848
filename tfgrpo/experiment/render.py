"""Write the paper-style table as report.md, a self-contained report.html and accuracy.png."""

from __future__ import annotations

import base64
from pathlib import Path

from tfgrpo.core.atomic import atomic_write_text
from tfgrpo.eval.compare import Comparison
from tfgrpo.eval.report import Table

_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{{ title }}</title>
<style>body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:80rem;color:#222}
table{border-collapse:collapse;font-size:.9rem}th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:left}
th{background:#f2f2f2}p.note{color:#555;font-size:.85rem}img{max-width:100%}</style></head>
<body><h1>{{ title }}</h1>{% if description %}<p>{{ description }}</p>{% endif %}
<table><thead><tr>{% for h in table.headers %}<th>{{ h }}</th>{% endfor %}</tr></thead><tbody>
{% for row in table.rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}
</tbody></table><p class="note">{{ table.note }}</p>
{% for more in extra %}<h2>{{ more.title }}</h2><table><thead><tr>{% for h in more.headers %}<th>{{ h }}</th>{% endfor %}</tr></thead><tbody>
{% for row in more.rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor %}
</tbody></table><p class="note">{{ more.note }}</p>{% endfor %}
<p>Full compare report per eval set: {% for name in sets %}<a href="{{ name }}/report.html">{{ name }}</a> {% endfor %}</p>
{% if prompts %}<p>The learned library as the system prompt to ship: {% for name in prompts %}<a href="{{ name }}">{{ name }}</a> {% endfor %}</p>{% endif %}
<img alt="Mean@K by system" src="data:image/png;base64,{{ image }}"></body></html>
"""


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _markdown_table(table: Table) -> list[str]:
    lines = ["| " + " | ".join(_md_cell(h) for h in table.headers) + " |"]
    lines.append("|" + "|".join("---" for _ in table.headers) + "|")
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    return [*lines, "", table.note or "", ""]


def render_markdown(
    table: Table,
    description: str,
    sets: list[str],
    prompts: list[str] | None = None,
    extra: list[Table] | None = None,
) -> str:
    lines = [f"# {table.title}", ""]
    if description:
        lines += [description, ""]
    lines += _markdown_table(table)
    for more in extra or []:
        lines += [f"## {more.title}", "", *_markdown_table(more)]
    lines += [
        "Full compare report per eval set: " + ", ".join(f"[{s}]({s}/report.md)" for s in sets),
        "",
    ]
    if prompts:
        lines += [
            "The learned library as the system prompt to ship: " + ", ".join(f"[{p}]({p})" for p in prompts),
            "",
        ]
    lines += [
        "![Mean@K by system](accuracy.png)",
        "",
    ]
    return "\n".join(lines)


def plot_systems(comparisons: dict[str, Comparison], path: Path) -> Path:
    """Grouped bars: one group per eval set, one bar per system, 95% CI whiskers."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sets = list(comparisons)
    names = list(dict.fromkeys(system.name for s in sets for system in comparisons[s].systems))
    by_name = {s: {system.name: system for system in comparisons[s].systems} for s in sets}
    figure = Figure(figsize=(max(5.0, 1.0 + 0.9 * len(sets) * len(names)), 4.0), dpi=120)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    width = 0.8 / len(names)
    for index, name in enumerate(names):
        found = [by_name[s].get(name) for s in sets]  # None: the system failed on that set (no bar)
        means = [100 * system.mean_at_k if system else 0.0 for system in found]
        lower = [m - 100 * system.ci95[0] if system else 0.0 for m, system in zip(means, found, strict=True)]
        upper = [100 * system.ci95[1] - m if system else 0.0 for m, system in zip(means, found, strict=True)]
        positions = [i + (index - (len(names) - 1) / 2) * width for i in range(len(sets))]
        axes.bar(
            positions,
            means,
            width,
            yerr=[[max(v, 0) for v in lower], [max(v, 0) for v in upper]],
            capsize=3,
            label=name,
        )
    axes.set_xticks(range(len(sets)), [f"{s} (Mean@{comparisons[s].systems[0].k})" for s in sets])
    axes.set_ylabel("Mean@K (%)")
    axes.set_ylim(0, 100)
    axes.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def write_table_report(
    table: Table,
    comparisons: dict[str, Comparison],
    out: Path,
    *,
    title: str,
    description: str,
    prompts: list[Path] | None = None,
    extra: list[Table] | None = None,
) -> dict[str, Path]:
    """`extra`: further tables after the main one (the experiment's "what each method saw")."""
    import jinja2

    sets = list(comparisons)
    names = [path.name for path in prompts or []]
    png = plot_systems(comparisons, out / "accuracy.png")
    markdown, html = out / "report.md", out / "report.html"
    atomic_write_text(markdown, render_markdown(table, description, sets, names, extra))
    image = base64.b64encode(png.read_bytes()).decode("ascii")
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    atomic_write_text(
        html,
        environment.from_string(_HTML).render(
            title=title, description=description, table=table, sets=sets, image=image, prompts=names, extra=extra or []
        ),
    )
    return {"markdown": markdown, "html": html, "png": png}


__all__ = ["plot_systems", "render_markdown", "write_table_report"]
