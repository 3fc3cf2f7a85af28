"""A run's curves as inline SVG (loss, reward, KL, zero-variance share), drawn with the quality
dashboard's chart pieces: no script, no fetch, every text escaped. The run page polls the run's JSON,
which carries these same charts, and swaps them in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from annotate.quality.charts import (
    ACCENT,
    GRID,
    INK,
    LINE,
    MUTED,
    SECOND_SERIES,
    nice_ticks,
    no_data,
    number,
    shorten,
    svg_coordinate,
    svg_document,
    svg_line,
    svg_text,
    svg_title,
)

MAX_POINTS = 400  # a long run's curve is thinned to this many points (evenly by position)

# Each chart: its title, then the metrics it may draw, first choice first; up to two a run logs are drawn
# (GRPO logs reward; DPO its implicit reward, whose margin is on the scale the chart needs).
CURVES = {
    "loss": ("Loss", [("loss", "training loss"), ("eval_loss", "eval loss")]),
    "reward": ("Reward", [("reward", "mean reward"), ("rewards/margins", "implicit reward margin"),
                          ("rewards/pairwise_reward_model/mean", "reward model's mean score")]),
    # Beside the reward: a policy pleasing a reward model by writing longer answers shows as both rising.
    "completion_length": ("Completion length (tokens)", [("completions/mean_length", "mean completion length")]),
    "kl": ("KL to the reference", [("kl", "KL")]),
    # A reward run evaluates on its snapshot's test split during training (training/reward.py).
    "accuracy": ("Pair accuracy", [("eval_accuracy", "test accuracy"), ("accuracy", "train accuracy")]),
    "zero_variance": ("Zero-variance groups", [("zero_variance/share", "share of groups with equal rewards")]),
}
EMPTY_REASONS = {
    "loss": "no training step logged yet",
    "reward": "no reward logged yet (DPO logs rewards/margins, GRPO reward)",
    "completion_length": "only GRPO generates during training",
    "kl": "this run logs no KL (GRPO logs it when beta > 0; DPO's implicit KL shows in the reward margin)",
    "accuracy": "only reward runs log pair accuracy (test accuracy when the snapshot has a test split)",
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


def axis_ranges(xs: list[float], ys: list[float]) -> tuple[float, float, list[float], float, float]:
    """The step axis's ends, the value axis's ticks and ends; a single step or a flat line still gets a span."""
    x0, x1 = min(xs), max(xs)
    if x1 <= x0:
        x0, x1 = x0 - 1, x1 + 1
    ticks = nice_ticks(min(ys), max(ys))
    y0, y1 = ticks[0], ticks[-1]
    if y1 <= y0:
        y0, y1 = y0 - 1, y1 + 1
    return x0, x1, ticks, y0, y1


@dataclass(frozen=True)
class PlotArea:
    """Where a chart plots: the data's ranges (steps x0..x1, values y0..y1) mapped onto the drawing's box."""

    x0: float
    x1: float
    y0: float
    y1: float
    left: float
    top: float
    width: float
    height: float

    def x(self, value: float) -> float:
        return self.left + (value - self.x0) / (self.x1 - self.x0) * self.width

    def y(self, value: float) -> float:
        return self.top + (1 - (value - self.y0) / (self.y1 - self.y0)) * self.height

    def axes(self, ticks: list[float]) -> list:
        """Grid lines with their values (as few decimals as write each exactly), step ticks and the base line."""
        digits, bottom, right = tick_digits(ticks), self.top + self.height, self.left + self.width
        body: list = []
        for tick in ticks:
            body.append(svg_line(self.left, self.y(tick), right, self.y(tick), color=GRID))
            body.append(svg_text(self.left - 6, self.y(tick) + 4, number(tick, digits), anchor="end", color=MUTED))
        for tick in nice_ticks(self.x0, self.x1, 5):
            if self.x0 <= tick <= self.x1:
                body.append(svg_text(self.x(tick), bottom + 18, f"{tick:g}", anchor="middle", color=MUTED))
        body.append(svg_line(self.left, bottom, right, bottom, color=LINE))
        return body


def line_chart(lines: list[tuple[str, list[tuple[float, float]]]], *, label: str) -> SafeString:
    """One or two lines against the optimizer step; hovering a point shows its value."""
    xs = [x for _, points in lines for x, _ in points]
    ys = [y for _, points in lines for _, y in points]
    x0, x1, ticks, y0, y1 = axis_ranges(xs, ys)
    width, height = 460.0, 220.0
    left, right, top, bottom = 56.0, 12.0, 28.0, 30.0
    plot_w, plot_h = width - left - right, height - top - bottom
    area = PlotArea(x0, x1, y0, y1, left=left, top=top, width=plot_w, height=plot_h)
    x_of, y_of = area.x, area.y
    body: list = area.axes(ticks)
    legend_x = left
    for (name, points), color in zip(lines, (ACCENT, SECOND_SERIES), strict=False):
        if len(points) > 1:
            body.append(format_html('<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>',
                                    " ".join(f"{svg_coordinate(x_of(x))},{svg_coordinate(y_of(y))}" for x, y in points), color))
        for x, y in points if len(points) <= 60 else points[-1:]:
            body.append(format_html('<circle cx="{}" cy="{}" r="2.5" fill="{}">{}</circle>', svg_coordinate(x_of(x)),
                                    svg_coordinate(y_of(y)), color, svg_title(f"step {x:g}: {name} {number(y, 4)}")))
        body.append(svg_line(legend_x, 12, legend_x + 18, 12, color=color, width=2))
        body.append(svg_text(legend_x + 23, 16, name, color=MUTED))
        legend_x += 40 + 7.2 * len(name)
    return svg_document(width, height, label, body)


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


# --- several runs on one chart (the runs' curves page) ---------------------------------------------------------

# Each chart of the curves page: its title, the metrics a run may draw on it (first one the run logs wins), and
# why a run has none of them.
RUNS_CURVES = {
    "loss": ("Loss", [("loss", "training loss")], "training loss", ""),
    "reward": ("Reward", [("reward", "mean reward"), ("rewards/margins", "implicit reward margin")], "reward",
               "DPO logs rewards/margins, GRPO reward"),
    "kl": ("KL to the reference", [("kl", "KL")], "KL", "GRPO logs it when beta > 0"),
    "completion_length": ("Completion length (tokens)",
                          [("completions/mean_length", "mean completion length"),
                           ("completion_length", "mean completion length")],
                          "completion length", "only GRPO generates during training"),
    "zero_variance": ("Zero-variance groups", [("zero_variance/share", "share of groups with equal rewards")],
                      "zero-variance share", "only GRPO runs have groups"),
}
MAX_RUNS = 8
# One style per run, told apart three ways: colour (Okabe–Ito, safe for the common colour blindnesses), dash
# pattern and marker shape, so a printed or grey chart still reads.
RUN_COLORS = (ACCENT, SECOND_SERIES, "#009e73", "#cc79a7", "#0072b2", "#d55e00", "#5b6475", "#1d2330")
RUN_DASHES = ("", "8 4", "2 3", "10 3 2 3", "4 4", "14 4 4 4", "1 6", "6 2 2 2 2 2")
RUN_MARKERS = ("circle", "square", "diamond", "triangle", "triangle-down", "plus", "cross", "bar")
MAX_MARKERS = 12  # a long curve gets this many evenly spaced markers, enough to tell it apart


def run_style(index: int) -> dict[str, str]:
    return {"color": RUN_COLORS[index % len(RUN_COLORS)], "dash": RUN_DASHES[index % len(RUN_DASHES)],
            "marker": RUN_MARKERS[index % len(RUN_MARKERS)]}


def _marker(shape: str, x: float, y: float, color: str, title: str = "") -> SafeString:
    """A 7-pixel mark centred on (x, y): filled shapes, or strokes for plus, cross and bar."""
    r = 3.5
    paths = {
        "square": f"M{svg_coordinate(x - r)},{svg_coordinate(y - r)}h{svg_coordinate(2 * r)}v{svg_coordinate(2 * r)}h{svg_coordinate(-2 * r)}Z",
        "diamond": f"M{svg_coordinate(x)},{svg_coordinate(y - r - 1)}L{svg_coordinate(x + r + 1)},{svg_coordinate(y)}L{svg_coordinate(x)},{svg_coordinate(y + r + 1)}L{svg_coordinate(x - r - 1)},{svg_coordinate(y)}Z",
        "triangle": f"M{svg_coordinate(x)},{svg_coordinate(y - r - 1)}L{svg_coordinate(x + r + 1)},{svg_coordinate(y + r)}L{svg_coordinate(x - r - 1)},{svg_coordinate(y + r)}Z",
        "triangle-down": f"M{svg_coordinate(x)},{svg_coordinate(y + r + 1)}L{svg_coordinate(x + r + 1)},{svg_coordinate(y - r)}L{svg_coordinate(x - r - 1)},{svg_coordinate(y - r)}Z",
        "plus": f"M{svg_coordinate(x - r - 1)},{svg_coordinate(y)}h{svg_coordinate(2 * r + 2)}M{svg_coordinate(x)},{svg_coordinate(y - r - 1)}v{svg_coordinate(2 * r + 2)}",
        "cross": f"M{svg_coordinate(x - r)},{svg_coordinate(y - r)}l{svg_coordinate(2 * r)},{svg_coordinate(2 * r)}M{svg_coordinate(x - r)},{svg_coordinate(y + r)}l{svg_coordinate(2 * r)},{svg_coordinate(-2 * r)}",
        "bar": f"M{svg_coordinate(x)},{svg_coordinate(y - r - 1)}v{svg_coordinate(2 * r + 2)}",
    }
    if shape == "circle":
        return format_html('<circle cx="{}" cy="{}" r="{}" fill="{}">{}</circle>', svg_coordinate(x), svg_coordinate(y), svg_coordinate(r), color,
                           svg_title(title))
    stroked = shape in ("plus", "cross", "bar")
    paint = f'fill="none" stroke="{color}" stroke-width="2"' if stroked else f'fill="{color}"'
    return format_html('<path d="{}" {}>{}</path>', paths[shape], mark_safe(paint), svg_title(title))


def run_swatch(index: int, *, label: str = "") -> SafeString:
    """A run's line and marker as a small SVG, for a legend outside the charts (the runs table of the page)."""
    style = run_style(index)
    body = [svg_line(2, 8, 38, 8, color=style["color"], width=2, dash=style["dash"]),
            _marker(style["marker"], 20, 8, style["color"])]
    return svg_document(40, 16, label or f"line style {index + 1}", body)


def tick_digits(ticks: list[float]) -> int:
    """The fewest decimals that write every tick exactly (0.0025 steps need four; 25, 30, 35 none)."""
    return next((digits for digits in range(7)
                 if all(abs(round(tick, digits) - tick) <= 1e-9 * max(1.0, abs(tick)) for tick in ticks)), 6)


def runs_line_chart(lines: list[tuple[str, list[tuple[float, float]]]], *, label: str) -> SafeString:
    """One line per run against the optimizer step, each in its run's style (`lines` in the runs' order; a run
    with no points keeps its place and its style, and draws nothing). The legend over the plot names every
    drawn run; hovering a marker shows its step and value."""
    drawn = [(index, name, points) for index, (name, points) in enumerate(lines) if points]
    xs = [x for _, _, points in drawn for x, _ in points]
    ys = [y for _, _, points in drawn for _, y in points]
    width = 460.0  # as the run page's charts: two fit side by side, and their text stays readable
    left, right, bottom = 56.0, 12.0, 30.0
    # The legend wraps in rows above the plot: a sample of the line with its marker, then the run's name.
    legend, legend_x, legend_y = [], left, 14.0
    for index, name, _ in drawn:
        name = shorten(name, int((width - left - right - 50) / 7.2))  # a long checkpoint name stays in the chart
        item_width = 34 + 7.2 * len(name) + 16
        if legend_x > left and legend_x + item_width > width - right:
            legend_x, legend_y = left, legend_y + 18
        style = run_style(index)
        legend.append(svg_line(legend_x, legend_y - 4, legend_x + 26, legend_y - 4, color=style["color"], width=2,
                            dash=style["dash"]))
        legend.append(_marker(style["marker"], legend_x + 13, legend_y - 4, style["color"]))
        legend.append(svg_text(legend_x + 32, legend_y, name, color=INK))
        legend_x += item_width
    top = legend_y + 16
    height = top + 190.0 + bottom
    x0, x1, ticks, y0, y1 = axis_ranges(xs, ys)
    plot_w, plot_h = width - left - right, height - top - bottom
    area = PlotArea(x0, x1, y0, y1, left=left, top=top, width=plot_w, height=plot_h)
    x_of, y_of = area.x, area.y
    body: list = area.axes(ticks)
    body.append(svg_text(left - 6, top + plot_h + 18, "step", anchor="end", color=MUTED))
    for index, name, points in drawn:
        style = run_style(index)
        if len(points) > 1:
            dash = format_html(' stroke-dasharray="{}"', style["dash"]) if style["dash"] else ""
            body.append(format_html(
                '<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{} data-run="{}">{}</polyline>',
                " ".join(f"{svg_coordinate(x_of(x))},{svg_coordinate(y_of(y))}" for x, y in points), style["color"], dash, name,
                svg_title(name)))
        every = max(1, -(-len(points) // MAX_MARKERS))
        marked = points[::every] if points[-1] in points[::every] else [*points[::every], points[-1]]
        for x, y in marked:
            body.append(_marker(style["marker"], x_of(x), y_of(y), style["color"],
                                f"{name}, step {x:g}: {number(y, 4)}"))
    return svg_document(width, height, label, [*legend, *body])


def runs_curves(runs: list[tuple[str, list[dict]]]) -> list[dict]:
    """The curves page's charts: for each metric, one line per run (`runs` as (name, metrics rows)), and a
    line for each run that does not log it. When the runs draw different metrics on one chart (a DPO run's
    implicit reward margin beside a GRPO run's mean reward), each legend entry says which."""
    charts = []
    for name, (title, candidates, what, why) in RUNS_CURVES.items():
        picked = [next(((key, text, points) for key, text in candidates if (points := series(metrics, key))), None)
                  for _, metrics in runs]
        texts = {pick[1] for pick in picked if pick}
        lines = [(run_name if pick is None or len(texts) < 2 else f"{run_name} ({pick[1]})",
                  pick[2] if pick else []) for (run_name, _), pick in zip(runs, picked, strict=True)]
        reason = f" ({why})" if why else ""
        missing = [f"{run_name} logs no {what}{reason}." for (run_name, _), pick in zip(runs, picked, strict=True)
                   if pick is None]
        charts.append({"name": name, "title": title, "metric": ", ".join(sorted(texts)),
                       "chart": (runs_line_chart(lines, label=title) if texts
                                 else no_data(f"none of these runs logs {what}{reason}")),
                       "missing": missing if texts else []})
    return charts
