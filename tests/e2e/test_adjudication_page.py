"""The adjudication page in real Chromium: a split pair, each reviewer's judgment on the adjudicator's own
left and right and where the reviewer saw it, the criteria in force, and a ruling stored un-swapped. Screenshots go to tests/e2e/artifacts/."""

import json
import uuid

import pytest

from annotate.review.assignments import assignment_next
from annotate.review.import_sql import items_import
from annotate.review.importing import items_parse
from annotate.review.judgments import judgment_submit
from annotate.review.models import Adjudication, Assignment
from annotate.review.projects import criteria_version_add, project_create_or_update
from annotate.review.users import user_add

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"
HIDDEN = ("secret-model-alpha", "secret-model-beta", "build-7781")
INSTRUCTIONS_NOW = "Pick the answer a teacher would give; the method counts as much as the number."
REASONS = {"ann": "divides the whole distance by the whole time.", "bob": "is nearer to what a driver reads off."}
CRITERIA_NOW = [{"key": "correct", "text": "Every step is right."},
                {"key": "method", "text": "It says why the speeds are not averaged."}]


@pytest.fixture
def split_pair(db):
    """One pair, two reviewers: ann prefers the first answer, bob the second. Each saw the pair in the
    opposite order (set, not drawn), and both clicked left: whichever order the adjudicator gets, one
    reviewer saw it as they do and the other the other way round. The criteria changed after they judged."""
    project, _, _ = project_create_or_update(
        slug="e2e-split", name="Average speed (adjudication)", instructions="Pick the answer a teacher would give.",
        criteria_items=[{"key": "correct", "text": "Every step is right."}], overlap=2, retest_rate=0.0,
    )
    row = {"prompt_id": "speed-9", "prompt": "A car covers 60 km then 90 km in 3 hours. Average speed?",
           "responses": [{"text": "First: (60 + 90) / 3 = 50 km/h.", "model": "secret-model-alpha",
                          "model_version": "build-7781"},
                         {"text": "Second: about 75 km/h.", "model": "secret-model-beta"}]}
    items_import(project=project, items=items_parse([json.dumps(row)]))
    for name, prefers_first in (("ann", True), ("bob", False)):
        reviewer, _, _ = user_add(username=name, role="reviewer", password=PASSWORD)
        assignment = assignment_next(project=project, reviewer=reviewer)
        Assignment.objects.filter(pk=assignment.pk).update(a_on_left=prefers_first)
        judgment_submit(
            assignment_id=assignment.pk, reviewer=reviewer, choice="left", strength=3 if prefers_first else 1,
            criteria={"correct": "left"}, rationale=f"{name.title()}: the left answer {REASONS[name]}",
            client_key=uuid.uuid4(),
        )
    criteria_version_add(project=project, instructions=INSTRUCTIONS_NOW, items=CRITERIA_NOW)
    user_add(username="judy", role="adjudicator", password=PASSWORD)
    return project


def test_an_adjudicator_sees_both_judgments_on_their_own_sides_and_rules(live_server, split_pair, browser, artifacts):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    bodies: list[str] = []
    page.on("response", lambda response: bodies.append(response.text()) if "/api/v1/" in response.url else None)
    page.goto(live_server.url + "/adjudicate/e2e-split/")
    page.get_by_label("Username").fill("judy")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    cards = page.locator("#judgments .vote")
    expect(cards).to_have_count(2)
    first_side = "Left" if page.locator("#left").inner_text().startswith("First") else "Right"
    second_side = "Right" if first_side == "Left" else "Left"
    ann = cards.filter(has_text="Ann: the left answer")
    bob = cards.filter(has_text="Bob: the left answer")
    expect(ann.locator(".pick")).to_have_text(f"{first_side}, much")
    expect(bob.locator(".pick")).to_have_text(f"{second_side}, slightly")
    # Both wrote "the left answer": each card says where that answer was for them, so the words make sense.
    for card, side in ((ann, first_side), (bob, second_side)):
        also = " too" if side == "Left" else ""
        expect(card.locator(".seen")).to_have_text(
            f"Chose the answer shown to you on the {side.lower()} (it was on their left{also}).")
        expect(card.locator("dd")).to_have_text(f"{side} (their left)")
        expect(card.locator(".criteria-version")).to_have_text("Judged under criteria version 1 (now version 2).")
    expect(page.locator("#votes")).to_contain_text("Left 1 · Right 1")
    expect(page.locator("#judgments")).not_to_contain_text("ann")

    # The instructions and criteria in force, as a reviewer is shown them now.
    criteria = page.locator("#criteria-card")
    expect(criteria.locator("#criteria-version")).to_have_text("(version 2)")
    expect(criteria.locator("#instructions")).to_have_text(INSTRUCTIONS_NOW)
    expect(criteria.locator("li")).to_have_text([f"{item['key']} {item['text']}" for item in CRITERIA_NOW])
    page.screenshot(path=artifacts / "adjudication.png", full_page=True)

    # Rule for the first answer, wherever it is shown.
    page.get_by_role("radio", name=first_side, exact=True).check()
    page.get_by_role("radio", name="Clearly").check()
    page.get_by_label("Why?").fill("Average speed is total distance over total time: the first answer.")
    page.get_by_role("button", name="Rule").click()
    expect(page.get_by_role("heading", name="Nothing to adjudicate")).to_be_visible()
    expect(page.locator("#message")).to_have_text(f"Ruled: {first_side}.")

    ruling = Adjudication.objects.get()
    assert (ruling.winner, ruling.strength, ruling.revision) == ("a", 2, 1)
    assert ruling.rationale.startswith("Average speed is total distance")
    for secret in HIDDEN:
        assert all(secret not in body for body in bodies), f"{secret} reached the adjudicator"
    context.close()
