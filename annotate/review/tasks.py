from celery import shared_task

from annotate.review.assignments import assignments_expire_stale


@shared_task
def expire_stale_assignments() -> int:
    """Periodic (celery beat): held-too-long assignments go back to the pool."""
    return assignments_expire_stale()
