"""`GET /`: the live library, arm counts and per-version mean rewards, as one HTML page."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2

from tfgrpo.experiences import Library


def render_page(library: Library, summary: dict[str, Any], *, holdout: float) -> str:
    versions = []
    for version, arms in summary["versions"].items():  # newest first
        means = [arms.get(arm, {}).get("mean_reward") for arm in ("A", "B")]
        diff = means[1] - means[0] if None not in means else None
        versions.append({"version": version, "arms": arms, "diff": diff})
    return _template().render(library=library, summary=summary, versions=versions, holdout=holdout, fmt=_fmt)


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    source = resources.files("tfgrpo.serve").joinpath("templates", "page.html.jinja").read_text(encoding="utf-8")
    return jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(source)
