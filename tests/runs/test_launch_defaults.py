"""The launch form's defaults cannot train on held-out data: it starts on a train task set and on a snapshot with a
test split; held-out task sets are offered for evaluation, not as "Train GRPO on this task set"."""

import re

import pytest

from annotate.exports.models import Export
from annotate.runs.task_sets import task_set_make

pytestmark = pytest.mark.django_db


def selected_option(page: str, select_name: str) -> str:
    """The option shown in the launch form's select (the runs table's filters above it have selects too)."""
    page = page[page.index('id="launch"'):]
    select = re.search(rf'<select name="{select_name}">(.*?)</select>', page, re.S).group(1)
    chosen = re.search(r'<option value="[^"]*" selected>([^<]*)</option>', select)
    first = re.search(r'<option value="[^"]*"[^>]*>([^<]*)</option>', select)
    return (chosen or first).group(1)  # a browser shows the first option when none is selected


@pytest.fixture
def task_sets(db):
    # "arithmetic · heldout" sorts before "speed · train": the form must not start on it for that reason.
    return {"heldout": task_set_make(families=["arithmetic"], variant="heldout", n=3, seed=2,
                                     name="arithmetic · heldout"),
            "train": task_set_make(families=["speed"], variant="train", n=3, seed=1, name="speed · train")}


def test_the_launch_form_starts_on_a_train_set_and_marks_held_out_sets(task_sets, make_user, client):
    client.force_login(make_user("eve", "engineer"))
    page = client.get("/runs/").content.decode()
    assert selected_option(page, "task_set").startswith("speed · train")
    assert "arithmetic · heldout · 3 tasks (arithmetic 3) · heldout (for evaluation)" in page
    # The task sets table: training from the train set, evaluation from the held-out one.
    held_out_row = re.search(rf'<tr id="task-set-{task_sets["heldout"].pk}">.*?</tr>', page, re.S)
    assert held_out_row is not None
    assert "Train GRPO on this task set" not in held_out_row.group(0)
    assert "held out: for evaluation, not training" in held_out_row.group(0)
    assert f"grpo_on_task_set={task_sets['train'].pk}#launch" in page
    assert f"grpo_on_task_set={task_sets['heldout'].pk}" not in page


def test_the_evaluate_form_starts_on_a_held_out_set(task_sets, make_user, client):
    client.force_login(make_user("eve", "engineer"))
    page = client.get("/runs/").content.decode()
    evaluate = page[page.index('id="evaluate"'):]
    select = re.search(r'<select name="task_set">(.*?)</select>', evaluate, re.S).group(1)
    assert re.search(r'<option value="[^"]*"[^>]*>([^<]*)</option>', select).group(1).startswith("arithmetic · heldout")


def test_the_launch_form_starts_on_the_newest_snapshot_with_a_test_split(make_project, tiny_snapshot, make_user,
                                                                         client):
    project = make_project("speed")
    with_test = Export.objects.create(project=project, filters={}, status=Export.Status.DONE,
                                      out_dir=str(tiny_snapshot), counts={"train": 24, "test": 8})
    newer_without = Export.objects.create(project=project, filters={}, status=Export.Status.DONE,
                                          out_dir=str(tiny_snapshot), counts={"train": 32, "test": 0})
    client.force_login(make_user("eve", "engineer"))
    page = client.get("/runs/").content.decode()
    assert selected_option(page, "export").startswith(f"Speed · export {with_test.pk} · 24 train / 8 test rows")
    assert f"export {newer_without.pk} · 32 train / no test split" in page
    # A link that names the export chooses it all the same.
    linked = client.get(f"/runs/?dpo_on_export={newer_without.pk}").content.decode()
    assert selected_option(linked, "export").startswith(f"Speed · export {newer_without.pk}")


def test_runs_and_checkpoints_come_first_and_the_launch_form_opens_when_asked(base_checkpoint, make_user, client):
    from annotate.runs.models import Run

    client.force_login(make_user("eve", "engineer"))
    first_visit = client.get("/runs/").content.decode()
    assert '<details class="card" id="launch" open>' in first_visit  # nothing to come back for yet
    Run.objects.create(kind=Run.Kind.DPO, status=Run.Status.SUCCEEDED, base_checkpoint=base_checkpoint)
    page = client.get("/runs/").content.decode()
    assert page.index('id="runs"') < page.index('id="checkpoints"') < page.index('id="launch"')
    assert '<details class="card" id="launch" >' in page  # closed: the runs are what an engineer came back for
    assert 'href="/runs/?launch=1#launch" id="open-launch">Launch a run</a>' in page
    checkpoints = page[page.index('id="checkpoints"'):page.index('id="launch"')]
    assert ">tiny-sft</a>" in checkpoints and "?launch=1&amp;train_from=tiny-sft#launch" in checkpoints
    asked = client.get("/runs/?launch=1&train_from=tiny-sft").content.decode()
    assert '<details class="card" id="launch" open>' in asked
    assert selected_option(asked, "base_checkpoint") == "tiny-sft"


def test_grpo_on_a_held_out_set_is_refused_unless_asked_for(task_sets, base_checkpoint, engineer_api):
    body = {"kind": "grpo", "base_checkpoint": "tiny-sft", "task_set": task_sets["heldout"].pk,
            "config": {"max_steps": 1}}
    refused = engineer_api.post("/api/v1/runs", body, format="json")
    assert refused.status_code == 400
    assert refused.json()["detail"] == (
        "task set 'arithmetic · heldout' is held out: it is for evaluating checkpoints, and a run trained on it leaves "
        "nothing unseen to judge the run by; pick a train set, or ask for it explicitly (train_on_heldout: true)")
    assert engineer_api.post("/api/v1/runs", {**body, "train_on_heldout": "yes"}, format="json").json() == {
        "detail": "train_on_heldout must be true or false"}
    asked = engineer_api.post("/api/v1/runs", {**body, "train_on_heldout": True}, format="json")
    assert asked.status_code == 202 and asked.json()["status"] == "checking"
    train = engineer_api.post("/api/v1/runs", {**body, "task_set": task_sets["train"].pk}, format="json")
    assert train.status_code == 202
