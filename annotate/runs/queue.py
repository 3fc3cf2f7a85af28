"""Queueing runs: where a run's folder lies, recording a run over registered checkpoints, and handing a run to
the "training" Celery queue once its row is committed.

The task that runs a run (annotate/runs/tasks.py) is found by its name in Celery's registry: that module runs
every kind of run, and the kinds queue their runs here, so this module must not import it. The app's ready()
imports the task modules, so the name is registered in every process (a worker imports them itself too). A run is
a job on the one lifecycle (annotate/jobs.py, RUN_JOB): sent, claimed, beat for, lost and cancelled there.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from annotate.jobs import JobKind, JobStatus, in_this_thread
from annotate.runs.models import Checkpoint, Run

QUEUE = "training"  # given at each send: Celery 6 drops the per-task queue attribute
EXECUTE_RUN = "annotate.runs.tasks.execute_run"
# A run on the one job lifecycle (annotate/jobs.py): its stored labels are the lifecycle's own. `checking` (its
# config check, before it is queued) is a step outside it, with a task and a lost-check rule of its own.
RUN_JOB = JobKind(
    model=Run, task=EXECUTE_RUN, noun="the run", queue=QUEUE, thread_prefix="run", worker_field="worker",
    labels={Run.Status.QUEUED: JobStatus.QUEUED, Run.Status.RUNNING: JobStatus.RUNNING,
            Run.Status.SUCCEEDED: JobStatus.SUCCEEDED, Run.Status.FAILED: JobStatus.FAILED,
            Run.Status.CANCELLED: JobStatus.CANCELLED})


def run_folder_for(run_id: int) -> Path:
    return Path(settings.RUN_ROOT) / f"run-{run_id:06d}"


def generation_engine_checked(engine) -> str:
    """A comparison's or an evaluation's generation engine (transformers, or vllm in the generation environment:
    training/vllm_generation.py), refused in one line when unknown or when vllm has no environment here."""
    from annotate.errors import UserMistake
    from training.errors import PairwiseInputError
    from training.vllm_generation import check_engine

    engine = str(engine or "transformers")
    try:
        check_engine(engine, where="engine")
    except PairwiseInputError as error:
        raise UserMistake(str(error)) from None
    return engine


def vllm_ready() -> bool:
    """Whether this machine has the generation environment that engine vllm samples in."""
    from annotate.errors import UserMistake

    try:
        generation_engine_checked("vllm")
    except UserMistake:  # what a launch with it would say; the forms show the choice greyed out instead
        return False
    return True


def queue_checkpoints_run(*, kind: str, checkpoints: list[Checkpoint], options: dict,
                          launched_by: AbstractBaseUser | None, enqueue: bool, **fields) -> Run:
    """Record a run over registered checkpoints (an evaluation, a comparison) and queue it after commit; the
    first checkpoint is its base. Its config is the checkpoints and `options`, already checked."""
    with transaction.atomic():
        run = Run.objects.create(kind=kind, base_checkpoint=checkpoints[0], launched_by=launched_by, folder="",
                                 **fields)
        run.folder = str(run_folder_for(run.pk))
        run.config = {"checkpoints": [{"id": c.pk, "name": c.name, "path": c.uri} for c in checkpoints], **options}
        run.resolved_config = run.config
        run.save(update_fields=["folder", "config", "resolved_config"])
        if enqueue:
            transaction.on_commit(partial(send, run.pk))
    return run


def execute_in_thread(run_id: int) -> None:
    """Run the run in this thread, as the task does in a worker."""
    in_this_thread(EXECUTE_RUN, run_id)


def send(run_id: int) -> None:
    """Hand the run to the training queue (a thread of this process with no broker); a broker that cannot be
    reached fails it."""
    RUN_JOB.send(run_id)
