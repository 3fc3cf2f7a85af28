"""The quality dashboard page as admins, engineers and reviewers get it, from stored judgments."""

import itertools

import pytest

from annotate.review.models import Assignment
from tests.conftest import import_rows, judge_until_done, make_items
from tests.quality.helpers import _Page, prefers_model_0, read_page

pytestmark = pytest.mark.django_db

SCRIPT_NAME = "<script>alert(1)</script>"
CHART_IDS = ("agreement-over-time", "left-rate", "reviewer-agreement", "model-ratings", "win-rate")


def body_rows(page: _Page, table: str) -> dict[str, dict]:
    """Rows under the header, by their first named cell (reviewer, model or criterion)."""
    rows = page.tables[table][1:]
    return {row["cells"][0 if table == "reviewer-table" else 1]: row for row in rows}


@pytest.fixture
def judged_project(make_project, make_user):
    """Thirty pairs judged by three reviewers: two prefer model-0, one always clicks left."""
    project = make_project(slug="judged", overlap=3, retest_rate=0)
    import_rows(project, make_items(30))
    for name in ("ann", "bob"):
        judge_until_done(project, make_user(name), prefers_model_0, seconds=30)
    # The queue puts model-0 on the left at random, so by chance alone a careful reviewer's left rate
    # can look biased. Show it on the left for exactly half of their pairs (their un-swapped choices,
    # always model-0, do not change), so the page's flags are decided by behaviour, not by luck.
    for index, assignment in enumerate(
        Assignment.objects.filter(project=project, reviewer__username__in=["ann", "bob"]).order_by("reviewer", "pair")
    ):
        Assignment.objects.filter(pk=assignment.pk).update(a_on_left=index % 2 == 0)
    # The same for the reviewer who always clicks left: whether the queue's coin put model-0 on the
    # left for 20 of their 30 pairs decided, now and then, whether they also looked like a low agreer.
    model_0_on_left = itertools.cycle([True, False])

    def always_left(assignment) -> str:
        Assignment.objects.filter(pk=assignment.pk).update(a_on_left=next(model_0_on_left))
        return "left"

    judge_until_done(project, make_user("lefty"), always_left, seconds=30)
    return project


@pytest.fixture
def page_for(client, make_user):
    def get(role: str, slug: str, username: str | None = None):
        client.force_login(make_user(username or f"someone-{role}", role))
        return client.get(f"/projects/{slug}/quality/")

    return get


def test_admin_sees_figures_charts_and_the_reviewer_table(judged_project, page_for):
    response = page_for("admin", "judged")
    assert response.status_code == 200
    html = response.content.decode()
    page = read_page(response)
    for chart in CHART_IDS:
        assert "svg" in page.charts[chart], f"{chart} is drawn"
    assert "Not enough data" not in html

    reviewers = body_rows(page, "reviewer-table")
    assert set(reviewers) == {"ann", "bob", "lefty"}
    assert reviewers["lefty"]["badges"] == ["position bias"]
    assert reviewers["ann"]["badges"] == [] and reviewers["bob"]["badges"] == []
    assert reviewers["lefty"]["cells"][3].startswith("100%"), "left rate column"
    assert reviewers["lefty"]["cells"][3].endswith("of 30 a/b choices"), "what the rate is out of"
    # No retests in this project: each reviewer's retest cell is a dash that says why.
    assert html.count('<span class="missing" title="no retest">') == 3
    assert reviewers["ann"]["cells"][1] == "30", "judgments column"
    assert list(reviewers)[0] == "lefty", "flagged reviewers come first"

    models = page.tables["model-table"][1:]
    assert models[0]["cells"][1] == "model-0@v0" and models[0]["cells"][2].startswith("+")
    assert page.figures["Judgments"] == "90" and page.figures["Pairs with overlap"] == "30"
    clicks = [(winner == "a") == a_on_left for a_on_left, winner in Assignment.objects.filter(
        project=judged_project, current_judgment__isnull=False).values_list("a_on_left", "current_judgment__winner")]
    assert page.figures["Left rate"] == f"{100 * sum(clicks) / len(clicks):.1f}%", "every click, lefty's included"
    assert '/api/v1/projects/judged/agreement' in html


def test_engineers_see_it_reviewers_get_403_and_visitors_go_to_login(judged_project, page_for, client):
    assert client.get("/projects/judged/quality/").status_code == 302
    assert page_for("engineer", "judged").status_code == 200
    assert page_for("reviewer", "judged", username="rita").status_code == 403
    assert page_for("admin", "no-such-project").status_code == 404


def test_the_project_list_links_admins_and_engineers_to_the_dashboard(judged_project, client, make_user):
    link = 'href="/projects/judged/quality/"'
    for role, sees_link in (("admin", True), ("engineer", True), ("reviewer", False)):
        client.force_login(make_user(f"home-{role}", role))
        assert (link in client.get("/").content.decode()) is sees_link, role


def test_an_empty_project_renders_with_the_reasons_nothing_can_be_drawn(make_project, page_for):
    make_project(slug="empty")
    response = page_for("admin", "empty")
    assert response.status_code == 200
    html = response.content.decode()
    page = read_page(response)
    for chart in CHART_IDS:
        assert "svg" not in page.charts[chart]
        assert "Not enough data." in page.charts[chart], chart
    assert "no judgment compares answers from two different models" in html
    assert "no two reviewers share 20 or more pairs" in html
    assert "krippendorff_alpha.nominal: no pair has two or more judgments" in html, "the notes are listed"
    assert page.figures["Judgments"] == "0" and page.figures["Percent agreement"] == "—"
    assert "no judgments yet" in " ".join(page.charts["agreement-over-time"])


def test_a_username_with_a_script_tag_is_shown_as_text(make_project, make_user, page_for):
    project = make_project(slug="xss", overlap=2, retest_rate=0)
    import_rows(project, make_items(25))
    # add_user refuses such a name; one can still arrive from elsewhere (an identity provider, a restore).
    hostile = make_user("hostile")
    type(hostile).objects.filter(pk=hostile.pk).update(username=SCRIPT_NAME)
    hostile.refresh_from_db()
    judge_until_done(project, hostile, lambda assignment: "left", seconds=30)
    judge_until_done(project, make_user("ann"), prefers_model_0, seconds=30)
    response = page_for("admin", "xss")
    html = response.content.decode()
    assert "<script>alert(1)" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    page = read_page(response)
    assert SCRIPT_NAME in body_rows(page, "reviewer-table")
    assert any(SCRIPT_NAME in text for text in page.charts["left-rate"]), "and in the charts, as text"
    assert any(SCRIPT_NAME in text for text in page.charts["reviewer-agreement"])
