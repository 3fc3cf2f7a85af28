"""The command line and environment of a `python -m training` subprocess, for every part of the app that starts
one: a launch's config check, the worker running a run, a task set's description and a model reviewer's scoring.
Only settings and the standard library, so any of them may import it."""

import os
import sys

from django.conf import settings


def training_env() -> dict[str, str]:
    """The environment of a training subprocess: this checkout importable, output unbuffered for the log, and
    offline (nothing is downloaded or pushed: a run reads local checkpoints only)."""
    path = os.pathsep.join(filter(None, [str(settings.BASE_DIR), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def training_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "training", *args]


def launched_training_command(processes: int, *args: str) -> list[str]:
    """`python -m training ARGS` as `processes` data-parallel processes on this machine: accelerate's launcher
    (torchrun underneath) with deploy/accelerate/cpu_ddp.yaml, over gloo on CPU or one process per GPU, as the
    training config's device says. torchrun starts each in a session of its own and stops them when it gets the
    cancel's SIGTERM (in about a second here), before the follower's SIGKILL is due."""
    launcher_config = os.path.join(settings.BASE_DIR, "deploy", "accelerate", "cpu_ddp.yaml")
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", launcher_config,
            "--num_processes", str(processes), "-m", "training", *args]
