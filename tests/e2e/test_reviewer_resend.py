"""The reviewer page never loses a judgment and never freezes: in real Chromium, against a server that is
stopped and started again mid-session, a reply lost after the server stored the judgment, a busy server
(503) or a dropped reply when the page asks for the next pair and the standing, and a resend the server
refuses because it already holds a different judgment under that client key.

Busy and dropped replies are made by Chromium's own network layer (Playwright's page.route), in front of
the real server.

The server here is the project's own `manage.py runserver` in a subprocess on the test database (not
pytest-django's live server, which cannot be stopped and started again within a test).
"""

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection

from annotate.review.import_sql import items_import
from annotate.review.importing import items_parse
from annotate.review.models import Judgment
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"
ROOT = Path(__file__).resolve().parents[2]
PAIRS = 4
KEPT_ONE = "1 judgment not confirmed by the server yet, kept in this browser"
NOT_CONFIRMED = ("Not confirmed: the server did not answer. Your judgment is kept in this browser and sent again "
                 "(with the same key, so it is never counted twice) when the server is back.")
ALREADY_HAD = "The server already had your kept judgment: its answer was lost on the way, and it counts once."


@pytest.fixture
def resend_project(db):
    project, _, _ = project_create_or_update(
        slug="resend", name="Resend check", instructions="Pick the better answer.",
        criteria_items=[{"key": "correct", "text": "Every step is right."}], retest_rate=0.0,
    )
    rows = [{"prompt_id": f"p{i}", "prompt": f"What is {i} + {i}?",
             "responses": [{"text": f"It is {2 * i}.", "model": "m1"}, {"text": f"It is {2 * i + 1}.", "model": "m2"}]}
            for i in range(PAIRS)]
    items_import(project=project, items=items_parse(json.dumps(row) for row in rows))
    return project


@pytest.fixture
def reviewer(db):
    user, _, _ = user_add(username="rosa", role="reviewer", password=PASSWORD)
    # The suite hashes with MD5 for speed; the server below runs on the default hashers, which refuse it.
    user.password = PBKDF2PasswordHasher().encode(PASSWORD, PBKDF2PasswordHasher().salt())
    user.save(update_fields=["password"])
    return user


class Server:
    """`manage.py runserver` on the test database, on one port for its whole life (the page's
    localStorage belongs to that origin)."""

    def __init__(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        db = connection.settings_dict
        self.env = {**os.environ, "DB_CONN_MAX_AGE": "0", "DATABASE_URL":
                    f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST']}:{db['PORT']}/{db['NAME']}"}
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{self.port}"],
            cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"runserver exited: {self.process.stderr.read().decode()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        pytest.fail("runserver did not listen within 60 s")

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.process = None


@pytest.fixture
def server(resend_project, reviewer):
    running = Server()
    running.start()
    yield running
    running.stop()
    connection.close()


def log_in(page, server: Server) -> None:
    page.goto(f"{server.url}/review/resend/")
    page.get_by_label("Username").fill("rosa")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{server.url}/review/resend/")


def fresh_page(browser, server: Server):
    """The reviewer's page, logged in, with nothing judged yet."""
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(page, server)
    expect(page.locator("#progress")).to_have_text(f"Judged 0 · {PAIRS} left")
    return page


def judge_left(page, rationale: str) -> None:
    for key in ("a", "2", "h", "r"):
        page.keyboard.press(key)
    page.keyboard.type(rationale)
    page.keyboard.press("Control+Enter")


def stored(reviewer) -> list[tuple[int, str]]:
    return sorted(Judgment.objects.filter(reviewer=reviewer).values_list("assignment_id", "rationale"))


def test_judgment_made_while_the_server_is_down_is_sent_once_it_is_back(server, reviewer, browser):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    progress, kept, message = page.locator("#progress"), page.locator("#kept"), page.locator("#message")
    log_in(page, server)
    expect(progress).to_have_text(f"Judged 0 · {PAIRS} left")
    judge_left(page, "First pair, judged while the server is up.")
    expect(progress).to_have_text(f"Judged 1 · {PAIRS - 1} left")

    server.stop()
    judge_left(page, "Second pair, judged while the server is down.")
    expect(kept).to_have_text(KEPT_ONE)
    expect(message).to_have_text(NOT_CONFIRMED)
    expect(page.locator("#judgment-form")).to_be_hidden()  # no next pair until this one is sent
    assert len(stored(reviewer)) == 1

    server.start()  # the page's own timer sends it, then asks for the next pair
    expect(kept).to_be_hidden(timeout=45_000)
    expect(message).to_have_text("Saved 1 kept judgment.")  # the server answered 201 for it, a new judgment
    expect(progress).to_have_text(f"Judged 2 · {PAIRS - 2} left")
    rationales = [rationale for _, rationale in stored(reviewer)]
    assert rationales == ["First pair, judged while the server is up.",
                          "Second pair, judged while the server is down."]
    assert len({assignment for assignment, _ in stored(reviewer)}) == 2


def test_reply_lost_after_the_server_stored_it_is_sent_again_on_load_and_counted_once(server, reviewer, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    log_in(page, server)
    expect(page.locator("#progress")).to_have_text(f"Judged 0 · {PAIRS} left")

    def store_then_drop(route):
        route.fetch()  # the server stores the judgment ...
        route.abort("connectionreset")  # ... and the reply never arrives

    page.route("**/api/v1/assignments/*/judgment", store_then_drop)
    judge_left(page, "Stored, but the page never heard back.")
    # The server may hold it: the page says it is not confirmed, not that it was not sent.
    expect(page.locator("#message")).to_have_text(NOT_CONFIRMED)
    expect(page.locator("#kept")).to_have_text(KEPT_ONE)
    assert len(stored(reviewer)) == 1
    page.close()

    # Another reviewer's kept judgment in the same browser is neither sent nor counted here.
    other_key = f"pairwise.kept.{reviewer.pk + 1000}.resend.{uuid.uuid4()}"
    context.add_init_script(f"localStorage.setItem({json.dumps(other_key)}, "
                            f"{json.dumps(json.dumps({'assignment': 1, 'judgment': {}, 'kept_at': 0}))})")
    again = context.new_page()
    # On load: sent with the same client key; the server answers that it already held it, and the page says so.
    again.goto(f"{server.url}/review/resend/")
    expect(again.locator("#message")).to_have_text(ALREADY_HAD)
    expect(again.locator("#kept")).to_be_hidden()
    expect(again.locator("#progress")).to_have_text(f"Judged 1 · {PAIRS - 1} left")
    assert [rationale for _, rationale in stored(reviewer)] == ["Stored, but the page never heard back."]
    assert again.evaluate("(key) => localStorage.getItem(key) !== null", other_key)


def test_kept_judgment_the_server_refuses_is_shown_and_dropped(server, reviewer, browser):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    log_in(page, server)
    expect(page.locator("#progress")).to_have_text(f"Judged 0 · {PAIRS} left")
    client_key = str(uuid.uuid4())
    kept = {"assignment": 999_999, "kept_at": 0, "judgment": {
        "choice": "left", "strength": 2, "criteria": {"correct": "left"}, "rationale": "Not mine to judge.",
        "client_key": client_key}}
    page.evaluate("([key, value]) => localStorage.setItem(key, value)",
                  [f"pairwise.kept.{reviewer.pk}.resend.{client_key}", json.dumps(kept)])
    page.reload()
    expect(page.locator("#message")).to_contain_text("A kept judgment was not accepted: assignment 999999")
    expect(page.locator("#kept")).to_be_hidden()  # a 404 is a refusal: not sent again and again
    expect(page.locator("#judgment-form")).to_be_visible()
    assert stored(reviewer) == []


def busy_until_released(released: dict):
    """A route handler: 503 with Retry-After (as the server answers while the database is busy) until
    `released["now"]`, then the real server's answer."""
    def handle(route):
        if released["now"]:
            route.continue_()
        else:
            route.fulfill(status=503, headers={"Retry-After": "1"}, content_type="application/json",
                          body=json.dumps({"detail": "the database is not answering right now"}))
    return handle


def test_a_busy_server_after_a_saved_judgment_takes_the_pair_away_and_the_next_comes_by_itself(
    server, reviewer, browser
):
    page = fresh_page(browser, server)
    progress, message, form = page.locator("#progress"), page.locator("#message"), page.locator("#judgment-form")
    first_prompt = page.locator("#prompt").inner_text()
    released = {"now": False}
    page.route("**/api/v1/projects/resend/assignments/next", busy_until_released(released))

    judge_left(page, "Saved just before the server got busy.")
    expect(message).to_have_text(
        "Saved. The server is not answering; the next pair comes by itself as soon as it is back.")
    expect(form).to_be_hidden()  # the saved pair cannot be changed and sent again under its client key
    expect(page.get_by_role("button", name="Try again now")).to_be_visible()
    page.keyboard.press("d")
    page.keyboard.press("Control+Enter")
    assert [rationale for _, rationale in stored(reviewer)] == ["Saved just before the server got busy."]

    released["now"] = True  # the page's own timer asks again
    expect(progress).to_have_text(f"Judged 1 · {PAIRS - 1} left", timeout=15_000)
    expect(form).to_be_visible()
    expect(page.locator("#prompt")).not_to_have_text(first_prompt)
    expect(message).to_have_text("")
    expect(page.get_by_role("button", name="Try again now")).to_be_hidden()
    judge_left(page, "The second pair, once the server answered again.")
    expect(progress).to_have_text(f"Judged 2 · {PAIRS - 2} left")
    assert len({assignment for assignment, _ in stored(reviewer)}) == 2


def test_dropped_replies_to_next_and_standing_are_asked_again_by_the_page_itself(server, reviewer, browser):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    drops = {"next": 1, "standing": 2}

    def drop_first(name):
        def handle(route):
            if drops[name]:
                drops[name] -= 1
                route.abort("connectionreset")
            else:
                route.continue_()
        return handle

    page.route("**/api/v1/projects/resend/assignments/next", drop_first("next"))
    page.route("**/api/v1/projects/resend/standing", drop_first("standing"))
    log_in(page, server)
    expect(page.locator("#progress")).to_have_text(f"Judged 0 · {PAIRS} left", timeout=15_000)
    expect(page.locator("#judgment-form")).to_be_visible()
    expect(page.locator("#standing-text")).to_have_text(
        "Your standing appears once you have judged 20 pairs here; you have judged 0.", timeout=15_000)
    assert drops == {"next": 0, "standing": 0}


def test_a_kept_judgment_whose_key_already_saved_a_different_one_is_explained_and_not_counted(
    server, reviewer, browser
):
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    progress, message = page.locator("#progress"), page.locator("#message")
    log_in(page, server)
    expect(progress).to_have_text(f"Judged 0 · {PAIRS} left")
    judge_left(page, "What the server stored first.")
    expect(progress).to_have_text(f"Judged 1 · {PAIRS - 1} left")
    saved = Judgment.objects.get(reviewer=reviewer)
    client_key = str(saved.client_key)
    # The same key, kept in the browser with a changed answer.
    kept = {"assignment": saved.assignment_id, "kept_at": 0, "judgment": {
        "choice": "right", "strength": 3, "criteria": {"correct": "right"}, "rationale": "A changed answer.",
        "client_key": client_key}}
    page.evaluate("([key, value]) => localStorage.setItem(key, value)",
                  [f"pairwise.kept.{reviewer.pk}.resend.{client_key}", json.dumps(kept)])
    page.reload()
    expect(message).to_contain_text(
        "A kept judgment was not accepted: the server already holds a different judgment of that pair, which "
        f"stands (client_key: already used for a different judgment of assignment {saved.assignment_id}")
    expect(message).not_to_contain_text("Sent")
    expect(page.locator("#kept")).to_be_hidden()
    expect(progress).to_have_text(f"Judged 1 · {PAIRS - 1} left")
    assert [rationale for _, rationale in stored(reviewer)] == ["What the server stored first."]


def drop_replies_while(dropping: dict):
    """A route handler: the request reaches the server, which stores the judgment, but its reply is lost
    while `dropping["now"]`; then the real server's answer."""
    def handle(route):
        if dropping["now"]:
            route.fetch()
            route.abort("connectionreset")
        else:
            route.continue_()
    return handle


# Records every moment the page says "Saved" while it also says a judgment is waiting: never both.
SAVED_AND_WAITING = """
window.savedAndWaiting = [];
new MutationObserver(() => {
  const message = document.getElementById("message").textContent;
  const kept = document.getElementById("kept");
  if (message.startsWith("Saved") && !kept.hidden) window.savedAndWaiting.push([message, kept.textContent]);
}).observe(document.getElementById("review"), { subtree: true, childList: true, characterData: true,
                                                 attributes: true });
"""


def test_undo_waits_until_the_kept_judgment_is_confirmed_and_saved_never_shows_beside_a_waiting_one(
    server, reviewer, browser
):
    page = fresh_page(browser, server)
    progress, message, kept = page.locator("#progress"), page.locator("#message"), page.locator("#kept")
    page.evaluate(SAVED_AND_WAITING)
    dropping = {"now": True}
    page.route("**/api/v1/assignments/*/judgment", drop_replies_while(dropping))

    judge_left(page, "Stored, but its reply was lost.")
    expect(message).to_have_text(NOT_CONFIRMED)
    expect(kept).to_have_text(KEPT_ONE)
    # Undo now would withdraw the stored judgment while its kept copy is still on the way: it waits.
    page.keyboard.press("u")
    expect(message).to_have_text(
        "Nothing was undone: your last judgment is not confirmed by the server yet. Undo once it is (U).")
    expect(page.locator("#judgment-form")).to_be_hidden()
    assert [(j.revision, j.retracted) for j in Judgment.objects.filter(reviewer=reviewer)] == [(1, False)]

    dropping["now"] = False  # the page's own timer sends it again; the server already had it
    expect(message).to_have_text(ALREADY_HAD, timeout=15_000)
    expect(kept).to_be_hidden()
    expect(progress).to_have_text(f"Judged 1 · {PAIRS - 1} left")
    page.keyboard.press("u")  # confirmed now: undo withdraws it and brings the pair back
    expect(message).to_contain_text("withdrawn")
    expect(progress).to_have_text(f"Judged 0 · {PAIRS} left")
    judge_left(page, "Judged again after the undo.")
    expect(message).to_have_text("Saved.")
    expect(kept).to_be_hidden()
    expect(progress).to_have_text(f"Judged 1 · {PAIRS - 1} left")
    assert page.evaluate("window.savedAndWaiting") == []
    judgments = list(Judgment.objects.filter(reviewer=reviewer).order_by("id").values_list(
        "revision", "retracted", "rationale"))
    assert judgments == [(1, False, "Stored, but its reply was lost."), (2, True, ""),
                         (3, False, "Judged again after the undo.")]
