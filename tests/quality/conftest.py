"""Fixtures of the quality tests: one real reward model per test session (the session's tiny checkpoint of 20 SFT
steps, then 2 reward steps), and a copy of it that cannot tokenize chat prompts."""

import shutil
from pathlib import Path

import pytest

from tests.conftest import TORCH_THREADS


@pytest.fixture(scope="session")
def tiny_reward_model(tmp_path_factory, tiny_checkpoint, tiny_snapshot) -> dict[str, Path]:
    """{"sft": the causal LM it started from, "reward": the reward model's checkpoint folder}."""
    import yaml

    from training.reward import load_reward_config, run_reward

    root = tmp_path_factory.mktemp("reward-model")
    config = {"base_checkpoint": str(tiny_checkpoint), "snapshot": str(tiny_snapshot),
              "output_dir": str(root / "run"), "learning_rate": 1e-3, "max_steps": 2,
              "per_device_train_batch_size": 4, "per_device_eval_batch_size": 8, "logging_steps": 1,
              "torch_threads": TORCH_THREADS, "use_cpu": True, "seed": 0}
    (root / "reward.yaml").write_text(yaml.safe_dump(config))
    run_reward(load_reward_config(root / "reward.yaml"))
    return {"sft": tiny_checkpoint, "reward": root / "run" / "checkpoint"}


@pytest.fixture(scope="session")
def reward_model_without_chat_template(tiny_reward_model, tmp_path_factory) -> Path:
    """The reward model with its chat template removed (and its score head nudged, so its weights are its own):
    it cannot tokenize a project's chat prompts."""
    import json

    from safetensors.torch import load_file, save_file

    folder = tmp_path_factory.mktemp("no-template") / "checkpoint"
    shutil.copytree(tiny_reward_model["reward"], folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    weights = load_file(folder / "model.safetensors")
    weights["score.weight"] = weights["score.weight"] + 0.5
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder
