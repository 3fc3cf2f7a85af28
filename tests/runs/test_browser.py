"""The run pages in real Chromium: an engineer launches a DPO run from the form, follows its curves as
they are drawn, and cancels it; the trainer's process group is gone afterwards.

With no broker configured (as in the embedded default) the launch runs the training command in a thread
of the server; the screenshot goes to tests/e2e/artifacts/run-page.png for a person to look at.
"""

import re
import time

import pytest

from annotate.exports.models import Export
from annotate.review.projects import project_create_or_update
from annotate.review.users import user_add
from annotate.runs.models import Run
from tests.e2e.conftest import _database_before_live_server, _orm_beside_playwright, artifacts, browser  # noqa: F401
from tests.runs.conftest import process_alive

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"
LONG_RUN = ("learning_rate: 1.0e-4\nmax_steps: 2000\nper_device_train_batch_size: 2\nlogging_steps: 1\n"
            "torch_threads: 1\nuse_cpu: true\nreport_to: [none]\n")


def test_an_engineer_launches_follows_and_cancels_a_run(live_server, base_checkpoint, tiny_snapshot, browser,  # noqa: F811
                                                        artifacts):  # noqa: F811
    user_add(username="eve", role="engineer", password=PASSWORD)
    project, _, _ = project_create_or_update(slug="speed", name="Speed", instructions="Pick the right one.",
                                             criteria_items=[{"key": "correct", "text": "It is right."}])
    export = Export.objects.create(project=project, filters={}, status=Export.Status.DONE, out_dir=str(tiny_snapshot),
                                   counts={"train": 24, "test": 8})
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.set_default_navigation_timeout(60_000)
    page.goto(live_server.url + "/")
    page.get_by_label("Username").fill("eve")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.get_by_role("link", name="Training runs").click()

    page.get_by_label("Base checkpoint").select_option("tiny-sft")
    page.get_by_label("Snapshot (DPO, reward)").select_option(str(export.pk))
    page.get_by_label("Config (YAML)").fill(LONG_RUN)
    # While the launch is in flight its button is disabled and says so: shown with a submit the page keeps to itself.
    page.evaluate("document.querySelector('.launch-form').addEventListener('submit', (e) => e.preventDefault())")
    page.get_by_role("button", name="Launch").click()
    expect(page.get_by_role("button", name="Launching…")).to_be_disabled()  # a second click sends nothing
    assert not Run.objects.exists()
    page.reload()
    page.get_by_label("Base checkpoint").select_option("tiny-sft")
    page.get_by_label("Snapshot (DPO, reward)").select_option(str(export.pk))
    page.get_by_label("Config (YAML)").fill(LONG_RUN)
    page.get_by_role("button", name="Launch").click()
    # The run page at once, while the training command checks the config off the request.
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    run_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    expect(page.locator("#run-checking")).to_contain_text("Checking the config with the training command")

    # Followed without reloading: the check ends, the step counter moves and the loss curve is drawn as rows arrive.
    expect(page.locator("#run-status")).to_have_text("running", timeout=240_000)
    expect(page.locator("#run-checking")).to_be_hidden()
    expect(page.locator("#chart-loss polyline")).to_be_visible(timeout=180_000)
    expect(page.locator("#run-step")).to_have_text(re.compile(r"^\d+$"))
    page.screenshot(path=str(artifacts / "run-page.png"), full_page=True)
    pid = Run.objects.get(pk=run_id).pid
    assert pid and process_alive(pid)

    # Cancel asks first: dismissed, the run goes on; accepted, it is cancelled.
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_role("button", name="Cancel run").click()
    expect(page.get_by_role("button", name="Cancel run")).to_be_enabled()
    assert asked and asked[0].startswith(f"Cancel run {run_id}?")
    assert Run.objects.get(pk=run_id).status == "running"
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel run").click()
    expect(page.locator("#run-status")).to_have_text("cancelled", timeout=60_000)
    expect(page.locator("#run-error")).to_contain_text("process group was stopped")
    expect(page.get_by_role("button", name="Cancel run")).to_be_hidden()
    run = Run.objects.get(pk=run_id)
    assert run.status == "cancelled" and run.finished_at is not None
    # The base checkpoint's page lists the run under its DPO children, beside an empty GRPO column.
    page.get_by_role("link", name="tiny-sft").first.click()
    expect(page.locator("#children-dpo")).to_contain_text(f"run {run_id}")
    expect(page.locator("#children-grpo")).to_contain_text("none")
    page.screenshot(path=str(artifacts / "checkpoint-page.png"), full_page=True)
    deadline = time.monotonic() + 30
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not process_alive(pid)
