"""Writes of a run's record: what its folder says, how it ended, the checkpoint it made, and registering a
run folder made outside the app (`manage.py register_run`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from annotate.errors import UserMistake
from annotate.runs.checkpoints import (
    checkpoint_for_folder,
    local_content_hash,
    made_checkpoint_name,
    registered_reward_model,
)
from annotate.runs.folder import STATUS_OF_RECORD, FolderReader
from annotate.runs.models import Checkpoint, Run
from training.json_input import read_json_file
from training.run_folder import RUN_FORMAT, weights_unchanged_reason
from training.snapshot import SnapshotError, read_manifest


def run_apply_folder(run: Run, state: dict) -> None:
    """Copy what FolderReader read into the row (metrics, run.json, ledger, log tail), saving only the fields
    that changed: a follower polling a run folder that stands still writes nothing."""
    record = state["record"] or run.record
    new = {"metrics": state["metrics"], "record": record, "ledger": state["ledger"] or run.ledger,
           "log_tail": state["log_tail"] or run.log_tail}
    if record and record.get("config") and not run.resolved_config:
        new["resolved_config"] = record["config"]
    changed = {name: value for name, value in new.items() if value != getattr(run, name)}
    if "metrics" in changed:
        changed["metrics"] = list(changed["metrics"])  # a copy: FolderReader keeps appending to its own list
    for name, value in changed.items():
        setattr(run, name, value)
    if changed:
        Run.objects.filter(pk=run.pk).update(**changed)


def run_finish(run: Run, *, status: str, exit_code: int | None = None, error: str = "") -> Run:
    """Record how a run ended; a successful run's checkpoint is registered with the base as its parent."""
    with transaction.atomic():
        run.status, run.exit_code, run.error = status, exit_code, error
        run.finished_at = timezone.now()
        run.save(update_fields=["status", "exit_code", "error", "finished_at"])
        if status == Run.Status.SUCCEEDED:
            register_output_checkpoint(run)
    return run


def register_output_checkpoint(run: Run) -> Checkpoint | None:
    """The checkpoint run.json names as the run's output, registered new with the base as its parent and this
    run as its maker, and named after both (`tiny-sft · dpo · run 3`). Never an existing checkpoint: a
    checkpoint's origin is written once, so weights already registered (the base's own, when the run changed
    nothing) are left as they are and nothing is linked."""
    output = (run.record or {}).get("output_checkpoint") or {}
    if not output.get("path"):
        return None
    Run.objects.select_for_update().filter(pk=run.pk).first()  # one finish of a run registers at a time
    if (made := Checkpoint.objects.filter(run=run).first()) is not None:
        return made  # the run's end read a second time
    content_hash = output.get("content_hash")
    if not content_hash and Path(output["path"]).is_dir():
        content_hash = local_content_hash(Path(output["path"]))
    if _output_refusal(run, content_hash) is not None:
        return None
    checkpoint = checkpoint_for_folder(output["path"], content_hash=content_hash, name=made_checkpoint_name(run),
                                       parent=run.base_checkpoint, run=run, registered_by=run.launched_by)
    return checkpoint if checkpoint.run_id == run.pk else None


@dataclass(frozen=True)
class NoCheckpointMade:
    """Why a run's output is not a checkpoint it made: its weights did not change, or they are registered already."""

    reason: str
    weights_unchanged: bool


def _output_refusal(run: Run, content_hash: str | None) -> NoCheckpointMade | None:
    """Why the run's output is not a checkpoint it made, or None when it is one."""
    record = run.record or {}
    base_hashes = {(record.get("base_checkpoint") or {}).get("content_hash"),
                   run.base_checkpoint.content_hash if run.base_checkpoint else None} - {None, ""}
    if record.get("weights_changed") is False or content_hash in base_hashes:
        why = record.get("weights_unchanged_reason") or weights_unchanged_reason(record, run.metrics)
        return NoCheckpointMade(f"its weights did not change: {why}", weights_unchanged=True)
    same = Checkpoint.objects.filter(content_hash=content_hash).exclude(run=run).first() if content_hash else None
    if same is None:
        return None
    maker = f" as made by run {same.run_id}" if same.run_id else ""
    return NoCheckpointMade(f"its output holds the same weights as checkpoint {same.name!r}, registered "
                            f"already{maker}; that checkpoint's origin stays as it was written", weights_unchanged=False)


def why_no_checkpoint_made(run: Run) -> NoCheckpointMade | None:
    """For the run page and the commands: why a succeeded training run links no checkpoint as the one it made
    (None when it links one, or has no output to link)."""
    output = (run.record or {}).get("output_checkpoint") or {}
    if run.status != Run.Status.SUCCEEDED or not output.get("path") or run.made_checkpoint is not None:
        return None
    return _output_refusal(run, output.get("content_hash"))


def snapshot_manifest(path: str) -> dict | None:
    """A snapshot's manifest without its files' hashes (the training command verifies them)."""
    try:
        return read_manifest(path)
    except SnapshotError:
        return None


def _when(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def run_register_folder(path: str | Path, *, registered_by: AbstractBaseUser | None = None) -> Run:
    """A run folder made by `python -m training dpo|grpo|reward` outside the app, as a Run with its checkpoints."""
    folder = Path(path).resolve()
    record = read_json_file(folder / "run.json")
    if record is None:
        raise UserMistake(f"{path} has no readable run.json; give the output_dir of a python -m training dpo or "
                          "grpo run")
    if record.get("format") != RUN_FORMAT or record.get("kind") not in ("dpo", "grpo", "reward"):
        raise UserMistake(f"{folder / 'run.json'} is not a {RUN_FORMAT} record of a dpo, grpo or reward run "
                          f"(format {record.get('format')!r}, kind {record.get('kind')!r})")
    status = STATUS_OF_RECORD.get(record.get("status"))
    if status is None:
        raise UserMistake(f"{folder} is still {record.get('status')!r} according to its run.json; register it once "
                          "it has ended")
    if (same := Run.objects.filter(folder=str(folder)).first()) is not None:
        raise UserMistake(f"{folder} is registered already as run {same.pk}")
    base = record.get("base_checkpoint") or {}
    snapshot = record.get("snapshot") or {}
    tasks = record.get("tasks") or {}
    scorer_hash = (record.get("reward_model") or {}).get("content_hash")
    with transaction.atomic():
        base_checkpoint = (checkpoint_for_folder(base["path"], content_hash=base.get("content_hash"),
                                                 registered_by=registered_by) if base.get("path") else None)
        run = Run.objects.create(
            kind=record["kind"], status=Run.Status.RUNNING, config=record.get("config") or {},
            resolved_config=record.get("config"), snapshot_path=snapshot.get("path") or "",
            snapshot_manifest=(snapshot_manifest(snapshot["path"]) if snapshot.get("path") else None) or (
                snapshot or None),
            tasks_path=tasks.get("path") or "", base_checkpoint=base_checkpoint, folder=str(folder),
            # the reward model run.json names, when its weights are registered (a GRPO run scored by one)
            reward_model=registered_reward_model(scorer_hash) if scorer_hash else None,
            launched_by=registered_by, started_at=_when(record.get("started_at")),
        )
        run_apply_folder(run, FolderReader(folder).read())
        run.refresh_from_db()
        run_finish(run, status=status, error=record.get("error") or "")
        ended = _when(record.get("ended_at"))
        if ended:
            Run.objects.filter(pk=run.pk).update(finished_at=ended)
    run.refresh_from_db()
    return run
