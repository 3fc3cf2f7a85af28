"""Queueing runs: where a run's folder lies, recording a run over registered checkpoints, and handing a run to
the "training" Celery queue once its row is committed.

The task that runs a run (annotate/runs/tasks.py) is found by its name in Celery's registry: that module runs
every kind of run, and the kinds queue their runs here, so this module must not import it. The app's ready()
imports the task modules, so the name is registered in every process (a worker imports them itself too).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
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


def in_this_thread(task_name: str, object_id: int) -> None:
    """Run a registered task on `object_id` in this thread, as a worker would (called directly, a task's worker
    name is "in-process"); its failure is logged, never raised into the thread that started it."""
    try:
        celery_app.tasks[task_name](object_id)
    except Exception:
        logger.exception("%s(%s) failed in its thread", task_name, object_id)
    finally:
        connections.close_all()  # this thread's own connections; they would outlive it otherwise


def execute_in_thread(run_id: int) -> None:
    """Run the run in this thread, as the task does in a worker."""
    in_this_thread(EXECUTE_RUN, run_id)


def off_the_request(task_name: str, object_id: int, *, queue: str | None = None,
                    could_not_queue: Callable[[Exception], None]) -> None:
    """Hand a task on `object_id` away from the request: with no broker (the embedded default) to a daemon thread of
    this process, so the request returns at once (Celery's eager mode would run it inside the request); with one,
    to the broker (`queue`, else the default queue). A broker that cannot be reached calls `could_not_queue`."""
    if celery_app.conf.task_always_eager:
        threading.Thread(target=in_this_thread, args=(task_name, object_id),
                         name=f"{task_name.rsplit('.', 1)[-1]}-{object_id}", daemon=True).start()
        return
    try:
        celery_app.tasks[task_name].apply_async((object_id,), queue=queue)
    except Exception as error:  # kombu raises many kinds: connection refused, timeouts, auth
        logger.exception("%s(%s) could not be queued", task_name, object_id)
        could_not_queue(error)


def send(run_id: int) -> None:
    """Hand the run to the training queue (a thread of this process with no broker); a broker that cannot be
    reached fails it."""
    def could_not_queue(error: Exception) -> None:
        Run.objects.filter(pk=run_id, status=Run.Status.QUEUED).update(
            status=Run.Status.FAILED, finished_at=timezone.now(),
            error=f"the run could not be queued ({type(error).__name__}: {error}); check CELERY_BROKER_URL")

    off_the_request(EXECUTE_RUN, run_id, queue=QUEUE, could_not_queue=could_not_queue)
