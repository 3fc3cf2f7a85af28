"""Launch again keeps a GRPO run's explicit ask to train on a held-out task set: the form it opens has the box
ticked, and submitting it as shown records the run again; a run on a train set opens the form with the box clear."""

import re

import pytest

from annotate.runs.models import Run
from annotate.runs.task_sets import task_set_make

pytestmark = pytest.mark.django_db

CONFIG = "max_steps: 1\nnum_generations: 2\nper_device_train_batch_size: 2\n"


def heldout_box_ticked(page: str) -> bool:
    box = re.search(r'<input type="checkbox" name="train_on_heldout"[^>]*>', page)
    assert box is not None, "the launch form has no train_on_heldout box"
    return " checked" in box.group(0)


def selected(page: str, name: str) -> str:
    launch = page[page.index('id="launch"'):]
    select = re.search(rf'<select name="{name}">(.*?)</select>', launch, re.S).group(1)
    return re.search(r'<option value="([^"]*)" selected>', select).group(1)


@pytest.fixture
def task_sets(db):
    return {"heldout": task_set_make(families=["arithmetic"], variant="heldout", n=3, seed=2,
                                     name="arithmetic · heldout"),
            "train": task_set_make(families=["speed"], variant="train", n=3, seed=1, name="speed · train")}


def launched(api, task_set, **asked) -> Run:
    answer = api.post("/api/v1/runs", {"kind": "grpo", "base_checkpoint": "tiny-sft", "task_set": task_set.pk,
                                       "config": CONFIG, **asked}, format="json")
    assert answer.status_code == 202, answer.json()
    return Run.objects.get(pk=answer.json()["id"])


def test_launching_again_a_run_trained_on_a_held_out_set_keeps_its_ask(task_sets, base_checkpoint, engineer_api,
                                                                       make_user, client):
    run = launched(engineer_api, task_sets["heldout"], train_on_heldout=True)
    client.force_login(make_user("ed", "engineer"))
    page = client.get(f"/runs/?again={run.pk}").content.decode()
    assert heldout_box_ticked(page)
    assert selected(page, "task_set") == str(task_sets["heldout"].pk)

    # Submitted as shown, the form records the run again on the same held-out set, not refused.
    form = {"kind": "grpo", "base_checkpoint": selected(page, "base_checkpoint"), "backend": "local",
            "task_set": selected(page, "task_set"), "reward_model": "", "export": "", "config": CONFIG,
            "train_on_heldout": "on"}
    answer = client.post("/runs/", form)
    assert answer.status_code == 302, re.findall(r'id="launch-error">([^<]*)', answer.content.decode())
    again = Run.objects.exclude(pk=run.pk).get()
    assert again.task_set == task_sets["heldout"] and answer["Location"] == f"/runs/{again.pk}/"

    # A launch refused for another reason keeps the box as it was sent.
    refused = client.post("/runs/", {**form, "base_checkpoint": "no-such-checkpoint"}).content.decode()
    assert 'id="launch-error"' in refused and heldout_box_ticked(refused)


def test_launching_again_a_run_on_a_train_set_leaves_the_box_clear(task_sets, base_checkpoint, engineer_api,
                                                                   make_user, client):
    run = launched(engineer_api, task_sets["train"])
    client.force_login(make_user("ed", "engineer"))
    page = client.get(f"/runs/?again={run.pk}").content.decode()
    assert selected(page, "task_set") == str(task_sets["train"].pk)
    assert not heldout_box_ticked(page)
    assert not heldout_box_ticked(client.get("/runs/?launch=1").content.decode())  # nor a fresh form
