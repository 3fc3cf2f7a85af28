"""The qualification round in real Chromium: feedback after each gold item on the reviewer's own sides,
live items after passing, and how the page tells a typed rationale from a pasted one.

Screenshots are written to tests/e2e/artifacts/ for a person to look at.
"""

import json
import re

import pytest

from annotate.review.import_sql import items_import
from annotate.review.importing import items_parse
from annotate.review.models import Judgment, RationaleCheck
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add
from tests.e2e.conftest import speed_gold_rows

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"
REASON = "Average speed is total distance over total time, not the mean of the two speeds."
TYPED = "The left one divides the whole distance by the whole time."
PASTED = "Copied from my notes: the chosen answer uses the total time correctly."


@pytest.fixture
def onboarding(db):
    project, _, _ = project_create_or_update(
        slug="e2e-gold", name="Average speed (qualification)", instructions="Pick the answer a teacher would give.",
        criteria_items=[{"key": "correct", "text": "Every step is right."}], retest_rate=0.0,
        qualification_items=2, qualification_pass_mark=0.5,
    )
    live = {"prompt_id": "live-0", "prompt": "Which sentence is clearer?",
            "responses": [{"text": "Live answer one.", "model": "m-good"}, {"text": "Live answer two.", "model": "m-poor"}]}
    rows = [*speed_gold_rows(2, reason=REASON), live]
    items_import(project=project, items=items_parse(json.dumps(row) for row in rows))
    user_add(username="rita", role="reviewer", password=PASSWORD)
    return project


def log_in(page, base_url: str, path: str) -> None:
    page.goto(base_url + path)
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(base_url + path)


def good_side(page) -> str:
    return "left" if page.locator("#left").inner_text().startswith("Good") else "right"


def other(side: str) -> str:
    return "right" if side == "left" else "left"


def test_feedback_after_each_gold_item_then_live_items_and_paste_is_told_from_typing(live_server, onboarding, browser,
                                                                                     artifacts):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page = context.new_page()
    log_in(page, live_server.url, "/review/e2e-gold/")
    banner = page.locator("#qualification")
    expect(banner).to_contain_text("Qualification round, attempt 1 of 2: item 1 of 2")
    expect(page.locator("#standing-text")).to_have_text(
        "Your standing appears once you have judged 20 pairs here; you have judged 0.")

    # Item 1: the expected answer, with a rationale typed key by key.
    first_good = good_side(page)
    pair_shown = {part: page.locator(f"#{part}").inner_text() for part in ("prompt", "left", "right")}
    page.keyboard.press("a" if first_good == "left" else "d")
    page.keyboard.press("2")
    page.keyboard.press("h" if first_good == "left" else "l")
    page.keyboard.press("r")
    page.keyboard.type(TYPED, delay=5)
    page.keyboard.press("Escape")
    page.keyboard.press("Control+Enter")
    feedback = page.locator("#feedback")
    expect(feedback).to_be_visible()
    expect(page.locator("#feedback-verdict")).to_have_text("Right.")
    expect(page.locator("#feedback-expected")).to_have_text(f"The expected answer is the one on the {first_good}.")
    # Shown apart from the live counts: answers of the round are not live judgments.
    expect(page.locator("#progress")).to_have_text("Qualification: 1 of 2 answered")
    expect(page.locator("#feedback-reason")).to_have_text(f"Why: {REASON}")
    # The pair stays in view, its expected side and the reviewer's own choice marked; the choices go.
    expect(page.locator("#feedback-yours")).to_have_text(f"You chose the one on the {first_good}.")
    expect(page.locator(f"#{first_good}-note")).to_have_text("Expected answer · Your choice")
    expect(page.locator(f"#{other(first_good)}-note")).to_be_hidden()
    for part, text in pair_shown.items():
        expect(page.locator(f"#{part}")).to_have_text(text)
    expect(page.get_by_role("button", name="Submit")).to_be_hidden()
    page.screenshot(path=artifacts / "qualification-feedback.png", full_page=True)

    # Enter goes on to item 2: a wrong answer, its rationale pasted in one go.
    page.keyboard.press("Enter")
    expect(banner).to_contain_text("item 2 of 2 (1 right so far")
    expect(page.get_by_role("button", name="Undo last")).to_be_hidden()  # the last judgment is a qualification answer
    page.keyboard.press("u")
    expect(page.locator("#message")).to_have_text(
        "A qualification answer cannot be undone: its expected answer was shown to you.")
    second_good = good_side(page)
    wrong = other(second_good)
    page.keyboard.press("a" if wrong == "left" else "d")
    page.keyboard.press("1")
    page.keyboard.press("h" if wrong == "left" else "l")
    page.evaluate("text => navigator.clipboard.writeText(text)", PASTED)
    page.keyboard.press("r")
    page.keyboard.press("Control+V")
    expect(page.locator("#rationale")).to_have_value(PASTED)
    page.keyboard.press("Control+Enter")
    expect(page.locator("#feedback-verdict")).to_have_text("Not the expected answer.")
    expect(page.locator("#feedback-expected")).to_have_text(f"The expected answer is the one on the {second_good}.")
    expect(page.locator("#feedback-attempt")).to_contain_text("You passed the qualification round (1 of 2 right)")
    expect(page.locator("#feedback-yours")).to_have_text(f"You chose the one on the {wrong}.")
    expect(page.locator(f"#{wrong}-note")).to_have_text("Your choice")
    expect(page.locator(f"#{second_good}-note")).to_have_text("Expected answer")

    page.get_by_role("button", name="Continue").click()
    expect(page.locator("#left")).to_contain_text(re.compile("Live answer"))
    expect(banner).to_be_hidden()
    # Live counts only, as in the quality table: the two answers of the round are not live judgments.
    expect(page.locator("#progress")).to_have_text("Judged 0 · 1 left")
    expect(page.locator("#standing-text")).to_contain_text("you have judged 0.")
    expect(page.locator("#left-note")).to_be_hidden()
    expect(page.get_by_role("button", name="Undo last")).to_be_hidden()

    # After a reload the page cannot know what the last judgment was: undo is offered, and the server's
    # refusal is explained in a sentence and takes the button away.
    page.reload()
    expect(page.locator("#left")).to_contain_text(re.compile("Live answer"))
    page.get_by_role("button", name="Undo last").click()
    expect(page.locator("#message")).to_have_text(
        "Your last judgment is a qualification answer, and a qualification answer cannot be undone: "
        "its expected answer was shown to you.")
    expect(page.get_by_role("button", name="Undo last")).to_be_hidden()
    expect(page.locator("#left")).to_contain_text(re.compile("Live answer"))  # still there to judge

    typed, pasted = (RationaleCheck.objects.get(judgment=j) for j in Judgment.objects.order_by("id"))
    assert (typed.pasted, typed.paste_events, typed.typed_chars, typed.pasted_chars) == (False, 0, len(TYPED), 0)
    assert typed.typing_seconds > 0
    assert (pasted.pasted, pasted.paste_events, pasted.typed_chars, pasted.pasted_chars) == (True, 1, 0, len(PASTED))
    context.close()
