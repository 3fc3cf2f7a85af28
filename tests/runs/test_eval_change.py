"""An evaluation reads a child against its parent task by task: the change in success rate with a paired 95% t
interval over tasks, and one sentence on the eval run's page, the checkpoint's page and the GRPO run's page:
better, worse, or too short to show a difference. The figures are checked against scipy and statsmodels, and
against the order the tasks come in; the results are the JSON `python -m training eval` writes, from answers the
real verifier scored."""

import html
import json
import random
import re

import numpy as np
import pytest

from annotate.runs.evaluation import EVAL_FILE, eval_result
from annotate.runs.models import Checkpoint, Run
from training.evaluate import (
    CHANGE_METHOD,
    Attempt,
    eval_report,
    format_eval_table,
    paired_change,
    task_outcomes,
)
from training.run_folder import write_json_atomic
from training.task_families import make_tasks
from training.verifiers.task_verifier import TaskVerifier

PARENT, CHILD = "/models/tiny-sft", "/models/child"
WRONG = "Hmm.\nI do not know"


@pytest.fixture(scope="module")
def verdicts():
    """Twenty held-out speed tasks (and one whose answer the verifier cannot read), with the real verifier's
    verdict on a right answer and on a wrong one for each."""
    tasks = make_tasks("speed", n=20, seed=5, variant="heldout")
    broken = {"task_id": "speed-zz-broken", "kind": "math", "prompt": "?", "answer": "\\frac{", "unit": "km/h"}
    with TaskVerifier(workers=1) as verifier:
        right = verifier.verify_many([(t, t["solution"]) for t in tasks] + [(broken, "Answer: 50 km/h")])
        wrong = verifier.verify_many([(t, WRONG) for t in tasks])
    assert {r.status for r in right[:-1]} == {"correct"} and {r.status for r in wrong} == {"wrong"}
    assert right[-1].status == "error"
    return tasks, broken, right, wrong


def attempts_of(verdicts, checkpoint: str, correct: list[list[bool]]) -> list[Attempt]:
    """One checkpoint's attempts: correct[i][k] says whether sample k of task i is a right answer."""
    tasks, _, right, wrong = verdicts
    attempts = []
    for i, samples in enumerate(correct):
        for k, ok in enumerate(samples):
            attempt = Attempt(checkpoint, tasks[i], k, tasks[i]["solution"] if ok else WRONG, 12)
            attempt.result = right[i] if ok else wrong[i]
            attempts.append(attempt)
    return attempts


def written_eval(verdicts, parent: list[list[bool]], child: list[list[bool]], *, broken: bool = False,
                 checkpoints=(PARENT, CHILD)) -> dict:
    """The JSON `python -m training eval` writes for these answers (parent's and child's, in `checkpoints` order)."""
    tasks, broken_task, right, _ = verdicts
    attempts = attempts_of(verdicts, PARENT, parent) + attempts_of(verdicts, CHILD, child)
    used = tasks[:len(parent)]
    if broken:  # a task the verifier cannot score: both sides answer it, neither is scored
        for checkpoint in (PARENT, CHILD):
            attempt = Attempt(checkpoint, broken_task, 0, "Answer: 50 km/h", 6)
            attempt.result = right[-1]
            attempts.append(attempt)
        used = [*used, broken_task]
    samples = len(parent[0])
    return eval_report(attempts, checkpoints=list(checkpoints), tasks=used,
                       settings={"samples": samples, "temperature": 1.0 if samples > 1 else 0.0,
                                 "max_new_tokens": 64, "seed": 0},
                       content_hashes={PARENT: "sha256:parent", CHILD: "sha256:child"})


def first_right(count: int, n: int = 20) -> list[list[bool]]:
    return [[i < count] for i in range(n)]


# --- the statistics ---------------------------------------------------------------------------------------------

def shares(outcomes: dict, tasks: list[str]) -> np.ndarray:
    return np.array([outcomes[t][0] / outcomes[t][1] for t in tasks])


@pytest.mark.parametrize("samples", [1, 4])
def test_the_interval_is_scipys_paired_t_interval_and_statsmodels(samples):
    from scipy import stats
    from statsmodels.stats.weightstats import DescrStatsW

    rng = np.random.default_rng(samples)
    ease = rng.uniform(0, 1, 40)
    parent = {f"t{i:03d}": [int(rng.binomial(samples, p)), samples] for i, p in enumerate(ease)}
    child = {f"t{i:03d}": [int(rng.binomial(samples, min(p + 0.15, 1))), samples] for i, p in enumerate(ease)}
    change = paired_change(parent, child)
    tasks = sorted(parent)
    before, after = shares(parent, tasks), shares(child, tasks)
    low, high = stats.ttest_rel(after, before).confidence_interval(0.95)
    assert change["interval"] == [round(low, 4), round(high, 4)]
    assert change["interval"] == pytest.approx(list(DescrStatsW(after - before).tconfint_mean(alpha=0.05)), abs=5e-5)
    # The mean per-task difference is the child's success rate minus the parent's, as the table shows them.
    assert change["difference"] == pytest.approx(after.mean() - before.mean(), abs=5e-5)
    assert (change["better"], change["worse"], change["same"]) == (
        int((after > before).sum()), int((after < before).sum()), int((after == before).sum()))
    assert change["real"] == (low > 0 or high < 0)


def test_worked_by_hand_with_one_sample_per_task():
    # 20 tasks: the parent right on 4, the child on 18 (the same 4 and 14 more). Differences: fourteen 1s and six
    # 0s: mean 0.7, sd sqrt(14 * 0.09 + 6 * 0.49) / sqrt(19) = sqrt(4.2 / 19); t(0.975, 19) = 2.0930.
    parent = {f"t{i:02d}": [int(i < 4), 1] for i in range(20)}
    child = {f"t{i:02d}": [int(i < 18), 1] for i in range(20)}
    half = 2.093024 * (4.2 / 19) ** 0.5 / 20 ** 0.5
    change = paired_change(parent, child)
    assert change["interval"] == pytest.approx([0.7 - half, 0.7 + half], abs=1e-4)
    assert change | {"interval": None} == {
        "tasks": 20, "left_out": 0, "better": 14, "worse": 0, "same": 6, "confidence": 0.95, "difference": 0.7,
        "interval": None, "real": True, "direction": "better"}
    # Read the other way round, it is the same interval mirrored.
    backwards = paired_change(child, parent)
    assert backwards["interval"] == [-change["interval"][1], -change["interval"][0]]
    assert backwards["direction"] == "worse" and (backwards["better"], backwards["worse"]) == (0, 14)


@pytest.mark.parametrize("samples", [1, 4])
def test_a_change_that_is_not_there_is_called_real_at_most_five_times_in_a_hundred(samples):
    """Parent and child equally good (each task's chance of a right answer the same for both, the tasks' chances
    spread over 0-1): the interval excludes no change in at most 5% of evaluations, give or take the simulation's
    own error (1,500 evaluations: about 0.6 points). With one sample per task the differences are -1, 0 and +1."""
    rng = np.random.default_rng(20 + samples)
    calls = 0
    for _ in range(1500):
        ease = rng.uniform(0, 1, 30)
        parent = {f"t{i:02d}": [int(rng.binomial(samples, p)), samples] for i, p in enumerate(ease)}
        child = {f"t{i:02d}": [int(rng.binomial(samples, p)), samples] for i, p in enumerate(ease)}
        calls += paired_change(parent, child)["real"]
    assert calls / 1500 <= 0.065


def test_a_real_change_is_found_most_of_the_time():
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(300):
        ease = rng.uniform(0.1, 0.7, 40)
        parent = {f"t{i:02d}": [int(rng.binomial(4, p)), 4] for i, p in enumerate(ease)}
        child = {f"t{i:02d}": [int(rng.binomial(4, p + 0.25)), 4] for i, p in enumerate(ease)}
        found += paired_change(parent, child)["direction"] == "better"
    assert found / 300 > 0.9


def test_the_change_does_not_depend_on_the_order_of_tasks_and_draws_nothing_at_random(verdicts):
    rng = random.Random(3)
    parent = [[rng.random() < 0.4, rng.random() < 0.4] for _ in range(20)]
    child = [[rng.random() < 0.6, rng.random() < 0.6] for _ in range(20)]
    result = written_eval(verdicts, parent, child)
    # The same answers in another order (tasks, samples and checkpoints shuffled), as a shuffled task file gives.
    attempts = attempts_of(verdicts, PARENT, parent) + attempts_of(verdicts, CHILD, child)
    shuffled = list(attempts)
    rng.shuffle(shuffled)
    tasks = list(verdicts[0])
    rng.shuffle(tasks)
    again = eval_report(shuffled, checkpoints=[PARENT, CHILD], tasks=tasks, settings=result["settings"],
                        content_hashes={PARENT: "sha256:parent", CHILD: "sha256:child"})
    assert again["changes"] == result["changes"] and len(result["changes"]) == 1
    assert list(again["checkpoints"][1]["per_task"]) != list(result["checkpoints"][1]["per_task"])  # really shuffled
    # Per-task counts given in any order: the same digits (the sums are exactly rounded).
    before, after = result["checkpoints"][0]["per_task"], result["checkpoints"][1]["per_task"]
    for seed in range(5):
        order = list(before)
        random.Random(seed).shuffle(order)
        assert paired_change({t: before[t] for t in order}, {t: after[t] for t in reversed(order)}) == {
            key: value for key, value in result["changes"][0].items() if key not in ("checkpoint", "against")}
    # No resampling, so no seed to fix: the method written into the JSON says so.
    assert "no resampling" in result["change"] and result["change"] == CHANGE_METHOD


def test_the_json_keeps_counts_per_task_and_reads_every_later_checkpoint_against_the_first(verdicts):
    result = written_eval(verdicts, [[True, False]] * 12, [[True, True]] * 12, broken=True)
    json.dumps(result)
    assert result["checkpoints"][0]["per_task"]["speed-zz-broken"] == [0, 0]
    assert sorted(result["checkpoints"][1]["per_task"].values()) == [[0, 0]] + [[2, 2]] * 12
    assert task_outcomes(attempts_of(verdicts, CHILD, [[True, False]])) == {verdicts[0][0]["task_id"]: [1, 2]}
    [change] = result["changes"]
    assert (change["checkpoint"], change["against"]) == (CHILD, PARENT)
    # Every task moved by +0.5: no spread, the interval is the point, and it excludes 0.
    assert change | {"checkpoint": None, "against": None} == {
        "checkpoint": None, "against": None, "tasks": 12, "left_out": 1, "better": 12, "worse": 0, "same": 0,
        "confidence": 0.95, "difference": 0.5, "interval": [0.5, 0.5], "real": True, "direction": "better"}
    assert ("child: Better than tiny-sft: +0.500 [+0.500, +0.500] in success rate, 95% paired interval over 12 tasks "
            "× 2 samples (12 tasks better, 0 worse, 0 the same).") in format_eval_table(result)


# --- the pages --------------------------------------------------------------------------------------------------


@pytest.fixture
def lineage(db):
    """A parent and the child a GRPO run made from it, registered without weights (URIs)."""
    parent = Checkpoint.objects.create(name="tiny-sft", uri="s3://models/tiny-sft", content_hash="sha256:parent")
    grpo = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=parent, folder="/runs/grpo",
                              record={"status": "completed", "results": {"ledger": {}}})
    child = Checkpoint.objects.create(name="tiny-grpo", uri="s3://models/child", content_hash="sha256:child",
                                      parent=parent, run=grpo)
    return parent, grpo, child


def eval_run(tmp_path, lineage, result: dict, *, child_first: bool = False) -> Run:
    """A succeeded evaluation run whose folder holds `result` as eval.json, recorded as the worker records it."""
    parent, _, child = lineage
    evaluated = [{"id": parent.pk, "name": parent.name, "path": PARENT},
                 {"id": child.pk, "name": child.name, "path": CHILD}]
    folder = tmp_path / f"eval-{Run.objects.count()}"
    folder.mkdir()
    run = Run.objects.create(kind="eval", status="succeeded", folder=str(folder), base_checkpoint=parent,
                             config={"checkpoints": evaluated[::-1] if child_first else evaluated,
                                     **{key: value for key, value in result["settings"].items() if key != "tasks"},
                                     "tasks": "/inputs/speed-heldout.jsonl"})
    write_json_atomic(folder / EVAL_FILE, result)
    run.record = {"eval": eval_result(run)}  # as annotate/runs/execute.py records an evaluation that ended
    run.save()
    return run


def said(page: str) -> list[str]:
    """The change sentences of a page, as a reader sees them."""
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", p)).split())
            for p in re.findall(r'<p class="eval-change[^"]*"[^>]*>(.*?)</p>', page, re.S)]


@pytest.fixture
def engineer_client(client, make_user):
    client.force_login(make_user("eve", "engineer"))
    return client


@pytest.mark.django_db
def test_a_child_better_than_its_parent_is_said_so_on_every_page(verdicts, lineage, engineer_client, tmp_path):
    parent, grpo, child = lineage
    run = eval_run(tmp_path, lineage, written_eval(verdicts, first_right(4), first_right(18)))
    better = ("tiny-grpo: Better than its parent tiny-sft: +0.700 [+0.480, +0.920] in success rate, 95% paired "
              "interval over 20 tasks × 1 sample (14 tasks better, 0 worse, 6 the same).")
    assert said(engineer_client.get(f"/runs/{run.pk}/").content.decode()) == [better]
    assert 'class="eval-change ok"' in engineer_client.get(f"/runs/{run.pk}/").content.decode()
    for checkpoint in (parent, child):
        assert said(engineer_client.get(f"/checkpoints/{checkpoint.pk}/").content.decode()) == [better]
    # The GRPO run that made the child says it in its held-out section, with the evaluation it comes from.
    section = engineer_client.get(f"/runs/{grpo.pk}/").content.decode().split('id="eval"')[1].split("</section>")[0]
    assert said(section) == [f"Evaluation run {run.pk} on /inputs/speed-heldout.jsonl: "
                             + better.removeprefix("tiny-grpo: ")]
    assert "evaluate its parent and its checkpoint side by side" not in section
    # The API gives the figures with the sentence.
    [change] = engineer_client.get(f"/api/v1/runs/{run.pk}").json()["evaluation"]["changes"]
    assert change["interval"] == [0.48, 0.92] and change["real"] is True and change["against_parent"] is True


@pytest.mark.django_db
def test_a_child_no_better_than_its_parent_was_too_short_to_show_a_difference(verdicts, lineage, engineer_client,
                                                                            tmp_path):
    _, grpo, _ = lineage
    # Two samples per task. Against the parent: +0.5 on three tasks, -0.5 on one, the same on sixteen; and a task
    # the verifier cannot score, left out of the pairs (the table counts it, unscored). Mean +0.05, sd sqrt(0.95 / 19),
    # so +-2.0930 * sqrt(0.05 / 20) = +-0.105.
    parent = [[i % 2 == 0, False] for i in range(20)]
    child = [list(samples) for samples in parent]
    child[1], child[3], child[5], child[2] = [True, False], [True, False], [True, False], [False, False]
    run = eval_run(tmp_path, lineage, written_eval(verdicts, parent, child, broken=True))
    short = ("tiny-grpo: Too short to show a difference from its parent tiny-sft: the change +0.050 [-0.055, +0.155] "
             "includes no change (20 tasks × 2 samples; 3 tasks better, 1 worse, 16 the same).")
    page = engineer_client.get(f"/runs/{run.pk}/").content.decode()
    assert said(page) == [short] and 'class="eval-change muted"' in page
    assert said(engineer_client.get(f"/runs/{grpo.pk}/").content.decode()) == [
        f"Evaluation run {run.pk} on /inputs/speed-heldout.jsonl: " + short.removeprefix("tiny-grpo: ")]


@pytest.mark.django_db
def test_a_worse_child_and_a_child_on_too_few_tasks(verdicts, lineage, engineer_client, tmp_path):
    worse = eval_run(tmp_path, lineage, written_eval(verdicts, first_right(18), first_right(4)))
    assert said(engineer_client.get(f"/runs/{worse.pk}/").content.decode()) == [
        "tiny-grpo: Worse than its parent tiny-sft: -0.700 [-0.920, -0.480] in success rate, 95% paired interval "
        "over 20 tasks × 1 sample (0 tasks better, 14 worse, 6 the same)."]
    thin = eval_run(tmp_path, lineage, written_eval(verdicts, first_right(0, 6), first_right(6, 6)))
    assert said(engineer_client.get(f"/runs/{thin.pk}/").content.decode()) == [
        "tiny-grpo: Too few tasks to judge a difference from its parent tiny-sft: 6 scored by both, at least 10 "
        "needed."]


@pytest.mark.django_db
def test_the_child_is_read_against_its_parent_whatever_order_they_were_evaluated_in(verdicts, lineage,
                                                                                   engineer_client, tmp_path):
    # The runs page's multiple select sends checkpoints in its list's order: here the child came first, so the JSON
    # reads the parent against the child; the pages still read the child against its parent.
    result = written_eval(verdicts, first_right(4), first_right(18), checkpoints=(CHILD, PARENT))
    assert result["changes"][0]["direction"] == "worse"
    run = eval_run(tmp_path, lineage, result, child_first=True)
    assert said(engineer_client.get(f"/runs/{run.pk}/").content.decode()) == [
        "tiny-grpo: Better than its parent tiny-sft: +0.700 [+0.480, +0.920] in success rate, 95% paired interval "
        "over 20 tasks × 1 sample (14 tasks better, 0 worse, 6 the same)."]


@pytest.mark.django_db
def test_checkpoints_without_lineage_are_read_against_the_first_and_old_results_say_nothing(
        verdicts, lineage, engineer_client, tmp_path):
    parent, _, child = lineage
    Checkpoint.objects.filter(pk=child.pk).update(parent=None)
    run = eval_run(tmp_path, lineage, written_eval(verdicts, first_right(10), first_right(11)))
    assert said(engineer_client.get(f"/runs/{run.pk}/").content.decode()) == [
        "tiny-grpo: No difference shown from tiny-sft: the change +0.050 [-0.055, +0.155] includes no change "
        "(20 tasks × 1 sample; 1 task better, 0 worse, 19 the same)."]
    # An evaluation recorded before per-task counts were kept: its table, and no sentence.
    old = written_eval(verdicts, first_right(10), first_right(11))
    for report in old["checkpoints"]:
        del report["per_task"]
    del old["changes"]
    page = engineer_client.get(f"/runs/{eval_run(tmp_path, lineage, old).pk}/").content.decode()
    assert said(page) == [] and 'class="data compact evaluation"' in page
