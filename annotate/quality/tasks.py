"""Celery task of the quality app: recompute a project's stored agreement report off the request path."""

from celery import shared_task

from annotate.quality import services
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
def score_model_reviewer(reviewer_id: int, attempt: int) -> str:
    """Score a model reviewer's judged pairs (annotate/quality/model_reviewers.py); a stale delivery does nothing."""
    from annotate.quality.model_reviewers import model_reviewer_run

    reviewer = model_reviewer_run(reviewer_id=reviewer_id, attempt=attempt)
    return reviewer.status if reviewer is not None else "skipped"
