"""manage.py register_checkpoint and register_run: existing checkpoints and run folders become rows with
their lineage, and a checkpoint's origin is written once (the admin cannot change it either); bad input is one
line and a non-zero exit."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError

from annotate.runs.models import Checkpoint, Run
from tests.runs.helpers import finished_run_folder, register
from training.run_folder import checkpoint_content_hash

pytestmark = pytest.mark.django_db
REPO = Path(__file__).resolve().parents[2]


def test_register_checkpoint_hashes_the_folder_and_refuses_the_same_weights_twice(tiny_checkpoint, tmp_path):
    said = register("register_checkpoint", str(tiny_checkpoint), "--name", "sft")
    sft = Checkpoint.objects.get(name="sft")
    assert sft.content_hash == checkpoint_content_hash(tiny_checkpoint) and sft.content_hash in said
    with pytest.raises(CommandError, match=r"holds the same weights as checkpoint 'sft'"):
        register("register_checkpoint", str(tiny_checkpoint), "--name", "again")
    remote = register("register_checkpoint", "s3://models/sft-7b", "--parent", "sft", "--hash", "sha256:abc")
    assert "parent sft" in remote and Checkpoint.objects.get(uri="s3://models/sft-7b").parent == sft
    with pytest.raises(CommandError, match=r"^.*/nowhere is not a folder; give a local checkpoint folder or a URI"):
        register("register_checkpoint", str(tmp_path / "nowhere"))
    with pytest.raises(CommandError, match=r"--parent 'nope' is not a registered checkpoint \(registered: "):
        register("register_checkpoint", "s3://models/other", "--parent", "nope")


def test_register_run_brings_in_a_finished_folder_with_its_base_and_output_checkpoints(tiny_checkpoint,
                                                                                       tiny_snapshot, tmp_path):
    folder = finished_run_folder(tmp_path, tiny_checkpoint, tiny_snapshot)
    said = register("register_run", str(folder))
    run = Run.objects.get()
    assert run.kind == "dpo" and run.status == "succeeded" and [row["step"] for row in run.metrics] == [1, 2]
    assert run.ledger["consumed"]["optimizer_steps"] == 2
    assert run.snapshot_manifest["snapshot_id"].startswith("snap-") and run.started_at.hour == 10
    made = run.made_checkpoint
    assert made.parent == run.base_checkpoint and run.base_checkpoint.uri == str(tiny_checkpoint)
    assert f"checkpoint {made.name} from {run.base_checkpoint.name}" in said
    with pytest.raises(CommandError, match=r"is registered already as run"):
        register("register_run", str(folder))


def test_a_run_folder_whose_output_is_its_base_registers_no_checkpoint_and_leaves_the_base_as_it_was(
        tiny_checkpoint, tiny_snapshot, tmp_path):
    # A run.json from before weights_changed was recorded: a warmup held the learning rate at 0 throughout.
    folder = finished_run_folder(tmp_path, tiny_checkpoint, tiny_snapshot, learning_rate=0.0,
                                 weights=(tiny_checkpoint / "model.safetensors").read_bytes())
    said = register("register_run", str(folder))
    run = Run.objects.get()
    sft = Checkpoint.objects.get()
    assert run.status == "succeeded" and run.made_checkpoint is None and run.base_checkpoint == sft
    assert (sft.run_id, sft.parent_id, sft.uri) == (None, None, str(tiny_checkpoint))
    assert said.strip().endswith(
        "; no checkpoint made: its weights did not change: the learning rate was 0 at every logged step (a warmup "
        "longer than the run, or a schedule that ends at 0)")


def test_a_run_folder_whose_output_is_registered_already_leaves_that_checkpoints_origin_alone(
        tiny_checkpoint, tiny_snapshot, tmp_path):
    register("register_checkpoint", str(tiny_checkpoint), "--name", "sft")
    folder = finished_run_folder(tmp_path, tiny_checkpoint, tiny_snapshot)
    register("register_checkpoint", str(folder / "checkpoint"), "--name", "by-hand")  # parent from parent.json
    said = register("register_run", str(folder))
    by_hand = Checkpoint.objects.get(name="by-hand")
    assert (by_hand.parent.name, by_hand.run_id) == ("sft", None) and Run.objects.get().made_checkpoint is None
    assert "its output holds the same weights as checkpoint 'by-hand', registered already" in said


def test_register_checkpoint_never_rewrites_an_origin_and_refuses_a_copy_of_known_weights(tiny_checkpoint,
                                                                                         tiny_snapshot, tmp_path):
    register("register_checkpoint", str(tiny_checkpoint), "--name", "sft")
    register("register_checkpoint", "s3://models/sft-7b", "--hash", "sha256:abc")
    with pytest.raises(CommandError, match=r"^.*sft holds the same weights as checkpoint 'sft' \(.*\); it is "
                                           r"registered already, and a checkpoint's origin is written once: its "
                                           r"parent stays none$"):
        register("register_checkpoint", str(tiny_checkpoint), "--parent", "sft-7b")
    with pytest.raises(CommandError, match=r"^s3://models/copy holds the same weights as checkpoint 'sft' "):
        register("register_checkpoint", "s3://models/copy", "--hash", checkpoint_content_hash(tiny_checkpoint))
    with pytest.raises(CommandError, match=r"^s3://models/sft-7b is registered already as checkpoint 'sft-7b'$"):
        register("register_checkpoint", "s3://models/sft-7b", "--name", "again")
    # A run that changed nothing left a checkpoint/ with its parent's very weights: not a model of its own.
    unchanged = finished_run_folder(tmp_path, tiny_checkpoint, tiny_snapshot,
                                    weights=(tiny_checkpoint / "model.safetensors").read_bytes()) / "checkpoint"
    Checkpoint.objects.filter(name="sft").delete()
    parent = re.escape(str(tiny_checkpoint))
    with pytest.raises(CommandError, match=rf"^.*/checkpoint holds the very weights of its parent {parent} \(its "
                                           r"parent.json says so: the run that wrote it changed no weight\); "
                                           rf"register {parent} itself$"):
        register("register_checkpoint", str(unchanged))
    assert sorted(Checkpoint.objects.values_list("name", "parent")) == [("sft-7b", None)]


def test_the_admin_cannot_change_a_checkpoints_origin(tiny_checkpoint, client, django_user_model):
    sft = Checkpoint.objects.create(name="sft", uri=str(tiny_checkpoint), content_hash="sha256:sft")
    other = Checkpoint.objects.create(name="other", uri="s3://models/other", content_hash="sha256:other")
    client.force_login(django_user_model.objects.create_superuser("root", password="a-long-test-password"))
    page = client.get(f"/admin/runs/checkpoint/{sft.pk}/change/").content.decode()
    assert 'name="parent"' not in page and 'name="run"' not in page
    client.post(f"/admin/runs/checkpoint/{sft.pk}/change/", {"name": "sft", "uri": sft.uri, "content_hash": "sha256:sft",
                                                              "parent": other.pk})
    sft.refresh_from_db()
    assert sft.parent_id is None
    sft.parent = other
    with pytest.raises(ValueError, match=r"checkpoint 'sft': its origin \(parent_id\) is written once"):
        sft.save()


def test_register_run_refuses_a_folder_that_is_not_a_finished_run(tiny_checkpoint, tiny_snapshot, tmp_path):
    with pytest.raises(CommandError, match=r"has no readable run.json; give the output_dir of a python -m training"):
        register("register_run", str(tmp_path))
    running = finished_run_folder(tmp_path, tiny_checkpoint, tiny_snapshot, status="running")
    with pytest.raises(CommandError, match=r"is still 'running' according to its run.json; register it once"):
        register("register_run", str(running))
    assert not Run.objects.exists()


def test_a_bad_command_line_is_one_line_on_stderr_and_a_non_zero_exit(tmp_path):
    done = subprocess.run([sys.executable, "manage.py", "register_run", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"CommandError: {tmp_path} has no readable run.json; give the output_dir of a python -m training dpo or "
        "grpo run"]
