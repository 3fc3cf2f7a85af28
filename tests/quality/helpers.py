"""Shared by the quality tests: a reviewer who always prefers model-0, and the dashboard page as a reader sees it."""

from html.parser import HTMLParser


def prefers_model_0(assignment) -> str:
    """Always the answer of model-0 (response a of every imported pair), wherever it is shown."""
    return "left" if assignment.a_on_left else "right"


class _Page(HTMLParser):
    """What a reader finds on the page: each chart's contents, and the rows of each table."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, list[str]] = {}  # chart id -> tags and texts inside it
        self.tables: dict[str, list[dict]] = {}  # table id -> rows {"cells": [...], "badges": [...]}
        self.figures: dict[str, str] = {}  # headline label -> value
        self._figure_part: str | None = None
        self._figure_label = ""
        self._chart: str | None = None
        self._chart_depth = 0
        self._table: str | None = None
        self._row: dict | None = None
        self._cell: list[str] | None = None
        self._badge: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "div" and ({"figure-label", "figure-value"} & set(classes)):
            self._figure_part = "label" if "figure-label" in classes else "value"
        if self._chart:
            self.charts[self._chart].append(tag)
            self._chart_depth += tag == "div"
        elif tag == "div" and (attrs.get("id") or "").startswith("chart-"):
            self._chart, self._chart_depth = attrs["id"].removeprefix("chart-"), 1
            self.charts[self._chart] = []
        if tag == "table":
            self._table = attrs.get("id")
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = {"cells": [], "badges": []}
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "span" and "badge" in (attrs.get("class") or "").split():
            self._badge = []

    def handle_endtag(self, tag):
        if tag == "div":
            self._figure_part = None
        if self._chart and tag == "div":
            self._chart_depth -= 1
            if self._chart_depth == 0:
                self._chart = None
        if tag == "span" and self._badge is not None:
            self._row["badges"].append("".join(self._badge).strip())
            self._badge = None
        elif tag in ("td", "th") and self._cell is not None:
            self._row["cells"].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._figure_part == "label":
            self._figure_label = data.strip()
        elif self._figure_part == "value":
            self.figures[self._figure_label] = data.strip()
        if self._chart:
            self.charts[self._chart].append(data)
        if self._cell is not None:
            self._cell.append(data)
        if self._badge is not None:
            self._badge.append(data)


def read_page(response) -> _Page:
    page = _Page()
    page.feed(response.content.decode())
    return page
