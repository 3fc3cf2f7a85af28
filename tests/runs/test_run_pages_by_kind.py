"""A run's page shows what its kind has: an SFT build its loss from the log and its step count, a trainer every
curve, an evaluation or a comparison no empty curve and no sentence about DPO."""

import pytest

from annotate.runs.models import Run

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
