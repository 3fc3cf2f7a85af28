"""The demo's SFT checkpoint: `python -m training tiny-sft`, built as a run of kind "sft" so the runs page shows
its progress, and registered as the checkpoint named `tiny-sft` once it is saved.

No model hub is reachable and the weights are not shipped, so the demo builds them on first start (several
minutes on two cores, README "Two commands"); `manage.py seed_demo` queues the build and `scripts/demo.sh` starts
it beside the server. The launch form waits for it: its Launch button names the build's progress until the
checkpoint is registered.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from annotate.errors import UserMistake
from annotate.limits import MAX_INT32, whole_number
from annotate.runs.checkpoints import checkpoint_register
from annotate.runs.models import Checkpoint, Run
from annotate.runs.queue import run_folder_for, send

DEMO_CHECKPOINT = "tiny-sft"
DEMO_STEPS = 320  # tiny-sft's own default recipe; PAIRWISE_DEMO_SFT_STEPS or build_demo_checkpoint --steps change it
CHECKPOINT_FOLDER = "checkpoint"
STEP_LINE = re.compile(r"step\s+(\d+)\s*/\s*(\d+)")


def demo_checkpoint_queue(*, steps: int = DEMO_STEPS, seed: int = 0, name: str = DEMO_CHECKPOINT,
                          launched_by: AbstractBaseUser | None = None, enqueue: bool = True) -> Run | None:
    """Queue the build of the demo checkpoint, unless it is registered already (None) or a build is under way
    (that run). With `enqueue`, it goes to the training queue after commit like any run."""
    steps = whole_number("steps", steps, low=1, high=1_000_000)
    seed = whole_number("seed", seed, low=0, high=MAX_INT32)
    if "=" in name or not name.strip():
        raise UserMistake(f"checkpoint name {name!r} may not contain '=' or be blank")
    with transaction.atomic():
        if Checkpoint.objects.filter(name=name).exists():
            return None
        under_way = sft_build_under_way()
        if under_way is not None:
            return under_way
        run = Run.objects.create(kind=Run.Kind.SFT, launched_by=launched_by, folder="")
        run.folder = str(run_folder_for(run.pk))
        run.config = run.resolved_config = {"recipe": "tiny-sft", "steps": steps, "seed": seed, "name": name}
        run.save(update_fields=["folder", "config", "resolved_config"])
        if enqueue:
            transaction.on_commit(lambda: send(run.pk))
    return run


def sft_build_under_way() -> Run | None:
    return Run.objects.filter(kind=Run.Kind.SFT).exclude(status__in=Run.FINISHED).order_by("-id").first()


def sft_command_args(run: Run) -> list[str]:
    Path(run.folder).mkdir(parents=True, exist_ok=True)  # tiny-sft writes --out into an existing folder
    return ["tiny-sft", "--out", str(Path(run.folder) / CHECKPOINT_FOLDER), "--steps", str(run.config["steps"]),
            "--seed", str(run.config["seed"])]


def sft_register(run: Run) -> Checkpoint:
    """The built checkpoint, registered under the run's chosen name as made by this run (no parent: it was trained
    from scratch)."""
    return checkpoint_register(uri=str(Path(run.folder) / CHECKPOINT_FOLDER), name=run.config["name"], run=run,
                               registered_by=run.launched_by)


def sft_progress(run: Run) -> dict:
    """How far a build is, from the last `step N/M` line of its log (tiny-sft logs every tenth of its steps)."""
    found = STEP_LINE.findall(run.log_tail or "")
    total = int(run.config.get("steps") or 0)
    done = int(found[-1][0]) if found else 0
    return {"step": done, "steps": total, "percent": round(100 * done / total) if total else 0,
            "name": run.config.get("name", DEMO_CHECKPOINT), "run": run}
