"""Celery tasks of training runs, on their own queue ("training") so long runs never hold up exports or
the reviewer sweeps. The work lives in annotate/runs/execute.py; a task only calls it."""

from celery import shared_task
from celery.signals import worker_ready

from annotate.runs import execute

QUEUE = "training"  # given at each send: Celery 6 drops the per-task queue attribute


@shared_task(bind=True)
def execute_run(self, run_id: int) -> str:
    """Run one queued run to its end; a repeated or stale delivery does nothing."""
    run = execute.run_execute(run_id=run_id, worker=self.request.hostname or "in-process")
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
