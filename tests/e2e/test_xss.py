"""Hostile text in real Chromium: prompts, answers, rationales and model names that carry script payloads
are shown as text on the review, adjudication and quality pages, and none of them runs."""

import json
import uuid

import pytest

from annotate.review.assignments import assignment_next
from annotate.review.import_sql import items_import
from annotate.review.importing import items_parse
from annotate.review.judgments import judgment_submit
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"
# Every payload reports itself through window.__xss (set up before the page's own code) or a dialog.
WATCH = "window.__xss = []; window.pwn = (where) => window.__xss.push(where);"
SCRIPT_TAG = "<script>pwn('script')</script>"
IMG_ONERROR = "<img src=x onerror=\"pwn('img')\">"
SVG_ONLOAD = "<svg onload=\"pwn('svg')\"></svg>"
JS_LINK = "[click me](javascript:pwn('link'))"
ALERT = "<iframe srcdoc=\"<script>alert('iframe')</script>\"></iframe>"
PAYLOADS = (SCRIPT_TAG, IMG_ONERROR, SVG_ONLOAD, JS_LINK, ALERT)
HOSTILE = " ".join(PAYLOADS)


def judged_split(project, row: dict, rationales: dict) -> None:
    items_import(project=project, items=items_parse([json.dumps(row)]))
    # Ann prefers the first answer and Bob the second, whichever side each was shown it on: a split pair.
    for name, prefers_first in (("ann", True), ("bob", False)):
        reviewer, _, _ = user_add(username=name, role="reviewer", password=PASSWORD)
        assignment = assignment_next(project=project, reviewer=reviewer)
        click = "left" if assignment.a_on_left == prefers_first else "right"
        judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=click, strength=2,
                        criteria={"correct": click}, rationale=rationales[name], client_key=uuid.uuid4())


@pytest.fixture
def hostile_project(db):
    """A split pair for the adjudicator and the dashboard, and a fresh pair for a third reviewer."""
    project, _, _ = project_create_or_update(
        slug="xss", name="Hostile input", instructions="Pick the better answer.",
        criteria_items=[{"key": "correct", "text": "Every step is right."}], overlap=2, retest_rate=0.0,
    )
    judged_split(project, {"prompt_id": "split", "prompt": f"Split prompt {HOSTILE}", "responses": [
        {"text": f"First {HOSTILE}", "model": "<img src=x onerror=pwn('model')>"},
        {"text": f"Second {HOSTILE}", "model": "m2"}]},
        {"ann": f"Ann says {IMG_ONERROR} {SCRIPT_TAG}", "bob": f"Bob says {JS_LINK} {SVG_ONLOAD}"})
    items_import(project=project, items=items_parse([json.dumps(
        {"prompt_id": "fresh", "prompt": [{"role": "system", "content": HOSTILE},
                                          {"role": "user", "content": f"Fresh prompt {HOSTILE}"}],
         "responses": [{"text": f"Left or right {HOSTILE}", "model": "m1"},
                       {"text": f"Other {JS_LINK}", "model": "m2"}]})]))
    for name, role in (("cara", "reviewer"), ("judy", "adjudicator"), ("ada", "admin")):
        user_add(username=name, role=role, password=PASSWORD)
    return project


def visit_as(browser, url: str, username: str):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(WATCH)
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(url)
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    return page, dialogs


def nothing_ran(page, dialogs: list[str]) -> None:
    page.wait_for_timeout(500)  # an onerror or onload fires after the content is in place
    assert page.evaluate("window.__xss") == []
    assert dialogs == []
    hrefs = page.eval_on_selector_all("a[href]", "links => links.map((a) => a.getAttribute('href'))")
    assert not [href for href in hrefs if href.strip().lower().startswith("javascript:")]


def test_review_page_shows_payloads_as_text(live_server, hostile_project, browser):
    page, dialogs = visit_as(browser, f"{live_server.url}/review/xss/", "cara")
    expect(page.locator("#prompt")).to_contain_text(f"Fresh prompt {SCRIPT_TAG}")
    expect(page.locator("#prompt")).to_contain_text(IMG_ONERROR)
    expect(page.locator(".answers")).to_contain_text(SVG_ONLOAD)
    nothing_ran(page, dialogs)


def test_adjudication_page_shows_payloads_as_text(live_server, hostile_project, browser):
    page, dialogs = visit_as(browser, f"{live_server.url}/adjudicate/xss/", "judy")
    expect(page.locator("#judgments .vote")).to_have_count(2)
    expect(page.locator("#judgments")).to_contain_text(f"Ann says {IMG_ONERROR} {SCRIPT_TAG}")
    expect(page.locator("#prompt")).to_contain_text(SCRIPT_TAG)
    nothing_ran(page, dialogs)


def test_quality_dashboard_shows_payloads_as_text(live_server, hostile_project, browser):
    page, dialogs = visit_as(browser, f"{live_server.url}/projects/xss/quality/", "ada")
    expect(page.locator("#models")).to_contain_text("<img src=x onerror=pwn('model')>")
    nothing_ran(page, dialogs)
