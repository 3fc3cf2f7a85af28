"""The dashboard's SVG charts, from plain report data: well-formed, escaped, and honest about gaps."""

import xml.etree.ElementTree as ET

import pytest

from annotate.quality.charts import (
    BAD,
    agreement_over_time_chart,
    charts_for_report,
    diverging_color,
    left_rate_chart,
    model_ratings_chart,
    nice_ticks,
    notes_by_key,
    number,
    reviewer_agreement_heat_map,
    win_rate_heat_map,
)
from annotate.quality.report import agreement_report
from annotate.quality.synthetic import synthetic_project
from annotate.quality.table import JudgmentTable

SVG = "{http://www.w3.org/2000/svg}"
SCRIPT_NAME = "<script>alert('x')</script>"


def parsed(svg) -> ET.Element:
    """The chart as XML; fails if it is not well-formed (an unescaped label would break it)."""
    root = ET.fromstring(str(svg))
    assert root.tag == f"{SVG}svg"
    return root


def texts(root: ET.Element) -> list[str]:
    return [element.text or "" for element in root.iter(f"{SVG}text")]


def titles(root: ET.Element) -> list[str]:
    return [element.text or "" for element in root.iter(f"{SVG}title")]


def reviewer(username, left_rate, ci=None, flags=()):
    return {"username": username, "left_rate": left_rate, "left_ci": ci, "decisive_judgments": 40,
            "flags": list(flags)}


def test_left_rate_bars_show_every_rate_and_paint_the_biased_reviewer_red():
    root = parsed(left_rate_chart([
        reviewer("ann", 0.52, [0.4, 0.64]),
        reviewer("lefty", 0.97, [0.9, 0.99], flags=["position_bias"]),
        reviewer("quiet", None),  # only ties so far: no bar, and no crash
    ]))
    shown = texts(root)
    assert "lefty" in shown and "ann" in shown and "quiet" not in shown
    assert "97% (90% to 99%)" in shown and "52% (40% to 64%)" in shown
    assert shown.index("lefty") < shown.index("ann"), "highest left rate first"
    groups = {group.find(f"{SVG}title").text.split(":")[0]: group for group in root.iter(f"{SVG}g")}
    assert groups["lefty"].find(f"{SVG}rect").get("fill") == BAD
    assert groups["ann"].find(f"{SVG}rect").get("fill") != BAD
    assert any(line.get("stroke-dasharray") for line in root.iter(f"{SVG}line")), "the 50% reference line"


def test_user_names_are_escaped_in_every_chart():
    rows = [reviewer(SCRIPT_NAME, 0.6, [0.5, 0.7]), reviewer("ann", 0.5)]
    models = [{"model": SCRIPT_NAME, "rating": 0.3, "ci": [0.1, 0.5], "wins": 3, "losses": 1, "ties": 0},
              {"model": "b&c", "rating": -0.3, "ci": None, "wins": 1, "losses": 3, "ties": 0}]
    kappa = {"min_shared_pairs": 20, "pairs": [
        {"reviewer_a": SCRIPT_NAME, "reviewer_b": "ann", "shared": 25, "observed_agreement": 0.8, "kappa": 0.6}]}
    matrix = {"models": [SCRIPT_NAME, "b&c"], "win_rate": [[None, 0.7], [0.3, None]],
              "comparisons": [[0, 10], [10, 0]]}
    for chart in (left_rate_chart(rows), model_ratings_chart(models), reviewer_agreement_heat_map(kappa),
                  win_rate_heat_map(matrix)):
        assert "<script" not in str(chart)
        assert "&lt;script&gt;" in str(chart)
        root = parsed(chart)
        assert any(SCRIPT_NAME in text for text in texts(root) + titles(root)), "shown as text, not dropped"


def test_agreement_over_time_leaves_a_gap_where_a_bucket_has_no_figure():
    series = [
        {"start": f"2024-03-0{day}T00:00:00+00:00", "judgments": 10, "agreement_with_others": value,
         "left_rate": 0.5}
        for day, value in ((1, 0.7), (2, 0.8), (3, None), (4, 0.6), (5, 0.65))
    ]
    root = parsed(agreement_over_time_chart({"bucket": "day", "series": series}))
    agreement_lines = [line for line in root.iter(f"{SVG}polyline") if not line.get("stroke-dasharray")]
    assert [len(line.get("points").split()) for line in agreement_lines] == [2, 2]
    assert "Mar 1" in texts(root)
    assert any(title.startswith("Mar 4: agreement with others 60%") for title in titles(root))


def test_a_single_bucket_is_still_drawn():
    root = parsed(agreement_over_time_chart({"bucket": "hour", "series": [
        {"start": "2024-03-01T09:00:00+00:00", "judgments": 4, "agreement_with_others": 0.5, "left_rate": None}]}))
    assert len(list(root.iter(f"{SVG}circle"))) == 1


@pytest.mark.parametrize("chart, empty", [
    (agreement_over_time_chart, {"bucket": None, "series": []}),
    (left_rate_chart, []),
    (model_ratings_chart, []),
    (reviewer_agreement_heat_map, {"min_shared_pairs": 20, "pairs": []}),
    (win_rate_heat_map, {"models": [], "win_rate": [], "comparisons": []}),
])
def test_empty_series_say_why_instead_of_drawing(chart, empty):
    html = str(chart(empty, empty_reason="only <one> reviewer so far"))
    assert "<svg" not in html
    assert "Not enough data." in html and "only &lt;one&gt; reviewer so far" in html


def test_undefined_kappa_and_never_compared_models_are_grey_cells_not_numbers():
    kappa = reviewer_agreement_heat_map({"min_shared_pairs": 20, "pairs": [
        {"reviewer_a": "ann", "reviewer_b": "bob", "shared": 30, "observed_agreement": 1.0, "kappa": None},
        {"reviewer_a": "ann", "reviewer_b": "cy", "shared": 22, "observed_agreement": 0.5, "kappa": -0.2}]})
    root = parsed(kappa)
    assert "n/a" in texts(root) and "−0.20" in texts(root)
    assert any("share fewer than 20 pairs" in title for title in titles(root)), "bob and cy were never paired"
    matrix = parsed(win_rate_heat_map({"models": ["m1", "m2", "m3"],
                                       "win_rate": [[None, 0.6, None], [0.4, None, 0.5], [None, 0.5, None]],
                                       "comparisons": [[0, 5, 0], [5, 0, 8], [0, 8, 0]]}))
    assert any(title == "m1 and m3 were never compared" for title in titles(matrix))
    assert "60" in texts(matrix) and "40" in texts(matrix)


def test_whole_reports_give_five_charts_or_five_reasons():
    full = agreement_report(synthetic_project(n_pairs=120, n_reviewers=6, n_models=4, days=10).table, bootstrap=50)
    charts = charts_for_report(full, notes_by_key(full["notes"]))
    assert set(charts) == {"agreement_over_time", "left_rate", "model_ratings", "reviewer_agreement", "win_rate"}
    for chart in charts.values():
        parsed(chart)

    empty = agreement_report(JudgmentTable.empty(criteria_keys=["correct"]), bootstrap=50)
    reasons = {name: str(chart) for name, chart in charts_for_report(empty, notes_by_key(empty["notes"])).items()}
    assert all("Not enough data." in html for html in reasons.values())
    assert "no judgments yet" in reasons["agreement_over_time"]
    assert "no judgment compares answers from two different models" in reasons["model_ratings"]
    assert "no two reviewers share 20 or more pairs" in reasons["reviewer_agreement"]


def test_small_helpers():
    assert notes_by_key(["a.b: why not", "c: because: of this"]) == {"a.b": "why not", "c": "because: of this"}
    assert nice_ticks(-0.73, 0.41) == [-1.0, -0.5, 0.0, 0.5]  # round steps that cover the range
    assert diverging_color(0) == "#f7f7f7" and diverging_color(1) == "#2452c7" and diverging_color(-1) == "#b42318"
    assert number(-0.0004) == "0.00" and number(-0.5) == "−0.50" and number(None) == "—"
