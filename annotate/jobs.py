"""The one lifecycle of Pairwise's background jobs: an export, a training run, a model reviewer's scoring.

A job is a row that carries its own state, so every page reads it from the database:

    queued -> running -> succeeded | failed | cancelled

- enqueue: once the row is committed, its task goes to the broker, on the job's queue; with no broker (the embedded
  defaults) to a named daemon thread of this process, so the request returns at once (Celery's eager mode would run
  it inside the request). A broker that cannot be reached fails the job with one line.
- claim: the task locks the row (SELECT ... FOR UPDATE) and moves it from queued to running, recording when and
  who; a message delivered twice, a stale attempt or a cancelled job finds nothing to claim and does nothing.
- heartbeat: a running job writes its last sign of life (and its progress) while it is still this attempt's.
- lost after: a job silent for longer than its bound is failed with one line saying why and what to do.
- cancel: a queued job is cancelled at once; a running one is asked to stop, and its worker stops it.

Each model keeps the status labels its pages, API and stored rows have always used; `JobKind.labels` maps them onto
the lifecycle's states in one place (docs/design.md, "Background work"). Below every app: it names no app's model,
each app describes its own job with a JobKind.
"""

from __future__ import annotations

import datetime as dt
import enum
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from django.db import connections, models, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from annotate.celery import app as celery_app

logger = logging.getLogger(__name__)


class JobStatus(enum.StrEnum):
    """The states of the lifecycle; each JobKind says which stored label stands for each."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


def in_this_thread(task_name: str, *args) -> None:
    """Run a registered task in this thread, as a worker would (called directly, a bound task's worker name is
    "in-process"); its failure is logged, never raised into the thread that started it."""
    try:
        celery_app.tasks[task_name](*args)
    except Exception:
        logger.exception("%s%s failed in its thread", task_name, args)
    finally:
        connections.close_all()  # this thread's own connections; they would outlive it otherwise


def start_thread(name: str, task_name: str, *args) -> None:
    """The broker-down half of enqueue: the task in a daemon thread of this process, named for the job."""
    threading.Thread(target=in_this_thread, args=(task_name, *args), name=name, daemon=True).start()


def enqueue(task_name: str, *args, queue: str | None = None, thread_name: str | None = None,
            could_not_queue: Callable[[Exception], None]) -> None:
    """Hand a registered task away from the request (call it once the row is committed): with no broker to a daemon
    thread of this process named `thread_name` (by default the task's name and its first argument); with one, to the
    broker (`queue`, else the default queue). A broker that cannot be reached calls `could_not_queue`."""
    if celery_app.conf.task_always_eager:
        start_thread(thread_name or f"{task_name.rsplit('.', 1)[-1]}-{args[0]}", task_name, *args)
        return
    try:
        celery_app.tasks[task_name].apply_async(args, queue=queue)
    except Exception as error:  # kombu raises many kinds: connection refused, timeouts, auth
        logger.exception("%s%s could not be queued", task_name, args)
        could_not_queue(error)


@dataclass(frozen=True)
class JobKind:
    """How one model's rows live the lifecycle: its task, queue and stored labels, and the fields it keeps.

    `labels` maps each stored status label onto its state; the first label of a state is the one written. Labels of
    steps before the lifecycle proper (a run's `checking`) are not in it. A kind with `attempt_field` sends (id,
    attempt) and a task runs only its own attempt; `claimable` narrows what may be claimed or beat for (a detached
    model reviewer is not)."""

    model: type[models.Model]
    task: str
    noun: str  # "the export": how its one-line errors name it
    labels: Mapping[str, JobStatus]
    queue: str | None = None
    thread_prefix: str = ""
    attempt_field: str | None = None
    started_field: str = "started_at"
    worker_field: str | None = None
    finished_field: str | None = "finished_at"
    retry_hint: str = ""  # what the one line of a job that could not be queued says to do after the broker is fixed
    claimable: Q = field(default_factory=Q)

    # --- the vocabulary ---------------------------------------------------------------------------------------

    def label(self, status: JobStatus) -> str:
        """The stored label that stands for `status`."""
        return next(label for label, state in self.labels.items() if state == status)

    def status_of(self, label: str) -> JobStatus | None:
        """The lifecycle's state of a stored label; None for a step outside it."""
        return self.labels.get(label)

    def _this_attempt(self, pk: int, attempt: int | None, *states: JobStatus, claimable: bool = True):
        rows = self.model._default_manager.filter(self.claimable if claimable else Q(), pk=pk)
        if self.attempt_field is not None and attempt is not None:
            rows = rows.filter(**{self.attempt_field: attempt})
        if states:
            rows = rows.filter(status__in=[self.label(state) for state in states])
        return rows

    def _finished_fields(self) -> dict:
        return {self.finished_field: timezone.now()} if self.finished_field else {}

    # --- enqueue ----------------------------------------------------------------------------------------------

    def send(self, pk: int, attempt: int | None = None) -> None:
        """enqueue() this job's task for row `pk` (and its attempt); a broker that cannot be reached fails the row
        while it is still queued."""
        args = (pk,) if self.attempt_field is None else (pk, attempt)

        def could_not_queue(error: Exception) -> None:
            self._this_attempt(pk, attempt, JobStatus.QUEUED, claimable=False).update(
                status=self.label(JobStatus.FAILED), **self._finished_fields(),
                error=f"{self.noun} could not be queued ({type(error).__name__}: {error}); check CELERY_BROKER_URL"
                      + (f", then {self.retry_hint}" if self.retry_hint else ""))

        enqueue(self.task, *args, queue=self.queue, thread_name=f"{self.thread_prefix}-{pk}",
                could_not_queue=could_not_queue)

    # --- claim and heartbeat ----------------------------------------------------------------------------------

    def claim(self, pk: int, attempt: int | None = None, *, worker: str = "", **fields) -> models.Model | None:
        """Lock the row and move it from queued to running, recording when (the start and the first heartbeat),
        who (`worker`) and `fields`; None when it is gone, not queued, another attempt's or not claimable.

        The lock waits rather than skips: the other holders of the row (a retry, a settings change) hold it for a
        moment, and a claim that skipped their row would leave the job queued until it is lost."""
        now = timezone.now()
        with transaction.atomic():
            row = self._this_attempt(pk, attempt).select_for_update().first()
            if row is None or self.status_of(row.status) != JobStatus.QUEUED:
                return None
            row.status = self.label(JobStatus.RUNNING)
            changed = {self.started_field: now, "heartbeat_at": now, **fields}
            if self.worker_field is not None:
                changed[self.worker_field] = worker
            for name, value in changed.items():
                setattr(row, name, value)
            row.save(update_fields=["status", *changed])
        return row

    def heartbeat(self, pk: int, attempt: int | None = None, **progress) -> bool:
        """Say a running job is alive (with its progress, if any); False when it is no longer running under this
        attempt (cancelled, lost, detached or started again), so its worker can stop."""
        return self._this_attempt(pk, attempt, JobStatus.RUNNING).update(
            heartbeat_at=timezone.now(), **progress) == 1

    def finish(self, pk: int, attempt: int | None, status: JobStatus, **fields) -> None:
        """Record how this attempt ended (with its end time, where the model keeps one), whatever state the row was
        left in meanwhile: the worker that ran it to its end knows best."""
        self._this_attempt(pk, attempt, claimable=False).update(status=self.label(status), **self._finished_fields(),
                                                                 **fields)

    # --- lost after -------------------------------------------------------------------------------------------

    def silent_for(self, row: models.Model, after: dt.timedelta, now: dt.datetime | None = None,
                   states: tuple[JobStatus, ...] = (JobStatus.RUNNING,)) -> dt.timedelta | None:
        """How long a row in `states` has been silent, when that is longer than `after`; else None. A row that never
        beat counts from its start, else from when it was made."""
        if self.status_of(row.status) not in states:
            return None
        heard = row.heartbeat_at or getattr(row, self.started_field, None) or row.created_at
        silent = (now or timezone.now()) - heard
        return silent if silent > after else None

    def lost_mark(self, *, after: dt.timedelta, reason: Callable[[models.Model], str], where: Q | None = None,
                  now: dt.datetime | None = None, on_failed: Callable[[models.Model], None] | None = None,
                  **fields) -> list[int]:
        """Fail every running row (narrowed by `where`) silent for longer than `after` (heartbeat_at, else its
        start), each with its one-line `reason` and `fields`. Each row is failed under its lock, read again, so a
        job that beats, ends or is failed meanwhile keeps what its worker wrote. Returns the ids failed."""
        cutoff = (now or timezone.now()) - after
        last_heard = Coalesce("heartbeat_at", self.started_field)
        silent = Q(last_heard__lt=cutoff, status=self.label(JobStatus.RUNNING)) & (where or Q())
        return self.fail_each(self.model._default_manager.annotate(last_heard=last_heard).filter(silent),
                              reason, on_failed=on_failed, **fields)

    def fail_each(self, rows, reason: Callable[[models.Model], str],
                  on_failed: Callable[[models.Model], None] | None = None, **fields) -> list[int]:
        """Fail each of `rows` (a queryset) under its lock, if it still matches, with its one-line `reason`."""
        failed = []
        for pk in list(rows.order_by("pk").values_list("pk", flat=True)):
            with transaction.atomic():
                row = rows.select_for_update().filter(pk=pk).first()
                if row is None:
                    continue  # it reported, ended or was failed meanwhile
                row.status = self.label(JobStatus.FAILED)
                row.error = reason(row)
                changed = {**self._finished_fields(), **fields}
                for name, value in changed.items():
                    setattr(row, name, value)
                row.save(update_fields=["status", "error", *changed])
            logger.warning("%s %s failed: %s", self.noun, pk, row.error)
            if on_failed is not None:
                on_failed(row)
            failed.append(pk)
        return failed

    # --- cancel -----------------------------------------------------------------------------------------------

    def cancel(self, pk: int, *, before_start: tuple[str, ...] = (), message: str = "cancelled before it started"):
        """Cancel a job under its row lock: a queued one (or one in a step `before_start`) at once, with `message`;
        a running one by asking its worker (cancel_requested), which stops it and records how it ended. Returns
        the row, or raises JobFinished for one that has ended."""
        with transaction.atomic():
            row = self.model._default_manager.select_for_update().get(pk=pk)
            state = self.status_of(row.status)
            if state in FINISHED:
                raise JobFinished(row)
            if state == JobStatus.QUEUED or row.status in before_start:
                row.status, row.error = self.label(JobStatus.CANCELLED), message
                changed = ["status", "error"]
                if self.finished_field:
                    setattr(row, self.finished_field, timezone.now())
                    changed.append(self.finished_field)
                row.save(update_fields=changed)
                return row
            row.cancel_requested = True
            row.save(update_fields=["cancel_requested"])
        return row


class JobFinished(Exception):
    """A job that has already ended cannot be cancelled; `row` is the job as it ended."""

    def __init__(self, row: models.Model):
        super().__init__(f"{row.status}")
        self.row = row
