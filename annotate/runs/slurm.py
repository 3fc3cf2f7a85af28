"""The Slurm backend: the job template of the run's kind from deploy/slurm/, rendered for this run, then
sbatch; cancel is scancel. The job writes the run folder on shared storage; the app reads it (`slurm_refresh`)
every PAIRWISE_RUN_POLL_S (annotate/runs/sweeps.py) and whenever the run is looked at, and squeue says when
a job has left the queue.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from django.conf import settings
from django.db import transaction

from annotate.runs.folder import STATUS_OF_RECORD, FolderReader, last_error_line, sidecar
from annotate.runs.models import Run
from annotate.runs.services import run_apply_folder, run_finish

COMMAND_TIMEOUT_S = 60
JOB_ID = re.compile(r"(?:Submitted batch job )?(\d+)(?:;\S+)?\s*$")


def template_path(kind: str) -> Path:
    return Path(settings.BASE_DIR) / "deploy" / "slurm" / f"{kind}.sbatch"


def _replace_once(text: str, pattern: str, replacement: str, what: str, template: Path) -> str:
    new, count = re.subn(pattern, lambda _: replacement, text, count=1, flags=re.MULTILINE)
    if count != 1:
        raise ValueError(f"{template} has no {what} line to fill in; restore the template's form")
    return new


def render_job(run: Run, config_file: Path) -> str:
    """The kind's template with this run's job name, log file and config filled in."""
    template = template_path(run.kind)
    text = template.read_text(encoding="utf-8")
    text = _replace_once(text, r"^#SBATCH --job-name=.*$", f"#SBATCH --job-name=pairwise-run-{run.pk}", "job-name",
                         template)
    text = _replace_once(text, r"^#SBATCH --output=.*$", f"#SBATCH --output={sidecar(run.folder, '.log')}", "output",
                         template)
    return _replace_once(text, r"^CONFIG=\$\{1:\?.*\}$", f"CONFIG=${{1:-{shlex.quote(str(config_file))}}}",
                         "CONFIG=${1:?...}", template)


def _run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, cwd=settings.BASE_DIR, timeout=COMMAND_TIMEOUT_S)


def slurm_submit(run: Run, config_file: Path) -> Run:
    """Render and submit the job; the run stays running with its job id, or fails with sbatch's words."""
    try:
        script = sidecar(run.folder, ".sbatch")
        script.write_text(render_job(run, config_file), encoding="utf-8")
        done = _run(["sbatch", "--parsable", f"--chdir={settings.BASE_DIR}", str(script)])
    except (OSError, ValueError, subprocess.TimeoutExpired) as error:
        return run_finish(run, status=Run.Status.FAILED, error=f"sbatch could not be run: {error}")
    match = JOB_ID.search(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "")
    if done.returncode != 0 or match is None:
        said = last_error_line(done.stderr) or last_error_line(done.stdout) or "no output"
        return run_finish(run, status=Run.Status.FAILED, exit_code=done.returncode,
                          error=f"sbatch refused the job: {said}")
    run.slurm_job_id = match.group(1)
    Run.objects.filter(pk=run.pk).update(slurm_job_id=run.slurm_job_id)
    return run


def _finish_once(run: Run, *, status: str, exit_code: int | None = None, error: str) -> Run:
    """Record the run's end unless it has one already: the periodic poll, a page view and a cancel may look at
    the same run at once, and the end recorded first stands (under the row lock)."""
    with transaction.atomic():
        now = Run.objects.select_for_update().filter(pk=run.pk).values_list("status", flat=True).first()
        if now != Run.Status.RUNNING:
            run.refresh_from_db()
            return run
        return run_finish(run, status=status, exit_code=exit_code, error=error)


def slurm_cancel(run: Run) -> Run:
    """scancel the job; the run is cancelled whatever the job had done so far (unless its end was recorded
    a moment before)."""
    if run.slurm_job_id:
        try:
            done = _run(["scancel", run.slurm_job_id])
        except (OSError, subprocess.TimeoutExpired) as error:
            done = subprocess.CompletedProcess([], 1, "", str(error))
        if done.returncode != 0:
            run.log_tail = (run.log_tail + f"\nscancel {run.slurm_job_id}: {last_error_line(done.stderr)}").strip()
            Run.objects.filter(pk=run.pk).update(log_tail=run.log_tail)
    return _finish_once(run, status=Run.Status.CANCELLED, error=f"cancelled; scancel {run.slurm_job_id or '(no job)'}")


def _job_in_queue(job_id: str) -> bool | None:
    """True while squeue lists the job, False once it does not, None when squeue cannot say."""
    try:
        done = _run(["squeue", "-h", "-j", job_id, "-o", "%T"])
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return False if "Invalid job id" in done.stderr else None
    return bool(done.stdout.strip())


def slurm_refresh(run: Run) -> Run:
    """Read a running Slurm run's folder into its row, and record its end once run.json or squeue says so."""
    if run.backend != Run.Backend.SLURM or run.status != Run.Status.RUNNING:
        return run
    run_apply_folder(run, FolderReader(Path(run.folder), log=sidecar(run.folder, ".log")).read())
    status = STATUS_OF_RECORD.get((run.record or {}).get("status"))
    if status is not None:
        return _finish_once(run, status=status, error=(run.record or {}).get("error") or "")
    if run.slurm_job_id and _job_in_queue(run.slurm_job_id) is False:
        return _finish_once(run, status=Run.Status.FAILED, error=(
            f"Slurm job {run.slurm_job_id} left the queue without finishing its run.json: "
            f"{last_error_line(run.log_tail) or 'see the job log'}"))
    return run
