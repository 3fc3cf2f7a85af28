"""The dashboard's qualification section in real Chromium: every reviewer who has not passed has a button an
admin can press, a project whose gold cannot fill its round says so, and passed does not look like held.

The screenshot goes to tests/e2e/artifacts/qualification-dashboard.png for a person to look at.
"""

import json
import re

import pytest

from annotate.review.assignments import assignment_next
from annotate.review.errors import ReviewError
from annotate.review.import_sql import items_import
from annotate.review.importing import items_parse
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add
from tests.conftest import answer_gold
from tests.e2e.conftest import speed_gold_rows

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"


@pytest.fixture
def short_of_gold(db):
    """As the demo was: 2 items x 2 attempts configured before an import that brought 3 gold pairs."""
    project, _, _ = project_create_or_update(
        slug="e2e-short", name="Average speed (short of gold)", instructions="Pick the answer a teacher would give.",
        criteria_items=[{"key": "correct", "text": "Every step is right."}], retest_rate=0.0,
        qualification_items=2, qualification_pass_mark=1.0, qualification_attempts=2,
    )
    rows = speed_gold_rows(3, reason="Total distance over total time.")
    items_import(project=project, items=items_parse(json.dumps(row) for row in rows))
    ann, bob, cat = (user_add(username=name, role="reviewer", password=PASSWORD)[0]
                     for name in ("ann", "bob", "cat"))
    for _ in range(2):
        answer_gold(project, ann, right=True)
    for _ in range(3):
        answer_gold(project, bob, right=False)
    with pytest.raises(ReviewError):  # attempt 2 ran out of gold: scored, and bob is held
        assignment_next(project=project, reviewer=bob)
    answer_gold(project, cat, right=True)
    user_add(username="ada", role="admin", password=PASSWORD)
    return project


def test_an_admin_sees_a_way_out_for_every_reviewer_who_has_not_passed(live_server, short_of_gold, browser,
                                                                       artifacts):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    path = "/projects/e2e-short/quality/"
    page.goto(live_server.url + path)
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(live_server.url + path)

    expect(page.locator("#qualification-gold-short")).to_contain_text(
        "need 4 gold pairs but project 'e2e-short' has 3")
    row = {name: page.locator("#qualification-table tr", has_text=name) for name in ("ann", "bob", "cat")}
    expect(row["bob"].locator(".badge")).to_have_text("held")
    expect(row["bob"].get_by_role("button", name="Allow another attempt")).to_be_visible()
    expect(row["bob"].get_by_role("button", name="Pass")).to_be_visible()
    expect(row["cat"].locator(".badge")).to_have_text("running")
    expect(row["cat"].get_by_role("button", name="Stop and start another attempt")).to_be_visible()
    expect(row["cat"].get_by_role("button", name="Pass")).to_be_visible()
    expect(row["ann"].get_by_role("button")).to_have_count(0)

    def colours(locator) -> tuple[str, str]:
        return locator.evaluate("e => [getComputedStyle(e).backgroundColor, getComputedStyle(e).color]")

    passed, held = colours(row["ann"].locator(".badge")), colours(row["bob"].locator(".badge"))
    assert passed != held, "passed must not look like held"
    red, green, _ = (int(v) for v in re.findall(r"\d+", passed[1])[:3])
    assert green > red, f"passed reads green, not red: {passed[1]}"
    page.screenshot(path=artifacts / "qualification-dashboard.png", full_page=True)

    row["bob"].get_by_role("button", name="Pass").click()
    expect(page.get_by_text("bob passed.")).to_be_visible()
    bob = page.locator("#qualification-table tr", has_text="bob")
    expect(bob.locator(".badge")).to_have_text("passed")
    expect(bob.get_by_role("button")).to_have_count(0)
