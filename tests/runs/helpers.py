"""Shared by the runs tests: calling a management command, a finished run folder as the trainer leaves it, a
queued run, a Slurm run, stand-in cluster commands on PATH, and a GRPO rollout row."""

import json
import os
from pathlib import Path

from django.core.management import call_command

from annotate.runs.models import Run
from annotate.runs.queue import run_folder_for
from training.run_folder import checkpoint_content_hash


def register(*args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def finished_run_folder(tmp_path: Path, base: Path, snapshot: Path, *, status: str = "completed",
                        learning_rate: float = 1e-3, weights: bytes = b"weights after two steps") -> Path:
    """A run folder as `python -m training dpo` leaves it (run.json, metrics, ledger, checkpoint/)."""
    folder = tmp_path / "dpo-run"
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "checkpoint" / "model.safetensors").write_bytes(weights)
    trained_hash = checkpoint_content_hash(folder / "checkpoint")
    (folder / "checkpoint" / "parent.json").write_text(json.dumps(
        {"parent": {"path": str(base), "content_hash": checkpoint_content_hash(base)}, "content_hash": trained_hash}))
    manifest = json.loads((snapshot / "manifest.json").read_text())
    (folder / "run.json").write_text(json.dumps({
        "format": "pairwise.run/1", "run": "dpo-run", "kind": "dpo", "status": status,
        "config": {"max_steps": 2, "beta": 0.1, "output_dir": str(folder)},
        "base_checkpoint": {"path": str(base), "content_hash": checkpoint_content_hash(base)},
        "snapshot": {"path": str(snapshot), "snapshot_id": manifest["snapshot_id"]},
        "started_at": "2026-01-01T10:00:00Z", "ended_at": "2026-01-01T10:05:00Z", "error": None,
        "results": {"test": {"base": {"preference_accuracy": 0.5}, "trained": {"preference_accuracy": 0.75}}},
        "output_checkpoint": {"path": str(folder / "checkpoint"), "content_hash": trained_hash},
    }))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"event": "train", "step": s, "loss": 0.7 - s / 10,
                                                              "learning_rate": learning_rate}) + "\n" for s in (1, 2)))
    (folder / "ledger.json").write_text(json.dumps({"consumed": {"optimizer_steps": 2, "wall_s": 4.2}}))
    return folder


def queued_run(base_checkpoint, behave: str, seed: int = 0) -> Run:
    run = Run.objects.create(kind="dpo", base_checkpoint=base_checkpoint, folder="")
    run.folder = str(run_folder_for(run.pk))
    run.config = {"base_checkpoint": base_checkpoint.uri, "output_dir": run.folder, "behave": behave, "seed": seed}
    run.save()
    return run


def slurm_run(base_checkpoint, kind: str = "dpo") -> Run:
    run = Run.objects.create(kind=kind, backend="slurm", base_checkpoint=base_checkpoint, folder="")
    run.folder = str(run_folder_for(run.pk))
    run.config = {"base_checkpoint": base_checkpoint.uri, "output_dir": run.folder, "max_steps": 2}
    run.save()
    return run


def commands_on_path(folder: Path, monkeypatch, scripts: dict[str, str]) -> None:
    """Stand-in commands (sbatch, scancel, squeue: name -> bash body) in folder/bin, first on PATH."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def rollout(index: int, *, status: str, reward: float) -> dict:
    return {
        "rollout_id": f"0-{index}-0", "batch": 0, "group_id": f"0-{index}", "member": 0, "task_id": f"speed-{index}",
        "prompt": json.dumps([{"role": "user", "content": f"A car goes {60 + index} km in 1 h. Its speed?"}]),
        "completion": f"{60 + index} / 1 = {60 + index}\nAnswer: {60 + index} km/h", "completion_token_ids": [1],
        "logprobs": [-0.5], "logprobs_source": "policy forward in the update", "finish_reason": "stopped",
        "length": 1, "status": status, "reward": reward, "components": "{}", "component_scores": {},
        "reason": "", "scorer": "math@2", "advantage": 0.0, "in_batch": True, "policy_step": index % 3,
        "policy_weights_sha256": None, "process_index": 0,
    }
