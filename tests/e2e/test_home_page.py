"""The home page in real Chromium at a desktop and a narrow width: no two buttons or links of a project row
overlap, nor of a run or checkpoint row, and nothing makes the page scroll sideways. Screenshots go to
tests/e2e/artifacts/home-*.png for a person to look at."""

import uuid
from itertools import combinations

import pytest

from annotate.exports.models import Export
from annotate.review.assignments import assignment_next
from annotate.review.demo_data import DEMO_CRITERIA
from annotate.review.judgments import judgment_submit
from annotate.review.models import Project
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add
from annotate.runs.models import Checkpoint, Run
from tests.conftest import import_rows, make_items
from tests.e2e.conftest import _database_before_live_server, _orm_beside_playwright, artifacts, browser  # noqa: F401

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"
WIDTHS = (1440, 1024, 800)  # desktop, between the two layouts, narrow


@pytest.fixture
def home_data(tmp_path):
    """Three projects (one with a long name), judgments and a finished export on one of them, and a short
    run lineage."""
    for slug, name in (("speed", "Average speed"), ("units", "Unit conversions with worked steps and rounding rules"),
                       ("empty", "Empty")):
        project, _, _ = project_create_or_update(
            slug=slug, name=name, instructions=DEMO_CRITERIA["instructions"], criteria_items=DEMO_CRITERIA["criteria"],
            overlap=2, retest_rate=0)
        if slug != "empty":
            import_rows(project, make_items(4))
    speed = Project.objects.get(slug="speed")
    for name in ("rita", "sam"):
        reviewer, _, _ = user_add(username=name, role="reviewer", password=PASSWORD)
        for _ in range(3):
            assignment = assignment_next(project=speed, reviewer=reviewer)
            judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice="left", strength=2,
                            criteria={"correct": "left", "complete": "tie"}, rationale="Chosen for being right and clear.",
                            client_key=uuid.uuid4())
    Export.objects.create(project=speed, filters={}, status=Export.Status.DONE, out_dir=str(tmp_path / "snapshot"),
                          counts={"train": 1200, "test": 140})
    base = Checkpoint.objects.create(name="tiny-sft", uri=str(tmp_path / "base"))
    run = Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=base, folder=str(tmp_path / "run"))
    made = Checkpoint.objects.create(name="tiny-dpo-from-average-speed", uri=str(tmp_path / "run" / "checkpoint"),
                                     parent=base, run=run)
    Run.objects.create(kind="grpo", status="running", base_checkpoint=made, folder=str(tmp_path / "next"))
    user_add(username="ada", role="admin", password=PASSWORD)


def overlapping(boxes: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of boxes whose areas intersect (touching edges do not count)."""
    def meet(a, b):
        return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
                and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])
    return [(a, b) for a, b in combinations(boxes, 2) if meet(a, b)]


def test_the_home_page_buttons_never_overlap(live_server, home_data, browser, artifacts):  # noqa: F811
    for width in WIDTHS:
        page = browser.new_page(viewport={"width": width, "height": 900})
        page.goto(live_server.url + "/")
        page.get_by_label("Username").fill("ada")
        page.get_by_label("Password").fill(PASSWORD)
        page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Projects")).to_be_visible()
        expect(page.locator("#project-speed [data-figure=judged]")).to_contain_text("3 of 4")
        expect(page.locator("#latest-runs")).to_contain_text("tiny-dpo-from-average-speed")

        rows = page.locator("tr[id^=project-], tr[id^=run-], tr[id^=checkpoint-]")
        assert rows.count() == 3 + 2 + 2
        for index in range(rows.count()):
            row = rows.nth(index)
            boxes = [box for box in (link.bounding_box() for link in row.locator("a, button").all()) if box]
            assert boxes, row.get_attribute("id")
            assert not overlapping(boxes), f"{row.get_attribute('id')} at {width} px: {overlapping(boxes)}"
        buttons = page.locator("#project-units .row-actions a")
        assert buttons.count() == 4  # Review, Adjudicate, Quality, Exports
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), f"scrolls at {width} px"
        page.screenshot(path=str(artifacts / f"home-{width}.png"), full_page=True)
        page.close()
