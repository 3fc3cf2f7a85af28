"""Launching and cancelling runs from the app (API and page).

A launch is checked by the app's own rules at once, then recorded as `checking`; the training command's own check
(`python -m training dpo|grpo --config F --check`, in a subprocess: the same one-line errors as on the command
line, and the web process never imports the training stack) runs off the request, since it takes up to a minute.
A config it accepts is recorded as queued and handed to the "training" Celery queue (annotate/runs/execute.py
runs it); one it refuses fails the run with its line.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
import threading
from functools import partial
from pathlib import Path

import yaml
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from annotate.errors import UserMistake
from annotate.exports.models import Export
from annotate.jobs import JobFinished, enqueue
from annotate.runs.checkpoints import checkpoint_resolve, reward_model_resolve, text_model
from annotate.runs.input_paths import input_path
from annotate.runs.models import Checkpoint, Run
from annotate.runs.queue import RUN_JOB, run_folder_for, send
from annotate.runs.services import snapshot_manifest
from annotate.runs.task_sets import task_set_for_path, task_set_resolve
from annotate.runs.training_process import training_command, training_env
from training.config import (
    PROCESSES_BOUNDED_ELSEWHERE_ENV,
    ConfigError,
    check_nested_settings,
    nested_items,
    yaml_config,
)
from training.trl_setup import resume_value

logger = logging.getLogger(__name__)

# The trainers a config launches. Evaluations and comparisons (eval, sample) are not: they run over registered
# checkpoints and are queued by annotate/runs/evaluation.py and compare.py with options of their own.
LAUNCH_KINDS = (Run.Kind.DPO, Run.Kind.GRPO, Run.Kind.REWARD)
SNAPSHOT_KINDS = (Run.Kind.DPO, Run.Kind.REWARD)  # the rest of LAUNCH_KINDS read a task set
CHECK_TIMEOUT_S = 180
# Keys the launch sets from its own fields; a config naming them would contradict the form.
SET_BY_LAUNCH = {"base_checkpoint": "base_checkpoint", "output_dir": "the run folder (chosen by the app)",
                 "snapshot": "snapshot", "tasks": "tasks"}
# Keys that would send a run, its metrics or its checkpoint off this server: refused at any depth of the config when
# set to anything but null or false. The training subprocess is offline as well (training_env). Credentials and
# trust_remote_code are refused at every depth by the training command's own rule (check_nested_settings), which
# the launch applies first.
OFF_SERVER_KEYS = ("push_to_hub", "hub_model_id", "hub_strategy", "hub_private_repo", "hub_always_push",
                   "hub_revision", "log_completions_hub_repo", "trackio_space_id", "trackio_bucket_id",
                   "trackio_static_space_id", "vllm_server_base_url", "vllm_server_host")
LOCAL_REPORT_TO = ("tensorboard", "none")
# Config keys whose text value is a file the trainer reads (a dict value is the settings themselves).
FILE_KEYS = ("accelerator_config", "deepspeed", "fsdp_config")


def check_config(kind: str, config: dict, *, backend: str = Run.Backend.LOCAL) -> dict:
    """Run the training CLI's own check on the config; return its resolved config or raise UserMistake."""
    with tempfile.TemporaryDirectory(prefix="pairwise-check-") as scratch:
        config_file = Path(scratch) / "config.yaml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=True), encoding="utf-8")
        try:
            done = subprocess.run(training_command(kind, "--config", str(config_file), "--check"),
                                  capture_output=True, text=True, cwd=settings.BASE_DIR, env=check_env(backend),
                                  timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise UserMistake(f"checking the config took over {CHECK_TIMEOUT_S} s; is the snapshot or checkpoint "
                              "on slow storage?", status=503) from None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode == 2 and lines:
        # The CLI's one line names the scratch file; the user wrote a form or a request body, not that file.
        message = lines[-1].removeprefix("error: ").replace(f"{config_file}: ", "config: ")
        raise UserMistake(message.replace(str(config_file), "the config"))
    if done.returncode != 0:
        logger.error("python -m training %s --check failed:\n%s", kind, done.stderr[-4000:])
        raise UserMistake(f"the training command's check failed (exit code {done.returncode}): "
                          f"{lines[-1] if lines else 'no output'}", status=500)
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_env(backend: str) -> dict[str, str]:
    """The check's environment: a local run starts on this machine, whose cores or GPUs bound its `processes`; a
    Slurm run starts on a node of its partition, which checked_overrides (annotate/runs/slurm.py) holds it to, so
    the training command's check leaves that bound to it."""
    env = training_env()
    if backend == Run.Backend.SLURM:
        env[PROCESSES_BOUNDED_ELSEWHERE_ENV] = "1"
    return env


def parse_config(raw) -> dict:
    """A config given as a mapping or as YAML text (the page's text box), held to what a run launched from the
    app may do: no keys the launch sets, nothing off this server, files only from the run input folders (their
    paths resolved here, so the training command reads the file that was checked)."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = yaml_config(raw, "config")
        except ConfigError as error:
            raise UserMistake(str(error)) from None
        raw = raw or {}
    if not isinstance(raw, dict):
        raise UserMistake("config must be a mapping of key: value lines (TRL's DPOConfig/GRPOConfig keys)")
    try:  # before anything is written, even the checked copy: a credential is refused, never stored
        check_nested_settings(raw, "config")
    except ConfigError as error:
        raise UserMistake(str(error)) from None
    check_stays_on_server(raw)
    config = dict(raw)
    for key, value in raw.items():
        if key in SET_BY_LAUNCH:
            raise UserMistake(f"config: {key} is set by the launch itself ({SET_BY_LAUNCH[key]}); remove it from "
                              "the config")
        if key in FILE_KEYS and isinstance(value, str):
            path = input_path(f"config: {key}", value)
            if not path.is_file():
                raise UserMistake(f"config: {key} {value} is not a file; give a JSON file or the settings as a "
                                  "mapping")
            config[key] = str(path)
        if key == "resume_from_checkpoint":
            config.pop(key)
            resume = resume_value(value if isinstance(value, bool | None) else str(value))
            if resume is True:
                raise UserMistake("config: resume_from_checkpoint: true would look in the new run's own folder, "
                                  "which is empty; give the trainer checkpoint folder to continue from "
                                  "(RUN/trainer_checkpoints/checkpoint-N)")
            if resume:
                path = input_path("config: resume_from_checkpoint", resume)
                if not path.is_dir():
                    raise UserMistake(f"config: resume_from_checkpoint {resume} is not a folder; give a trainer "
                                      "checkpoint folder (RUN/trainer_checkpoints/checkpoint-N)")
                config[key] = str(path)
    return config


def check_stays_on_server(raw: dict) -> None:
    """The app's own rule, at every depth of the config (nested mappings and JSON text of one included): nothing
    that would send the run, its metrics or its checkpoint off this server."""
    for where, key, value in nested_items(raw):
        name = f"{where}.{key}" if where else key
        if key in OFF_SERVER_KEYS and value not in (None, False):
            raise UserMistake(f"config: {name} is refused: a run launched from the app stays on this server (no Hub, "
                              "no remote services); remove it")
        if key == "report_to":
            for sink in [value] if isinstance(value, str) else value if isinstance(value, list) else []:
                if sink not in LOCAL_REPORT_TO:
                    raise UserMistake(f"config: {name} {sink!r} would send metrics off this server; a run "
                                      "launched from the app reports to tensorboard (in its folder) or none")


def check_launch_keys(resolved: dict, expected: dict) -> None:
    """After the training command's parser: the keys the launch sets came out as the app resolved them."""
    for key, value in expected.items():
        if resolved.get(key) != value:
            raise UserMistake(f"config: {key} came out of the training command's parser as {resolved.get(key)!r}, "
                              f"not {value!r} as the launch set it; nothing was queued")


def export_for_training(reference) -> Export:
    """A finished export of the app, by id; or one line saying what is wrong. export_snapshot_folder checks its
    folder."""
    text = str(reference if reference is not None else "").strip()
    export = (Export.objects.select_related("project").filter(pk=int(text)).first()
              if text.isdigit() and len(text) < 19 else None)
    if export is None:
        raise UserMistake(f"export {text or '(empty)'!r} is not an export of this app; pick one from a project's "
                          "Exports page")
    if export.status != Export.Status.DONE:
        raise UserMistake(f"export {export.pk} of {export.project.slug} is {export.status}, not done; a run trains "
                          "on a finished snapshot")
    return export


def export_snapshot_folder(export: Export) -> Path:
    """A finished export's snapshot folder as a run reads it; or one line saying why a launch refuses it (the folder
    is gone, or lies outside the run input folders). The launch form offers only exports that pass."""
    if not Path(export.out_dir).is_dir():
        raise UserMistake(f"export {export.pk}'s snapshot folder {export.out_dir} is gone; export the project again")
    return input_path("snapshot", export.out_dir)


def _input_path(kind: str, snapshot: str | None, tasks: str | None, export, task_set) -> tuple[str, str, dict]:
    """The snapshot (DPO, reward) or task file (GRPO) the kind needs, as an absolute path, with the app's export or
    task set it is (picked, or found by its path)."""
    on_snapshot = kind in SNAPSHOT_KINDS
    wanted, other = ("snapshot", "tasks") if on_snapshot else ("tasks", "snapshot")
    given = {"snapshot": snapshot or export, "tasks": tasks or task_set}
    if given[other]:
        picked = {"snapshot": "a snapshot", "tasks": "a task set"}
        raise UserMistake(f"a {kind} run takes {picked[wanted]}, not {picked[other]}")
    if snapshot and export or tasks and task_set:
        raise UserMistake(f"give the {wanted} once: a path or the app's {'export' if on_snapshot else 'task set'}, "
                          "not both")
    if not given[wanted]:
        what = ("a snapshot (an export of a project, or a snapshot folder)" if on_snapshot
                else "a task set (or a task file, JSONL)")
        raise UserMistake(f"{wanted} is required for a {kind} run: give {what}")
    if export:
        chosen = export_for_training(export)
        return wanted, str(export_snapshot_folder(chosen)), {"export": chosen}
    if task_set:
        chosen = task_set_resolve(task_set)
        return wanted, str(input_path("tasks", chosen.path)), {"task_set": chosen}
    path = str(input_path(wanted, given[wanted]))
    if wanted == "snapshot":
        found = Export.objects.filter(out_dir=path, status=Export.Status.DONE).first()
        return wanted, path, {"export": found} if found else {}
    found = task_set_for_path(path)
    return wanted, path, {"task_set": found} if found else {}


def picked_reward_model(kind: str, reward_model, config: dict) -> Checkpoint | None:
    """The reward-model checkpoint a GRPO launch picked (by id or name, never a path: the app writes its folder into
    the config as `reward_model`), or None. A config that names `reward_model` itself must name that very folder."""
    named = config.get("reward_model")
    if reward_model in (None, "") and named in (None, ""):
        return None
    if kind != Run.Kind.GRPO:
        raise UserMistake(f"reward_model is for grpo runs (a reward model scores their answers); a {kind} run takes "
                          "none: leave it out")
    if reward_model in (None, ""):
        raise UserMistake("config: reward_model is set by the launch from the reward model you pick (a registered "
                          "reward-model checkpoint, by name or id); pick it as reward_model and remove it from the "
                          "config")
    checkpoint = reward_model_resolve(reward_model)
    if named not in (None, "") and Path(str(named)).expanduser().resolve() != Path(checkpoint.uri).resolve():
        raise UserMistake(f"config: reward_model {str(named)[:200]} is not the folder of the reward model picked, "
                          f"{checkpoint.name!r} ({checkpoint.uri}); remove reward_model from the config")
    return checkpoint


def picked_kl_reference(kind: str, config: dict) -> Checkpoint | None:
    """The registered checkpoint a GRPO config's `reference_checkpoint` names (by name or id, like the base), whose
    folder the launch then gives the trainer; None when the config names none. Never a path as the user typed it."""
    named = config.get("reference_checkpoint")
    if kind != Run.Kind.GRPO or named in (None, ""):
        return None
    checkpoint = text_model(checkpoint_resolve(named, key="reference_checkpoint"), key="reference_checkpoint",
                            purpose="be the reference of a KL term")
    if not Path(checkpoint.uri).is_dir():
        raise UserMistake(f"reference_checkpoint {checkpoint.name!r} lies at {checkpoint.uri}, which is not a folder "
                          "here; the KL term loads its reference from a local checkpoint folder")
    return checkpoint


# The config keys a launch writes itself (over the user's config), which the training command's parser must leave
# as they were written.
LAUNCH_SET_KEYS = ("base_checkpoint", "snapshot", "tasks", "output_dir", "reward_model", "reference_checkpoint")
CHECK_RUN_CONFIG = "annotate.runs.tasks.check_run_config"
CONFIG_REFUSED = "config refused: "  # how a run whose config the training command refused begins its error


def config_checked(kind: str, backend: str, config: dict) -> dict:
    """The training command's check of a launch's full config, then the rules that read what it resolved; the
    resolved config, or UserMistake with one line."""
    from annotate.runs.slurm import STAGED_MODES, checked_overrides, template_path, without_slurm

    checked_overrides(config, backend)
    resolved = check_config(kind, without_slurm(config), backend=backend)
    mode = resolved.get("mode") if kind == Run.Kind.GRPO else None
    if backend == Run.Backend.SLURM and mode in STAGED_MODES and not template_path(kind, mode).is_file():
        raise UserMistake(f"backend slurm has no job script for grpo runs in mode {mode} (deploy/slurm/grpo_staged.sh); "
                          "launch it on the local backend")
    check_launch_keys(resolved, {**{key: config[key] for key in LAUNCH_SET_KEYS if key in config},
                                 "resume_from_checkpoint": config.get("resume_from_checkpoint")})
    return resolved


def run_launch(*, kind: str, base_checkpoint, config=None, snapshot: str | None = None, tasks: str | None = None,
               export=None, task_set=None, reward_model=None, backend: str = "local",
               launched_by: AbstractBaseUser | None = None, enqueue: bool = True, check_now: bool = True,
               train_on_heldout: bool = False) -> Run:
    """Check a launch and record it; with `enqueue`, hand it on after commit.

    The app's own rules are checked here, at once (a mistake is a UserMistake, nothing recorded). The training
    command's check takes up to a minute (it imports the training stack): with `check_now` it runs here, before
    anything is recorded, and the run is recorded queued; without it (a launch from the page or the API) the run is
    recorded as `checking` and run_config_check runs the check off the request (with `enqueue`), queueing the run
    or failing it with "config refused: <its line>".

    The input is the app's export (DPO, reward) or task set (GRPO), by id, or a path under the run input folders
    for files that live elsewhere (a cluster's storage); a path that is an export's or task set's is linked to it.
    A GRPO run may be scored by a registered reward model as well (`reward_model`, by name or id)."""
    from annotate.runs.slurm import checked_overrides, template_path

    if kind not in LAUNCH_KINDS:
        raise UserMistake(f"kind must be one of {', '.join(LAUNCH_KINDS)}, got {kind!r}")
    if backend not in Run.Backend.values:
        raise UserMistake(f"backend must be one of {', '.join(Run.Backend.values)}, got {backend!r}")
    if backend == Run.Backend.SLURM and not template_path(kind).is_file():
        raise UserMistake(f"backend slurm has no job template for {kind} runs (deploy/slurm/{kind}.sbatch); launch it "
                          "on the local backend")
    base = text_model(checkpoint_resolve(base_checkpoint), key="base_checkpoint", purpose=f"be the base of a {kind} "
                      "run")
    if not Path(base.uri).is_dir():
        raise UserMistake(f"base_checkpoint {base.name!r} lies at {base.uri}, which is not a folder here; a run "
                          "starts from a local checkpoint folder")
    user_config = parse_config(config)
    checked_overrides(user_config, backend)  # the job's resources, at once: a mistake is a 400, nothing recorded
    scorer = picked_reward_model(kind, reward_model, user_config)
    kl_reference = picked_kl_reference(kind, user_config)
    input_key, input_path, picked = _input_path(kind, snapshot, tasks, export, task_set)
    held_out = picked.get("task_set")
    if held_out is not None and held_out.variant == "heldout" and not train_on_heldout:
        raise UserMistake(f"task set {held_out.name!r} is held out: it is for evaluating checkpoints, and a run trained "
                          "on it leaves nothing unseen to judge the run by; pick a train set, or ask for it "
                          "explicitly (train_on_heldout: true)")
    set_here = {"base_checkpoint": base.uri, input_key: input_path,
                **({"reward_model": str(Path(scorer.uri).resolve())} if scorer else {}),
                **({"reference_checkpoint": kl_reference.uri} if kl_reference else {})}
    resolved = None
    if check_now:
        # The check sees the real inputs and a run folder that cannot exist yet; the real one is named after the row.
        placeholder = Path(settings.RUN_ROOT) / f".check-{os.getpid()}-{threading.get_ident()}" / "run"
        resolved = config_checked(kind, backend, {**user_config, **set_here, "output_dir": str(placeholder)})
    with transaction.atomic():
        run = Run.objects.create(
            kind=kind, backend=backend, base_checkpoint=base, reward_model=scorer, launched_by=launched_by, folder="",
            status=Run.Status.QUEUED if check_now else Run.Status.CHECKING,
            snapshot_path=input_path if input_key == "snapshot" else "",
            snapshot_manifest=snapshot_manifest(input_path) if input_key == "snapshot" else None,
            tasks_path=input_path if input_key == "tasks" else "", **picked,
        )
        run.folder = str(run_folder_for(run.pk))
        run.config = {**user_config, **set_here, "output_dir": run.folder}
        run.resolved_config = {**resolved, "output_dir": run.folder} if check_now else None
        run.save(update_fields=["folder", "config", "resolved_config"])
        if enqueue:
            transaction.on_commit(partial(send if check_now else send_config_check, run.pk))
    return run


# Config checks at once in one process (each a training-command subprocess that imports torch): twenty launches in a
# row from the embedded server check two at a time, each waiting its turn for at most CHECK_TURN_WAIT_S.
CHECKS_AT_ONCE = threading.BoundedSemaphore(2)
CHECK_TURN_WAIT_S = 600


def run_config_check(run_id: int, *, enqueue: bool = True) -> Run | None:
    """Check a `checking` run's config with the training command (config_checked), then record it queued (and,
    with `enqueue`, hand it to the training queue) or failed with "config refused: <the line>". None when the run
    is gone or no longer checking (cancelled meanwhile, or a repeated delivery); a run cancelled during the check
    stays cancelled, since every write here is conditional on the row still checking."""
    run = Run.objects.filter(pk=run_id, status=Run.Status.CHECKING).first()
    if run is None:
        return None
    still_checking = Run.objects.filter(pk=run_id, status=Run.Status.CHECKING)
    if not CHECKS_AT_ONCE.acquire(timeout=CHECK_TURN_WAIT_S):
        still_checking.update(status=Run.Status.FAILED, finished_at=timezone.now(), error=(
            f"the config check did not get its turn within {CHECK_TURN_WAIT_S} s (other launches were being checked); "
            "launch it again"))
        return Run.objects.get(pk=run_id)
    try:
        still_checking.update(heartbeat_at=timezone.now())  # the lost-check sweep counts from the check's start
        resolved = config_checked(run.kind, run.backend, run.config)
    except UserMistake as mistake:
        # A 5xx mistake is the check's own failure (no interpreter, no training packages where it ran), not the
        # config's: it is not called a refusal.
        line = " ".join(str(mistake).split())
        still_checking.update(status=Run.Status.FAILED, finished_at=timezone.now(), error=(
            CONFIG_REFUSED + line if mistake.status < 500 else f"the config check failed: {line}; launch it again"))
    except Exception as error:  # the check itself broke (a full disk, a missing interpreter): one line, logged
        logger.exception("run %s: the config check failed", run_id)
        still_checking.update(status=Run.Status.FAILED, finished_at=timezone.now(),
                              error=f"the config check failed ({type(error).__name__}: {error}); launch it again")
    else:
        queued = still_checking.update(status=Run.Status.QUEUED, resolved_config={**resolved, "output_dir": run.folder})
        if queued and enqueue:
            send(run_id)
    finally:
        CHECKS_AT_ONCE.release()
    return Run.objects.get(pk=run_id)


def config_refusal(run_id) -> str | None:
    """The line a run's config was refused with, for the launch form that launches it again; None for any other
    run (or no run: the form says so itself)."""
    text = str(run_id).strip()
    if not text.isdigit() or len(text) > 18:
        return None
    return (Run.objects.filter(pk=int(text), status=Run.Status.FAILED, error__startswith=CONFIG_REFUSED)
            .values_list("error", flat=True).first())


def send_config_check(run_id: int) -> None:
    """Hand a checking run's config check off the request, as send() hands a run (annotate/jobs.py enqueue): with no
    broker to a thread of this process; with one to the default Celery queue, never the training queue, so a check
    does not wait behind a training run. A broker that cannot be reached fails the run, saying so."""
    def could_not_queue(error: Exception) -> None:
        Run.objects.filter(pk=run_id, status=Run.Status.CHECKING).update(
            status=Run.Status.FAILED, finished_at=timezone.now(),
            error=f"the config check could not be queued ({type(error).__name__}: {error}); check CELERY_BROKER_URL")

    enqueue(CHECK_RUN_CONFIG, run_id, thread_name=f"run-config-check-{run_id}", could_not_queue=could_not_queue)


def run_cancel(run: Run) -> Run:
    """Cancel a run (the lifecycle's cancel, annotate/jobs.py): one checking its config or queued at once; a local
    one by its worker, which stops its process group; a Slurm job with scancel."""
    from annotate.runs.slurm import slurm_cancel

    try:
        run = RUN_JOB.cancel(run.pk, before_start=(Run.Status.CHECKING,))
    except JobFinished as finished:
        raise UserMistake(f"run {run.pk} has already {finished.row.status}; only a run checking its config, queued or "
                          "running can be cancelled", status=409) from None
    if run.cancel_requested and run.backend == Run.Backend.SLURM:
        slurm_cancel(run)
    return run
