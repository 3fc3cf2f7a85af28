"""Celery tasks of training runs and of model reviewers' scoring, on their own queue ("training") so long runs
never hold up exports or the reviewer sweeps; and the periodic sweeps that follow runs when nobody looks. The work
lives in annotate/runs/execute.py, annotate/runs/model_reviewer_scoring.py and annotate/runs/sweeps.py; a task only
calls it."""

from celery import shared_task
from celery.signals import worker_ready

from annotate.quality.model_reviewers import SCORE_MODEL_REVIEWER
from annotate.runs import execute, launch, model_reviewer_scoring, sweeps, task_sets
from annotate.runs.queue import EXECUTE_RUN, QUEUE


@shared_task(bind=True, name=EXECUTE_RUN)
def execute_run(self, run_id: int) -> str:
    """Run one queued run to its end; a repeated or stale delivery does nothing."""
    run = execute.run_execute(run_id=run_id, worker=self.request.hostname or "in-process")
    return run.status if run is not None else "skipped"


@shared_task(name=SCORE_MODEL_REVIEWER)
def score_model_reviewer(reviewer_id: int, attempt: int) -> str:
    """Score a model reviewer's judged pairs (annotate/runs/model_reviewer_scoring.py); a stale delivery does
    nothing. On the training queue, as a run, since it runs a training command."""
    reviewer = model_reviewer_scoring.model_reviewer_run(reviewer_id=reviewer_id, attempt=attempt)
    return reviewer.status if reviewer is not None else "skipped"


@shared_task(name=task_sets.CHECK_TASK_SET)
def check_task_set(task_set_id: int) -> str:
    """Check an uploaded task set (annotate/runs/task_sets.py); a forgotten set or a repeated delivery does nothing.
    On the default queue: the check is bounded (PAIRWISE_TASK_SET_CHECK_S) and must not wait behind a run."""
    task_set = task_sets.task_set_check(task_set_id)
    return task_set.status if task_set is not None else "skipped"


@shared_task(name=launch.CHECK_RUN_CONFIG)
def check_run_config(run_id: int) -> str:
    """Check a launched run's config with the training command (annotate/runs/launch.py), then queue or fail it; a
    cancelled run or a repeated delivery does nothing. On the default queue: the check is bounded (CHECK_TIMEOUT_S)
    and must not wait behind a training run."""
    run = launch.run_config_check(run_id)
    return run.status if run is not None else "skipped"


@shared_task
def follow_run_again(run_id: int) -> str:
    """Follow a run whose worker restarted while its training process lived on."""
    run = execute.run_follow_again(run_id=run_id)
    return run.status if run is not None else "skipped"


@worker_ready.connect
def reconcile_runs_of_this_worker(sender, **kwargs) -> None:
    """Runs still marked running under this worker's name: follow the live ones again, fail the others."""
    for run_id in execute.runs_reconcile(worker=sender.hostname):
        follow_run_again.apply_async((run_id,), queue=QUEUE)


# The sweeps go to the default queue, not "training": a training worker runs one run at a time and is busy
# following it for hours, so a sweep queued there would wait for the run to end, and the lost-run sweep would
# wait on the very worker it watches. The default worker has what the web host has: the run root and, for a
# Slurm cluster, squeue (the page view calls it too).


@shared_task
def poll_slurm_runs() -> int:
    """Periodic (celery beat): read every running Slurm run; returns how many ended."""
    return len(sweeps.slurm_runs_poll())


@shared_task
def mark_lost_runs() -> int:
    """Periodic (celery beat): local runs whose worker stopped reporting, and runs whose config check never ended,
    are marked failed; returns how many."""
    return len(sweeps.lost_runs_mark()) + len(sweeps.lost_checks_mark())
