"""The stored agreement report: compute and store it, say how old it is, have Celery recompute it.

The page, the API and the export's "exclude flagged reviewers" filter read a project's stored report
(annotate/quality/models.py) instead of recomputing it on every request. Nothing here runs on the
judgment hot path: whether the stored report is out of date is asked of the judgments when someone
looks. Every submit, undo and revision adds a Judgment row with a larger id, so the report is stale
exactly when the project has a Judgment newer than the report's watermark; counting those reads the
primary-key index from the watermark on (the judgments made since, in every project), not the
project's history.

A stale or missing report asks for one recompute: the request is claimed with one UPDATE on the
stored row, so many page loads queue one Celery task, and a claim older than RECOMPUTE_PATIENCE
(a worker that died) may be claimed again. With no broker configured (the embedded default) Celery
runs the task in-process, so the page that asked gets the fresh report.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Q
from django.utils import timezone
from kombu.exceptions import OperationalError

from annotate.quality.models import StoredAgreementReport
from annotate.quality.selectors import agreement_report_for_project
from annotate.review.models import Judgment, Project

logger = logging.getLogger(__name__)

# Resamples behind the stored report's intervals: stable to about a percentage point, and off the
# request path, so the page shows the same intervals as the API's default.
STORED_BOOTSTRAP = 1000
# A recompute queued this long ago and not finished is presumed lost (its worker died); another may start.
RECOMPUTE_PATIENCE = timedelta(minutes=15)


@dataclass(frozen=True)
class StoredReportState:
    """What a reader gets: the stored report (None before the first one) and how current it is."""

    report: dict | None
    computed_at: datetime | None
    compute_seconds: float | None
    stale: bool
    judgments_since: int | None  # Judgment rows (submissions, revisions, undos) newer than the report; None without one
    recomputing: bool  # a recompute is queued or running

    def freshness(self) -> dict:
        """The fields the API adds to the report."""
        return {
            "computed_at": self.computed_at.isoformat() if self.computed_at else None,
            "compute_seconds": None if self.compute_seconds is None else round(self.compute_seconds, 3),
            "stale": self.stale,
            "judgments_since": self.judgments_since,
            "recomputing": self.recomputing,
        }


def project_judgment_watermark(*, project: Project) -> int:
    """Id of the project's newest Judgment row, 0 when there is none.

    Written as "newest first, one row" rather than MAX(): PostgreSQL then walks the primary key
    backwards and stops at the first row of the project (0.1 ms at a million judgments, where MAX
    over the join reads them all).
    """
    newest = Judgment.objects.filter(pair__project_id=project.pk).order_by("-pk").values_list("pk", flat=True)
    return newest.first() or 0


def judgments_since(*, project: Project, watermark: int) -> int:
    """Judgment rows of the project newer than ``watermark`` (an index range scan from it)."""
    return Judgment.objects.filter(pk__gt=watermark, pair__project_id=project.pk).aggregate(n=Count("pk"))["n"]


def stored_report_refresh(*, project: Project) -> StoredAgreementReport:
    """Compute the project's report now and store it; returns the stored row.

    The watermark is read before the judgments, so a judgment made while the report is computed
    leaves it stale (recomputed next time) rather than claimed without being counted. A slower
    computation that started earlier never overwrites a newer stored report.
    """
    started = time.perf_counter()
    watermark = project_judgment_watermark(project=project)
    report = agreement_report_for_project(project=project, bootstrap=STORED_BOOTSTRAP)
    seconds = time.perf_counter() - started
    StoredAgreementReport.objects.get_or_create(project=project)
    StoredAgreementReport.objects.filter(project=project, judgment_watermark__lte=watermark).update(
        report=report, bootstrap=STORED_BOOTSTRAP, computed_at=timezone.now(), compute_seconds=seconds,
        judgment_watermark=watermark, judgments_covered=report["judgments"],
    )
    return StoredAgreementReport.objects.get(project=project)


def stored_report_request_recompute(*, project: Project, now: datetime | None = None) -> bool:
    """Queue one recompute unless one is already queued; True when this call queued it."""
    now = now or timezone.now()
    StoredAgreementReport.objects.get_or_create(project=project)
    claimed = (
        StoredAgreementReport.objects.filter(project=project)
        .filter(Q(recompute_requested_at__isnull=True) | Q(recompute_requested_at__lt=now - RECOMPUTE_PATIENCE))
        .update(recompute_requested_at=now)
    )
    if not claimed:
        return False
    # Imported here: the task module imports this one.
    from annotate.quality.tasks import recompute_agreement_report

    try:
        recompute_agreement_report.delay(project.pk)
    except OperationalError as error:
        # No broker to queue it on: the page still shows the stored report; the next look tries again.
        StoredAgreementReport.objects.filter(project=project).update(recompute_requested_at=None)
        logger.warning("could not queue the agreement report of %s: %s", project.slug, error)
        return False
    return True


def stored_report_recompute_done(*, project_id: int) -> None:
    """The queued recompute has finished (or failed): the next stale look may queue another."""
    StoredAgreementReport.objects.filter(project_id=project_id).update(recompute_requested_at=None)


def _state(*, project: Project, now: datetime) -> StoredReportState:
    stored = StoredAgreementReport.objects.filter(project=project).first()
    has_report = stored is not None and stored.report is not None
    # Before the first report nothing is counted: that would read the project's whole history.
    since = judgments_since(project=project, watermark=stored.judgment_watermark) if has_report else None
    recomputing = (
        stored is not None
        and stored.recompute_requested_at is not None
        and stored.recompute_requested_at >= now - RECOMPUTE_PATIENCE
    )
    return StoredReportState(
        report=stored.report if has_report else None,
        computed_at=stored.computed_at if has_report else None,
        compute_seconds=stored.compute_seconds if has_report else None,
        stale=not has_report or bool(since),
        judgments_since=since,
        recomputing=recomputing,
    )


def stored_report_read(*, project: Project, schedule: bool = True, now: datetime | None = None) -> StoredReportState:
    """The project's stored report and how current it is; a stale or missing one queues a recompute.

    With ``schedule=False`` nothing is queued. Without a broker the queued task has already run
    in-process when this returns, so the state read afterwards is the fresh report.
    """
    now = now or timezone.now()
    state = _state(project=project, now=now)
    if state.stale and schedule and stored_report_request_recompute(project=project, now=now):
        state = _state(project=project, now=now)
    return state


def flagged_reviewers_current(*, project: Project) -> list[dict]:
    """The reviewers flagged on the project's current judgments, for the export filter.

    Read from the stored report when it is current; otherwise (none stored yet, or judgments made
    since) recomputed here without bootstrap intervals, which the flags do not use.
    """
    state = stored_report_read(project=project, schedule=False)
    report = state.report
    if report is None or state.stale:
        report = agreement_report_for_project(project=project, bootstrap=0)
    return [{"username": r["username"], "flags": r["flags"]} for r in report["reviewers"] if r["flags"]]
