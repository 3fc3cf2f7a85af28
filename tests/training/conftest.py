"""Fixtures for the training tests (the tiny checkpoints and snapshot they share with other tests are in
tests/conftest.py, built once per test run)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TORCH_THREADS

REPO = Path(__file__).resolve().parents[2]


def run_training_cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m training ARGS` in a fresh process, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(TORCH_THREADS), "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-m", "training", *args], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)


def train_reward_model(folder: Path, checkpoint: Path, snapshot: Path, *, steps: int) -> Path:
    """RUN/checkpoint of a reward run of `steps` RewardTrainer steps from `checkpoint` on `snapshot`."""
    from tests.training.helpers import write_snapshot_run_config
    from training.reward import load_reward_config, run_reward

    config = write_snapshot_run_config(folder, checkpoint, snapshot, name="reward", max_steps=steps,
                                       report_to=["none"])
    run_reward(load_reward_config(config))
    return folder / "run" / "checkpoint"


@pytest.fixture(scope="session")
def tiny_reward_model(tmp_path_factory, tiny_checkpoint, tiny_snapshot) -> Path:
    """A reward model from the tiny checkpoint: two steps on the tiny snapshot (a trained classifier, not a good
    judge: the tests need its identity and its scores, not its taste)."""
    return train_reward_model(tmp_path_factory.mktemp("reward-model"), tiny_checkpoint, tiny_snapshot, steps=2)


@pytest.fixture(scope="session")
def speed_tasks(tmp_path_factory) -> Path:
    from training.task_families import make_tasks
    from training.tasks import write_tasks

    path = tmp_path_factory.mktemp("tasks") / "speed.jsonl"
    write_tasks(path, make_tasks("speed", n=12, seed=3))
    return path


@pytest.fixture(scope="session")
def grpo_in_process_run(tmp_path_factory, grpo_checkpoint, speed_tasks) -> Path:
    """Two in-process GRPO steps of tests.training.helpers.write_grpo_config's recipe: what the staged cycle must
    reproduce."""
    from tests.training.helpers import COMPARED_BETA, write_grpo_config

    tmp = tmp_path_factory.mktemp("in-process")
    result = run_training_cli("grpo", "--config", str(write_grpo_config(tmp, grpo_checkpoint, speed_tasks, name="run",
                                                                         beta=COMPARED_BETA)))
    assert result.returncode == 0, result.stderr
    return tmp / "run"
