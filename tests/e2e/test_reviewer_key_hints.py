"""The reviewer page names keyboard keys only where a keyboard is likely: on a phone (390 px, touch) neither the
shortcut hints nor the messages tell the reviewer to press a key, and each message is a whole sentence in view; on
a desktop (1440 px) the same messages name their keys. Screenshots go to tests/e2e/artifacts/review-keys-*.png."""

import re

import pytest

from tests.e2e.test_reviewer_page import PHONE, WIDE, in_viewport, log_in, review_project, reviewer  # noqa: F401 (fixtures)

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# A key the page could tell a reviewer to press: a modifier or a named key, or a bracket of single keys ("(R)",
# "(A, D, S, X)", "(J/K to move, H/L/T to choose)").
KEY_NAMES = re.compile(r"\b(Ctrl|Enter|Esc)\b|\((?:[A-Z0-9](?:[,/] ?[A-Z0-9])*)[ )]|\b[A-Z]/[A-Z]\b")

# What the form says as the reviewer submits it one missing part at a time, and the keys a keyboard user is told.
MESSAGES = [
    ("Choose left, right, tie or both bad", "A, D, S, X"),
    ("Say how strongly: slightly, clearly or much", "1, 2, 3"),
    ("Choose left, right or tie for: correct, complete", "J/K to move, H/L/T to choose"),
    ("Write at least 15 characters on why", "R"),
]


def messages_as_submitted(page) -> list[str]:
    """Submit with nothing chosen, then fill in one part after another, by pointer as on a phone; what the form
    says each time, as shown (hidden text left out), each checked to be in view."""
    steps = [lambda: page.locator("input[name=choice][value=left]").check(),
             lambda: page.locator("input[name=strength][value='2']").check(),
             lambda: [row.locator("input").first.check() for row in page.locator("#criteria-choices li").all()],
             lambda: None]
    shown = []
    for fill_in in steps:
        page.locator("#submit").click()
        problem = page.get_by_role("alert")
        expect(problem).to_be_visible()
        assert in_viewport(page, problem), f"{problem.inner_text()!r} is not all on screen"
        shown.append(problem.inner_text())
        fill_in()
    return shown


@pytest.mark.usefixtures("review_project", "reviewer")
def test_a_phone_is_told_no_keys_and_a_desktop_is_told_its_shortcuts(live_server, browser, artifacts):
    phone = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    page = phone.new_page()
    log_in(page, live_server.url, "/review/e2e/", "rita")
    expect(page.locator("#progress")).to_have_text("Judged 0 · 4 left")
    assert page.locator("kbd:visible, .hint:visible").count() == 0
    assert messages_as_submitted(page) == [f"{text}." for text, _ in MESSAGES]
    on_screen = page.locator("#review").inner_text()
    assert KEY_NAMES.search(on_screen) is None, f"the phone is told to press {KEY_NAMES.search(on_screen)[0]!r}"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(artifacts / "review-keys-390.png"), full_page=True)
    phone.close()

    desktop = browser.new_context(viewport=WIDE)
    page = desktop.new_page()
    log_in(page, live_server.url, "/review/e2e/", "rita")
    expect(page.locator("#progress")).to_have_text("Judged 0 · 4 left")
    expect(page.get_by_role("button", name="Submit")).to_contain_text("Ctrl+Enter")
    expect(page.locator(".decide kbd:visible")).to_have_count(12)  # A D S X, 1 2 3, R Esc, Ctrl Enter, U
    assert messages_as_submitted(page) == [f"{text} ({keys})." for text, keys in MESSAGES]
    page.screenshot(path=str(artifacts / "review-keys-1440.png"), full_page=True)
    desktop.close()
