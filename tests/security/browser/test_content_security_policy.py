"""The content security policy in real Chromium: every page still runs its own scripts and styles, and
the browser reports no violation (an inline script or style would be one)."""

import json
import re
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
# Every violation the page reports, collected before any of its own code runs.
COLLECT_VIOLATIONS = """
window.cspViolations = [];
document.addEventListener("securitypolicyviolation",
  (event) => window.cspViolations.push(`${event.violatedDirective} ${event.blockedURI} ${event.sourceFile}:${event.lineNumber}`));
"""


@pytest.fixture
def split_project(db):
    """Two reviewers split on one pair of two: there is something to review, chart and export."""
    project, _, _ = project_create_or_update(
        slug="csp", name="Policy check", instructions="Pick the better answer.",
        criteria_items=[{"key": "correct", "text": "Every step is right."}], overlap=2, retest_rate=0.0,
    )
    rows = [{"prompt_id": f"p{i}", "prompt": f"What is {i} + {i}?",
             "responses": [{"text": f"**{2 * i}**", "model": "m1"}, {"text": f"{2 * i + 1}", "model": "m2"}]}
            for i in range(2)]
    items_import(project=project, items=items_parse(json.dumps(row) for row in rows))
    for name, click in (("ann", "left"), ("bob", "right")):
        reviewer, _, _ = user_add(username=name, role="reviewer", password=PASSWORD)
        assignment = assignment_next(project=project, reviewer=reviewer)
        judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=click, strength=2,
                        criteria={"correct": click}, rationale=f"{name} read both answers carefully.",
                        client_key=uuid.uuid4())
    user_add(username="ada", role="admin", password=PASSWORD)
    return project


def test_every_page_works_under_the_policy_with_no_violation(live_server, split_project, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_init_script(COLLECT_VIOLATIONS)
    page = context.new_page()
    console = []
    page.on("console", lambda message: console.append(message.text) if "Content Security Policy" in message.text
            else None)
    seen = {}

    def visit(path: str, ready: str):
        """Open the page and wait for what only its own script or stylesheet produces."""
        response = page.goto(live_server.url + path)
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        expect(page.locator(ready).first).to_be_visible()
        seen[path] = page.evaluate("window.cspViolations")

    page.goto(live_server.url + "/accounts/login/")
    seen["/accounts/login/"] = page.evaluate("window.cspViolations")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/$"))
    visit("/", "main")
    visit("/review/csp/", "#left p")  # the answers arrive through review.js
    # The stylesheet applies: the page's own CSS sets the top bar's layout.
    assert page.locator("header.topbar").evaluate("e => getComputedStyle(e).display") == "flex"
    visit("/adjudicate/csp/", "main h1")
    expect(page.locator("#queue")).not_to_be_empty()  # written by adjudicate.js
    # Its filter fields' widths come from the stylesheet now, not from style attributes: 8em for the tag.
    width_in_em = "e => parseFloat(getComputedStyle(e).width) / parseFloat(getComputedStyle(e).fontSize)"
    assert page.locator("#queue-filter input[name=tag]").evaluate(width_in_em) == pytest.approx(8, abs=0.01)
    visit("/projects/csp/quality/", "main h1")
    visit("/projects/csp/exports/", "main h1")
    visit("/admin/", "#content")
    assert {path: found for path, found in seen.items() if found} == {}
    assert console == []
