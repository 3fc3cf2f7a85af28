"""Runs side by side in Chromium: an engineer narrows the runs table to GRPO runs, ticks two of them, presses
Compare curves and reads one chart per metric with a line per run. The screenshot goes to
tests/e2e/artifacts/runs-curves.png for a person to look at."""

import math
import random

import pytest

from annotate.review.users import user_add
from annotate.runs.models import Checkpoint, Run

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"


def grpo_rows(*, steps: int, learning: float, seed: int) -> list[dict]:
    """A GRPO run's training rows: loss and KL, a reward rising at the run's own pace, shorter answers."""
    noise = random.Random(seed)
    rows = []
    for step in range(1, steps + 1):
        reward = 1 - math.exp(-learning * step) + noise.uniform(-0.05, 0.05)
        rows.append({"event": "train", "step": step, "loss": 0.02 * noise.uniform(-1, 1), "reward": reward,
                     "kl": 0.002 * step * learning + noise.uniform(0, 0.001),
                     "completions/mean_length": 48 - 20 * (1 - math.exp(-learning * step)) + noise.uniform(-2, 2),
                     "zero_variance/share": max(0.0, 0.6 - 0.5 * reward + noise.uniform(-0.05, 0.05))})
    return rows


def test_an_engineer_compares_two_runs_curves(live_server, browser, artifacts):
    user_add(username="eve", role="engineer", password=PASSWORD)
    base = Checkpoint.objects.create(name="tiny-sft", uri="/checkpoints/tiny-sft")
    slow = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base, folder="a",
                              tasks_path="/inputs/arith.jsonl", metrics=grpo_rows(steps=40, learning=0.05, seed=1))
    fast = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base, folder="b",
                              tasks_path="/inputs/arith.jsonl", metrics=grpo_rows(steps=30, learning=0.15, seed=2))
    Run.objects.create(kind="dpo", status="failed", base_checkpoint=base, folder="c", snapshot_path="/inputs/speed-1",
                       metrics=[{"event": "train", "step": 1, "loss": 0.69}])

    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    page.goto(live_server.url + "/runs/")
    page.get_by_label("Username").fill("eve")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()

    page.get_by_label("Run type").select_option("grpo")
    page.get_by_role("button", name="Filter").click()
    runs = page.locator("#runs tbody tr")
    expect(runs).to_have_count(2)
    page.locator("#runs").screenshot(path=str(artifacts / "runs-filtered.png"))
    page.get_by_label(f"compare run {slow.pk}").check()
    page.get_by_label(f"compare run {fast.pk}").check()
    page.get_by_role("button", name="Compare curves").click()

    expect(page.get_by_role("heading", name="Runs side by side")).to_be_visible()
    for metric in ("loss", "reward", "kl", "completion_length", "zero_variance"):
        expect(page.locator(f"#curve-{metric} polyline")).to_have_count(2)
    legend = page.locator("#curve-reward svg")
    expect(legend).to_contain_text(f"run {slow.pk} · grpo · tiny-sft")
    expect(legend).to_contain_text(f"run {fast.pk} · grpo · tiny-sft")
    page.screenshot(path=str(artifacts / "runs-curves.png"), full_page=True)

    page.goto(live_server.url + f"/runs/curves?run={slow.pk}")
    expect(page.locator("#curves-error")).to_have_text(
        "choose two or more runs to compare their curves (got 1); tick them in the runs table and press Compare curves")
