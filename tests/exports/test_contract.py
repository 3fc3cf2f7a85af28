"""The contract: a real export goes through training.snapshot.load, TRL's DPOTrainer and its RewardTrainer (margins
from meta.strength) unchanged."""

import io
import json

import pytest
import yaml
from django.core.management import call_command

from tests.conftest import TORCH_THREADS
from training import snapshot
from training.cli import main as training_main

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_an_exported_snapshot_trains_two_dpo_steps_on_the_tiny_model(voted_project, tmp_path, tiny_checkpoint):
    from safetensors.torch import load_file

    out = tmp_path / "snapshot"
    call_command("export_snapshot", "voted", "--out", str(out), "--test-ratio", "0.3", stdout=io.StringIO(),
                 stderr=io.StringIO())
    data = snapshot.load(out)
    assert set(data) == {"train", "test"} and len(data["train"]) >= 4 and len(data["test"]) >= 1
    assert data["train"][0]["chosen"][0]["role"] == "assistant"

    config = tmp_path / "dpo.yaml"
    config.write_text(yaml.safe_dump({
        "base_checkpoint": str(tiny_checkpoint), "snapshot": str(out), "output_dir": str(tmp_path / "run"),
        "learning_rate": 1e-3, "max_steps": 2, "per_device_train_batch_size": 4, "per_device_eval_batch_size": 8,
        "logging_steps": 1, "torch_threads": TORCH_THREADS, "use_cpu": True, "report_to": ["none"],
    }))
    assert training_main(["dpo", "--config", str(config)]) == 0

    run = json.loads((tmp_path / "run" / "run.json").read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    assert run["status"] == "completed" and run["steps"] == 2
    assert run["snapshot"]["snapshot_id"] == manifest["snapshot_id"]
    before, after = load_file(tiny_checkpoint / "model.safetensors"), load_file(tmp_path / "run" / "checkpoint" / "model.safetensors")
    assert any(not before[name].equal(after[name]) for name in before)


def test_an_exported_snapshot_trains_a_reward_model_with_margins_from_strength(voted_project, tmp_path,
                                                                                tiny_checkpoint):
    out = tmp_path / "snapshot"
    call_command("export_snapshot", "voted", "--out", str(out), "--test-ratio", "0.3", stdout=io.StringIO(),
                 stderr=io.StringIO())
    assert {row["meta"]["strength"] for row in snapshot.iter_rows(out, "train")} == {2.0}  # every vote said 2

    config = tmp_path / "reward.yaml"
    config.write_text(yaml.safe_dump({
        "base_checkpoint": str(tiny_checkpoint), "snapshot": str(out), "output_dir": str(tmp_path / "run"),
        "learning_rate": 1e-3, "max_steps": 1, "per_device_train_batch_size": 4, "per_device_eval_batch_size": 8,
        "logging_steps": 1, "torch_threads": TORCH_THREADS, "use_cpu": True, "report_to": ["none"],
        "margin_from_strength": True, "margin_per_strength": 0.5,
    }))
    assert training_main(["reward", "--config", str(config)]) == 0

    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["status"] == "completed" and run["config"]["margin_from_strength"] is True
