"""The quality dashboard in real Chromium: an admin opens it from the project list and reads it.

The screenshot goes to tests/e2e/artifacts/quality-dashboard.png for a person to look at.
"""

import datetime as dt
import json
import random
import re
import uuid

import pytest
from django.utils import timezone

from annotate.review.assignments import assignment_next
from annotate.review.import_sql import items_import
from annotate.review.importing import items_parse
from annotate.review.judgments import judgment_submit
from annotate.review.models import Assignment, Judgment
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1440, "height": 900}
PASSWORD = "a-long-e2e-password"
MODELS = [("grpo-math", "r2"), ("dpo-run", "7"), ("sft-base", "v3")]  # best first
CAREFUL = {"ann.lee": 0.88, "bruno": 0.82, "chen-wei": 0.76}  # reviewer -> how often they see the truth


COIN_SEED = 11  # which answer each reviewer sees on the left; the figures asserted hold for seeds 0-29 too


def truth_for(pair) -> str:
    """The better answer of a pair ('a' or 'b'): the stronger model's. The careful reviewers' mistakes are
    the noise; a truth drawn per pair as well made the top two models' ratings a close call."""
    rank = {name: index for index, (name, _) in enumerate(MODELS)}
    return "a" if rank[pair.response_a.model] < rank[pair.response_b.model] else "b"


def judged_over_two_weeks(project, reviewers: dict) -> None:
    """Every reviewer judges every pair, taking turns, on a clock that runs over the last fortnight.

    The judgments' timestamps are set to that clock afterwards, so that "agreement over time" has
    days to show; everything else goes through the services the reviewer page uses.
    """
    rng = random.Random(7)
    # The queue's left/right coin is not seeded, and lefty's clicks (always left) are votes for whichever
    # answer it put on the left: each first-time assignment's order is set from a seeded coin instead, in
    # the order the fixture judges, so the figures are the same in every run and after any other test.
    # A retest keeps the order the queue gives it (the original's, swapped).
    coin = random.Random(COIN_SEED)
    clock = timezone.now() - dt.timedelta(days=14)
    active = dict(reviewers)
    while active:
        for name, user in list(active.items()):
            assignment = assignment_next(project=project, reviewer=user, now=clock)
            if assignment is None:
                del active[name]
                continue
            if not assignment.is_retest:
                assignment.a_on_left = coin.random() < 0.5
                Assignment.objects.filter(pk=assignment.pk).update(a_on_left=assignment.a_on_left)
            if name == "lefty":
                choice, seconds = "left", 2
            else:
                seen = truth_for(assignment.pair) if rng.random() < CAREFUL[name] else rng.choice("ab")
                left = "a" if assignment.a_on_left else "b"
                choice = "tie" if rng.random() < 0.06 else ("left" if seen == left else "right")
                seconds = rng.uniform(20, 70)
            clock += dt.timedelta(seconds=seconds)
            judgment, _ = judgment_submit(
                assignment_id=assignment.pk, reviewer=user, choice=choice, strength=rng.choice([1, 2, 3]),
                criteria={"correct": choice, "complete": "tie"}, rationale="The chosen answer shows its steps.",
                client_key=uuid.uuid4(), now=clock,
            )
            Judgment.objects.filter(pk=judgment.pk).update(created_at=clock)
            clock += dt.timedelta(minutes=rng.uniform(10, 70))


@pytest.fixture
def quality_project(db):
    project, _, _ = project_create_or_update(
        slug="e2e-quality", name="Average speed", overlap=4, retest_rate=0.1,
        instructions="Pick the answer a careful teacher would give a ten-year-old.",
        criteria_items=[
            {"key": "correct", "text": "Every fact and every step is right."},
            {"key": "complete", "text": "It explains the conditions and the process, not only the result."},
        ],
    )
    rows = [
        {"prompt_id": f"speed-{i:03d}", "prompt": f"A car travels {i + 10} km in {i % 3 + 1} hours. Its speed?",
         "responses": [{"text": f"{name} says {(i + 10) / (i % 3 + 1) + k}", "model": name, "model_version": version}
                       for k, (name, version) in enumerate(MODELS)]}
        for i in range(24)
    ]
    items_import(project=project, items=items_parse(json.dumps(row) for row in rows))
    reviewers = {name: user_add(username=name, role="reviewer", password=PASSWORD)[0]
                 for name in (*CAREFUL, "lefty")}
    judged_over_two_weeks(project, reviewers)
    user_add(username="ada", role="admin", password=PASSWORD)
    return project


def test_admin_opens_the_dashboard_from_the_project_list(live_server, quality_project, browser, artifacts):
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    page.goto(live_server.url + "/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("link", name="Quality").click()
    expect(page).to_have_url(live_server.url + "/projects/e2e-quality/quality/")
    expect(page.get_by_role("heading", name="Quality · Average speed")).to_be_visible()
    # The first look computed and stored the report (no broker here: Celery runs in-process).
    expect(page.locator("#report-age")).to_contain_text("computed 0 minutes ago, up to date")

    for chart in ("agreement-over-time", "left-rate", "model-ratings", "win-rate", "reviewer-agreement"):
        expect(page.locator(f"#chart-{chart} svg")).to_be_visible()
    expect(page.locator(".no-data")).to_have_count(0)

    lefty = page.locator("#reviewers tr", has_text="lefty")
    expect(lefty.locator(".badge", has_text="position bias")).to_be_visible()
    expect(page.locator("#reviewers tr", has_text="ann.lee").locator(".badge")).to_have_count(0)
    expect(page.locator("#models tbody tr").first).to_contain_text("grpo-math@r2")
    # The charts fit their cards: no sideways scrolling on a laptop screen.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=artifacts / "quality-dashboard.png", full_page=True)

    assert all(url.startswith(live_server.url) for url in requested), "the page fetches nothing from elsewhere"
    page.get_by_role("link", name="Full report as JSON").click()
    expect(page).to_have_url(re.compile(r"/api/v1/projects/e2e-quality/agreement$"))
    context.close()
