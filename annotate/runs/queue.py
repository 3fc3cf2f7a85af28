"""Queueing runs: where a run's folder lies, recording a run over registered checkpoints, and handing a run to
the "training" Celery queue once its row is committed.

The task that runs a run (annotate/runs/tasks.py) is found by its name in Celery's registry: that module runs
every kind of run, and the kinds queue their runs here, so this module must not import it. The app's ready()
imports the task modules, so the name is registered in every process (a worker imports them itself too).
"""

from __future__ import annotations

import logging
import threading
from functools import partial
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import connections, transaction
from django.utils import timezone

from annotate.celery import app as celery_app
from annotate.runs.models import Checkpoint, Run

logger = logging.getLogger(__name__)

QUEUE = "training"  # given at each send: Celery 6 drops the per-task queue attribute
EXECUTE_RUN = "annotate.runs.tasks.execute_run"


def run_folder_for(run_id: int) -> Path:
    return Path(settings.RUN_ROOT) / f"run-{run_id:06d}"


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
    """Run the run in this thread, as the task does in a worker (called directly, the task's worker name is
    "in-process")."""
    try:
        celery_app.tasks[EXECUTE_RUN](run_id)
    except Exception:
        logger.exception("run %s failed in its thread", run_id)
    finally:
        connections.close_all()  # this thread's own connections; they would outlive it otherwise


def send(run_id: int) -> None:
    """Hand the run to the training queue. With no broker (the embedded default) it runs in a thread of this
    process instead, so a launch from the page returns at once; a broker that cannot be reached fails it."""
    if celery_app.conf.task_always_eager:
        threading.Thread(target=execute_in_thread, args=(run_id,), name=f"run-{run_id}", daemon=True).start()
        return
    execute_run = celery_app.tasks[EXECUTE_RUN]
    try:
        execute_run.apply_async((run_id,), queue=QUEUE)
    except Exception as error:  # kombu raises many kinds: connection refused, timeouts, auth
        logger.exception("run %s could not be queued", run_id)
        Run.objects.filter(pk=run_id, status=Run.Status.QUEUED).update(
            status=Run.Status.FAILED, finished_at=timezone.now(),
            error=f"the run could not be queued ({type(error).__name__}: {error}); check CELERY_BROKER_URL")
