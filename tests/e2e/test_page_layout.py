"""The pages an engineer and an admin come back to fit the screen at 1440, 800 and 390 px: nothing scrolls the page
sideways (a wide table scrolls inside its own box), and no button or control sticks out of its card. Screenshots
go to tests/e2e/artifacts/layout-*.png."""

import math

import pytest

from annotate.exports.models import Export
from annotate.review.users import user_add
from annotate.runs.models import Checkpoint, Run
from annotate.runs.task_sets import task_set_make
from tests.conftest import import_rows, make_items

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"
WIDTHS = (1440, 800, 390)

# What sticks out: the page wider than the window, or a control wider than, or outside, the card that holds it.
OVERFLOW = """() => {
  const problems = [];
  const width = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth > width + 1)
    problems.push(`page scrolls sideways: ${document.documentElement.scrollWidth} > ${width}`);
  for (const control of document.querySelectorAll(".card button, .card a.button, .card input, .card select, .card textarea")) {
    if (control.offsetParent === null) continue;  // hidden
    let scrolls = false;  // inside a box that scrolls by itself (a wide table on a narrow screen)
    for (let box = control.parentElement; box && !box.classList.contains("card"); box = box.parentElement)
      if (["auto", "scroll"].includes(getComputedStyle(box).overflowX)) scrolls = true;
    if (scrolls) continue;
    const card = control.closest(".card").getBoundingClientRect();
    const box = control.getBoundingClientRect();
    if (box.left < card.left - 1 || box.right > card.right + 1)
      problems.push(`${control.tagName.toLowerCase()} "${(control.innerText || control.name || "").slice(0, 40)}" ` +
                    `spans ${Math.round(box.left)}-${Math.round(box.right)}, its card ${Math.round(card.left)}-${Math.round(card.right)}`);
  }
  return problems;
}"""


@pytest.fixture
def pages(make_project, tiny_snapshot):
    user_add(username="ada", role="admin", password=PASSWORD)
    project = make_project("speed")
    import_rows(project, make_items(4))
    Export.objects.create(project=project, filters={}, status=Export.Status.DONE, out_dir=str(tiny_snapshot),
                          counts={"train": 24, "test": 8})
    task_set_make(families=["speed"], variant="train", n=3, seed=1, name="speed · train")
    base = Checkpoint.objects.create(name="tiny-sft", uri="/checkpoints/tiny-sft")
    rows = [{"event": "train", "step": step, "loss": 1 / step, "reward": 1 - math.exp(-0.1 * step), "kl": 0.01 * step}
            for step in range(1, 21)]
    grpo = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base, folder="a",
                              tasks_path="/inputs/speed-train.jsonl", metrics=rows)
    return {"runs": "/runs/", "run": f"/runs/{grpo.pk}/", "exports": "/projects/speed/exports/",
            "quality": "/projects/speed/quality/"}


def test_pages_fit_the_screen_at_every_width(live_server, pages, browser, artifacts):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(live_server.url + "/accounts/login/")
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Projects")).to_be_visible()
    found = {}
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in pages.items():
            page.goto(live_server.url + path)
            page.screenshot(path=str(artifacts / f"layout-{name}-{width}.png"), full_page=True)
            if problems := page.evaluate(OVERFLOW):
                found[f"{name} at {width} px"] = problems
    assert found == {}, "\n".join(f"{where}: {problem}" for where, problems in found.items() for problem in problems)
