"""Fixtures for training runs: the session's tiny checkpoint and snapshot, a registered base checkpoint,
engineers' API clients, and a stand-in for `python -m training` that behaves like a run without training."""

import os
import sys
import textwrap
from pathlib import Path

import pytest

from annotate.runs import execute
from annotate.runs.checkpoints import checkpoint_register
from annotate.runs.models import Checkpoint, Run
from tests.conftest import built_once_root
from tests.runs.helpers import commands_on_path, rollout
from training.grpo.rollouts import write_batch


def process_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting for its parent counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture(autouse=True)
def run_root(tmp_path, tmp_path_factory, settings) -> Path:
    settings.RUN_ROOT = tmp_path / "runs"
    settings.INPUTS_ROOT = tmp_path / "inputs"  # task sets and prompt files the app writes for runs
    # Runs read their inputs from the test's own folders and the session's tiny checkpoints and snapshot only.
    settings.PAIRWISE_RUN_INPUT_ROOTS = [tmp_path_factory.getbasetemp(), built_once_root(tmp_path_factory)]
    return settings.RUN_ROOT


@pytest.fixture
def base_checkpoint(db, tiny_checkpoint):
    return checkpoint_register(uri=str(tiny_checkpoint), name="tiny-sft")


@pytest.fixture
def engineer_api(make_user, client_for):
    return client_for(make_user("eve", "engineer"))


@pytest.fixture
def second_checkpoint(tiny_checkpoint, tmp_path):
    """The tiny checkpoint with its weights nudged: another model with the same tokenizer."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "tiny-nudged"
    shutil.copytree(tiny_checkpoint, folder)
    weights = load_file(folder / "model.safetensors")
    generator = torch.Generator().manual_seed(0)
    save_file({name: tensor + 0.05 * torch.randn(tensor.shape, generator=generator) if tensor.is_floating_point()
               else tensor for name, tensor in weights.items()}, folder / "model.safetensors", metadata={"format": "pt"})
    return checkpoint_register(uri=str(folder), name="tiny-nudged")


# A stand-in trainer: it writes the run folder the way `python -m training dpo` does (run.json, metrics rows,
# a checkpoint with a weights file), then behaves as its config's `behave` key says. It starts a child in its
# own process group, as a trainer's data loaders and compile workers would be.
STAND_IN = textwrap.dedent('''
    import json, os, subprocess, sys, time, pathlib
    import yaml
    config = yaml.safe_load(open(sys.argv[sys.argv.index("--config") + 1]))
    folder = pathlib.Path(config["output_dir"]); folder.mkdir(parents=True)
    child = subprocess.Popen(["sleep", "300"])
    (folder.parent / (folder.name + ".child")).write_text(str(child.pid))
    record = {"format": "pairwise.run/1", "kind": "dpo", "status": "running", "config": config}
    (folder / "run.json").write_text(json.dumps(record))
    with open(folder / "metrics.jsonl", "a") as metrics:
        for step in (1, 2, 3):
            metrics.write(json.dumps({"event": "train", "step": step, "loss": 0.7 - 0.1 * step,
                                      "rewards/margins": 0.05 * step}) + "\\n")
            metrics.flush()
    print("step 3 of 3", flush=True)
    behave = config["behave"]
    if behave == "fail":
        print("error: snapshot speed-1 has no train rows; export it with looser filters", file=sys.stderr)
        sys.exit(2)
    if behave == "hang":
        time.sleep(300)
    checkpoint = folder / "checkpoint"; checkpoint.mkdir()
    (checkpoint / "model.safetensors").write_bytes(b"trained weights " + str(config["seed"]).encode())
    record.update(status="completed", output_checkpoint={"path": str(checkpoint), "content_hash": None})
    (folder / "run.json").write_text(json.dumps(record))
    child.kill()
''')


@pytest.fixture
def stand_in_trainer(tmp_path, monkeypatch):
    """Replace the training command the worker starts with the stand-in; the config's `behave` says what it does."""
    script = tmp_path / "stand_in_trainer.py"
    script.write_text(STAND_IN)
    monkeypatch.setattr(execute, "training_command", lambda *args: [sys.executable, str(script), *args])
    monkeypatch.setattr(execute, "POLL_S", 0.1)
    return script


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """sbatch prints a job id (or fails when SBATCH_FAIL is set); every call is appended to calls.log."""
    calls = tmp_path / "calls.log"
    commands_on_path(tmp_path, monkeypatch, {
        "sbatch": f'echo "sbatch $*" >> {calls}\ncp "${{@: -1}}" {tmp_path}/submitted.sbatch\n'
                  'if [ -n "${SBATCH_FAIL:-}" ]; then echo "sbatch: error: Batch job submission failed: Invalid '
                  'account or account/partition combination specified" >&2; exit 1; fi\necho "4242;cluster-a"',
        "scancel": f'echo "scancel $*" >> {calls}',
        "squeue": f'echo "squeue $*" >> {calls}\necho "4242|pairwise-run|RUNNING|None"',
    })
    return calls


@pytest.fixture
def grpo_run(base_checkpoint, tmp_path):
    """A finished GRPO run: 12 answers with the full reward, 3 partly right, 3 wrong; its checkpoint registered."""
    folder = tmp_path / "grpo-run"
    rows = ([rollout(i, status="correct", reward=1.0) for i in range(12)]
            + [rollout(i, status="wrong", reward=0.5) for i in range(12, 15)]
            + [rollout(i, status="wrong", reward=0.0) for i in range(15, 18)])
    write_batch(folder / "rollouts", 0, 0, rows[::-1])
    run = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base_checkpoint, folder=str(folder))
    Checkpoint.objects.create(name="tiny-grpo", uri=str(folder / "checkpoint"), parent=base_checkpoint, run=run)
    return run
