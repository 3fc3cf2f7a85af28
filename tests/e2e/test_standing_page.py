"""A reviewer's own standing on the reviewer page in real Chromium: their figures once they have judged
enough, and nothing on the page about another reviewer."""

import pytest

from annotate.quality.standing import STANDING_STEP
from annotate.review.users import user_add
from tests.conftest import import_rows, judge_until_done, make_items
from tests.review.helpers import judge

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"


@pytest.fixture
def judged(make_project):
    """ann has judged every pair; rita has judged STANDING_STEP of them as ann did."""
    project = make_project(slug="e2e-standing", overlap=2, retest_rate=0, standing_min_judgments=STANDING_STEP)
    import_rows(project, make_items(STANDING_STEP + 3))
    ann, _, _ = user_add(username="ann.lee", role="reviewer", password=PASSWORD)
    judge_until_done(project, ann, lambda assignment: "left" if assignment.a_on_left else "right")
    rita, _, _ = user_add(username="rita", role="reviewer", password=PASSWORD)
    judge(project, rita, STANDING_STEP, agree=True)
    return project


def test_the_reviewer_sees_their_own_figures_and_nothing_of_the_others(live_server, judged, browser, artifacts):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(live_server.url + "/review/e2e-standing/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    # The first look computes the project's report: more than expect's 5 s on a busy machine.
    expect(page.locator("#standing-text")).to_have_text(
        f"Over your first {STANDING_STEP} judgments; next update after {2 * STANDING_STEP}.", timeout=20_000)
    # The header counts the same judgments the figures are over.
    expect(page.locator("#progress")).to_have_text(f"Judged {STANDING_STEP} · 3 left")
    agreement = page.locator('[data-figure="agreement_with_others"]')
    expect(agreement).to_contain_text("Agreement with others")
    expect(agreement.locator("dd")).to_contain_text("100%")
    expect(agreement.locator("dd")).to_contain_text(f"of {STANDING_STEP} pairs where the other reviewers have a majority")
    expect(page.locator('[data-figure="gold_accuracy"]')).to_contain_text("0 gold items so far; shown from 1")
    page.screenshot(path=artifacts / "standing.png", full_page=True)
    assert "ann.lee" not in page.content()
