"""Running a queued run: the local backend's subprocess, followed until it ends; or a Slurm submission.

The worker claims the run under its row lock (a message delivered twice runs once), writes the config
beside the run folder, and starts `python -m training KIND --config F` in a process group of its own, so
cancelling stops the trainer and anything it started. While it runs, metrics.jsonl, run.json, ledger.json
and the log's tail are copied into the row every POLL_S. A worker that restarts finds the runs it was
following: a training process still alive is followed again, one that is gone is marked failed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from django.conf import settings

from annotate.errors import UserMistake
from annotate.runs.compare import sample_command_args, sample_import
from annotate.runs.demo_checkpoint import sft_command_args, sft_register
from annotate.runs.evaluation import eval_command_args, eval_result
from annotate.runs.folder import FolderReader, last_error_line, sidecar
from annotate.runs.models import Run
from annotate.runs.queue import RUN_JOB
from annotate.runs.services import run_apply_folder, run_finish
from annotate.runs.training_process import launched_training_command, training_command, training_env
from training.run_folder import RecordStatus

logger = logging.getLogger(__name__)

POLL_S = 1.0
# How often a follower tells the row it is still there (Run.heartbeat_at); a run not heard from for
# PAIRWISE_RUN_LOST_AFTER_S is marked lost (annotate/runs/sweeps.py).
HEARTBEAT_S = 5.0
# The kinds whose config is a trainer's, where `processes` (data-parallel processes) is a key.
TRAINER_KINDS = (Run.Kind.DPO, Run.Kind.GRPO, Run.Kind.REWARD)
STOP_GRACE_S = 10.0  # SIGTERM first, so the trainer can mark its run.json; then SIGKILL


def _claim(run_id: int, worker: str) -> Run | None:
    """The lifecycle's claim (annotate/jobs.py): None when the run was cancelled before it started, or for a repeated
    delivery."""
    return RUN_JOB.claim(run_id, worker=worker, host=socket.gethostname())


def processes(run: Run) -> int:
    """The data-parallel processes a trainer's config asks for (its --check has parsed the value); 1 otherwise."""
    if run.kind not in TRAINER_KINDS:
        return 1
    try:
        return max(int((run.config or {}).get("processes", 1)), 1)
    except (TypeError, ValueError):
        return 1


def launched_processes(run: Run) -> int:
    """The processes the worker starts the training command as: a staged or overlapped GRPO run's cycle is one
    process, which starts its update stage as `processes` itself (training/grpo/cycle.py)."""
    if run.kind == Run.Kind.GRPO and (run.resolved_config or {}).get("mode", "in_process") != "in_process":
        return 1
    return processes(run)


def write_config(run: Run) -> Path:
    config_file = sidecar(run.folder, ".yaml")
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(yaml.safe_dump(run.config, sort_keys=True), encoding="utf-8")
    return config_file


def command_args(run: Run, config_file: Path) -> list[str]:
    """The training command's arguments: a trainer reads its config file; sampling takes its options."""
    if run.kind == Run.Kind.SAMPLE:
        return sample_command_args(run)
    if run.kind == Run.Kind.EVAL:
        return eval_command_args(run)
    if run.kind == Run.Kind.SFT:
        return sft_command_args(run)
    return [run.kind, "--config", str(config_file)]


def _after_success(run: Run) -> Run:
    """What a kind does once its command succeeded: an evaluation's figures are kept; a comparison's answers
    go into their project."""
    if run.kind == Run.Kind.EVAL:
        run.record = {**(run.record or {}), "eval": eval_result(run)}
        Run.objects.filter(pk=run.pk).update(record=run.record)
    if run.kind == Run.Kind.SFT:
        try:
            sft_register(run)
        except UserMistake as error:
            return run_finish(run, status=Run.Status.FAILED, exit_code=0, error=f"the checkpoint it built could not "
                              f"be registered: {error}")
    if run.kind != Run.Kind.SAMPLE:
        return run_finish(run, status=Run.Status.SUCCEEDED, exit_code=0)
    try:
        imported = sample_import(run)
    except UserMistake as error:
        return run_finish(run, status=Run.Status.FAILED, exit_code=0, error=str(error))
    run.record = {**(run.record or {}), "imported": imported}
    Run.objects.filter(pk=run.pk).update(record=run.record)
    return run_finish(run, status=Run.Status.SUCCEEDED, exit_code=0)


def run_execute(*, run_id: int, worker: str) -> Run | None:
    """Run one queued run to its end (local) or until it is submitted (Slurm); None if it is not queued."""
    run = _claim(run_id, worker)
    if run is None:
        return None
    try:
        config_file = write_config(run)
        if run.backend == Run.Backend.SLURM:
            from annotate.runs.slurm import slurm_submit

            return slurm_submit(run, config_file)
        log = sidecar(run.folder, ".log")
        with open(log, "ab") as output:
            args, count = command_args(run, config_file), launched_processes(run)
            command = training_command(*args) if count == 1 else launched_training_command(count, *args)
            process = subprocess.Popen(command,
                                       cwd=settings.BASE_DIR, env=training_env(), stdout=output,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as error:
        return run_finish(run, status=Run.Status.FAILED, error=f"the training command could not start: {error}")
    Run.objects.filter(pk=run.pk).update(pid=process.pid)
    run.pid = process.pid
    return follow(run, exit_code=process.poll, process_alive=lambda: process.poll() is None)


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group has ended
        os.killpg(pid, sig)  # the trainer leads its own group (start_new_session)


def follow(run: Run, *, exit_code: Callable[[], int | None], process_alive: Callable[[], bool]) -> Run:
    """Copy the run folder into the row until the process ends; stop its group when a cancel is asked for."""
    reader = FolderReader(Path(run.folder), log=sidecar(run.folder, ".log"))
    stop_sent_at: float | None = None
    beat_at: float | None = None  # the first pass says so at once: a follower after a restart starts late
    try:
        while True:
            alive = process_alive()
            run_apply_folder(run, reader.read())
            if not alive:
                break
            if beat_at is None or time.monotonic() - beat_at >= HEARTBEAT_S:
                RUN_JOB.heartbeat(run.pk)
                beat_at = time.monotonic()
            if stop_sent_at is None and Run.objects.filter(pk=run.pk, cancel_requested=True).exists():
                _signal_group(run.pid, signal.SIGTERM)
                stop_sent_at = time.monotonic()
            elif stop_sent_at is not None and time.monotonic() - stop_sent_at > STOP_GRACE_S:
                _signal_group(run.pid, signal.SIGKILL)
            time.sleep(POLL_S)
    except BaseException as error:
        # The worker is going away (or the database is): stop the trainer rather than leave it unwatched.
        _signal_group(run.pid, signal.SIGKILL)
        run_finish(run, status=Run.Status.FAILED,
                   error=f"stopped: its worker {run.worker} stopped following it ({type(error).__name__})")
        raise
    _signal_group(run.pid, signal.SIGKILL)  # whatever the trainer started and left behind
    return _ended(run, exit_code())


def _ended(run: Run, code: int | None) -> Run:
    run.refresh_from_db(fields=["cancel_requested"])
    record_status = (run.record or {}).get("status")
    if run.cancel_requested:
        return run_finish(run, status=Run.Status.CANCELLED, exit_code=code, error="cancelled; its process group "
                          "was stopped")
    if code == 0:
        return _after_success(run)
    if code is None and record_status == RecordStatus.COMPLETED:
        return run_finish(run, status=Run.Status.SUCCEEDED)
    reason = last_error_line(run.log_tail) or (run.record or {}).get("error") or "no output"
    where = f"exit code {code}" if code is not None else f"run.json says {record_status or 'nothing'}"
    return run_finish(run, status=Run.Status.FAILED, exit_code=code, error=f"{reason} ({where})")


def _is_training_process(pid: int | None) -> bool:
    """True if `pid` is alive here and is a `python -m training` process (not a reused pid)."""
    if not pid:
        return False
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z" and b"training" in command and b"-m" in command


def runs_reconcile(*, worker: str) -> list[int]:
    """A worker that has just started follows nothing yet: its runs still marked running either have a live
    training process (returned, to be followed again) or are marked failed with the reason."""
    adopt = []
    for run in Run.objects.filter(status=Run.Status.RUNNING, backend=Run.Backend.LOCAL, worker=worker):
        if run.host == socket.gethostname() and _is_training_process(run.pid):
            adopt.append(run.pk)
            continue
        run_finish(run, status=Run.Status.FAILED, error=(
            f"its worker {worker} restarted while it ran and its training process (pid {run.pid}) is gone; "
            "launch it again, with resume_from_checkpoint: true to continue from its last checkpoint"))
    return adopt


def run_follow_again(*, run_id: int) -> Run | None:
    """Follow a run whose worker restarted while its training process lived on; its exit code is lost, so
    run.json's status says how it ended."""
    run = Run.objects.filter(pk=run_id, status=Run.Status.RUNNING).first()
    if run is None:
        return None
    return follow(run, exit_code=lambda: None, process_alive=lambda: _is_training_process(run.pid))
