"""The running test as a picture: its confidence sequence on challenger minus champion, drawn over the rewards
seen so far, as an SVG the status page embeds (rendered here, no script).

A confidence sequence holds at every moment at once, so the band at each point is the interval the test had
then, after each observation in the order their rewards arrived (`difference_path`: one pass over the
stream); `points` of them, evenly spaced, are drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from tfgrpo.core.sequential import DifferenceBounds, Observation, difference_path

WIDTH, HEIGHT, PAD = 640, 240, 40


@dataclass(frozen=True)
class Limits:
    """The lines the bounds are judged against: promote above `min_effect`, roll back below `-margin`."""

    min_effect: float
    margin: float


def bounds_over_time(
    champion: Sequence[Observation],
    challenger: Sequence[Observation],
    *,
    alpha: float,
    low: float,
    high: float,
    points: int = 40,
) -> list[tuple[int, DifferenceBounds]]:
    """(observations seen, the bounds then) at `points` evenly spaced moments of the test."""
    path = difference_path(champion, challenger, alpha=alpha, low=low, high=high)
    total = len(path)
    cuts = sorted({max(1, round(total * step / points)) for step in range(1, points + 1)}) if total else []
    return [(cut, path[cut - 1]) for cut in cuts]


def confidence_svg(history: Sequence[tuple[int, DifferenceBounds]], limits: Limits, *, span: float = 1.0) -> str:
    """The band of [lower, upper] and the estimate over observations seen, with the decision lines."""
    if not history:
        return ""
    top = max(span * 0.05, max(_clip(b.upper, span) for _n, b in history), limits.min_effect)
    bottom = min(-span * 0.05, min(_clip(b.lower, span) for _n, b in history), -limits.margin)
    most = max(n for n, _b in history)

    def x(n: float) -> float:
        return PAD + (WIDTH - 2 * PAD) * n / most

    def y(value: float) -> float:
        return PAD + (HEIGHT - 2 * PAD) * (top - _clip(value, span)) / (top - bottom)

    upper = [f"{x(n):.1f},{y(b.upper):.1f}" for n, b in history]
    lower = [f"{x(n):.1f},{y(b.lower):.1f}" for n, b in reversed(history)]
    estimate = " ".join(f"{x(n):.1f},{y(b.estimate):.1f}" for n, b in history)
    last = history[-1][1]
    title = (
        f"challenger minus champion: {last.estimate:+.3f} in [{last.lower:+.3f}, {last.upper:+.3f}] "
        f"after {last.n_champion} + {last.n_challenger} rewards ({last.kind})"
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id="confidence-sequence" role="img" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}"><title>{escape(title)}</title>',
        f'<polygon points="{" ".join(upper + lower)}" fill="#9ecae1" fill-opacity="0.6" stroke="none"/>',
        f'<polyline points="{estimate}" fill="none" stroke="#08519c" stroke-width="1.5"/>',
        _line(y(0.0), "#555", "", "0"),
        _line(y(limits.min_effect), "#2ca02c", ' stroke-dasharray="6 3"', f"min_effect {limits.min_effect:+.3f}"),
        _line(y(-limits.margin), "#d62728", ' stroke-dasharray="6 3"', f"-margin {-limits.margin:+.3f}"),
        f'<text x="{PAD}" y="{HEIGHT - 10}" font-size="11">0</text>',
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - 10}" font-size="11" text-anchor="end">{most} rewards seen</text>',
        f'<text x="{PAD}" y="16" font-size="12">{escape(title)}</text>',
        "</svg>",
    ]
    return "".join(parts)


def _line(at: float, colour: str, dash: str, label: str) -> str:
    return (
        f'<line x1="{PAD}" y1="{at:.1f}" x2="{WIDTH - PAD}" y2="{at:.1f}" stroke="{colour}"{dash}/>'
        f'<text x="{PAD + 4}" y="{at - 3:.1f}" font-size="10" fill="{colour}">{escape(label)}</text>'
    )


def _clip(value: float, span: float) -> float:
    if math.isnan(value):
        return 0.0
    return max(-span, min(span, value))
