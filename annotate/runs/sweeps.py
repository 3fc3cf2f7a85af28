"""Following runs when nobody looks: every PAIRWISE_RUN_POLL_S seconds, Slurm runs are read from their folders
and squeue, and a local run whose worker stopped reporting is marked failed.

With a broker, celery beat sends both sweeps to a worker (annotate/runs/tasks.py). Embedded mode has no beat:
the web server's own process runs them in a daemon thread (`sweeps_start_in_process`, started by
annotate/wsgi.py under runserver or gunicorn, never by migrate, other commands or tests).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading

from django.conf import settings
from django.db import connections
from django.db.models import Q
from django.utils import timezone

from annotate.runs.models import Run
from annotate.runs.queue import RUN_JOB
from annotate.runs.slurm import slurm_refresh

logger = logging.getLogger(__name__)

RESUMABLE_KINDS = (Run.Kind.DPO, Run.Kind.GRPO)
CHECK_MARGIN_S = 60  # past the config check's own timeout: its subprocess is killed by then, its thread has written


def slurm_runs_poll() -> list[int]:
    """Read every running Slurm run's folder into its row; the runs that ended (run.json says so, or squeue no
    longer lists the job) are recorded as such. Returns the ids of the runs that ended."""
    ended = []
    for run in Run.objects.filter(status=Run.Status.RUNNING, backend=Run.Backend.SLURM).order_by("pk"):
        try:
            if slurm_refresh(run).finished:
                ended.append(run.pk)
        except Exception:  # one unreadable folder or squeue hiccup must not stop the others
            logger.exception("run %s: the Slurm poll could not read it", run.pk)
    return ended


def lost_line(run: Run, last_heard: dt.datetime) -> str:
    """Why a run was marked lost, and how to continue, in one line."""
    who = ("the web process that ran it" if run.worker == "in-process" else f"its worker {run.worker or '(none)'}")
    when = last_heard.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    again = "launch it again"
    if run.kind in RESUMABLE_KINDS:
        again += (f", with resume_from_checkpoint: {run.folder}/trainer_checkpoints/checkpoint-N (its last one) to "
                  "continue from there")
    return (f"lost: {who} on {run.host or 'an unknown host'} stopped reporting; last heard from at {when}, over "
            f"{settings.PAIRWISE_RUN_LOST_AFTER_S} s before this check; {again}")


def lost_runs_mark() -> list[int]:
    """Mark failed every running local run whose worker has not reported (Run.heartbeat_at; the start for a run
    claimed before heartbeats were kept) for PAIRWISE_RUN_LOST_AFTER_S: the lifecycle's lost-after rule
    (annotate/jobs.py), each under its row lock, so a run that ends, or whose worker reports, at the same moment keeps
    what its worker wrote. Returns the ids of the runs failed."""
    return RUN_JOB.lost_mark(after=dt.timedelta(seconds=settings.PAIRWISE_RUN_LOST_AFTER_S),
                             where=Q(backend=Run.Backend.LOCAL), exit_code=None,
                             reason=lambda run: lost_line(run, run.last_heard))


# A check never started (its message lost, or a worker that never came) is failed only this long after the launch:
# a check may wait in the default queue behind exports and task-set checks before it starts.
CHECK_NEVER_STARTED_S = 1800


def lost_checks_mark() -> list[int]:
    """Mark failed every run still `checking` well past the bound of its config check, counted from when the check
    started (run_config_check stamps heartbeat_at), or never started long after the launch: the process that ran
    it died (a restart, a lost worker), so none stays checking forever. Returns the ids of the runs failed."""
    from annotate.runs.launch import CHECK_TIMEOUT_S

    bound_s = CHECK_TIMEOUT_S + CHECK_MARGIN_S
    now = timezone.now()
    lost = (Q(heartbeat_at__lt=now - dt.timedelta(seconds=bound_s))
            | Q(heartbeat_at__isnull=True, created_at__lt=now - dt.timedelta(seconds=CHECK_NEVER_STARTED_S)))
    return RUN_JOB.fail_each(Run.objects.filter(lost, status=Run.Status.CHECKING), reason=lambda run: (
        f"lost: the check of its config did not finish (started over {bound_s} s ago, or never in "
        f"{CHECK_NEVER_STARTED_S} s; the process that ran it stopped); launch it again"))


def runs_sweep() -> None:
    """The sweeps, as embedded mode runs them."""
    slurm_runs_poll()
    lost_runs_mark()
    lost_checks_mark()


_started: tuple[threading.Thread, threading.Event] | None = None
_start_lock = threading.Lock()


def _sweep_every(interval_s: float, stop: threading.Event) -> None:
    while not stop.wait(interval_s):  # the first sweep one interval after the start: the server is up by then
        try:
            runs_sweep()
        except Exception:
            logger.exception("the run sweep failed; trying again in %s s", interval_s)
        finally:
            connections.close_all()  # this thread's own; it sleeps far longer than it works


def sweeps_start_in_process(*, interval_s: float | None = None) -> threading.Thread | None:
    """Embedded mode (no broker, so no beat): run the sweeps in a daemon thread of this process, once however
    often this is called. With a broker it does nothing and returns None: beat sends them to a worker."""
    from annotate.celery import app

    global _started
    if not app.conf.task_always_eager:
        return None
    with _start_lock:
        if _started is None or not _started[0].is_alive():
            stop = threading.Event()
            thread = threading.Thread(target=_sweep_every, args=(interval_s or settings.PAIRWISE_RUN_POLL_S, stop),
                                      name="pairwise-run-sweeps", daemon=True)
            thread.start()
            _started = (thread, stop)
        return _started[0]


def sweeps_stop_in_process() -> None:
    """Stop the embedded sweep thread, if one runs, and wait for it (tests; a server just exits)."""
    global _started
    with _start_lock:
        if _started is not None:
            _started[1].set()
            _started[0].join()
            _started = None
