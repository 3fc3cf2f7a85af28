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
