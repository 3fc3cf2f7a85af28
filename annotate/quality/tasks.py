"""Celery tasks of the quality app, off the request path: a project's stored agreement report, leaderboard
projects' queue priorities. A model reviewer's scoring needs the training process: its task is the runs app's
(annotate/runs/tasks.py score_model_reviewer)."""

from celery import shared_task

from annotate.quality import services
from annotate.quality.queue_priorities import queue_priorities_refresh
from annotate.review.models import Project


@shared_task
def recompute_agreement_report(project_id: int) -> str:
    """Compute and store the project's agreement report; queued by services.stored_report_request_recompute."""
    try:
        project = Project.objects.filter(pk=project_id).first()
        if project is None:
            return "skipped: no such project"
        stored = services.stored_report_refresh(project=project)
        return f"{project.slug}: {stored.judgments_covered} judgments in {stored.compute_seconds:.1f} s"
    finally:
        services.stored_report_recompute_done(project_id=project_id)


@shared_task
def refresh_queue_priorities(project_id: int | None = None) -> int:
    """Periodic (celery beat), or one project when its leaderboard switch is turned on: the queue
    priorities of leaderboard projects' open pairs, from their models' ratings. Returns pairs changed."""
    projects = Project.objects.filter(leaderboard_priority=True)
    if project_id is not None:
        projects = Project.objects.filter(pk=project_id)
    return sum(queue_priorities_refresh(project=project) for project in projects.order_by("pk"))
