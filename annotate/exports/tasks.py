"""Celery tasks of the export workflow. The pipeline lives in services and pipeline; a task only calls it."""

from celery import shared_task
from celery.signals import worker_ready

from annotate.exports import services


@shared_task(bind=True, name=services.EXPORT_SNAPSHOT)
def export_snapshot(self, export_id: int, attempt: int) -> str:
    """Run one attempt of an export; a stale or repeated delivery does nothing."""
    export = services.export_run(export_id=export_id, attempt=attempt, worker=self.request.hostname or "in-process")
    return export.status if export is not None else "skipped"


@shared_task
def fail_stale_exports() -> int:
    """Periodic (celery beat): running exports whose worker died are marked failed."""
    return services.exports_fail_stale()


@worker_ready.connect
def fail_exports_of_this_worker(sender, **kwargs) -> None:
    """A worker that has just started runs nothing: exports still marked running under its name died with it."""
    services.exports_fail_orphaned(worker=sender.hostname)
