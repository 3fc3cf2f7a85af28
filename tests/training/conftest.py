"""Fixtures for the training tests: one tiny checkpoint and one synthetic snapshot per test session."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TORCH_THREADS

REPO = Path(__file__).resolve().parents[2]
TEST_SFT_STEPS = 20  # enough for a loadable checkpoint; tests never need it to be good


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    from training.tiny import TinySFTConfig, build_tiny_sft

    out = tmp_path_factory.mktemp("tiny") / "sft"
    build_tiny_sft(out, TinySFTConfig(steps=TEST_SFT_STEPS, warmup_steps=4, eval_tasks=3),
                   log=lambda line: None)
    return out


@pytest.fixture(scope="session")
def tiny_snapshot(tmp_path_factory) -> Path:
    from training.tiny import write_tiny_snapshot

    out = tmp_path_factory.mktemp("snapshots") / "tiny"
    write_tiny_snapshot(out, train=24, test=8, seed=0)
    return out


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
def grpo_checkpoint(tmp_path_factory) -> Path:
    """A tiny checkpoint trained long enough to write answers in the right shape, so that the answers of a
    group differ in reward (the 20-step one of the other tests writes noise: every reward 0, nothing to learn)."""
    from training.tiny import TinySFTConfig, build_tiny_sft

    out = tmp_path_factory.mktemp("tiny") / "sft-60"
    build_tiny_sft(out, TinySFTConfig(steps=60, warmup_steps=10, eval_tasks=2), log=lambda line: None)
    return out


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
    from tests.training.helpers import write_grpo_config

    tmp = tmp_path_factory.mktemp("in-process")
    result = run_training_cli("grpo", "--config", str(write_grpo_config(tmp, grpo_checkpoint, speed_tasks, name="run")))
    assert result.returncode == 0, result.stderr
    return tmp / "run"
