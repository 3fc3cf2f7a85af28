"""Helpers the training tests (and the runs tests that train) share."""
import json
from pathlib import Path

from tests.conftest import TORCH_THREADS


def write_unlearnable_tasks(path):
    """Missing-information tasks answered in at most four characters: too few to say what is missing ("unknown")
    or to mark an answer ("Answer:"), so every answer of every group is wrong with reward 0, whatever the model."""
    from training.task_families import make_tasks
    from training.tasks import write_tasks

    write_tasks(path, make_tasks("missing", n=6, seed=0))
    return path


def write_snapshot_run_config(tmp_path, checkpoint, snapshot, *, name: str, **overrides):
    """A two-step CPU config of a trainer on a snapshot (dpo, reward) as `name`.yaml; overrides replace keys."""
    import yaml

    config = {
        "base_checkpoint": str(checkpoint),
        "snapshot": str(snapshot),
        "output_dir": str(tmp_path / "run"),
        "learning_rate": 1e-3,
        "max_steps": 2,
        "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 8,
        "logging_steps": 1,
        "torch_threads": TORCH_THREADS,
        "use_cpu": True,
        **overrides,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def load_weights(folder):
    from safetensors.torch import load_file

    return load_file(folder / "model.safetensors")


# The staged, lanes and in-process runs compared bit for bit carry a KL term, so the comparisons also show that every
# update measures it against the run's start (v0000), as in-process GRPO does, not against the version it updates.
COMPARED_BETA = 0.04


def write_grpo_config(tmp_path, checkpoint, tasks, name="grpo", **overrides):
    """A two-step CPU GRPO config (groups of 4, 24-token answers) as `name`.yaml; overrides replace keys."""
    import yaml

    config = {
        "base_checkpoint": str(checkpoint),
        "tasks": str(tasks),
        "output_dir": str(tmp_path / name),
        "max_steps": 2,
        "num_generations": 4,
        "per_device_train_batch_size": 8,
        "max_completion_length": 24,
        "learning_rate": 5e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "use_cpu": True,
        "torch_threads": TORCH_THREADS,
        "verifier_workers": 1,
        "report_to": ["none"],
        "seed": 0,
        **overrides,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def rollout_rows(run: Path) -> list[dict]:
    """Every rollout row of a GRPO run folder."""
    from training.grpo.rollouts import read_rollouts

    return read_rollouts(run).to_pylist()


def records(run: Path, batch: int, name: str = "scored.parquet") -> list[dict]:
    """The answer records a staged run's stage wrote for `batch`."""
    import pyarrow.parquet as pq

    return pq.read_table(run / "batches" / f"{batch:06d}" / name).to_pylist()


def version_record(run: Path, number: int) -> dict:
    """version.json of a staged run's policy version `number`."""
    return json.loads((run / "versions" / f"v{number:04d}" / "version.json").read_text())


def answer_row(task: dict, group: int, member: int, *, completion: str, length: int, score: float, step: int) -> dict:
    """A recorded answer of a GRPO run on a reward model, to an open task (unscored), with its score and step."""
    from tests.runs.helpers import rollout

    row = rollout(group, status="wrong", reward=0.0)  # status and reward as the open task recorded them: unscored
    return {**row, "rollout_id": f"0-{group}-{member}", "group_id": f"0-{group}", "member": member,
            "task_id": task["task_id"], "completion": completion, "length": length, "reward_model_score": score,
            "policy_step": step, "scorer": "none"}
