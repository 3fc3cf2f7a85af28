"""The Slurm backend: the job template of the run's kind from deploy/slurm/, rendered for this run, then
sbatch; cancel is scancel. The job writes the run folder on shared storage; the app reads it (`slurm_refresh`)
every PAIRWISE_RUN_POLL_S (annotate/runs/sweeps.py) and whenever the run is looked at, and squeue says when
a job has left the queue.

A GRPO run whose resolved config has mode staged or overlapped is a chain of jobs, one per stage: the submit
script deploy/slurm/grpo_staged.sh, rendered for this run, calls sbatch once per stage and names each job on a
line; the app keeps the list beside the run folder (`run-NNNNNN.jobs`), follows the last job (the one that ends
the run) and cancels them all.

What a job asks for (partition, account, nodes, GPUs and CPUs, memory, time, extra options) comes from the
deployment's PAIRWISE_SLURM_* settings and the run config's `slurm:` mapping (annotate/runs/slurm_resources.py):
the app writes the template's resources block and keeps what it asked for beside the run folder
(`run-NNNNNN.slurm.json`), with each job's state and Slurm's reason as squeue last gave them; the `slurm:` mapping
never reaches the training command. A run of several data-parallel processes (`processes`) on a partition without
GPUs asks for a CPU for each at least, and is refused at launch if one node of its partition has fewer CPUs: its
processes share the job's one node (deploy/slurm/train.sh starts them with accelerate).
"""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
from pathlib import Path

import yaml
from django.conf import settings
from django.db import transaction

from annotate.errors import UserMistake
from annotate.runs.folder import STATUS_OF_RECORD, FolderReader, last_error_line, sidecar
from annotate.runs.models import Run
from annotate.runs.services import run_apply_folder, run_finish
from annotate.runs.slurm_resources import (
    RUN_KEYS,
    SlurmSettingError,
    extra_options,
    job_resources,
    run_overrides,
    sbatch_options,
)
from annotate.runs.training_process import training_env

COMMAND_TIMEOUT_S = 60
JOB_ID = re.compile(r"(?:Submitted batch job )?(\d+)(?:;\S+)?\s*$")
# GRPO modes (training/grpo/config.py) and the ones that run as a chain of stage jobs.
GRPO_MODES = ("in_process", "staged", "overlapped")
STAGED_MODES = ("staged", "overlapped")
STAGED_TEMPLATE = "grpo_staged.sh"
# A line the staged submit script prints per job it submitted: "JOBID NAME".
STAGED_JOB = re.compile(r"^(\d+) (pairwise-[A-Za-z0-9._-]+)$")
SUBMIT_S_PER_JOB = 2  # the staged submit script's time limit grows with the jobs it submits


def template_path(kind: str, mode: str | None = None) -> Path:
    """The job template of a run's kind; a GRPO run in mode staged or overlapped is submitted by the staged
    script instead."""
    folder = Path(settings.BASE_DIR) / "deploy" / "slurm"
    if kind == Run.Kind.GRPO and mode in STAGED_MODES:
        return folder / STAGED_TEMPLATE
    return folder / f"{kind}.sbatch"


def run_mode(run: Run) -> str:
    """The GRPO mode the training CLI resolved at launch (run.resolved_config, never the config as sent);
    in_process for other kinds and for a resolved config from before modes existed."""
    if run.kind != Run.Kind.GRPO:
        return "in_process"
    mode = (run.resolved_config or {}).get("mode") or "in_process"
    if mode not in GRPO_MODES:
        raise ValueError(f"the resolved config's mode {str(mode)[:40]!r} is none of {', '.join(GRPO_MODES)}")
    return mode


def _replace_once(text: str, pattern: str, replacement: str, what: str, template: Path) -> str:
    new, count = re.subn(pattern, lambda _: replacement, text, count=1, flags=re.MULTILINE)
    if count != 1:
        raise ValueError(f"{template} has no {what} line to fill in; restore the template's form")
    return new


RESOURCES_BLOCK = r"^# Resources:[^\n]*\n(?:#(?!SBATCH)[^\n]*\n)*(?:#SBATCH [^\n]*\n)+"
PYTHON_LINE = r"^export PYTHON=\$\{PYTHON:-python\}(?:[ ]+#.*)?$"


def deployment_resources() -> dict:
    """The deployment's PAIRWISE_SLURM_* resource settings, by RUN_KEYS key."""
    return {key: getattr(settings, f"PAIRWISE_SLURM_{key.upper()}") for key in RUN_KEYS}


def run_resources(run: Run) -> list[tuple[str, int | str, str]]:
    """What the run's job asks for: (key, value, "deployment", "this run" or "processes: N") per resource; a run of
    N processes on CPUs asks for N CPUs at least, whatever cpus_per_task says."""
    from annotate.runs.execute import processes  # execute hands Slurm runs to this module: imported when used

    resources = job_resources(deployment_resources(), run_overrides(run.config or {}, run.backend))
    count = processes(run)
    if count == 1 or _count(dict((key, value) for key, value, _ in resources)["gpus_per_node"]) > 0:
        return resources
    return [(key, count, f"processes: {count}") if key == "cpus_per_task" and _count(value) < count
            else (key, value, source) for key, value, source in resources]


def _count(value) -> int:
    """A resource count as settings or a run give it (a number, or its digits as text; empty: none)."""
    return int(value) if str(value).isascii() and str(value).isdigit() else 0


def checked_overrides(config: dict, backend: str) -> dict:
    """A launch's `slurm:` mapping checked (annotate/runs/slurm_resources.py), and on backend slurm its `processes`
    against the CPUs of its partition's nodes; or UserMistake with one line."""
    try:
        overrides = run_overrides(config, backend)
    except SlurmSettingError as error:
        raise UserMistake(str(error)) from None
    if backend == Run.Backend.SLURM:
        check_processes_fit_a_node(config.get("processes"), {**deployment_resources(), **overrides})
    return overrides


def check_processes_fit_a_node(processes, resources: dict) -> None:
    """Refuse, in one line, more processes than a node of the run's partition has CPUs (a CPU run's processes share
    the job's one node). Nothing to check with GPUs (one process per GPU), or when sinfo cannot say."""
    if isinstance(processes, bool) or not isinstance(processes, int) or processes <= 1:
        return  # one process, or a value the training command's check refuses in its own words
    if _count(resources["gpus_per_node"]) > 0:
        return
    partition = resources["partition"]
    cpus = node_cpus(partition)
    if cpus is not None and processes > cpus:
        named = f"partition {partition}" if partition else "the cluster's default partition"
        raise UserMistake(f"processes is {processes} but a node of {named} has {cpus} CPUs, and a run's processes "
                          f"share one node; set processes to {cpus} or fewer, or pick a partition of larger nodes "
                          "(slurm: {partition: NAME})")


def node_cpus(partition: str) -> int | None:
    """The most CPUs one node of `partition` (empty: the cluster's default one) has, as sinfo says; None when sinfo
    does not answer or lists no node."""
    try:
        done = _run(["sinfo", "-h", "-N", "-o", "%P|%c"])
    except (OSError, subprocess.TimeoutExpired):
        return None
    counts = []
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        name, _, cpus = line.strip().partition("|")
        if (name.rstrip("*") == partition if partition else name.endswith("*")) and cpus.isdigit():
            counts.append(int(cpus))
    return max(counts, default=None)


def without_slurm(config: dict) -> dict:
    """The config as the training command takes it: the `slurm:` mapping is the job's, not the trainer's."""
    return {key: value for key, value in config.items() if key != "slurm"}


def _deployment_extra_options() -> list[str]:
    return extra_options(settings.PAIRWISE_SLURM_EXTRA_OPTIONS, "PAIRWISE_SLURM_EXTRA_OPTIONS")


def render_job(run: Run, config_file: Path) -> str:
    """The kind's template with this run's job name, log file, config, interpreter and resources filled in."""
    template = template_path(run.kind)
    text = template.read_text(encoding="utf-8")
    text = _replace_once(text, r"^#SBATCH --job-name=.*$", f"#SBATCH --job-name=pairwise-run-{run.pk}", "job-name",
                         template)
    text = _replace_once(text, r"^#SBATCH --output=.*$", f"#SBATCH --output={sidecar(run.folder, '.log')}", "output",
                         template)
    lines = [f"#SBATCH {option}" for option in [*sbatch_options(run_resources(run)), *_deployment_extra_options()]]
    text = _replace_once(text, RESOURCES_BLOCK, "\n".join(["# Resources: PAIRWISE_SLURM_* and this run's slurm: "
                                                            "mapping", *lines, ""]), "# Resources: block", template)
    text = _replace_once(text, PYTHON_LINE, f"export PYTHON={shlex.quote(settings.PAIRWISE_SLURM_PYTHON)}",
                         "export PYTHON=${PYTHON:-python}", template)
    return _replace_once(text, r"^CONFIG=\$\{1:\?.*\}$", f"CONFIG=${{1:-{shlex.quote(str(config_file))}}}",
                         "CONFIG=${1:?...}", template)


def _resolved_count(resolved: dict, key: str, least: int) -> int:
    value = resolved.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"the resolved config's {key} is {str(value)[:40]}, not a whole number of at least {least}")
    return value


def render_staged(run: Run, config_file: Path, resume_from: int | None = None) -> str:
    """The staged submit script with this run's job names, log folder, config and resolved run filled in: its
    output_dir (the app's run folder), max_steps, mode and max_staleness as the training CLI resolved them; with
    `resume_from`, the chain goes on from that version."""
    template = template_path(run.kind, run_mode(run))
    resolved = run.resolved_config or {}
    if str(resolved.get("output_dir")) != run.folder:
        raise ValueError(f"the resolved config's output_dir is not the run folder {run.folder}")
    line = json.dumps({"max_staleness": _resolved_count(resolved, "max_staleness", 0),
                       "max_steps": _resolved_count(resolved, "max_steps", 1), "mode": run_mode(run),
                       "output_dir": run.folder}, sort_keys=True, ensure_ascii=False)
    # Every stage is a one-node job: the GPU stages (generate, update) ask for the run's GPUs, the others for none.
    resources = [resource for resource in run_resources(run) if resource[0] != "nodes"]
    extra = _deployment_extra_options()
    gpu_options = " ".join([*sbatch_options(resources), *extra])
    cpu_options = " ".join([*sbatch_options(resources, gpus=False), *extra])
    text = template.read_text(encoding="utf-8")
    for pattern, replacement, what in (
            (r"^CONFIG=\$\{1:\?.*\}$", f"CONFIG=${{1:-{shlex.quote(str(config_file))}}}", "CONFIG=${1:?...}"),
            (r"^JOB_PREFIX=.*$", f"JOB_PREFIX=pairwise-run-{run.pk}", "JOB_PREFIX"),
            (r"^LOG_DIR=.*$", f"LOG_DIR={shlex.quote(str(sidecar(run.folder, '.logs')))}", "LOG_DIR"),
            (PYTHON_LINE, f"export PYTHON={shlex.quote(settings.PAIRWISE_SLURM_PYTHON)}", "export PYTHON"),
            (r"^GPU_OPTIONS=.*$", f"GPU_OPTIONS={shlex.quote(gpu_options)}", "GPU_OPTIONS"),
            (r"^CPU_OPTIONS=.*$", f"CPU_OPTIONS={shlex.quote(cpu_options)}", "CPU_OPTIONS"),
            (r"^RESUME_FROM=.*$", f"RESUME_FROM={'' if resume_from is None else int(resume_from)}", "RESUME_FROM"),
            (r'^RESOLVED=""$', f"RESOLVED={shlex.quote(line)}", 'RESOLVED=""')):
        text = _replace_once(text, pattern, replacement, what, template)
    return text


def _run(command: list[str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    """A Slurm command in the training environment (the job inherits it: offline, unbuffered, this checkout)."""
    return subprocess.run(command, capture_output=True, text=True, cwd=settings.BASE_DIR, env=training_env(),
                          timeout=timeout)


# What a Slurm command says when the cluster itself does not answer, and the one line the app shows for it.
NOT_ANSWERING = (("Munge encode failed", "munge is not answering on this host (sbatch could not sign its request)"),
                 ("Unable to contact slurm controller", "slurmctld is not answering"))


def slurm_said(done: subprocess.CompletedProcess) -> str:
    """The one line of a Slurm command's failure: which daemon did not answer, else its last error line."""
    for marker, line in NOT_ANSWERING:
        said = next((said.strip() for said in done.stderr.splitlines() if marker in said), None)
        if said:
            return f"{line}: {said}"
    return last_error_line(done.stderr) or last_error_line(done.stdout) or "no output"


def write_job_config(run: Run, config_file: Path) -> None:
    """The config file the job reads: the run's config without its slurm: mapping (the job's resources, which the
    training command does not take)."""
    config_file.write_text(yaml.safe_dump(without_slurm(run.config or {}), sort_keys=True), encoding="utf-8")


def _job_file(run: Run) -> Path:
    return sidecar(run.folder, ".slurm.json")


def job_record(run: Run) -> dict:
    """What the app kept of the run's jobs: the resources asked for, the extra options and interpreter, and each
    job's state and reason as squeue or sacct last gave them. {} before submission."""
    try:
        record = json.loads(_job_file(run).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _keep_job_record(run: Run, **changes) -> None:
    record = {**job_record(run), **changes}
    path = _job_file(run)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record, sort_keys=True), encoding="utf-8")
    partial.replace(path)  # whole or not at all: a page reads it while the sweep writes it


def staged_jobs(run: Run) -> list[str]:
    """The job ids of a staged run's chain, as the app kept them at submission ([] for a one-job run)."""
    try:
        lines = sidecar(run.folder, ".jobs").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [match.group(1) for match in map(STAGED_JOB.match, lines) if match]


def _submit_staged(run: Run, config_file: Path, resume_from: int | None = None) -> Run:
    """Run the rendered staged submit script; keep every job it submitted and follow the last one."""
    script = sidecar(run.folder, ".sh")
    jobs_file = sidecar(run.folder, ".jobs")
    try:
        text = render_staged(run, config_file, resume_from)
        steps = run.resolved_config["max_steps"]
        script.write_text(text, encoding="utf-8")
        done = _run(["bash", str(script)], timeout=COMMAND_TIMEOUT_S + SUBMIT_S_PER_JOB * (3 * steps + 2))
    except subprocess.TimeoutExpired as error:
        # Whatever it submitted before it was stopped is cancelled: no half chain stays queued.
        submitted = [m.group(1) for m in map(STAGED_JOB.match, _text(error.stdout).splitlines()) if m]
        if submitted:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                _run(["scancel", *submitted])
        return run_finish(run, status=Run.Status.FAILED, error=f"the staged submit script ran over its time limit "
                          f"({error.timeout:.0f} s); the {len(submitted)} jobs it had submitted were cancelled")
    except (OSError, ValueError) as error:
        return run_finish(run, status=Run.Status.FAILED, error=f"the staged submit script could not be run: {error}")
    lines = [m.group(0) for m in map(STAGED_JOB.match, done.stdout.splitlines()) if m]
    if done.returncode != 0 or not lines:
        return run_finish(run, status=Run.Status.FAILED, exit_code=done.returncode,
                          error=f"the staged jobs were not submitted: {slurm_said(done)}")
    jobs_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run.slurm_job_id = lines[-1].split(" ", 1)[0]
    Run.objects.filter(pk=run.pk).update(slurm_job_id=run.slurm_job_id)
    return run


def _text(output) -> str:
    return output.decode("utf-8", errors="replace") if isinstance(output, bytes) else output or ""


def slurm_submit(run: Run, config_file: Path) -> Run:
    """Render and submit the job; the run stays running with its job id, or fails with sbatch's words."""
    try:
        write_job_config(run, config_file)
        _keep_job_record(run, resources=run_resources(run), extra_options=_deployment_extra_options(),
                         python=settings.PAIRWISE_SLURM_PYTHON, jobs=[])
        if run_mode(run) in STAGED_MODES:
            return _submit_staged(run, config_file)
        script = sidecar(run.folder, ".sbatch")
        script.write_text(render_job(run, config_file), encoding="utf-8")
        done = _run(["sbatch", "--parsable", f"--chdir={settings.BASE_DIR}", str(script)])
    except (OSError, ValueError, subprocess.TimeoutExpired) as error:
        return run_finish(run, status=Run.Status.FAILED, error=f"sbatch could not be run: {error}")
    match = JOB_ID.search(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "")
    if done.returncode != 0 or match is None:
        return run_finish(run, status=Run.Status.FAILED, exit_code=done.returncode,
                          error=f"sbatch refused the job: {slurm_said(done)}")
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
            done = _run(["scancel", *(staged_jobs(run) or [run.slurm_job_id])])
        except (OSError, subprocess.TimeoutExpired) as error:
            done = subprocess.CompletedProcess([], 1, "", str(error))
        if done.returncode != 0:
            run.log_tail = (run.log_tail + f"\nscancel {run.slurm_job_id}: {slurm_said(done)}").strip()
            Run.objects.filter(pk=run.pk).update(log_tail=run.log_tail)
    return _finish_once(run, status=Run.Status.CANCELLED, error=f"cancelled; scancel {run.slurm_job_id or '(no job)'}")


def resume_refusal(run: Run) -> str | None:
    """Why the run cannot go on from its last complete version, in one line; None when it can: a staged GRPO run on
    Slurm, cancelled or failed, none of its chain's jobs still queued (squeue is asked), with a version in its
    folder. The run page shows its Resume button only then; slurm_resume checks it again."""
    from training.grpo.versions import latest_version

    if run.backend != Run.Backend.SLURM or run_mode(run) not in STAGED_MODES:
        return f"run {run.pk} is not a staged GRPO run on Slurm; only such a run goes on from a version"
    if run.status not in (Run.Status.CANCELLED, Run.Status.FAILED):
        return f"run {run.pk} is {run.status}; only a cancelled or failed run goes on from a version"
    if latest_version(Path(run.folder)) is None:
        return f"run {run.pk} has no complete version in {run.folder}/versions; launch it again instead"
    still = queue_states(_run_jobs(run))
    if still is None:
        return f"run {run.pk}: squeue does not answer; resume it once the cluster does"
    if still:
        return (f"run {run.pk}: jobs of its chain are still queued ({', '.join(still)}); resume it once they have left "
                "the queue")
    return None


def slurm_resume(run: Run) -> Run:
    """Submit a staged run whose chain stopped (a stage job cancelled or failed) again, from its last complete
    version: the same run and folder, a new chain with no prepare job. UserMistake (one line) for a run that cannot
    (resume_refusal). `manage.py resume_slurm_run` and the run page's Resume button call it."""
    from training.grpo.versions import latest_version

    refusal = resume_refusal(run)
    if refusal is not None:
        raise UserMistake(refusal, status=409)
    version = latest_version(Path(run.folder))
    with transaction.atomic():
        if Run.objects.filter(pk=run.pk, status=run.status).update(
                status=Run.Status.RUNNING, finished_at=None, exit_code=None, error="", slurm_job_id="") != 1:
            raise UserMistake(f"run {run.pk} changed meanwhile; look at it again", status=409)
    run.refresh_from_db()
    return _submit_staged(run, sidecar(run.folder, ".yaml"), resume_from=version)


def log_path(run: Run) -> Path:
    """The log the run page shows: the job's; for a staged run, the stage job that wrote last (each job of the
    chain logs to its own file in run-NNNNNN.logs/, named after the job)."""
    logs = sidecar(run.folder, ".logs")
    try:
        newest = max(logs.glob("pairwise-*.out"), key=lambda path: path.stat().st_mtime, default=None)
    except OSError:
        newest = None
    return newest or sidecar(run.folder, ".log")


def _run_jobs(run: Run) -> list[str]:
    return staged_jobs(run) or ([run.slurm_job_id] if run.slurm_job_id else [])


def queue_states(job_ids: list[str]) -> dict[str, dict] | None:
    """squeue's word on the jobs it still lists: {job id: {name, state, reason}}; None when squeue cannot say
    (the cluster does not answer). A job that left the queue is not in it."""
    try:
        done = _run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%j|%T|%r"])
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return {} if "Invalid job id" in done.stderr else None
    states = {}
    for line in done.stdout.splitlines():
        job, name, state, reason = (line.split("|", 3) + ["", "", ""])[:4]
        states[job.strip()] = {"name": name, "state": state, "reason": "" if reason == "None" else reason}
    return states


def job_ends(job_ids: list[str]) -> dict[str, dict]:
    """How the jobs ended, as sacct says: {job id: {name, state, exit_code}}. From the accounting database where
    the cluster keeps one, else from the job completion file (sacct --completion: JobCompType=jobcomp/filetxt);
    {} where neither answers."""
    for completion in ([], ["--completion"]):
        try:
            done = _run(["sacct", *completion, "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,JobName,State,"
                         "ExitCode"])
        except (OSError, subprocess.TimeoutExpired):
            return {}
        if done.returncode == 0 and done.stdout.strip():
            ends = {}
            for line in done.stdout.splitlines():
                job, name, state, code = (line.split("|", 3) + ["", "", ""])[:4]
                if job in job_ids:  # not its steps (12.batch)
                    ends[job] = {"name": name, "state": state.split(" ")[0], "exit_code": code}
            return ends
    return {}


# srun's own lines about a step it ends because a task failed: they follow the line that says why.
SRUN_BOOKKEEPING = re.compile(r"srun: (launch/slurm: _step_signal|error: \S+: tasks? [0-9-]+: |Job step aborted|"
                              r"Terminating|error: Timed out waiting)")


def job_log_line(log: str) -> str:
    """The line of a job's log that says why it failed: the training command's `error: ...`, else the last line
    that speaks of an error (slurmstepd's execve or memory limit), else the last line; srun's bookkeeping after
    it is passed over."""
    lines = [line.strip() for line in log.splitlines() if line.strip() and not SRUN_BOOKKEEPING.match(line.strip())]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line.removeprefix("error: ")
    return next((line for line in reversed(lines) if "error" in line.lower()), lines[-1] if lines else "")


def _ended(run: Run, jobs: list[str]) -> tuple[str, str]:
    """How a run whose last job left the queue without finishing run.json ended: the first of its jobs that did
    not complete, as sacct says, and the line of the log that says why. Cancelled when that job was cancelled
    (scancel outside the app: a staged run's later jobs are then cancelled by Slurm for want of it), else failed."""
    said = job_log_line(run.log_tail) or "see the job log"
    ends = job_ends(jobs)
    _keep_job_states(run, {}, ends)
    for job in jobs:
        end = ends.get(job)
        if end and end["state"] != "COMPLETED":
            code = f", exit code {end['exit_code']}" if end["exit_code"] not in ("", "0:0") else ""
            status = Run.Status.CANCELLED if end["state"] == "CANCELLED" else Run.Status.FAILED
            return status, f"Slurm job {job} ({end['name']}) ended {end['state']}{code}: {said}"
    return Run.Status.FAILED, f"Slurm job {run.slurm_job_id} left the queue without finishing its run.json: {said}"


def slurm_refresh(run: Run) -> Run:
    """Read a running Slurm run's folder into its row, keep squeue's word on its jobs (a pending job's reason), and
    record its end once run.json or the queue says so."""
    if run.backend != Run.Backend.SLURM or run.status != Run.Status.RUNNING:
        return run
    run_apply_folder(run, FolderReader(Path(run.folder), log=log_path(run)).read())
    status = STATUS_OF_RECORD.get((run.record or {}).get("status"))
    if status is not None:
        return _finish_once(run, status=status, error=(run.record or {}).get("error") or "")
    jobs = _run_jobs(run)
    if not jobs:
        return run
    states = queue_states(jobs)
    if states is None:
        return run
    _keep_job_states(run, states)
    if run.slurm_job_id not in states:
        status, line = _ended(run, jobs)
        return _finish_once(run, status=status, error=line)
    return run


# The states a job ends in (sacct's); a job kept in another state was last seen queued or running.
ENDED_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED",
                "BOOT_FAIL", "DEADLINE")


def _job_names(run: Run) -> dict[str, str]:
    try:
        lines = sidecar(run.folder, ".jobs").read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    names = {match.group(1): match.group(2) for match in map(STAGED_JOB.match, lines) if match}
    return names or ({run.slurm_job_id: f"pairwise-run-{run.pk}"} if run.slurm_job_id else {})


def _keep_job_states(run: Run, states: dict[str, dict], ends: dict[str, dict] | None = None) -> list[dict]:
    """Keep each job's state beside the run folder: squeue's while it is listed (with the reason it waits for),
    then sacct's end; a job neither lists any more keeps its last state, marked as having left the queue."""
    kept = {job.get("id"): job for job in job_record(run).get("jobs") or [] if isinstance(job, dict)}
    jobs = []
    for job, name in _job_names(run).items():
        entry = {"id": job, "name": name, "state": "", "reason": "", **kept.get(job, {})}
        if job in states:
            entry.update(state=states[job]["state"], reason=states[job]["reason"])
        elif ends and job in ends:
            entry.update(state=ends[job]["state"], reason=f"exit code {ends[job]['exit_code']}")
        elif entry["state"] not in ENDED_STATES:
            entry.update(reason="left the queue")
        jobs.append(entry)
    with contextlib.suppress(OSError):
        _keep_job_record(run, jobs=jobs)
    return jobs


def ended_job_states(run: Run) -> list[dict]:
    """A finished run's jobs as the run page shows them: once, sacct's word on how each ended is kept."""
    jobs = job_record(run).get("jobs") or []
    if not run.finished or not jobs or all(job.get("state") in ENDED_STATES for job in jobs):
        return jobs
    return _keep_job_states(run, {}, job_ends([job["id"] for job in jobs]))
