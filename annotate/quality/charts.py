"""Inline SVG charts of the agreement report: pure functions from report data to safe HTML.

Nothing is fetched and no script runs, so the dashboard works offline. Reviewer usernames and model
names are user data: every piece of text goes through ``format_html`` or ``_escape``.
A chart with nothing to draw says "Not enough data" and why, taken from the report's notes.
Hovering a mark shows its exact figures (an SVG ``<title>``).
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Callable, Iterable

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from annotate.quality.report import BUCKETS
from annotate.quality.reviewers import FLAG_POSITION_BIAS
from annotate.review.rationale import FLAGS as RATIONALE_FLAGS

INK = "#1d2330"
MUTED = "#5b6475"
LINE = "#d9dee8"
GRID = "#eef1f6"
ACCENT = "#2452c7"
ACCENT_SOFT = "#9db3ea"
BAD = "#b42318"
SECOND_SERIES = "#b45309"
EMPTY_CELL = "#f1f3f7"
NEUTRAL = (247, 247, 247)
NEGATIVE = (180, 35, 24)  # BAD
POSITIVE = (36, 82, 199)  # ACCENT

FONT_SIZE = 12
CHAR_WIDTH = 7.2  # generous width of a 12px system-ui character, so label columns never clip
BUCKET_SECONDS = dict(BUCKETS)  # the report's time buckets, by name
FEWER_THAN_TWO_MODELS = "fewer than two models have been compared"


# --- formatting shared with the page -------------------------------------------------------------


def percent(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"{100 * value:.{digits}f}%"


def number(value: float | None, digits: int = 2, *, signed: bool = False) -> str:
    if value is None:
        return "—"
    if round(value, digits) == 0:
        value = 0.0  # never "−0.00"
    text = f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return text.replace("-", "−")  # a real minus sign lines up with the plus in tables


def interval(ci: list[float] | None, show: Callable[[float | None], str]) -> str:
    return "" if not ci else f"{show(ci[0])} to {show(ci[1])}"


def p_value(value: float | None) -> str:
    if value is None:
        return "—"
    return "p < 0.001" if value < 0.001 else f"p = {value:.3f}"


def notes_by_key(notes: Iterable[str]) -> dict[str, str]:
    """The report's "<key>: <reason>" lines as {key: reason}."""
    found: dict[str, str] = {}
    for line in notes:
        key, _, reason = line.partition(": ")
        found.setdefault(key, reason)
    return found


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- SVG pieces ------------------------------------------------------------------------------------


def _escape(text) -> str:
    """Text for HTML: safe strings as they are, anything else escaped. The standard library's escape,
    because Django's lazy-aware one costs several times more, and a heat map calls this 40,000 times."""
    return str(text) if isinstance(text, SafeString) else html.escape(str(text))


def _join(parts: Iterable) -> SafeString:
    """Concatenate pieces; anything not already safe is escaped, so a plain string can never inject."""
    return mark_safe("".join(_escape(part) for part in parts))


def svg_coordinate(value: float) -> str:
    """A coordinate: short, and never "nan" (a None upstream must not reach here)."""
    return f"{value:.1f}"


def svg_document(width: float, height: float, label: str, body: Iterable) -> SafeString:
    return format_html(
        '<svg class="chart-svg" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" width="{}" height="{}" '
        'role="img" aria-label="{}" font-size="{}" fill="{}">{}</svg>',
        svg_coordinate(width), svg_coordinate(height), svg_coordinate(width), svg_coordinate(height), label, FONT_SIZE, INK, _join(body),
    )


# The shapes below are written with f-strings, not format_html: a heat map of 200 reviewers has
# 40,000 cells, and format_html's per-call cost made the page take seconds. Every piece of text
# still goes through _escape; the rest are numbers, colours and fixed attributes.


def svg_text(x: float, y: float, content: str, *, anchor: str = "start", color: str = INK,
          weight: str = "normal", extra: str = "") -> SafeString:
    return mark_safe(
        f'<text x="{svg_coordinate(x)}" y="{svg_coordinate(y)}" text-anchor="{anchor}" fill="{color}" font-weight="{weight}"{extra}>'
        f"{_escape(content)}</text>"
    )


def svg_line(x1: float, y1: float, x2: float, y2: float, *, color: str = LINE, width: float = 1,
          dash: str = "") -> SafeString:
    return format_html(
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{}" stroke-width="{}"{}/>',
        svg_coordinate(x1), svg_coordinate(y1), svg_coordinate(x2), svg_coordinate(y2), color, width,
        format_html(' stroke-dasharray="{}"', dash) if dash else "",
    )


def _rect(x: float, y: float, width: float, height: float, *, fill: str, title: str = "",
          rx: float = 0) -> SafeString:
    return mark_safe(
        f'<rect x="{svg_coordinate(x)}" y="{svg_coordinate(y)}" width="{svg_coordinate(max(width, 0))}" height="{svg_coordinate(max(height, 0))}" rx="{rx}" '
        f'fill="{fill}">{svg_title(title)}</rect>'
    )


def svg_title(text: str) -> SafeString:
    return mark_safe(f"<title>{_escape(text)}</title>") if text else mark_safe("")


def no_data(reason: str) -> SafeString:
    return format_html('<p class="no-data"><strong>Not enough data.</strong> {}</p>', reason)


def _label_width(labels: Iterable[str], limit: int) -> float:
    longest = max((len(shorten(label, limit)) for label in labels), default=4)
    return 12 + CHAR_WIDTH * longest


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high], about ``count`` of them."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(count - 1, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


def diverging_color(t: float) -> str:
    """t in [-1, 1]: red through near-white to blue."""
    t = max(-1.0, min(1.0, t))
    end = POSITIVE if t >= 0 else NEGATIVE
    r, g, b = (round(n + (e - n) * abs(t)) for n, e in zip(NEUTRAL, end, strict=True))
    return f"#{r:02x}{g:02x}{b:02x}"


def _ink_on(t: float) -> str:
    return "#ffffff" if abs(t) > 0.55 else INK


# --- agreement over time ----------------------------------------------------------------------------


def _tick_label(start: dt.datetime, bucket: str | None) -> str:
    if bucket == "hour":
        return f"{start:%b} {start.day} {start:%H}:00"
    if bucket == "30 days":
        return f"{start:%b %Y}"
    return f"{start:%b} {start.day}"


def agreement_over_time_chart(over_time: dict, *, empty_reason: str = "no judgments yet") -> SafeString:
    """Line chart: agreement with others and left rate per time bucket, judgments per bucket as bars.

    ``over_time`` is the report's ``agreement_over_time``: {"bucket", "series": [{"start", "judgments",
    "agreement_with_others", "left_rate"}]}; None values leave a gap in their line.
    """
    series = over_time.get("series") or []
    if not any(point.get("agreement_with_others") is not None for point in series):
        return no_data(empty_reason)
    bucket = over_time.get("bucket")
    starts = [dt.datetime.fromisoformat(point["start"]) for point in series]
    width_s = BUCKET_SECONDS.get(bucket or "", 0.0)
    times = [start.timestamp() + width_s / 2 for start in starts]
    t0, t1 = min(times) - width_s / 2, max(times) + width_s / 2
    if t1 <= t0:
        t0, t1 = t0 - 1, t1 + 1

    width, height = 640.0, 270.0
    left, right, top, bottom = 46.0, 14.0, 30.0, 34.0
    plot_w, plot_h = width - left - right, height - top - bottom

    def x_of(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * plot_w

    def y_of(v: float) -> float:
        return top + (1 - v) * plot_h

    body: list = []
    for tick in (0, 0.25, 0.5, 0.75, 1):
        body.append(svg_line(left, y_of(tick), left + plot_w, y_of(tick), color=GRID if tick not in (0, 0.5) else LINE,
                          dash="4 3" if tick == 0.5 else ""))
        body.append(svg_text(left - 6, y_of(tick) + 4, percent(tick), anchor="end", color=MUTED))

    most = max((point.get("judgments") or 0 for point in series), default=0)
    bar_w = max(2.0, (width_s / (t1 - t0)) * plot_w * 0.8) if width_s else 6.0
    for point, t, start in zip(series, times, starts, strict=True):
        count = point.get("judgments") or 0
        if most and count:
            bar_h = count / most * plot_h * 0.3
            body.append(_rect(x_of(t) - bar_w / 2, top + plot_h - bar_h, bar_w, bar_h, fill=GRID,
                              title=f"{_tick_label(start, bucket)}: {count} judgments"))

    for key, color, dash, name in (
        ("left_rate", SECOND_SERIES, "5 4", "left rate"),
        ("agreement_with_others", ACCENT, "", "agreement with others"),
    ):
        runs: list[list[tuple[float, float]]] = [[]]
        for point, t in zip(series, times, strict=True):
            value = point.get(key)
            if value is None:
                runs.append([])
            else:
                runs[-1].append((x_of(t), y_of(value)))
        for run in runs:
            if len(run) > 1:
                body.append(format_html(
                    '<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{}/>',
                    " ".join(f"{svg_coordinate(x)},{svg_coordinate(y)}" for x, y in run), color,
                    format_html(' stroke-dasharray="{}"', dash) if dash else "",
                ))
        for point, t, start in zip(series, times, starts, strict=True):
            value = point.get(key)
            if value is not None:
                body.append(format_html(
                    '<circle cx="{}" cy="{}" r="{}" fill="{}">{}</circle>',
                    svg_coordinate(x_of(t)), svg_coordinate(y_of(value)), 3 if key == "agreement_with_others" else 2.2, color,
                    svg_title(f"{_tick_label(start, bucket)}: {name} {percent(value)} "
                           f"({point.get('judgments') or 0} judgments)"),
                ))

    shown = max(1, math.ceil(len(series) / 6))
    for index in range(0, len(series), shown):
        body.append(svg_text(x_of(times[index]), top + plot_h + 18, _tick_label(starts[index], bucket),
                          anchor="middle", color=MUTED))

    legend = [("agreement with others", ACCENT, ""), ("left rate", SECOND_SERIES, "5 4")]
    x = left
    for name, color, dash in legend:
        body.append(svg_line(x, 12, x + 22, 12, color=color, width=2, dash=dash))
        body.append(svg_text(x + 27, 16, name, color=MUTED))
        x += 40 + CHAR_WIDTH * len(name)
    body.append(_rect(x, 6, 14, 12, fill=GRID))
    body.append(svg_text(x + 19, 16, f"judgments per {bucket or 'bucket'}", color=MUTED))
    return svg_document(width, height, "Agreement with others and left rate over time", body)


# --- left rate per reviewer --------------------------------------------------------------------------


def _rate_text(rate: float, ci: list[float] | None) -> str:
    return percent(rate) + (f" ({interval(ci, percent)})" if ci else "")


def left_rate_chart(reviewers: list[dict], *, empty_reason: str = "no reviewer has chosen a side yet") -> SafeString:
    """Horizontal bars: each reviewer's share of left clicks among a/b choices, with its 95% interval.

    The dashed line at 50% is an unbiased reviewer; reviewers flagged for position bias are red.
    """
    rows = [r for r in reviewers if r.get("left_rate") is not None]
    if not rows:
        return no_data(empty_reason)
    rows.sort(key=lambda r: (-r["left_rate"], r["username"]))
    label_w = _label_width((r["username"] for r in rows), 24)
    value_texts = [_rate_text(r["left_rate"], r.get("left_ci")) for r in rows]
    value_w = 16 + CHAR_WIDTH * max(len(text) for text in value_texts)
    row_h, top, bottom, plot_w = 24.0, 26.0, 10.0, 360.0
    width = label_w + plot_w + value_w
    height = top + row_h * len(rows) + bottom

    def x_of(v: float) -> float:
        return label_w + v * plot_w

    body: list = []
    for tick in (0, 0.25, 0.5, 0.75, 1):
        if tick != 0.5:
            body.append(svg_line(x_of(tick), top - 4, x_of(tick), height - bottom, color=GRID))
        body.append(svg_text(x_of(tick), top - 10, percent(tick), anchor="middle", color=MUTED))
    for index, reviewer in enumerate(rows):
        y = top + index * row_h
        biased = FLAG_POSITION_BIAS in (reviewer.get("flags") or [])
        rate, ci = reviewer["left_rate"], reviewer.get("left_ci")
        summary = (f"{reviewer['username']}: left in {percent(rate)} of {reviewer.get('decisive_judgments', 0)} "
                   f"a/b choices" + (f" (95% CI {interval(ci, percent)})" if ci else "")
                   + (" — flagged for position bias" if biased else ""))
        body.append(format_html("<g>{}", svg_title(summary)))
        body.append(svg_text(label_w - 8, y + row_h / 2 + 4, shorten(reviewer["username"], 24), anchor="end",
                          color=BAD if biased else INK, weight="600" if biased else "normal"))
        body.append(_rect(x_of(0), y + 5, rate * plot_w, row_h - 10, fill=BAD if biased else ACCENT_SOFT, rx=2))
        if ci:
            low, high = x_of(ci[0]), x_of(ci[1])
            mid = y + row_h / 2
            body.append(svg_line(low, mid, high, mid, color=INK, width=1.5))
            body.append(svg_line(low, mid - 4, low, mid + 4, color=INK, width=1.5))
            body.append(svg_line(high, mid - 4, high, mid + 4, color=INK, width=1.5))
        body.append(svg_text(x_of(1) + 10, y + row_h / 2 + 4, value_texts[index], color=BAD if biased else MUTED))
        body.append(mark_safe("</g>"))
    body.append(svg_line(x_of(0.5), top - 4, x_of(0.5), height - bottom, color=INK, dash="4 3"))
    return svg_document(width, height, "Left rate per reviewer with 95% intervals", body)


# --- rationale flags ----------------------------------------------------------------------------------


def rationale_flags_chart(rows: list[dict], *, empty_reason: str = "no judgment has a rationale flag") -> SafeString:
    """Horizontal bars: each reviewer's share of current judgments with a rationale flag, the flags by
    name beside it. ``rows``: {"username", "judgments", "flagged", "too_short", "reused", "near_duplicate",
    "pasted"}; reviewers without a flagged judgment are left out."""
    rows = [r for r in rows if r.get("flagged") and r.get("judgments")]
    if not rows:  # good news, not missing data
        return format_html('<p class="small muted">{}.</p>', empty_reason[:1].upper() + empty_reason[1:])
    rows.sort(key=lambda r: (-r["flagged"] / r["judgments"], r["username"]))
    details = [", ".join(f"{r[name]} {name.replace('_', ' ')}" for name in RATIONALE_FLAGS if r.get(name))
               for r in rows]
    label_w = _label_width((r["username"] for r in rows), 24)
    value_texts = [f"{percent(r['flagged'] / r['judgments'])} · {detail}" for r, detail in zip(rows, details, strict=True)]
    value_w = 16 + CHAR_WIDTH * max(len(text) for text in value_texts)
    row_h, top, bottom, plot_w = 24.0, 26.0, 10.0, 300.0
    width = label_w + plot_w + value_w
    height = top + row_h * len(rows) + bottom
    body: list = []
    for tick in (0, 0.25, 0.5, 0.75, 1):
        x = label_w + tick * plot_w
        body.append(svg_line(x, top - 4, x, height - bottom, color=GRID))
        body.append(svg_text(x, top - 10, percent(tick), anchor="middle", color=MUTED))
    for index, row in enumerate(rows):
        y = top + index * row_h
        share = row["flagged"] / row["judgments"]
        body.append(format_html("<g>{}", svg_title(
            f"{row['username']}: {row['flagged']} of {row['judgments']} judgments flagged ({details[index]})")))
        body.append(svg_text(label_w - 8, y + row_h / 2 + 4, shorten(row["username"], 24), anchor="end"))
        body.append(_rect(label_w, y + 5, share * plot_w, row_h - 10, fill=BAD, rx=2))
        body.append(svg_text(label_w + plot_w + 10, y + row_h / 2 + 4, value_texts[index], color=MUTED))
        body.append(mark_safe("</g>"))
    return svg_document(width, height, "Share of each reviewer's judgments with a rationale flag", body)


# --- model ratings ------------------------------------------------------------------------------------


def model_ratings_chart(models: list[dict], *, empty_reason: str = FEWER_THAN_TWO_MODELS) -> SafeString:
    """Dot and whisker: each model's Bradley–Terry rating (logits, mean 0) with its 95% interval."""
    rows = [m for m in models if m.get("rating") is not None]
    if len(rows) < 2:
        return no_data(empty_reason)
    values = [m["rating"] for m in rows] + [v for m in rows for v in (m.get("ci") or [])] + [0.0]
    ticks = nice_ticks(min(values), max(values))
    low, high = ticks[0], ticks[-1]
    if high <= low:
        low, high = low - 1, high + 1
    label_w = _label_width((m["model"] for m in rows), 28)
    value_texts = [number(m["rating"], signed=True) + (f" ({interval(m['ci'], number)})" if m.get("ci") else "")
                   for m in rows]
    value_w = 16 + CHAR_WIDTH * max(len(text) for text in value_texts)
    row_h, top, bottom, plot_w = 26.0, 12.0, 30.0, 340.0
    width = label_w + plot_w + value_w
    height = top + row_h * len(rows) + bottom

    def x_of(v: float) -> float:
        return label_w + (v - low) / (high - low) * plot_w

    body: list = []
    for tick in ticks:
        body.append(svg_line(x_of(tick), top, x_of(tick), height - bottom, color=LINE if tick == 0 else GRID,
                          dash="4 3" if tick == 0 else ""))
        body.append(svg_text(x_of(tick), height - bottom + 16, number(tick, 2 if abs(high - low) < 2 else 1),
                          anchor="middle", color=MUTED))
    for index, model in enumerate(rows):
        y = top + index * row_h + row_h / 2
        ci = model.get("ci")
        summary = (f"{model['model']}: rating {number(model['rating'], signed=True)}"
                   + (f" (95% CI {interval(ci, number)})" if ci else "")
                   + f"; {model.get('wins', 0)} wins, {model.get('losses', 0)} losses, {model.get('ties', 0)} ties")
        body.append(format_html("<g>{}", svg_title(summary)))
        body.append(svg_line(label_w, y, label_w + plot_w, y, color=GRID))
        body.append(svg_text(label_w - 8, y + 4, shorten(model["model"], 28), anchor="end"))
        if ci:
            body.append(svg_line(x_of(ci[0]), y, x_of(ci[1]), y, color=ACCENT, width=2))
            body.append(svg_line(x_of(ci[0]), y - 5, x_of(ci[0]), y + 5, color=ACCENT, width=2))
            body.append(svg_line(x_of(ci[1]), y - 5, x_of(ci[1]), y + 5, color=ACCENT, width=2))
        body.append(format_html('<circle cx="{}" cy="{}" r="5" fill="{}" stroke="#fff" stroke-width="1.5"/>',
                                svg_coordinate(x_of(model["rating"])), svg_coordinate(y), ACCENT))
        body.append(svg_text(label_w + plot_w + 10, y + 4, value_texts[index], color=MUTED))
        body.append(mark_safe("</g>"))
    return svg_document(width, height, "Model ratings with 95% intervals", body)


# --- heat maps ----------------------------------------------------------------------------------------


def _heat_map(*, labels: list[str], cells: Callable[[int, int], tuple[float | None, str, str]],
              legend: tuple[str, str, str], label: str, label_limit: int) -> SafeString:
    """A square matrix; cells(i, j) gives (shade in [-1, 1] or None for grey, text, hover title)."""
    n = len(labels)
    cell = 40.0 if n <= 10 else max(14.0, 420.0 / n)
    show_text = cell >= 28
    label_w = _label_width(labels, label_limit)
    top = 16 + (label_w - 12) * 0.72  # room for the slanted column labels
    legend_h = 44.0
    width = label_w + cell * n + max(24.0, label_w * 0.7)
    height = top + cell * n + legend_h

    body: list = []
    for j, name in enumerate(labels):
        x = label_w + j * cell + cell / 2
        body.append(svg_text(x, top - 6, shorten(name, label_limit), color=MUTED,
                          extra=f' transform="rotate(-45 {svg_coordinate(x)} {svg_coordinate(top - 6)})"'))
    for i, name in enumerate(labels):
        y = top + i * cell
        body.append(svg_text(label_w - 8, y + cell / 2 + 4, shorten(name, label_limit), anchor="end"))
        for j in range(n):
            shade, text, title = cells(i, j)
            x = label_w + j * cell
            fill = EMPTY_CELL if shade is None else diverging_color(shade)
            body.append(_rect(x + 1, y + 1, cell - 2, cell - 2, fill=fill, title=title, rx=2))
            if show_text and text:
                body.append(svg_text(x + cell / 2, y + cell / 2 + 4, text, anchor="middle",
                                  color=MUTED if shade is None else _ink_on(shade),
                                  extra=' font-size="11" pointer-events="none"'))
    low_label, mid_label, high_label = legend
    steps = 11
    step_w = min(18.0, (cell * n) / steps)
    y = top + cell * n + 14
    for k in range(steps):
        shade = -1 + 2 * k / (steps - 1)
        body.append(_rect(label_w + k * step_w, y, step_w, 10, fill=diverging_color(shade)))
    for k, text in ((0, low_label), (steps // 2, mid_label), (steps - 1, high_label)):
        body.append(svg_text(label_w + (k + 0.5) * step_w, y + 24, text, anchor="middle", color=MUTED))
    return svg_document(width, height, label, body)


def reviewer_agreement_heat_map(cohen_kappa: dict, *, empty_reason: str = "no two reviewers share enough pairs"
                                ) -> SafeString:
    """Cohen's kappa of every reviewer pair that shares enough pairs; red below chance, blue above."""
    pairs = cohen_kappa.get("pairs") or []
    if not pairs:
        return no_data(empty_reason)
    names: list[str] = []
    for pair in pairs:
        for name in (pair["reviewer_a"], pair["reviewer_b"]):
            if name not in names:
                names.append(name)
    by_pair = {}
    for pair in pairs:
        by_pair[(pair["reviewer_a"], pair["reviewer_b"])] = pair
        by_pair[(pair["reviewer_b"], pair["reviewer_a"])] = pair
    minimum = cohen_kappa.get("min_shared_pairs")

    def cells(i: int, j: int) -> tuple[float | None, str, str]:
        a, b = names[i], names[j]
        if i == j:
            return None, "", a
        pair = by_pair.get((a, b))
        if pair is None:
            return None, "", f"{a} and {b} share fewer than {minimum} pairs"
        kappa = pair.get("kappa")
        shared = f"{pair.get('shared', 0)} shared pairs, agreed on {percent(pair.get('observed_agreement'))}"
        if kappa is None:
            return None, "n/a", f"{a} and {b}: kappa undefined (all in one category); {shared}"
        return kappa, number(kappa), f"{a} and {b}: kappa {number(kappa)}; {shared}"

    return _heat_map(labels=names, cells=cells, legend=("−1", "0 (chance)", "+1"),
                     label="Cohen's kappa of each reviewer pair", label_limit=16)


def win_rate_heat_map(win_rate_matrix: dict, *, empty_reason: str = FEWER_THAN_TWO_MODELS) -> SafeString:
    """How often the row model beat the column model (ties count half); blue above 50%, red below."""
    models = win_rate_matrix.get("models") or []
    if len(models) < 2:
        return no_data(empty_reason)
    rates = win_rate_matrix.get("win_rate") or []
    counts = win_rate_matrix.get("comparisons") or []

    def cells(i: int, j: int) -> tuple[float | None, str, str]:
        if i == j:
            return None, "", models[i]
        rate = rates[i][j] if i < len(rates) and j < len(rates[i]) else None
        count = counts[i][j] if i < len(counts) and j < len(counts[i]) else None
        if rate is None or not count:
            return None, "", f"{models[i]} and {models[j]} were never compared"
        return ((rate - 0.5) * 2, f"{100 * rate:.0f}",
                f"{models[i]} beat {models[j]} in {percent(rate)} of {int(count)} comparisons (ties count half)")

    return _heat_map(labels=models, cells=cells, legend=("0%", "50%", "100%"),
                     label="Win rate of each model (row) against each other model (column)", label_limit=22)


# --- all charts of a report -----------------------------------------------------------------------------


def charts_for_report(report: dict, notes: dict[str, str]) -> dict[str, SafeString]:
    """Every dashboard chart of an agreement report, each with the report's reason when it cannot be drawn.

    ``notes`` is the report's notes by key (``notes_by_key``).
    """

    def reason(*keys: str, default: str) -> str:
        return next((notes[key] for key in keys if key in notes), default)

    no_judgments = "no judgments yet" if not report.get("judgments") else ""
    return {
        "agreement_over_time": agreement_over_time_chart(
            report.get("agreement_over_time") or {},
            empty_reason=no_judgments or reason(
                "agreement_over_time.series[].agreement_with_others", "percent_agreement",
                default="no judgment is on a pair whose other reviewers have a unique majority"),
        ),
        "left_rate": left_rate_chart(
            report.get("reviewers") or [],
            empty_reason=no_judgments or reason("position_bias", "reviewers[].left_rate",
                                                default="no reviewer has chosen a side yet"),
        ),
        "model_ratings": model_ratings_chart(
            report.get("models") or [],
            empty_reason=reason("models", default=FEWER_THAN_TWO_MODELS),
        ),
        "reviewer_agreement": reviewer_agreement_heat_map(
            report.get("cohen_kappa") or {},
            empty_reason=reason("cohen_kappa", default="no two reviewers share enough pairs"),
        ),
        "win_rate": win_rate_heat_map(
            report.get("win_rate_matrix") or {},
            empty_reason=reason("models", default=FEWER_THAN_TWO_MODELS),
        ),
    }
