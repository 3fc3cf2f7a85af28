"""A run's page shows what its kind has: an SFT build its loss from the log and its step count, a trainer every
curve, an evaluation or a comparison no empty curve and no sentence about DPO; no empty lineage item or log box."""

import html
import re
import shutil

import pytest

from annotate.runs.evaluation import eval_command_args, eval_result
from annotate.runs.models import Run
from training.cli import main as training_main
from training.task_families import make_tasks
from training.tasks import write_tasks

pytestmark = pytest.mark.django_db

SFT_LOG = ("tiny-sft: 979,200 parameters, 320 steps of 32 fresh problems\nstep    1/320  loss 4.595\n"
           "step   32/320  loss 0.840\nstep   64/320  loss 0.602\n")


def page_of(client, make_user, run: Run) -> str:
    client.force_login(make_user("eve", "engineer"))
    return client.get(f"/runs/{run.pk}/").content.decode()


def test_an_sft_build_draws_its_loss_from_its_log_and_counts_its_steps(client, make_user):
    run = Run.objects.create(kind=Run.Kind.SFT, status=Run.Status.RUNNING, log_tail=SFT_LOG,
                             config={"recipe": "tiny-sft", "steps": 320, "seed": 0, "name": "tiny-sft"})
    page = page_of(client, make_user, run)
    assert 'id="chart-loss"' in page and "<polyline" in page.split('id="chart-loss"')[1].split("</figure>")[0]
    assert "no training step logged yet" not in page
    assert 'id="chart-reward"' not in page and 'id="chart-kl"' not in page
    assert 'id="eval"' not in page  # an SFT build has no held-out pairs
    assert client.get(f"/api/v1/runs/{run.pk}").json()["steps"] == 64


@pytest.mark.parametrize("kind", [Run.Kind.EVAL, Run.Kind.SAMPLE])
def test_an_evaluation_or_a_comparison_shows_no_curve_and_no_dpo_sentence(kind, client, make_user):
    run = Run.objects.create(kind=kind, status=Run.Status.RUNNING)
    page = page_of(client, make_user, run)
    assert 'id="curves"' not in page
    assert "DPO" not in page.split('id="log"')[0] if 'id="log"' in page else "DPO" not in page


def test_a_grpo_run_says_how_it_is_judged_on_held_out_tasks(client, make_user):
    run = Run.objects.create(kind=Run.Kind.GRPO, status=Run.Status.RUNNING)
    page = page_of(client, make_user, run)
    assert 'id="chart-zero_variance"' in page and 'id="chart-reward"' in page
    assert "evaluate its parent and its checkpoint side by side on a held-out task set" in page


def dpo_with_change(*, real: bool, pairs: int = 45) -> Run:
    change = {"pairs": pairs, "real": real,
              "preference_accuracy": {"difference": 0.111 if real else 0.022, "gained": 6 if real else 2, "lost": 1,
                                      "interval": [0.01, 0.21] if real else [-0.05, 0.09], "p_value": 0.06},
              "log_likelihood_margin": {"mean_change": 0.8 if real else 0.01, "confidence": 0.975,
                                        "interval": [0.3, 1.3] if real else [-0.2, 0.22]}}
    base = {"pairs": pairs, "preference_accuracy": 0.5, "reward_accuracy": None, "reward_margin": 0.0}
    trained = {"pairs": pairs, "preference_accuracy": 0.6, "reward_accuracy": 0.6, "reward_margin": 0.1}
    return Run.objects.create(kind=Run.Kind.DPO, status=Run.Status.SUCCEEDED, record={
        "status": "completed", "results": {"test": {"base": base, "trained": trained, "change": change}}})


def test_a_dpo_run_says_whether_it_changed_beyond_chance_or_was_too_short_to_show_it(client, make_user):
    page = page_of(client, make_user, dpo_with_change(real=True))
    assert ("Against its base on 45 held-out pairs: preference accuracy +0.111 (6 pairs gained, 1 lost; McNemar&#x27;s "
            "exact p 0.06), log-likelihood margin +0.800 (97.5% interval +0.300 to +1.300). That is a change "
            "beyond chance.") in page
    short = page_of(client, make_user, dpo_with_change(real=False))
    assert "Neither test shows a change: this run was too short, or its test split too small, to show one." in short
    assert 'id="test-change"' not in page_of(client, make_user, dpo_with_change(real=True, pairs=6))  # too few


def lineage_items(page: str) -> list[str]:
    """The lineage list's items as a reader sees them, one string each."""
    listed = page.split('<ol class="lineage">')[1].split("</ol>")[0]
    return [" ".join(html.unescape(re.sub(r"<[^>]+>", "", item)).split())
            for item in re.findall(r"<li\b[^>]*>(.*?)</li>", listed, re.S)]


def test_an_sft_builds_lineage_starts_at_its_base_with_no_empty_item(client, make_user, tiny_checkpoint, tmp_path):
    folder = tmp_path / "sft-run"
    shutil.copytree(tiny_checkpoint, folder / "checkpoint")
    run = Run.objects.create(kind=Run.Kind.SFT, status=Run.Status.SUCCEEDED, folder=str(folder), log_tail=SFT_LOG,
                             config={"recipe": "tiny-sft", "steps": 320, "seed": 0, "name": "tiny-sft"})
    items = lineage_items(page_of(client, make_user, run))
    assert items[0] == "Base checkpoint —" and items[1] == "This run (sft)"  # nothing to train on: no input item
    assert all(items)


def evaluation_run(tmp_path, tiny_checkpoint, **fields) -> Run:
    """An evaluation of the tiny checkpoint on two speed tasks, its folder written by `python -m training eval`
    as the worker runs it, recorded as the worker records an evaluation that ended."""
    tasks = tmp_path / "speed.jsonl"
    write_tasks(tasks, make_tasks("speed", n=2, seed=0))
    run = Run.objects.create(kind=Run.Kind.EVAL, status=Run.Status.SUCCEEDED, folder=str(tmp_path / "eval-run"),
                             config={"checkpoints": [{"id": 1, "name": "tiny", "path": str(tiny_checkpoint)}],
                                     "tasks": str(tasks), "samples": 1, "temperature": 1.0, "max_new_tokens": 8,
                                     "seed": 0}, **fields)
    assert training_main(eval_command_args(run)) == 0
    run.record = {"eval": eval_result(run)}
    run.save()
    return run


def test_a_finished_evaluation_that_logged_nothing_shows_no_log_box_and_one_that_logged_shows_its_log(
        client, make_user, tiny_checkpoint, tmp_path):
    quiet = evaluation_run(tmp_path / "quiet", tiny_checkpoint)
    page = page_of(client, make_user, quiet)
    assert 'id="evaluated"' in page and 'id="log"' not in page and "No log yet" not in page
    logged = evaluation_run(tmp_path / "logged", tiny_checkpoint, log_tail="eval: 2 tasks x 1 sample, 1 checkpoint")
    log = page_of(client, make_user, logged).split('id="log"')[1].split("</section>")[0]
    assert "eval: 2 tasks x 1 sample, 1 checkpoint</pre>" in log and "No log yet" not in log


@pytest.mark.parametrize("kind", [Run.Kind.EVAL, Run.Kind.SAMPLE])
def test_a_run_under_way_that_has_logged_nothing_says_no_log_yet_in_one_line(kind, client, make_user, tmp_path):
    (tmp_path / "run").mkdir()
    run = Run.objects.create(kind=kind, status=Run.Status.RUNNING, folder=str(tmp_path / "run"))
    log = page_of(client, make_user, run).split('id="log"')[1].split("</section>")[0]
    assert re.findall(r"<p[^>]*>(.*?)</p>", log) == ["No log yet."]
    assert '<pre class="code log" id="log-tail"></pre>' in log  # kept empty (and hidden) for the page's refresh to fill
