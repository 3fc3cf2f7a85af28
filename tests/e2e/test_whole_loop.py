"""The whole loop on a fresh demo, in real Chromium, with no shell step: reviewers judge, the admin exports, the
engineer trains DPO from the export's row and GRPO on a task set from the same demo checkpoint, evaluates parent
and both children on a held-out task set, sends the three checkpoints' answers back to reviewers, who judge them;
the leaderboard ranks the checkpoints; an audit of GRPO's rewarded answers is judged and the GRPO child's page
shows the broken share. Screenshots go to tests/e2e/artifacts/loop-*.png.

The demo is seeded by the demo's own command (seed_demo), which registers the demo checkpoint that ships with
Pairwise (all 320 steps of tiny-sft's recipe; tests/runs/test_demo_checkpoint_shipped.py rebuilds it). GRPO needs
answers with full reward to audit, and a checkpoint cut shorter writes too few: from the same seed, 160 steps gave 0
fully rewarded answers of GRPO's 48 on one machine and 4 on another (floating-point sums differ between processors),
240 steps gave 2, and 320 gave 10. Runs launched from the pages execute in threads of the live server, as on the
embedded defaults.
"""

import io
import random
import re
import uuid

import pytest
from django.core.management import call_command

from annotate.review.assignments import assignment_next
from annotate.review.judgments import judgment_submit
from annotate.review.models import Project, Response
from annotate.review.users import user_add
from annotate.runs.audit import rewarded_rollouts
from annotate.runs.demo_checkpoint import shipped_manifest
from annotate.runs.management.commands.seed_demo import judge_demo_project
from annotate.runs.models import Checkpoint, Run

expect = pytest.importorskip(
    "playwright.sync_api", reason="Playwright for Python is missing; install the project's test extras"
).expect

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-e2e-password"
RUN_TIMEOUT_MS = 300_000
DPO_CONFIG = "learning_rate: 5.0e-6\nmax_steps: 4\nper_device_train_batch_size: 4\nlogging_steps: 1\n"
# The rate the GRPO tests use: six steps move the child far enough from its parent that their sampled answers
# differ, which the comparison below needs (prompts where every checkpoint answers alike are left out).
GRPO_CONFIG = ("learning_rate: 5.0e-3\nmax_steps: 6\nnum_generations: 4\nper_device_train_batch_size: 8\n"
               "max_completion_length: 48\nlogging_steps: 1\nseed: 0\n")
RATIONALE = "The chosen answer works the total distance over the total time."


@pytest.fixture
def fresh_demo(settings, tmp_path):
    """The demo as scripts/demo.sh seeds it, in this test's own folders, with known passwords."""
    settings.RUN_ROOT, settings.SNAPSHOT_ROOT = tmp_path / "runs", tmp_path / "snapshots"
    settings.INPUTS_ROOT = tmp_path / "inputs"
    settings.PAIRWISE_RUN_INPUT_ROOTS = [tmp_path]
    call_command("seed_demo", stdout=io.StringIO())
    for username, role in (("reviewer", "reviewer"), ("reviewer2", "reviewer"), ("reviewer3", "reviewer"),
                           ("engineer", "engineer"), ("admin", "admin")):
        user_add(username=username, role=role, password=PASSWORD)
    return tmp_path


def log_in(browser, base_url: str, username: str, *, width: int = 1440):
    page = browser.new_page(viewport={"width": width, "height": 1000})
    page.set_default_navigation_timeout(180_000)  # a launch waits for the training command's own check
    page.goto(base_url + "/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Projects")).to_be_visible()
    return page


def wait_for_success(page) -> int:
    expect(page).to_have_url(re.compile(r"/runs/\d+/$"))
    expect(page.locator("#run-status")).to_have_text("succeeded", timeout=RUN_TIMEOUT_MS)
    return int(page.url.rstrip("/").rsplit("/", 1)[1])


def option_value(select, text: str) -> str:
    """The value of the one option of a select whose label contains `text` (labels carry counts and dates)."""
    option = select.locator("option", has_text=text)
    expect(option).to_have_count(1)
    return option.get_attribute("value")


def judge_by_keyboard(page, count: int) -> None:
    """The reviewer picks the worked answer, strength 2, the same side on each criterion, and types a reason."""
    for judged in range(count):
        expect(page.locator("#progress")).to_contain_text(f"Judged {judged} ·")
        expect(page.locator("input[name=choice]:checked")).to_have_count(0)  # the next pair's fresh form
        side = "left" if page.locator("#left").inner_text().startswith("Average speed is") else "right"
        page.keyboard.press("a" if side == "left" else "d")
        page.keyboard.press("2")
        for _criterion in ("correct", "complete"):  # each criterion key moves on to the next criterion
            page.keyboard.press("h" if side == "left" else "l")
        page.keyboard.press("r")
        page.keyboard.type(f"{RATIONALE} ({judged + 1})", delay=2)
        page.keyboard.press("Escape")
        page.keyboard.press("Control+Enter")
        expect(page.locator("#progress")).to_contain_text(f"Judged {judged + 1}")


def judge_checkpoint_answers(project, reviewers, ranking: list[str]) -> int:
    """Reviewers judge the sampled answers; each prefers the checkpoint ranked higher, four times in five (seeded).
    The test knows which checkpoint wrote which answer; the reviewers' pages never show it."""
    rank = {name: position for position, name in enumerate(ranking)}
    judged = 0
    for reviewer in reviewers:
        rng = random.Random(reviewer.username)
        while (assignment := assignment_next(project=project, reviewer=reviewer)) is not None:
            pair = assignment.pair
            a_rank, b_rank = rank.get(pair.response_a.model, 99), rank.get(pair.response_b.model, 99)
            if a_rank == b_rank:  # the demo's own pairs
                a_better = pair.response_a.text.startswith("Average speed is")
            else:
                a_better = (a_rank < b_rank) == (rng.random() < 0.8)
            choice = "left" if a_better == assignment.a_on_left else "right"
            judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=choice, strength=2,
                            criteria={"correct": choice, "complete": choice},
                            rationale=f"{RATIONALE} Pair {pair.pk}.", client_key=uuid.uuid4())
            judged += 1
    return judged


def test_the_whole_loop_on_a_fresh_demo(live_server, fresh_demo, browser, artifacts):
    url = live_server.url
    demo = Project.objects.get(slug="demo")
    reviewers = [user_add(username=name, role="reviewer", password=PASSWORD)[0]
                 for name in ("reviewer", "reviewer2", "reviewer3")]

    # The demo checkpoint is registered the moment the demo is seeded: the engineer can launch at once.
    engineer = log_in(browser, url, "engineer")
    engineer.goto(url + "/runs/")
    expect(engineer.get_by_role("button", name="Launch", exact=True)).to_be_enabled()
    expect(engineer.get_by_label("Base checkpoint")).to_have_value("tiny-sft")
    engineer.screenshot(path=str(artifacts / "loop-1-the-demo-checkpoint-ready.png"), full_page=True)
    parent = Checkpoint.objects.get(name="tiny-sft")
    assert parent.content_hash == shipped_manifest()["content_hash"] and parent.parent_id is None

    # Reviewers judge: two pairs by keyboard in the browser, the rest of the demo through the same service.
    reviewer = log_in(browser, url, "reviewer")
    reviewer.get_by_role("link", name="Review").first.click()
    judge_by_keyboard(reviewer, 2)
    reviewer.screenshot(path=str(artifacts / "loop-2-reviewer.png"), full_page=True)
    judge_demo_project(demo, reviewers)

    # The admin exports what was agreed.
    admin = log_in(browser, url, "admin")
    admin.goto(url + "/projects/demo/exports/")
    admin.get_by_role("button", name="Export snapshot").click()
    export_row = admin.locator("#snapshots tbody tr").first
    expect(export_row).to_contain_text("done", timeout=60_000)
    admin.screenshot(path=str(artifacts / "loop-3-export.png"), full_page=True)

    # The engineer trains DPO from the export's row, nothing typed but the config.
    engineer.goto(url + "/projects/demo/exports/")
    engineer.locator("#snapshots tbody tr").first.get_by_role("link", name="Train DPO on this snapshot").click()
    expect(engineer.get_by_label("Kind")).to_have_value("dpo")
    expect(engineer.get_by_label("Snapshot (DPO, reward)")).to_contain_text("Average speed (demo) · export")
    expect(engineer.get_by_label("Base checkpoint")).to_have_value("tiny-sft")
    engineer.get_by_label("Config (YAML)").fill(DPO_CONFIG)
    engineer.get_by_role("button", name="Launch", exact=True).click()
    dpo_run = wait_for_success(engineer)

    # ... and GRPO on the speed task set, from the same checkpoint.
    engineer.goto(url + "/runs/")
    engineer.locator("#task-set-list tr", has_text="speed · train").get_by_role(
        "link", name="Train GRPO on this task set").click()
    expect(engineer.get_by_label("Kind")).to_have_value("grpo")
    expect(engineer.get_by_label("Base checkpoint")).to_have_value("tiny-sft")  # the root, not the DPO child
    engineer.get_by_label("Config (YAML)").fill(GRPO_CONFIG)
    engineer.get_by_role("button", name="Launch", exact=True).click()
    grpo_run = wait_for_success(engineer)
    engineer.screenshot(path=str(artifacts / "loop-4-grpo-run.png"), full_page=True)
    dpo_child = Run.objects.get(pk=dpo_run).made_checkpoint
    grpo_child = Run.objects.get(pk=grpo_run).made_checkpoint
    # The audit below needs answers with full reward: with fewer SFT steps the demo checkpoint may write none.
    assert rewarded_rollouts(Run.objects.get(pk=grpo_run)), "GRPO rewarded no answer of the demo checkpoint"
    assert dpo_child.parent_id == grpo_child.parent_id == parent.pk
    assert Run.objects.get(pk=dpo_run).export.project_id == demo.pk
    assert Run.objects.get(pk=grpo_run).task_set.name == "speed · train"
    names = [parent.name, dpo_child.name, grpo_child.name]

    # Parent and both children on the held-out task set, side by side.
    engineer.goto(url + "/runs/#evaluate")
    evaluate = engineer.locator("#evaluate")
    evaluate.get_by_label("Checkpoints (the parent first)").select_option(names)
    evaluate.get_by_label("Task set").select_option(option_value(evaluate.get_by_label("Task set"),
                                                                 "speed · heldout · 50 tasks"))
    evaluate.get_by_label("Longest answer (tokens)").fill("48")
    evaluate.get_by_role("button", name="Evaluate").click()
    wait_for_success(engineer)
    for name in names:
        expect(engineer.locator("body")).to_contain_text(name)
    engineer.screenshot(path=str(artifacts / "loop-5-evaluation.png"), full_page=True)

    # The admin makes a small held-out task set and sends the three checkpoints' answers to it back to reviewers.
    admin.goto(url + "/runs/#task-sets")
    make = admin.locator("#make-task-set")
    make.get_by_label("Families").select_option(["speed"])
    make.get_by_label("Variant").select_option("heldout")
    make.get_by_label("Tasks").fill("4")
    make.get_by_label("Seed").fill("9")
    make.get_by_label("Name (empty: from the recipe)").fill("speed · heldout · for reviewers")
    make.get_by_role("button", name="Make task set").click()
    expect(admin.locator("#task-set-list")).to_contain_text("speed · heldout · for reviewers")
    # Checked off the request: the page reloads by itself until the set is ready and offered to comparisons.
    expect(admin.locator("#task-set-list")).not_to_contain_text("checking:", timeout=60_000)
    compare = admin.locator("#compare")
    compare.get_by_label("Checkpoints (two or more)").select_option(names)
    compare.get_by_label("Prompts from").select_option(option_value(compare.get_by_label("Prompts from"),
                                                                    "task set speed · heldout · for reviewers"))
    compare.get_by_label("Into project").select_option("demo")
    compare.get_by_label("Longest answer (tokens)").fill("48")
    compare.get_by_role("button", name="Sample and import").click()
    wait_for_success(admin)
    sampled = set(Response.objects.filter(prompt__project=demo, model__in=names).values_list("model", flat=True))
    assert sampled == set(names)

    # Reviewers judge them (preferring GRPO's, then DPO's answers); the leaderboard ranks the checkpoints.
    assert judge_checkpoint_answers(demo, reviewers, [grpo_child.name, dpo_child.name, parent.name]) > 0
    admin.goto(url + "/projects/demo/quality/")
    models = admin.locator("#models tbody tr")
    expect(models.first).to_contain_text(grpo_child.name, timeout=60_000)
    for name in names:
        expect(admin.locator("#models")).to_contain_text(name)
    admin.screenshot(path=str(artifacts / "loop-6-leaderboard.png"), full_page=True)

    # An audit of GRPO's rewarded answers, judged by a reviewer alone; the GRPO child's page shows the broken share.
    engineer.goto(url + f"/runs/{grpo_run}/")
    audit = engineer.locator("#answer-audit")
    audit.get_by_label("Answers with full reward to audit").fill("3")
    audit.get_by_label("Reviewers per answer").fill("1")
    audit.get_by_role("button", name="Send to reviewers").click()
    expect(engineer.locator("body")).to_contain_text("rewarded answers for reviewers")
    reviewer.goto(url + "/audit/")
    verdicts = 0
    while reviewer.get_by_role("button", name="Submit").is_visible():
        reviewer.get_by_label("No, the reasoning is broken" if verdicts % 2 == 0 else
                              "Yes, the reasoning holds").check()
        reviewer.get_by_label("Why?").fill(f"Checked each step of answer {verdicts + 1} against the question.")
        reviewer.get_by_role("button", name="Submit").click()
        expect(reviewer.locator("body")).to_contain_text("Verdict saved.")
        verdicts += 1
    assert verdicts >= 1
    reviewer.screenshot(path=str(artifacts / "loop-7-audit-done.png"), full_page=True)
    engineer.goto(url + f"/checkpoints/{grpo_child.pk}/")
    broken = engineer.locator("#answer-audit #audit-results tbody tr").first
    expect(broken).to_contain_text(f"{(verdicts + 1) // 2} (")
    engineer.screenshot(path=str(artifacts / "loop-8-checkpoint-broken-share.png"), full_page=True)
