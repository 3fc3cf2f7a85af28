from celery import shared_task

from annotate.review.assignments import assignments_expire_stale
from annotate.review.models import Project
from annotate.review.queue_priority import queue_priorities_refresh


@shared_task
def expire_stale_assignments() -> int:
    """Periodic (celery beat): held-too-long assignments go back to the pool."""
    return assignments_expire_stale()


@shared_task
def refresh_queue_priorities(project_id: int | None = None) -> int:
    """Periodic (celery beat), or one project when its leaderboard switch is turned on: the queue
    priorities of leaderboard projects' open pairs, from their models' ratings. Returns pairs changed."""
    projects = Project.objects.filter(leaderboard_priority=True)
    if project_id is not None:
        projects = Project.objects.filter(pk=project_id)
    return sum(queue_priorities_refresh(project=project) for project in projects.order_by("pk"))
