"""The reviewer page in real Chromium: log in, judge by keyboard alone, undo, and what the page shows.

Screenshots are written to tests/e2e/artifacts/ for a person to look at.
"""

import json
import re

import pytest

from annotate.review.import_sql import items_import
from annotate.review.importing import items_parse
from annotate.review.models import Assignment, Judgment
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1280, "height": 900}
WIDE = {"width": 1440, "height": 900}
SMALL_WINDOW = {"width": 800, "height": 600}
PHONE = {"width": 390, "height": 844}
PASSWORD = "a-long-e2e-password"

# Distinctive names, so that finding one anywhere the reviewer's browser received proves a leak.
HIDDEN_MODEL_NAMES = ("secret-model-alpha", "secret-model-beta", "build-7781", "build-7782")

XSS_ANSWER = (
    "Try this: <img src=x onerror=\"document.title='pwned'\"> and "
    "<script>document.title='pwned'</script> <b>bold?</b>"
)
CODE_ANSWER = "Here is the function:\n\n```python\ndef add(a, b):\n    return a + b\n```\n\nIt returns the sum."
CRITERIA = [
    {"key": "correct", "text": "Every fact and every step is right."},
    {"key": "complete", "text": "It explains the conditions and the process, not only the result."},
]
PROMPTS = [  # (prompt_id, prompt text or chat messages, first answer, second answer)
    ("html-001", [{"role": "system", "content": "You teach Python to beginners."},
                  {"role": "user", "content": "Write a Python function add(a, b) that returns the sum."}],
     XSS_ANSWER, CODE_ANSWER),
    ("speed-001", "A car travels 60 km, then 90 km. The whole trip takes 3 hours. What is its average speed?",
     "Total distance is 60 km + 90 km = **150 km**; total time is **3 h**. So 150 / 3 = **50 km/h**.",
     "Average the speeds: about 75 km/h."),
    ("speed-002", "A cyclist rides 20 km, then 40 km. The whole ride takes 4 hours. What is her average speed?",
     "The answer is 15.",
     "Distance over time: (20 km + 40 km) / 4 h = **15 km/h**."),
    ("speed-003", "A train covers 120 km, then 80 km. The whole journey takes 2 hours. What is its average speed?",
     "- Total distance: 200 km\n- Total time: 2 h\n\nSo the average speed is **100 km/h**.",
     "It is 100."),
]


def project_with(slug: str, prompts: list[tuple]):
    """A project with one pair per prompt and no retests (so progress counts are exact)."""
    project, _, _ = project_create_or_update(
        slug=slug, name="Average speed (browser test)",
        instructions="Pick the answer a careful teacher would give a ten-year-old.",
        criteria_items=CRITERIA, retest_rate=0.0,
    )
    rows = [
        {"prompt_id": prompt_id, "prompt": prompt, "responses": [
            {"text": first, "model": "secret-model-alpha", "model_version": "build-7781"},
            {"text": second, "model": "secret-model-beta", "model_version": "build-7782"},
        ]}
        for prompt_id, prompt, first, second in prompts
    ]
    items_import(project=project, items=items_parse(json.dumps(row) for row in rows))
    return project


@pytest.fixture
def review_project(db):
    """Project `e2e`: four pairs, whichever order they are served in."""
    return project_with("e2e", PROMPTS)


@pytest.fixture
def html_project(db):
    """Project `e2e-html`: only the pair whose answers hold HTML and code."""
    return project_with("e2e-html", PROMPTS[:1])


@pytest.fixture
def reviewer(db):
    user, _, _ = user_add(username="rita", role="reviewer", password=PASSWORD)
    return user


def log_in(page, base_url: str, path: str, username: str) -> None:
    """Ask for `path`, get sent to the login form, fill it in, and land back on `path`."""
    page.goto(base_url + path)
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next="))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(base_url + path)


def choose_by_keyboard(page, *, choice: str, strength: str | None, criteria: list[str], rationale: str,
                       leave_rationale: bool = True) -> None:
    page.keyboard.press(choice)
    if strength:
        page.keyboard.press(strength)
    for key in criteria:
        page.keyboard.press(key)
    page.keyboard.press("r")
    page.keyboard.type(rationale)
    if leave_rationale:
        page.keyboard.press("Escape")


def on_screen(page) -> dict:
    """What the reviewer sees of the current pair."""
    return {side: page.locator(f"#{side}").inner_text() for side in ("prompt", "left", "right")}


def opening(text: str) -> str:
    """The first words of an answer as the page shows them (Markdown marks gone)."""
    first_line = text.strip().splitlines()[0]
    return " ".join(re.sub(r"[*`#]|^- ", "", first_line).split()[:4])


def stored_as(side_seen: str, *, pair, screen: dict) -> str:
    """What the database should hold for a side the reviewer picked: the response there ('a' or 'b')."""
    if side_seen not in ("left", "right"):
        return side_seen
    a_sides = [side for side in ("left", "right") if opening(pair.response_a.text) in screen[side]]
    assert len(a_sides) == 1, f"response a should be on exactly one side of {screen}"
    return "a" if a_sides[0] == side_seen else "b"


def test_reviewer_judges_three_pairs_by_keyboard_and_undoes_one(live_server, review_project, reviewer, browser,
                                                                artifacts):
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    received: list[tuple[str, str]] = []

    def record(response):
        if not 300 <= response.status < 400:  # a redirect has no body to read
            received.append((response.url, response.text()))

    page.on("response", record)
    pages_seen: list[str] = []
    progress = page.locator("#progress")

    log_in(page, live_server.url, "/review/e2e/", "rita")
    expect(progress).to_have_text("Judged 0 · 4 left")
    criteria = page.locator(".criteria")
    expect(criteria).to_contain_text("Every fact and every step is right.")
    # On a laptop screen the criteria sit beside the answers, and Submit is in view without scrolling.
    assert criteria.bounding_box()["x"] >= sum(page.locator("#right").bounding_box()[k] for k in ("x", "width"))
    expect(page.get_by_role("button", name="Submit")).to_be_in_viewport()

    # Submitting with nothing chosen says what is missing, beside the choices, and judges nothing.
    page.keyboard.press("Control+Enter")
    problem = page.get_by_role("alert")
    expect(problem).to_have_text("Choose left, right, tie or both bad (A, D, S, X).")
    expect(page.locator("fieldset.choice")).to_contain_text("Choose left, right, tie or both bad")
    expect(progress).to_have_text("Judged 0 · 4 left")

    plan = [  # keys pressed, and what they mean on screen
        {"keys": {"choice": "a", "strength": "3", "criteria": ["h", "l"]},
         "choice": "left", "strength": 3, "criteria": {"correct": "left", "complete": "right"}},
        # Submitted straight from the rationale box, as a touch typist would.
        {"keys": {"choice": "ArrowRight", "strength": "2", "criteria": ["l", "t"], "leave_rationale": False},
         "choice": "right", "strength": 2, "criteria": {"correct": "right", "complete": "tie"}},
        {"keys": {"choice": "d", "strength": "1", "criteria": ["h", "h"]},
         "choice": "right", "strength": 1, "criteria": {"correct": "left", "complete": "left"}},
    ]
    screens = []
    for number, step in enumerate(plan, start=1):
        screen = on_screen(page)
        screens.append(screen)
        pages_seen.append(page.content())
        choose_by_keyboard(page, **step["keys"], rationale=f"Pair {number}: the chosen one shows its steps.")
        # The keys did what the reviewer sees on the form.
        expect(page.locator(f"input[name=choice][value={step['choice']}]")).to_be_checked()
        expect(page.locator(f"input[name=strength][value='{step['strength']}']")).to_be_checked()
        for key, value in step["criteria"].items():
            expect(page.locator(f"input[name=criterion-{key}][value={value}]")).to_be_checked()
        if number == 1:
            expect(problem).to_be_hidden()  # the complaint went once the form was filled
            page.screenshot(path=artifacts / "review-desktop.png", full_page=True)
        page.keyboard.press("Control+Enter")
        expect(progress).to_have_text(f"Judged {number} · {4 - number} left")
        # The standing counts what the header counts, after every judgment (not every tenth).
        expect(page.locator("#standing-text")).to_contain_text(f"you have judged {number}.")
        expect(page.locator("#prompt")).not_to_have_text(screen["prompt"])
        expect(page.locator("input[name=choice]:checked")).to_have_count(0)  # a fresh form for the next pair

    page.keyboard.press("u")
    expect(progress).to_have_text("Judged 2 · 2 left")
    expect(page.locator("#message")).to_contain_text("withdrawn")
    assert on_screen(page) == screens[2], "the undone pair comes back as it was shown, same sides"
    pages_seen.append(page.content())
    page.screenshot(path=artifacts / "review-after-undo.png", full_page=True)

    # Stored un-swapped: "response a/b preferred", whatever side the page put it on.
    judgments = list(Judgment.objects.filter(reviewer=reviewer).select_related(
        "pair__prompt", "pair__response_a", "pair__response_b").order_by("id"))
    assert [(j.revision, j.retracted) for j in judgments] == [(1, False), (1, False), (1, False), (2, True)]
    for judgment, step, screen in zip(judgments[:3], plan, screens, strict=True):
        pair = judgment.pair
        assert pair.prompt.messages[-1]["content"] in screen["prompt"]
        assert judgment.winner == stored_as(step["choice"], pair=pair, screen=screen)
        assert judgment.strength == step["strength"]
        assert judgment.criteria == {key: stored_as(value, pair=pair, screen=screen)
                                     for key, value in step["criteria"].items()}
        assert judgment.rationale.startswith("Pair ")
    assert judgments[3].assignment_id == judgments[2].assignment_id
    undone = Assignment.objects.get(pk=judgments[2].assignment_id)
    assert undone.status == Assignment.Status.ACTIVE and undone.current_judgment_id is None

    # Judged again, it counts once more; its stored revision follows the withdrawal.
    choose_by_keyboard(page, choice="s", strength=None, criteria=["t", "t"], rationale="On a second look they tie.")
    page.keyboard.press("Control+Enter")
    expect(progress).to_have_text("Judged 3 · 1 left")
    again = Judgment.objects.filter(assignment=undone).order_by("-revision").first()
    assert (again.revision, again.retracted, again.winner, again.strength) == (3, False, "tie", None)
    pages_seen.append(page.content())

    # The last pair judged, the page says so, and U still brings it back.
    choose_by_keyboard(page, choice="x", strength=None, criteria=["t", "t"], rationale="Neither explains the steps.")
    page.keyboard.press("Control+Enter")
    expect(progress).to_have_text("Judged 4 · 0 left")
    expect(page.get_by_role("heading", name="All done")).to_be_visible()
    expect(page.locator("#judgment-form")).to_be_hidden()
    page.screenshot(path=artifacts / "review-all-done.png", full_page=True)
    page.keyboard.press("u")
    expect(progress).to_have_text("Judged 3 · 1 left")
    expect(page.locator("#judgment-form")).to_be_visible()
    pages_seen.append(page.content())

    api_calls = [url for url, _ in received if "/api/v1/" in url]
    assert len(api_calls) >= 9, f"the page's API calls were recorded: {api_calls}"
    for name in HIDDEN_MODEL_NAMES:
        for html in pages_seen:
            assert name not in html
        for url, body in received:
            assert name not in body, f"{name!r} leaked in {url}"
    context.close()


def in_viewport(page, locator) -> bool:
    box = locator.bounding_box()
    size = page.viewport_size
    return (box is not None and box["x"] >= 0 and box["y"] >= 0 and box["x"] + box["width"] <= size["width"]
            and box["y"] + box["height"] <= size["height"])


def test_a_short_rationale_is_told_under_the_box_in_view_with_focus_there_at_any_width(
    live_server, review_project, reviewer, browser, artifacts
):
    for number, viewport in enumerate((SMALL_WINDOW, PHONE, WIDE), start=1):
        context = browser.new_context(viewport=viewport)
        page = context.new_page()
        log_in(page, live_server.url, "/review/e2e/", "rita")
        expect(page.locator("#progress")).to_have_text(f"Judged {number - 1} · {5 - number} left")
        # The keys a message names show only where a keyboard is likely (pairwise.css hides them at 700 px and
        # under): each message is read as the reviewer sees it (innerText), not as the page holds it.
        keys = viewport["width"] > 700
        page.keyboard.press("Control+Enter")  # nothing chosen: told in the choice row, in view, focus there
        nothing = page.get_by_role("alert")
        expect(nothing).to_have_text("Choose left, right, tie or both bad" + (" (A, D, S, X)." if keys else "."),
                                     use_inner_text=True)
        expect(page.locator("fieldset.choice")).to_contain_text("Choose left, right, tie or both bad",
                                                                use_inner_text=True)
        assert in_viewport(page, nothing), f"at {viewport['width']} px the message is off-screen"
        assert page.evaluate("document.activeElement.name") == "choice"
        choose_by_keyboard(page, choice="a", strength="2", criteria=["h", "h"], rationale="Too short",
                           leave_rationale=False)
        page.keyboard.press("Control+Enter")
        problem = page.get_by_role("alert")
        expect(problem).to_have_text("Write at least 15 characters on why" + (" (R)." if keys else "."),
                                     use_inner_text=True)
        expect(problem).to_be_visible()
        # On screen, right under the rationale box, and the reviewer types on where they are.
        assert in_viewport(page, problem), f"at {viewport['width']} px the message is off-screen"
        assert page.evaluate("document.activeElement.id") == "rationale"
        box = page.locator("#rationale").bounding_box()
        assert problem.bounding_box()["y"] >= box["y"] + box["height"] - 1, "the message is under the box"
        page.screenshot(path=artifacts / f"review-short-rationale-{viewport['width']}.png")
        page.keyboard.type(": the left one shows its steps.")
        expect(problem).to_be_hidden()
        page.keyboard.press("Control+Enter")
        expect(page.locator("#progress")).to_have_text(f"Judged {number} · {4 - number} left")
        context.close()


def test_answer_html_shows_as_text_and_code_stays_in_a_code_block(live_server, html_project, reviewer, browser):
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page, live_server.url, "/review/e2e-html/", "rita")

    # A chat prompt, each turn labelled with who said it.
    expect(page.locator("#prompt .turn-role")).to_have_text(["system", "user"])
    expect(page.locator("#prompt")).to_contain_text("You teach Python to beginners.")

    answers = page.locator(".answers")
    expect(answers).to_contain_text("""<img src=x onerror="document.title='pwned'">""")
    expect(answers).to_contain_text("<script>document.title='pwned'</script>")
    expect(answers).to_contain_text("<b>bold?</b>")
    expect(answers.locator("img, script, b")).to_have_count(0)
    code = answers.locator("pre > code")
    expect(code).to_have_count(1)
    expect(code).to_have_text("def add(a, b):\n    return a + b\n")
    page.wait_for_load_state("networkidle")
    expect(page).to_have_title("Review · Average speed (browser test)")
    assert dialogs == []
    context.close()


def test_phone_shows_answers_stacked_without_sideways_scrolling(live_server, html_project, reviewer, browser,
                                                                artifacts):
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    page = context.new_page()
    log_in(page, live_server.url, "/review/e2e-html/", "rita")  # the widest answers: long tags and code
    expect(page.locator("#progress")).to_have_text("Judged 0 · 1 left")

    left = page.locator("#left").bounding_box()
    right = page.locator("#right").bounding_box()
    assert left["y"] + left["height"] <= right["y"], "the right answer sits below the left one"
    assert left["width"] > PHONE["width"] * 0.75, "each answer takes the width of the screen"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    expect(page.get_by_role("button", name="Submit")).to_be_visible()
    page.screenshot(path=artifacts / "review-phone.png", full_page=True)
    context.close()


def test_anonymous_visitor_ends_on_the_login_page(live_server, review_project, browser, artifacts):
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    for path in ("/review/e2e/", "/"):
        page.goto(live_server.url + path)
        expect(page).to_have_url(re.compile(r"/accounts/login/\?next=" + re.escape(path) + "$"))
        expect(page.get_by_role("heading", name="Log in")).to_be_visible()
        expect(page.locator("#review")).to_have_count(0)
    page.screenshot(path=artifacts / "login.png", full_page=True)
    context.close()
