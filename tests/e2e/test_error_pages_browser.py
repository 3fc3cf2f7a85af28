"""The 403 and 404 pages in Chromium at 1440, 800 and 390 px: the site's own styled page, not bare browser text; the
heading and the reason in view; a way back home that works; nothing wider than the screen. Screenshots go to
tests/e2e/artifacts/error-*.png."""

import pytest

from tests.e2e.test_page_layout import OVERFLOW, WIDTHS
from tests.e2e.test_reviewer_page import in_viewport, log_in, reviewer  # noqa: F401 (a fixture)

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# An address with nothing to break it at, longer than a phone is wide: a content hash pasted where an id goes.
MISTYPED = "/checkpoints/3f9a0c2b7d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8/"
# (path, status, heading, the sentence that says why, the file name of its screenshot)
ERRORS = [
    ("/runs/", 403, "Not allowed", "Only admins and engineers can launch and follow training runs.", "forbidden"),
    (MISTYPED, 404, "Not found", f"There is no page at {MISTYPED}", "not-found"),
]

# The page's own style sheet drew it: a white card with rounded corners on the page's grey, the site's header above.
STYLED = """(card) => {
  const style = getComputedStyle(card);
  return {card: style.backgroundColor, corners: style.borderTopLeftRadius,
          page: getComputedStyle(document.body).backgroundColor,
          header: getComputedStyle(document.querySelector("header.topbar")).display};
}"""


@pytest.mark.usefixtures("reviewer")
def test_forbidden_and_missing_pages_are_styled_say_why_and_lead_home_at_every_width(live_server, browser, artifacts):
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    log_in(page, live_server.url, "/runs/", "rita")  # a reviewer asking for the runs page lands on its 403
    found = {}
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for path, status, heading, why, name in ERRORS:
            response = page.goto(live_server.url + path)
            assert response.status == status
            title = page.get_by_role("heading", name=heading, level=1)
            reason = page.locator("main p").filter(has_text=why)
            back = page.get_by_role("link", name="Back to your projects")
            for what, locator in (("heading", title), ("reason", reason), ("way back", back)):
                expect(locator).to_be_visible()
                assert in_viewport(page, locator), f"{path} at {width} px: the {what} is not all on screen"
            card = page.locator("main section.card")
            assert card.evaluate(STYLED) == {"card": "rgb(255, 255, 255)", "corners": "8px",
                                             "page": "rgb(245, 247, 251)", "header": "flex"}
            expect(page.get_by_role("link", name="Pairwise")).to_be_visible()
            page.screenshot(path=str(artifacts / f"error-{name}-{width}.png"), full_page=True)
            if problems := page.evaluate(OVERFLOW):
                found[f"{path} at {width} px"] = problems
            back.click()
            expect(page).to_have_url(live_server.url + "/")
            expect(page.get_by_role("heading", name="Projects")).to_be_visible()
    assert found == {}, "\n".join(f"{where}: {problem}" for where, problems in found.items() for problem in problems)
    context.close()
