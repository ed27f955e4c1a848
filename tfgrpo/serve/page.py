"""`GET /`: the live library, arm counts and per-version mean rewards, as one HTML page; with a deployment,
also its champion and challenger, the running test's confidence sequence as an SVG plot, and the decision log."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from tfgrpo.experiences import Library
from tfgrpo.serve.confidence_plot import Limits, bounds_over_time, confidence_svg
from tfgrpo.serve.decider import read_test
from tfgrpo.serve.deploy_settings import DeploymentSettings
from tfgrpo.serve.live_deployment import LiveDeployment


def deployment_section(
    live: LiveDeployment, engine: Any, settings: DeploymentSettings, reward_bounds: tuple[float, float]
) -> dict[str, Any]:
    """What the page shows of a deployment: its state, the running test (bounds now, the plot) and its log."""
    state = live.deployment.state() or live.current.state
    reading = read_test(engine, state, settings, reward_bounds)
    plot = ""
    if reading is not None:
        low, high = reward_bounds
        history = bounds_over_time(
            reading.data.champion, reading.data.challenger, alpha=settings.test.alpha, low=low, high=high
        )
        plot = confidence_svg(history, Limits(settings.test.min_effect, settings.test.margin), span=high - low)
    return {
        "state": state,
        "reading": reading,
        "plot": Markup(plot),  # built from numbers and escaped text (confidence_plot.py)
        "decisions": live.deployment.decisions(limit=20),
    }


def render_page(
    library: Library, summary: dict[str, Any], *, holdout: float, deployment: dict[str, Any] | None = None
) -> str:
    versions = []
    for version, arms in summary["versions"].items():  # newest first
        means = [arms.get(arm, {}).get("mean_reward") for arm in ("A", "B")]
        diff = means[1] - means[0] if None not in means else None
        versions.append({"version": version, "arms": arms, "diff": diff})
    return _template().render(
        library=library, summary=summary, versions=versions, holdout=holdout, deployment=deployment, fmt=_fmt
    )


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    source = resources.files("tfgrpo.serve").joinpath("templates", "page.html.jinja").read_text(encoding="utf-8")
    return jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined).from_string(source)
