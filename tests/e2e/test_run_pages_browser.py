"""Run pages of every kind, and the runs page's launch form, in Chromium at 1440, 800 and 390 px.

A run page draws the curves its kind has and no empty box (an evaluation or a comparison draws none, even after the
page has asked the server for the run's news); an SFT build shows its step count and its loss; nothing is wider than
the screen. The launch form sits closed behind "Launch a run" once there are runs, opens, and starts on a train task
set and on the newest snapshot with a test split. Screenshots go to tests/e2e/artifacts/run-*.png and launch-*.png."""

import math

import pytest

from annotate.exports.models import Export
from annotate.review.users import user_add
from annotate.runs.models import Checkpoint, Run
from annotate.runs.task_sets import task_set_make
from tests.conftest import built_once_root
from tests.e2e.test_page_layout import OVERFLOW, WIDTHS
from tests.e2e.test_reviewer_page import PASSWORD, in_viewport, log_in
from tests.e2e.test_runs_curves import grpo_rows
from tests.runs.test_run_pages_by_kind import SFT_LOG, dpo_with_change

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

# Every chart box on the page: how many lines it draws, and the reason it gives when it draws none.
CHARTS = """() => Object.fromEntries([...document.querySelectorAll("[id^=chart-]")].map(box =>
  [box.id.slice("chart-".length), {lines: box.querySelectorAll("polyline").length, says: box.textContent.trim()}]))"""

# The curves each kind draws a line on, from the rows made below; every other box of the page says why it has none.
DRAWN = {
    "sft": {"loss"},
    "dpo": {"loss", "reward"},
    "grpo": {"loss", "reward", "kl", "completion_length", "zero_variance"},
    "reward": {"loss", "accuracy"},
    "eval": set(),
    "sample": set(),
}


@pytest.fixture
def runs_by_kind(db) -> dict[str, Run]:
    user_add(username="eve", role="engineer", password=PASSWORD)
    base = Checkpoint.objects.create(name="tiny-sft", uri="/checkpoints/tiny-sft")
    chosen = [{"id": base.pk, "name": base.name}]
    dpo = dpo_with_change(real=True)
    Run.objects.filter(pk=dpo.pk).update(base_checkpoint=base, metrics=[
        {"event": "train", "step": step, "loss": 0.69 - 0.01 * step, "rewards/margins": 0.02 * step}
        for step in range(1, 21)])
    return {
        # The still-running kinds: the page asks the server for news every 2 s and swaps in what it answers.
        "sft": Run.objects.create(kind=Run.Kind.SFT, status=Run.Status.RUNNING, log_tail=SFT_LOG,
                                  config={"recipe": "tiny-sft", "steps": 320, "seed": 0, "name": "tiny-sft"}),
        "eval": Run.objects.create(kind=Run.Kind.EVAL, status=Run.Status.RUNNING, base_checkpoint=base,
                                   config={"checkpoints": chosen, "tasks": "/inputs/arithmetic-heldout.jsonl"}),
        "sample": Run.objects.create(kind=Run.Kind.SAMPLE, status=Run.Status.RUNNING, base_checkpoint=base,
                                     config={"checkpoints": chosen, "prompts": "/inputs/prompts.jsonl",
                                             "project": "speed"}),
        "dpo": Run.objects.get(pk=dpo.pk),
        "grpo": Run.objects.create(kind=Run.Kind.GRPO, status=Run.Status.SUCCEEDED, base_checkpoint=base,
                                   tasks_path="/inputs/arithmetic.jsonl",
                                   metrics=grpo_rows(steps=30, learning=0.1, seed=3)),
        "reward": Run.objects.create(kind=Run.Kind.REWARD, status=Run.Status.SUCCEEDED, base_checkpoint=base,
                                     metrics=[{"event": "train", "step": step, "loss": math.exp(-0.1 * step),
                                               "accuracy": 0.5 + 0.02 * step} for step in range(1, 21)]),
    }


def run_page_problems(page, kind: str) -> list[str]:
    """What a person would notice is wrong on a run page of `kind` as it stands."""
    problems = list(page.evaluate(OVERFLOW))
    charts = page.evaluate(CHARTS)
    drawn = {name for name, chart in charts.items() if chart["lines"]}
    if drawn != DRAWN[kind]:
        problems.append(f"curves drawn: {sorted(drawn)}, expected {sorted(DRAWN[kind])}")
    problems += [f"the {name} box is empty" for name, chart in charts.items() if not chart["lines"] and not chart["says"]]
    if not DRAWN[kind] and (charts or page.locator("#curves").count()):
        problems.append(f"a {kind} run shows curve boxes: {sorted(charts)}")
    if page.locator("#curves").count() and not in_viewport_across(page, page.locator("#curves")):
        problems.append("the curves are wider than the screen")
    if not in_viewport(page, page.locator("h1")):
        problems.append("the heading is not all on screen")
    return problems


def in_viewport_across(page, locator) -> bool:
    box = locator.bounding_box()
    return box["x"] >= 0 and box["x"] + box["width"] <= page.viewport_size["width"] + 1


def test_each_kind_of_run_page_draws_what_it_has_and_fits_the_screen(live_server, runs_by_kind, browser, artifacts):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    log_in(page, live_server.url, "/runs/", "eve")
    found = {}
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for kind, run in runs_by_kind.items():
            path = f"/runs/{run.pk}/"
            if run.finished:
                page.goto(live_server.url + path)
            else:  # judged after the page has swapped in the server's news once
                with page.expect_response(lambda response, run=run: response.url.endswith(f"/api/v1/runs/{run.pk}")):
                    page.goto(live_server.url + path)
                page.wait_for_load_state("networkidle")
            expect(page.get_by_role("heading", level=1)).to_contain_text(f"Run {run.pk} · {kind}")
            if kind == "sft":
                step = page.locator("#run-step")
                expect(step).to_have_text("64")
                assert in_viewport(page, step), f"the SFT build's step count is off-screen at {width} px"
            page.screenshot(path=str(artifacts / f"run-{kind}-{width}.png"), full_page=True)
            if problems := run_page_problems(page, kind):
                found[f"{kind} run page at {width} px"] = problems
    assert found == {}, "\n".join(f"{where}: {problem}" for where, problems in found.items() for problem in problems)


def shown(select) -> str:
    """The option a select shows."""
    return select.evaluate("select => select.options[select.selectedIndex].text")


@pytest.fixture
def launch_choices(make_project, tiny_snapshot, settings, tmp_path_factory) -> dict:
    # The session's snapshot is read where it was built, beside the folders runs read from anyway.
    settings.PAIRWISE_RUN_INPUT_ROOTS = [*settings.PAIRWISE_RUN_INPUT_ROOTS, built_once_root(tmp_path_factory)]
    user_add(username="eve", role="engineer", password=PASSWORD)
    base = Checkpoint.objects.create(name="tiny-sft", uri="/checkpoints/tiny-sft")
    Run.objects.create(kind=Run.Kind.DPO, status=Run.Status.SUCCEEDED, base_checkpoint=base)  # the form starts closed
    # "arithmetic · heldout" sorts before "speed · train": the form must not start on it for that reason.
    task_set_make(families=["arithmetic"], variant="heldout", n=3, seed=2, name="arithmetic · heldout")
    task_set_make(families=["speed"], variant="train", n=3, seed=1, name="speed · train")
    project = make_project("speed")
    with_test = Export.objects.create(project=project, filters={}, status=Export.Status.DONE,
                                      out_dir=str(tiny_snapshot), counts={"train": 24, "test": 8})
    Export.objects.create(project=project, filters={}, status=Export.Status.DONE, out_dir=str(tiny_snapshot),
                          counts={"train": 32, "test": 0})  # newer, with no test split
    return {"snapshot": f"Speed · export {with_test.pk} · 24 train / 8 test rows"}


def test_the_launch_form_opens_on_a_train_set_and_a_snapshot_with_a_test_split(live_server, launch_choices, browser,
                                                                              artifacts):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    log_in(page, live_server.url, "/runs/", "eve")
    launch = page.locator("details#launch")
    task_set, snapshot = launch.locator("select[name=task_set]"), launch.locator("select[name=export]")
    found = {}
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(live_server.url + "/runs/")
        assert launch.evaluate("details => details.open") is False, "the runs come first; the form waits closed"
        expect(task_set).to_be_hidden()
        launch.locator("summary").click()
        expect(task_set).to_be_visible()
        assert shown(task_set).startswith("speed · train"), shown(task_set)
        assert shown(snapshot).startswith(launch_choices["snapshot"]), shown(snapshot)
        expect(launch.locator("input[name=train_on_heldout]")).not_to_be_checked()
        for name, control in (("task set", task_set), ("snapshot", snapshot),
                              ("Launch button", launch.get_by_role("button", name="Launch"))):
            control.scroll_into_view_if_needed()
            assert in_viewport_across(page, control), f"the {name} is wider than the screen at {width} px"
        launch.screenshot(path=str(artifacts / f"launch-{width}.png"))
        if problems := page.evaluate(OVERFLOW):
            found[f"runs page at {width} px, launch form open"] = problems
        # The button above the runs opens it as well, on the same choices.
        page.goto(live_server.url + "/runs/")
        page.locator("#open-launch").click()
        expect(task_set).to_be_visible()
        assert shown(task_set).startswith("speed · train") and shown(snapshot).startswith(launch_choices["snapshot"])
    assert found == {}, "\n".join(f"{where}: {problem}" for where, problems in found.items() for problem in problems)
