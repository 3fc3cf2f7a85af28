"""Writes of the export workflow: create an export, run it, cancel it, retry it, and fail the ones a dead worker left.

An export is a job on the one lifecycle (annotate/jobs.py, EXPORT_JOB): sent, claimed, beat for and failed when lost
there; its stored `done` is the lifecycle's succeeded.

An export is queued by `export_create` (the Celery task is sent once the row is committed), claimed and
run by `export_run` (in a worker, in-process in the embedded default, or by `manage.py export_snapshot`),
and retried by `export_retry`. A worker killed mid-export cannot mark its export failed, so two checks do
it: a restarted worker fails the exports it held (`exports_fail_orphaned`), and `exports_fail_stale`
fails running exports with no sign of life for STALE_AFTER. Either way the snapshot folder never
appeared (the writer renames it into place only when complete) and the half-written hidden folder is
removed.

`export_cancel` is the lifecycle's cancel: a queued export is cancelled at once (its task then finds nothing to
claim); a running one is asked (`cancel_requested`) and stops at its next heartbeat, inside the writer, which
removes its hidden folder: a cancelled export leaves no snapshot, whole or half.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from annotate.exports.filters import ExportError, ExportFilters, filters_parse
from annotate.exports.models import Export
from annotate.exports.pipeline import snapshot_write
from annotate.jobs import JobFinished, JobKind, JobStatus
from annotate.review.models import Project
from training.atomic_write import discard_partial
from training.snapshot import code_version

logger = logging.getLogger(__name__)

STALE_AFTER = dt.timedelta(minutes=10)  # a running export reports progress far more often than this
# The task that runs an export (annotate/exports/tasks.py), found by its name in Celery's registry: that module
# calls this one, so this one does not import it. The app's ready() imports it, so the name is registered here.
EXPORT_SNAPSHOT = "annotate.exports.tasks.export_snapshot"
# An export on the one job lifecycle (annotate/jobs.py): its stored labels, `done` for succeeded.
EXPORT_JOB = JobKind(
    model=Export, task=EXPORT_SNAPSHOT, noun="the export", thread_prefix="export", attempt_field="attempt",
    worker_field="worker", retry_hint="retry it",
    labels={Export.Status.QUEUED: JobStatus.QUEUED, Export.Status.RUNNING: JobStatus.RUNNING,
            Export.Status.DONE: JobStatus.SUCCEEDED, Export.Status.FAILED: JobStatus.FAILED,
            Export.Status.CANCELLED: JobStatus.CANCELLED})


class ExportCancelled(Exception):
    """Raised at a running export's heartbeat once a user asked it to stop: it unwinds the snapshot writer, which
    removes its hidden folder, and export_run records the export cancelled."""


def default_out_dir(*, project: Project, export_id: int) -> Path:
    return Path(settings.SNAPSHOT_ROOT) / project.slug / f"export-{export_id:06d}"


def _out_dir_unwritable(out_dir: Path) -> str | None:
    """Why the export could not create `out_dir` (its missing parents are made), or None: told before the export
    is recorded and its votes read, not as a failed export afterwards."""
    ancestor = out_dir.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        return f"{ancestor} is a file, not a folder"
    if not os.access(ancestor, os.W_OK | os.X_OK):
        return f"cannot write in {ancestor} (permission denied)"
    return None


def export_create(*, project: Project, filters: ExportFilters, created_by: AbstractBaseUser | None,
                  out_dir: Path | None = None, enqueue: bool = True) -> Export:
    """Record a queued export; with `enqueue`, send its task once the row is committed.

    `out_dir` defaults to SNAPSHOT_ROOT/<project>/export-<id>. With no broker configured the task runs in a thread
    of this process (annotate/jobs.py enqueue), so the request returns at once and the page follows the export.
    """
    if out_dir is not None and (out_dir.exists() or out_dir.is_symlink()):
        raise ExportError(f"{out_dir} already exists; a snapshot is never overwritten, choose a new folder",
                          status=409)
    if out_dir is not None and (problem := _out_dir_unwritable(out_dir)):
        raise ExportError(f"{out_dir}: {problem}; choose a folder path this user can write to")
    exports_fail_stale()
    with transaction.atomic():
        export = Export.objects.create(project=project, filters=filters.as_dict(), created_by=created_by,
                                       out_dir=str(out_dir or ""))
        if out_dir is None:
            export.out_dir = str(default_out_dir(project=project, export_id=export.pk))
            export.save(update_fields=["out_dir"])
        if enqueue:
            transaction.on_commit(partial(EXPORT_JOB.send, export.pk, export.attempt))
    return export


def _touch(export: Export, **fields) -> None:
    """Record progress (and that the export is alive) while it is running under this attempt; raise
    ExportCancelled when a user has asked it to stop."""
    EXPORT_JOB.heartbeat(export.pk, export.attempt, **fields)
    if Export.objects.filter(pk=export.pk, attempt=export.attempt, cancel_requested=True).exists():
        raise ExportCancelled


def _cancelled_line(export: Export, *, stage: str, done: int, total: int | None) -> str:
    """The one line a running export cancelled by a user ends with: who, while doing what, how far it got."""
    who = export.cancelled_by.get_username() if export.cancelled_by else "a user"
    progress = f"{done} of {total}" if total is not None else f"{done}"
    return (f"cancelled by {who} while {stage or 'starting'} ({progress} pairs done); nothing was written, "
            "start a new export to get a snapshot")


def _claim(*, export_id: int, attempt: int, worker: str) -> Export | None:
    """Lock the export row and mark it running, unless this delivery is stale or repeated."""
    if EXPORT_JOB.claim(export_id, attempt, worker=worker, stage="starting") is None:
        return None
    return Export.objects.select_related("project").get(pk=export_id)


def export_run(*, export_id: int, attempt: int, worker: str = "in-process",
               on_progress: Callable[[int, int | None], None] | None = None) -> Export | None:
    """Run one attempt of a queued export; returns the export as it ended, or None for a stale delivery.

    Claims the export under its row lock, so a message delivered twice runs once. Every error ends as
    status failed with a one-line reason; nothing is raised for a failed export except an interrupt
    (which is recorded first).
    """
    export = _claim(export_id=export_id, attempt=attempt, worker=worker)
    if export is None:
        return None
    try:
        filters = filters_parse(export.filters)
        total = None  # known when the votes query answers: its rows carry it
        stage, done_so_far = "starting", 0  # where a cancel found it, for its one line

        def stage_reached(name: str) -> None:
            nonlocal stage
            stage = name
            _touch(export, stage=name)

        def total_known(pairs_total: int) -> None:
            nonlocal total
            total = pairs_total
            _touch(export, pairs_total=total)

        def progress(done: int) -> None:
            nonlocal done_so_far
            done_so_far = done
            _touch(export, pairs_done=done)
            if on_progress is not None:
                on_progress(done, total)

        out_dir = Path(export.out_dir)
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        manifest = snapshot_write(
            project=export.project, filters=filters, out_dir=out_dir,
            created_at=export.created_at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            code_version=code_version(), on_stage=stage_reached, on_progress=progress, on_total=total_known,
        )
    except ExportCancelled:
        # The writer has removed its hidden folder already; whatever a killed earlier attempt left goes too.
        _discard_partial(export)
        export = Export.objects.select_related("cancelled_by").get(pk=export.pk)
        EXPORT_JOB.finish(export.pk, export.attempt, JobStatus.CANCELLED, stage="", heartbeat_at=timezone.now(),
                          error=_cancelled_line(export, stage=stage, done=done_so_far, total=total))
        logger.info("export %s cancelled while %s", export.pk, stage)
        export.refresh_from_db()
        return export
    except BaseException as error:
        if isinstance(error, ExportError | OSError):
            message = str(error)
        else:
            logger.exception("export %s failed", export.pk)
            message = f"unexpected error: {type(error).__name__}: {error}"
        EXPORT_JOB.finish(export.pk, export.attempt, JobStatus.FAILED, error=message, stage="",
                          heartbeat_at=timezone.now())
        if not isinstance(error, Exception):
            raise  # an interrupt (Ctrl-C, worker shutdown) is recorded, then goes on
        export.refresh_from_db()
        return export
    EXPORT_JOB.finish(export.pk, export.attempt, JobStatus.SUCCEEDED, stage="", snapshot_id=manifest["snapshot_id"],
                      counts=manifest["counts"], pairs_done=manifest["counts"]["pairs_considered"],
                      pairs_total=manifest["counts"]["pairs_considered"], heartbeat_at=timezone.now())
    export.refresh_from_db()
    return export


def export_cancel(*, export: Export, by: AbstractBaseUser | None) -> Export:
    """Cancel an export (the lifecycle's cancel, annotate/jobs.py): a queued one at once; a running one is asked to
    stop and its worker stops it at its next heartbeat. An export that has ended is refused (409)."""
    who = by.get_username() if by is not None else "a user"
    # Who asked is written under the cancel's row lock, in one commit with it: the worker that stops reads it.
    with transaction.atomic():
        try:
            EXPORT_JOB.cancel(export.pk, message=f"cancelled by {who} before it started; nothing was written, "
                                                 "start a new export to get a snapshot")
        except JobFinished as finished:
            raise ExportError(f"export {export.pk} is {finished.row.status}; only a queued or running export can be "
                              "cancelled", status=409) from None
        Export.objects.filter(pk=export.pk).update(cancelled_by=by)
    return Export.objects.select_related("project", "created_by", "cancelled_by").get(pk=export.pk)


def _discard_partial(export: Export) -> None:
    discard_partial(export.out_dir)  # what a killed attempt left beside it


def exports_fail_stale(*, now: dt.datetime | None = None, stale_after: dt.timedelta = STALE_AFTER) -> int:
    """Fail running exports with no progress for `stale_after` (their worker died); returns how many."""
    return len(EXPORT_JOB.lost_mark(after=stale_after, now=now, stage="", on_failed=_discard_partial, reason=lambda export: (
        f"the export stopped without finishing: no progress since "
        f"{export.heartbeat_at.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC on {export.worker or 'its worker'}; "
        "nothing was written, retry it")))


def exports_fail_orphaned(*, worker: str) -> int:
    """A worker that starts holds no export yet: fail the running ones recorded under its name."""
    orphaned = Export.objects.filter(status=Export.Status.RUNNING, worker=worker)
    return len(EXPORT_JOB.fail_each(orphaned, stage="", on_failed=_discard_partial, reason=lambda export: (
        f"the export stopped without finishing: its worker {worker} was restarted; nothing was written, retry it")))


def export_retry(*, export: Export) -> Export:
    """Queue a failed export again under a new attempt number (same filters, same folder)."""
    exports_fail_stale()
    with transaction.atomic():
        export = Export.objects.select_for_update().get(pk=export.pk)
        if export.status != Export.Status.FAILED:
            raise ExportError(f"export {export.pk} is {export.status}; only a failed export can be retried",
                              status=409)
        export.attempt += 1
        export.status = Export.Status.QUEUED
        export.error = export.stage = export.worker = ""
        export.pairs_done = 0
        export.cancel_requested, export.cancelled_by = False, None  # a cancel asked of the failed attempt ends with it
        export.started_at = export.heartbeat_at = export.finished_at = None
        export.save()
        discard_partial(export.out_dir)  # what a killed attempt left beside it
        transaction.on_commit(partial(EXPORT_JOB.send, export.pk, export.attempt))
    return export
