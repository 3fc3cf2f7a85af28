"""A run's curves as inline SVG (loss, reward, KL, zero-variance share), drawn with the quality
dashboard's chart pieces: no script, no fetch, every text escaped. The run page polls the run's JSON,
which carries these same charts, and swaps them in.
"""

from __future__ import annotations

import math

from django.utils.html import format_html
from django.utils.safestring import SafeString

from annotate.quality.charts import (
    ACCENT,
    GRID,
    LINE,
    MUTED,
    SECOND_SERIES,
    _f,
    _line,
    _svg,
    _text,
    _title,
    nice_ticks,
    no_data,
    number,
)

MAX_POINTS = 400  # a long run's curve is thinned to this many points (evenly by position)

# Each chart: its title, then the metrics it may draw, first choice first; up to two a run logs are drawn
# (GRPO logs reward; DPO its implicit reward, whose margin is on the scale the chart needs).
CURVES = {
    "loss": ("Loss", [("loss", "training loss"), ("eval_loss", "eval loss")]),
    "reward": ("Reward", [("reward", "mean reward"), ("rewards/margins", "implicit reward margin")]),
    "kl": ("KL to the reference", [("kl", "KL")]),
    "zero_variance": ("Zero-variance groups", [("zero_variance/share", "share of groups with equal rewards")]),
}
EMPTY_REASONS = {
    "loss": "no training step logged yet",
    "reward": "no reward logged yet (DPO logs rewards/margins, GRPO reward)",
    "kl": "this run logs no KL (GRPO logs it when beta > 0; DPO's implicit KL shows in the reward margin)",
    "zero_variance": "only GRPO runs have groups",
}


def series(metrics: list[dict], key: str) -> list[tuple[float, float]]:
    """(step, value) of every training row that logs `key`, thinned to MAX_POINTS."""
    points = [(float(row["step"]), float(row[key])) for row in metrics
              if row.get("event", "train") == "train" and isinstance(row.get(key), int | float)
              and isinstance(row.get("step"), int | float) and math.isfinite(row[key])]
    if len(points) > MAX_POINTS:
        stride = len(points) / MAX_POINTS
        points = [points[int(i * stride)] for i in range(MAX_POINTS - 1)] + [points[-1]]
    return points


def line_chart(lines: list[tuple[str, list[tuple[float, float]]]], *, label: str) -> SafeString:
    """One or two lines against the optimizer step; hovering a point shows its value."""
    xs = [x for _, points in lines for x, _ in points]
    ys = [y for _, points in lines for _, y in points]
    x0, x1 = min(xs), max(xs)
    if x1 <= x0:
        x0, x1 = x0 - 1, x1 + 1
    ticks = nice_ticks(min(ys), max(ys))
    y0, y1 = ticks[0], ticks[-1]
    if y1 <= y0:
        y0, y1 = y0 - 1, y1 + 1
    width, height = 460.0, 220.0
    left, right, top, bottom = 56.0, 12.0, 28.0, 30.0
    plot_w, plot_h = width - left - right, height - top - bottom

    def x_of(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * plot_w

    def y_of(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * plot_h

    digits = 3 if y1 - y0 < 1 else 2
    body: list = []
    for tick in ticks:
        body.append(_line(left, y_of(tick), left + plot_w, y_of(tick), color=GRID))
        body.append(_text(left - 6, y_of(tick) + 4, number(tick, digits), anchor="end", color=MUTED))
    for tick in nice_ticks(x0, x1, 5):
        if x0 <= tick <= x1:
            body.append(_text(x_of(tick), top + plot_h + 18, f"{tick:g}", anchor="middle", color=MUTED))
    body.append(_line(left, top + plot_h, left + plot_w, top + plot_h, color=LINE))
    legend_x = left
    for (name, points), color in zip(lines, (ACCENT, SECOND_SERIES), strict=False):
        if len(points) > 1:
            body.append(format_html('<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>',
                                    " ".join(f"{_f(x_of(x))},{_f(y_of(y))}" for x, y in points), color))
        for x, y in points if len(points) <= 60 else points[-1:]:
            body.append(format_html('<circle cx="{}" cy="{}" r="2.5" fill="{}">{}</circle>', _f(x_of(x)),
                                    _f(y_of(y)), color, _title(f"step {x:g}: {name} {number(y, 4)}")))
        body.append(_line(legend_x, 12, legend_x + 18, 12, color=color, width=2))
        body.append(_text(legend_x + 23, 16, name, color=MUTED))
        legend_x += 40 + 7.2 * len(name)
    return _svg(width, height, label, body)


def run_charts(metrics: list[dict]) -> dict[str, SafeString]:
    """Every curve of the run page, by name; a curve the run does not log says why."""
    charts = {}
    for name, (title, candidates) in CURVES.items():
        drawn = [(text, points) for key, text in candidates if (points := series(metrics, key))][:2]
        charts[name] = line_chart(drawn, label=title) if drawn else no_data(EMPTY_REASONS[name])
    return charts


def zero_variance_share(metrics: list[dict], record: dict | None) -> float | None:
    """Share of generated groups whose rewards were all equal: the run's ledger (GRPO's run.json results),
    else the generation rows logged so far; None for a run without groups."""
    groups = (((record or {}).get("results") or {}).get("ledger") or {}).get("groups") or {}
    if groups.get("groups"):
        return groups["zero_variance"] / groups["groups"]
    rows = [row for row in metrics if row.get("event") == "generation"]
    total = sum(row.get("groups") or 0 for row in rows)
    return sum(row.get("zero_variance") or 0 for row in rows) / total if total else None
