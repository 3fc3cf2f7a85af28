"""Answer audit: answers a GRPO run rewarded in full (or a reward model scored highest) go to reviewers alone and
blind; the run page shows the share with broken reasoning with its interval, per checkpoint, and whether reviewers
agree."""

import json
from pathlib import Path

import pytest

from annotate.runs.audit import audit_create, audit_next, audit_results
from annotate.runs.models import AuditItem, Run
from tests.runs.helpers import rollout
from training.grpo.rollouts import write_batch

pytestmark = pytest.mark.django_db


def test_only_fully_rewarded_answers_are_sampled_the_same_whatever_the_file_order(grpo_run, tmp_path):
    batch = audit_create(run=grpo_run, size=5, overlap=2, seed=3)
    chosen = sorted(batch.items.values_list("rollout_id", flat=True))
    assert len(chosen) == 5 and batch.checkpoint.name == "tiny-grpo"
    assert all(item.reward == 1.0 for item in batch.items.all())
    assert batch.items.first().prompt.startswith("A car goes")  # the user's words, not the JSON

    reordered = tmp_path / "reordered"  # the same rollouts, listed in another order
    write_batch(reordered / "rollouts", 0, 0, [rollout(i, status="correct", reward=1.0) for i in range(12)])
    again = Run.objects.create(kind="grpo", status="succeeded", folder=str(reordered))
    assert sorted(audit_create(run=again, size=5, overlap=2, seed=3).items.values_list("rollout_id", flat=True)) \
        == chosen


def test_reviewers_judge_alone_and_blind_with_a_rationale_and_overlap_holds(grpo_run, make_user, client_for):
    audit_create(run=grpo_run, size=2, overlap=2)
    ann, bob, cat = (client_for(make_user(name)) for name in ("ann", "bob", "cat"))
    served = ann.get("/api/v1/audits/next")
    body = served.json()
    assert served.status_code == 200 and set(body) == {"id", "prompt", "answer", "token"}
    assert not {"tiny-grpo", "tiny-sft", "0-"} & {word[:9] for word in json.dumps(body).split()}
    cat_served = cat.get("/api/v1/audits/next").json()  # the same answer, served to cat before the others judge it
    assert cat_served["id"] == body["id"]
    refused = ann.post(f"/api/v1/audits/{body['id']}/judgment", {"verdict": "no", "rationale": "",
                                                                 "token": body["token"]}, format="json")
    assert (refused.status_code, refused.json()) == (400, {"detail": "rationale is required: say in at least 10 "
                                                                     "characters why the reasoning holds or where "
                                                                     "it breaks"})
    reason = "It divides by the wrong time, then fixes the number."
    assert ann.post(f"/api/v1/audits/{body['id']}/judgment", {"verdict": "no", "rationale": reason,
                                                              "token": body["token"]}, format="json").status_code == 201
    bob_served = bob.get("/api/v1/audits/next").json()
    assert bob_served["id"] == body["id"]  # the fullest answer first
    assert bob.post(f"/api/v1/audits/{body['id']}/judgment", {"verdict": "no", "rationale": reason,
                                                              "token": bob_served["token"]},
                    format="json").status_code == 201
    assert cat.get("/api/v1/audits/next").json()["id"] != body["id"]  # it has its two verdicts
    full = cat.post(f"/api/v1/audits/{body['id']}/judgment", {"verdict": "yes", "rationale": reason,
                                                              "token": cat_served["token"]}, format="json")
    assert full.status_code == 409
    engineer = client_for(make_user("eve", "engineer"))
    assert engineer.get("/api/v1/audits/next").status_code == 403


def test_the_run_page_shows_the_broken_share_with_its_interval_and_agreement(grpo_run, make_user, client):
    batch = audit_create(run=grpo_run, size=10, overlap=2)
    reviewers = [make_user("ann"), make_user("bob")]
    reason = "Checked every step against the question."
    for index, item in enumerate(AuditItem.objects.filter(batch=batch).order_by("id")):
        verdicts = ["no", "no"] if index < 3 else ["yes", "yes"] if index < 9 else ["yes", "no"]
        for reviewer, verdict in zip(reviewers, verdicts, strict=True):
            item.judgments.create(reviewer=reviewer, verdict=verdict, rationale=reason)

    [row] = audit_results(run=grpo_run)
    assert (row["checkpoint"], row["answers"], row["decided"], row["broken"]) == ("tiny-grpo", 10, 9, 3)
    assert row["broken_share"] == pytest.approx(1 / 3)
    low, high = row["broken_ci"]
    assert 0.1 < low < 1 / 3 < high < 0.7  # Wilson, 3 of 9
    assert 0.7 < row["alpha"] < 1  # nine answers agreed on, one split
    assert audit_next(reviewer=reviewers[0]) is None

    client.force_login(make_user("eve", "engineer"))
    page = client.get(f"/runs/{grpo_run.pk}/").content.decode()
    table = page.split('id="audit-results"')[1].split("</table>")[0]
    assert "tiny-grpo" in table and "3 (33%)" in table and f"{low:.2f} to {high:.2f}" in table
    checkpoint_page = client.get(f"/checkpoints/{grpo_run.made_checkpoint.pk}/").content.decode()
    assert "3 (33%)" in checkpoint_page


def test_the_run_page_splits_the_audit_by_the_step_that_wrote_each_answer(grpo_run, make_user, client):
    """Broken reasoning that rises with the step shows where the run learned to earn reward without being right."""
    batch = audit_create(run=grpo_run, size=12, overlap=2)
    reviewers = [make_user("ann"), make_user("bob")]
    reason = "Checked every step against the question."
    items = list(AuditItem.objects.filter(batch=batch))
    assert sorted({item.policy_step for item in items}) == [0, 1, 2]  # the fixture's answers, four per step
    for item in items:
        # step 0 all sound; step 1 one answer of four broken; step 2 every answer broken
        broken = item.policy_step == 2 or (item.policy_step == 1 and item.rollout_id == min(
            i.rollout_id for i in items if i.policy_step == 1))
        for reviewer in reviewers:
            item.judgments.create(reviewer=reviewer, verdict="no" if broken else "yes", rationale=reason)

    [row] = audit_results(run=grpo_run)
    assert [(w["steps"], w["answers"], w["decided"], w["broken"]) for w in row["by_steps"]] == [
        ([0, 0], 4, 4, 0), ([1, 1], 4, 4, 1), ([2, 2], 4, 4, 4)]
    assert row["broken"] == 5 == sum(w["broken"] for w in row["by_steps"])

    client.force_login(make_user("eve", "engineer"))
    page = client.get(f"/runs/{grpo_run.pk}/").content.decode()
    table = page.split('id="audit-by-steps-1"')[1].split("</table>")[0]
    assert [cells.split("</td>")[0] for cells in table.split("<tr><td>")[1:]] == ["0–0", "1–1", "2–2"]
    assert "4 (100%)" in table and "1 (25%)" in table and "register_checkpoint" in page


def test_an_audit_spread_over_steps_draws_from_each_windows_own_top_answers(base_checkpoint, make_user, client_for,
                                                                           tmp_path):
    """A reward model's scores rise as the run learns to please it: the run's top tenth is all late answers, so an
    audit by step needs each window's own most rewarded answers."""
    identity = "reward_model@sha256:" + "cd" * 32
    rows = [{**rollout(step * 10 + i, status="unverified", reward=None), "scorer": "none", "policy_step": step,
             "reward_model_score": step + i / 100, "reward_model": identity} for step in range(4) for i in range(10)]
    write_batch(tmp_path / "rollouts", 0, 0, rows)
    run = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base_checkpoint, folder=str(tmp_path))
    engineer = client_for(make_user("eve", "engineer"))

    whole_run = engineer.post(f"/api/v1/runs/{run.pk}/audits", {"size": 8}, format="json")
    assert whole_run.status_code == 201 and whole_run.json()["spread_over_steps"] is False
    assert set(AuditItem.objects.filter(batch_id=whole_run.json()["id"]).values_list("policy_step", flat=True)) == {3}

    spread = engineer.post(f"/api/v1/runs/{run.pk}/audits", {"size": 8, "spread_over_steps": True}, format="json")
    assert spread.status_code == 201 and spread.json()["spread_over_steps"] is True
    items = AuditItem.objects.filter(batch_id=spread.json()["id"])
    # Each window of one step holds 10 answers, whose top tenth is one: one answer per step, the best of each.
    assert sorted(items.values_list("policy_step", "reward")) == [(0, 0.09), (1, 1.09), (2, 2.09), (3, 3.09)]

    refused = engineer.post(f"/api/v1/runs/{run.pk}/audits", {"size": 8, "spread_over_steps": "often"}, format="json")
    assert (refused.status_code, refused.json()["detail"]) == (400, "spread_over_steps: Must be a valid boolean.")


def test_an_audit_needs_a_grpo_run_with_rewarded_answers(base_checkpoint, make_user, client_for, tmp_path):
    engineer = client_for(make_user("eve", "engineer"))
    dpo = Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=base_checkpoint, folder=str(tmp_path))
    refused = engineer.post(f"/api/v1/runs/{dpo.pk}/audits", {"size": 5}, format="json")
    assert (refused.status_code, refused.json()["detail"]) == (
        400, f"run {dpo.pk} is a dpo run; an answer audit samples a GRPO run's rollouts")
    empty = Run.objects.create(kind="grpo", status="succeeded", folder=str(Path(tmp_path) / "none"))
    refused = engineer.post(f"/api/v1/runs/{empty.pk}/audits", {"size": 5}, format="json")
    assert refused.status_code == 400 and "has no answer with the full reward" in refused.json()["detail"]


def test_a_reward_models_highest_scored_open_answers_are_audited_too(base_checkpoint, tmp_path):
    """Open answers have no verifier: the top tenth by the reward model's score stands for the full reward, ties at
    the cut included, whatever order the files list them in."""
    identity = "reward_model@sha256:" + "ab" * 32
    scores = [i / 10 for i in range(20)] + [1.8]  # the cut (the 2nd highest of 21) is 1.8: three answers reach it
    rows = [{**rollout(100 + i, status="unverified", reward=None), "scorer": "none", "reward_model_score": score,
             "reward_model": identity} for i, score in enumerate(scores)]
    rows += [rollout(i, status="correct", reward=1.0) for i in range(2)]
    picked = {}
    for order, name in ((rows, "forward"), (rows[::-1], "reversed")):
        write_batch(tmp_path / name / "rollouts", 0, 0, order)
        run = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base_checkpoint,
                                 folder=str(tmp_path / name))
        batch = audit_create(run=run, size=50, overlap=2, seed=1)
        picked[name] = sorted(batch.items.values_list("rollout_id", "reward", "scorer"))
    assert picked["forward"] == picked["reversed"]
    open_items = [item for item in picked["forward"] if item[2] == identity]
    assert sorted(round(reward, 6) for _, reward, _ in open_items) == [1.8, 1.8, 1.9]
    assert len(picked["forward"]) == 5  # and the two the verifier rewarded in full
