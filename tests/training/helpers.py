"""Helpers the training tests (and the runs tests that train) share."""
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
