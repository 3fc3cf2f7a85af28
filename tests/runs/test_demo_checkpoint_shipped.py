"""The demo checkpoint that ships with Pairwise: registered at once by seed_demo, checked byte for byte against its
manifest, and what tiny-sft's recipe makes (the recipe's first steps, taken again from the manifest's config, are
compared with the ones the manifest recorded)."""

import io
import json
import shutil
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from annotate.errors import UserMistake
from annotate.runs.demo_checkpoint import (
    SHIPPED_FOLDER,
    SHIPPED_MANIFEST,
    demo_checkpoint_install,
    demo_checkpoint_queue,
    folder_file_hashes,
    sft_progress,
    shipped_manifest,
)
from annotate.runs.models import Checkpoint
from training.run_folder import checkpoint_content_hash
from training.tiny import TinySFTConfig

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def own_data_folder(own_data_folders):
    return own_data_folders  # where the demo checkpoint's copy and the judged demo's export go, new for each test


def test_the_manifest_names_every_shipped_file_and_the_recipe_of_today():
    manifest = shipped_manifest()
    assert manifest["files"] == folder_file_hashes(SHIPPED_FOLDER)
    assert manifest["content_hash"] == checkpoint_content_hash(SHIPPED_FOLDER)
    # A change to tiny-sft's default recipe must ship new files (manage.py ship_demo_checkpoint).
    assert manifest["config"] == asdict(TinySFTConfig())
    assert json.loads((SHIPPED_FOLDER / "tiny_sft.json").read_text())["config"] == manifest["config"]


def test_seed_demo_registers_the_shipped_checkpoint_at_once(settings):
    out = io.StringIO()
    call_command("seed_demo", "--no-task-sets", stdout=out)
    checkpoint = Checkpoint.objects.get(name="tiny-sft")
    assert checkpoint.content_hash == shipped_manifest()["content_hash"]
    assert f"checkpoint tiny-sft: registered from the shipped files ({checkpoint.content_hash})" in out.getvalue()
    # A copy in the data folder, so nothing a run writes beside its base touches the repository's files.
    assert str(settings.DATA_DIR) in checkpoint.uri and str(SHIPPED_FOLDER) not in checkpoint.uri
    assert folder_file_hashes(Path(checkpoint.uri)) == shipped_manifest()["files"]
    again = io.StringIO()
    call_command("seed_demo", "--no-task-sets", stdout=again)
    assert "checkpoint tiny-sft: registered already" in again.getvalue()
    assert Checkpoint.objects.count() == 1
    # Renamed, it is still the demo's checkpoint: seeding again neither registers nor recopies it.
    Checkpoint.objects.filter(pk=checkpoint.pk).update(name="my-base")
    call_command("seed_demo", "--no-task-sets", stdout=io.StringIO())
    assert list(Checkpoint.objects.values_list("name", flat=True)) == ["my-base"]
    assert folder_file_hashes(Path(checkpoint.uri)) == shipped_manifest()["files"]


def test_a_changed_byte_in_the_shipped_files_is_refused_and_nothing_is_registered(tmp_path, settings):
    tampered = tmp_path / "tiny-sft"
    shutil.copytree(SHIPPED_FOLDER, tampered)
    weights = tampered / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(UserMistake, match=r"differ from their manifest \(model\.safetensors\)"):
        demo_checkpoint_install(source=tampered)
    assert not Checkpoint.objects.exists()
    assert not (settings.DATA_DIR / "demo-checkpoint" / "tiny-sft").exists()


def test_seed_demo_says_in_one_line_when_the_shipped_files_were_changed(tmp_path, monkeypatch):
    tampered = tmp_path / "tiny-sft"
    shutil.copytree(SHIPPED_FOLDER, tampered)
    (tampered / "tokenizer.json").write_text("{}")
    manifest = tmp_path / "tiny-sft.manifest.json"
    shutil.copyfile(SHIPPED_MANIFEST, manifest)
    monkeypatch.setattr("annotate.runs.demo_checkpoint.SHIPPED_FOLDER", tampered)
    monkeypatch.setattr("annotate.runs.demo_checkpoint.SHIPPED_MANIFEST", manifest)
    with pytest.raises(CommandError, match=r"^demo checkpoint: .*\(tokenizer\.json\); restore them"):
        call_command("seed_demo", "--no-task-sets", stdout=io.StringIO())
    assert not Checkpoint.objects.exists()


def test_a_build_under_way_shows_its_minutes_left_and_the_launch_waits(client, make_user):
    run = demo_checkpoint_queue(enqueue=False)
    run.started_at = timezone.now() - timedelta(minutes=2)
    run.log_tail = "tiny-sft: 979,200 parameters, 320 steps of 32 fresh problems\nstep   32/320  loss 0.840\n"
    run.status = "running"
    run.save(update_fields=["started_at", "log_tail", "status"])
    assert sft_progress(run)["minutes_left"] == 18  # 2 minutes for 32 steps: 18 more for the other 288
    client.force_login(make_user("engineer", role="engineer"))
    page = client.get("/runs/").content.decode()
    assert "Building the demo checkpoint tiny-sft" in page
    assert 'about <span id="sft-minutes-left">18</span> minutes left' in page
    assert "Launch (waits for tiny-sft: 10%)" in page


def test_with_no_checkpoint_the_build_form_says_how_long_a_build_takes(client, make_user):
    client.force_login(make_user("engineer", role="engineer"))
    page = client.get("/runs/").content.decode()
    built = shipped_manifest()["built_with"]
    per_step = round(built["train_s"] / 320, 1)
    assert f"the shipped one took {per_step} s a step on\n      {built['processor']}, so about" in page


def test_the_recipe_of_today_takes_the_shipped_checkpoints_first_steps(tmp_path):
    """tiny-sft's recipe, from the manifest's own config, takes the first steps the shipped build took: the same
    tokenizer and model config byte for byte, and the losses the manifest recorded for those steps (the same seed,
    model, problems and schedule), within float rounding between processors and thread counts. A change to the
    recipe shows here in seconds, not after the full build's hour (which `manage.py ship_demo_checkpoint` runs when
    the recipe changes on purpose)."""
    from training.tiny import tiny_sft_first_steps

    manifest = shipped_manifest()
    first = tmp_path / "first-steps"
    losses = tiny_sft_first_steps(first, TinySFTConfig(**manifest["config"]), steps=manifest["first_losses"]["steps"])
    found = folder_file_hashes(first)
    assert found.keys() == manifest["files"].keys()
    for name in found.keys() - {"model.safetensors", "tiny_sft.json", "tokenizer.json"}:
        assert found[name] == manifest["files"][name], name
    # The full build's held-out evaluation pads batches, and the tokenizers backend saves that padding state with the
    # vocabulary; everything else in tokenizer.json is the same.
    taken, shipped = (json.loads((folder / "tokenizer.json").read_text()) for folder in (first, SHIPPED_FOLDER))
    assert {**taken, "padding": None} == {**shipped, "padding": None}
    assert losses == pytest.approx(manifest["first_losses"]["losses"], abs=1e-3)
    # Another recipe takes other steps: a changed learning rate moves the losses far past that tolerance.
    other = tiny_sft_first_steps(tmp_path / "other", TinySFTConfig(**{**manifest["config"], "learning_rate": 0.004}),
                                 steps=manifest["first_losses"]["steps"])
    assert max(abs(a - b) for a, b in zip(other, manifest["first_losses"]["losses"], strict=True)) > 0.01
