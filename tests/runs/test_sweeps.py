"""Runs followed when nobody looks: the Slurm poll ends runs from their run.json or squeue with no page or API
request, a local run whose worker stopped reporting is failed with one line (and no other run is touched), the
follower keeps its heartbeat fresh, beat names both sweeps, and embedded mode runs them in a thread."""

import datetime as dt
import threading
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from annotate.celery import app as celery_app
from annotate.runs import execute, sweeps
from annotate.runs.launch import run_cancel
from annotate.runs.models import Run
from annotate.runs.queue import execute_in_thread, run_folder_for
from annotate.runs.slurm import slurm_refresh
from tests.exports.helpers import wait_for
from tests.runs.helpers import slurm_run

LONG_AGO = dt.datetime(2024, 3, 1, 9, 30, 0, tzinfo=dt.UTC)


def queued_run(base_checkpoint, behave: str) -> Run:
    """A local DPO run for the stand-in trainer, whose config's `behave` says what it does."""
    run = Run.objects.create(kind="dpo", base_checkpoint=base_checkpoint, folder="")
    run.folder = str(run_folder_for(run.pk))
    run.config = {"base_checkpoint": base_checkpoint.uri, "output_dir": run.folder, "behave": behave, "seed": 0}
    run.save()
    return run


def submitted(base_checkpoint) -> Run:
    """A Slurm run submitted to the stand-in sbatch: running, job 4242, its folder not written yet."""
    run = execute.run_execute(run_id=slurm_run(base_checkpoint).pk, worker="w1@test")
    assert run.status == "running" and run.slurm_job_id == "4242"
    Path(run.folder).mkdir()
    return run


def squeue_lists_nothing(tmp_path) -> None:
    (tmp_path / "bin" / "squeue").write_text("#!/bin/bash\nexit 0\n")  # the job has left the queue


@pytest.mark.django_db
def test_the_poll_ends_a_slurm_run_whose_run_json_says_completed(base_checkpoint, slurm):
    run = submitted(base_checkpoint)
    folder = Path(run.folder)
    (folder / "metrics.jsonl").write_text('{"event": "train", "step": 1, "loss": 0.69}\n')
    (folder / "run.json").write_text('{"status": "running"}')
    assert sweeps.slurm_runs_poll() == []
    still = Run.objects.get(pk=run.pk)
    assert still.status == "running" and len(still.metrics) == 1

    (folder / "run.json").write_text('{"status": "completed"}')
    assert sweeps.slurm_runs_poll() == [run.pk]
    done = Run.objects.get(pk=run.pk)
    assert done.status == "succeeded" and done.finished_at is not None
    assert sweeps.slurm_runs_poll() == []  # an ended run is not read again


@pytest.mark.django_db
def test_the_poll_fails_a_slurm_run_once_squeue_stops_listing_its_job(base_checkpoint, slurm, tmp_path):
    run = submitted(base_checkpoint)
    Path(run.folder + ".log").write_text("srun: error: node gpu-7 lost\n")
    assert sweeps.slurm_runs_poll() == []
    assert Run.objects.get(pk=run.pk).status == "running"  # squeue still lists it
    squeue_lists_nothing(tmp_path)
    assert sweeps.slurm_runs_poll() == [run.pk]
    failed = Run.objects.get(pk=run.pk)
    assert failed.status == "failed"
    assert failed.error == ("Slurm job 4242 left the queue without finishing its run.json: srun: error: node gpu-7 "
                            "lost")


@pytest.mark.django_db
def test_a_cancel_recorded_while_the_poll_held_an_old_copy_stands(base_checkpoint, slurm, tmp_path):
    run = submitted(base_checkpoint)
    old_copy = Run.objects.get(pk=run.pk)
    run_cancel(run)
    squeue_lists_nothing(tmp_path)
    after = slurm_refresh(old_copy)
    assert after.status == "cancelled" and after.error == "cancelled; scancel 4242"
    assert Run.objects.get(pk=run.pk).status == "cancelled"


def local_run(base_checkpoint, *, status: str = "running", heartbeat_at: dt.datetime | None, kind: str = "dpo",
              worker: str = "training@gpu-box") -> Run:
    run = queued_run(base_checkpoint, "hang")
    Run.objects.filter(pk=run.pk).update(status=status, kind=kind, worker=worker, host="gpu-box", pid=4321,
                                         started_at=LONG_AGO - dt.timedelta(minutes=5), heartbeat_at=heartbeat_at)
    return Run.objects.get(pk=run.pk)


@pytest.mark.django_db
def test_a_local_run_not_heard_from_for_longer_than_the_limit_is_failed_with_one_line(base_checkpoint, settings):
    settings.PAIRWISE_RUN_LOST_AFTER_S = 120
    run = local_run(base_checkpoint, heartbeat_at=LONG_AGO)
    assert sweeps.lost_runs_mark() == [run.pk]
    lost = Run.objects.get(pk=run.pk)
    assert lost.status == "failed" and lost.finished_at is not None and lost.exit_code is None
    assert lost.error == (
        "lost: its worker training@gpu-box on gpu-box stopped reporting; last heard from at 2024-03-01 09:30:00 UTC, "
        "over 120 s before this check; launch it again, with resume_from_checkpoint: "
        f"{run.folder}/trainer_checkpoints/checkpoint-N (its last one) to continue from there")
    assert "\n" not in lost.error
    assert sweeps.lost_runs_mark() == []


@pytest.mark.django_db
def test_a_run_of_the_embedded_server_is_named_as_such_and_one_without_a_heartbeat_goes_by_its_start(
        base_checkpoint):
    run = local_run(base_checkpoint, heartbeat_at=None, kind="eval", worker="in-process")
    assert sweeps.lost_runs_mark() == [run.pk]
    assert Run.objects.get(pk=run.pk).error == (
        "lost: the web process that ran it on gpu-box stopped reporting; last heard from at 2024-03-01 09:25:00 UTC, "
        f"over {django_settings.PAIRWISE_RUN_LOST_AFTER_S} s before this check; launch it again")


@pytest.mark.django_db
def test_the_lost_run_sweep_leaves_live_finished_queued_and_slurm_runs_alone(base_checkpoint, settings):
    settings.PAIRWISE_RUN_LOST_AFTER_S = 120
    fresh = local_run(base_checkpoint, heartbeat_at=timezone.now())
    finished = {status: local_run(base_checkpoint, status=status, heartbeat_at=LONG_AGO)
                for status in ("succeeded", "failed", "cancelled")}
    queued = queued_run(base_checkpoint, "hang")
    queued_sft = local_run(base_checkpoint, status="queued", heartbeat_at=None, kind="sft")
    on_slurm = local_run(base_checkpoint, heartbeat_at=LONG_AGO)
    Run.objects.filter(pk=on_slurm.pk).update(backend="slurm", slurm_job_id="4242")
    before = {run.pk: (run.status, run.error, run.finished_at) for run in Run.objects.all()}

    assert sweeps.lost_runs_mark() == []
    assert {run.pk: (run.status, run.error, run.finished_at) for run in Run.objects.all()} == before
    assert Run.objects.get(pk=fresh.pk).status == "running"
    assert {Run.objects.get(pk=run.pk).status for run in (queued, queued_sft)} == {"queued"}
    assert [Run.objects.get(pk=run.pk).status for run in finished.values()] == list(finished)


@pytest.mark.django_db(transaction=True)
def test_the_follower_refreshes_the_heartbeat_while_it_follows(base_checkpoint, stand_in_trainer, monkeypatch):
    monkeypatch.setattr(execute, "HEARTBEAT_S", 0.1)
    run = queued_run(base_checkpoint, "hang")
    follower = threading.Thread(target=execute_in_thread, args=(run.pk,))
    follower.start()
    try:
        wait_for(lambda: len(Run.objects.get(pk=run.pk).metrics) == 3, "the trainer's metrics")
        first = Run.objects.get(pk=run.pk).heartbeat_at
        assert first is not None
        wait_for(lambda: Run.objects.get(pk=run.pk).heartbeat_at > first, "a newer heartbeat")
        assert sweeps.lost_runs_mark() == [] and Run.objects.get(pk=run.pk).status == "running"
        run_cancel(Run.objects.get(pk=run.pk))
    finally:
        follower.join(timeout=30)
    assert Run.objects.get(pk=run.pk).status == "cancelled"


@pytest.mark.django_db
def test_the_follower_writes_its_heartbeat_at_most_every_heartbeat_s(base_checkpoint, monkeypatch):
    run = queued_run(base_checkpoint, "hang")
    Run.objects.filter(pk=run.pk).update(status="running", pid=2 ** 22 + 17, heartbeat_at=LONG_AGO)
    run.refresh_from_db()
    Path(run.folder).mkdir(parents=True)
    Path(run.folder, "run.json").write_text('{"status": "completed"}')
    passes = []
    monkeypatch.setattr(execute, "POLL_S", 0)
    monkeypatch.setattr(execute, "HEARTBEAT_S", 3600)
    with CaptureQueriesContext(connection) as queries:
        execute.follow(run, exit_code=lambda: None, process_alive=lambda: passes.append(1) or len(passes) < 5)
    beats = [q["sql"] for q in queries.captured_queries if '"heartbeat_at"' in q["sql"] and "UPDATE" in q["sql"]]
    assert len(passes) == 5 and len(beats) == 1  # the first pass, at once; then not again within the hour


def test_beat_sends_both_sweeps_at_the_poll_interval():
    import annotate.runs.tasks  # noqa: F401 - registers the tasks

    schedule = {entry["task"]: entry for entry in django_settings.CELERY_BEAT_SCHEDULE.values()}
    for task in ("annotate.runs.tasks.poll_slurm_runs", "annotate.runs.tasks.mark_lost_runs"):
        assert task in celery_app.tasks
        assert schedule[task]["schedule"] == django_settings.PAIRWISE_RUN_POLL_S
        assert schedule[task].get("options", {}).get("queue") in (None, "celery")  # not the training queue


@pytest.fixture
def sweep_thread():
    yield
    sweeps.sweeps_stop_in_process()


@pytest.mark.django_db(transaction=True)
def test_embedded_mode_sweeps_in_a_thread_started_once(base_checkpoint, sweep_thread):
    assert celery_app.conf.task_always_eager  # no broker: no beat either
    run = local_run(base_checkpoint, heartbeat_at=LONG_AGO, worker="in-process")
    thread = sweeps.sweeps_start_in_process(interval_s=0.1)
    assert sweeps.sweeps_start_in_process(interval_s=0.1) is thread and thread.daemon
    wait_for(lambda: Run.objects.get(pk=run.pk).status == "failed", "the sweep thread to mark the run lost")
    assert Run.objects.get(pk=run.pk).error.startswith("lost: the web process that ran it on gpu-box")


def test_with_a_broker_no_sweep_thread_starts(sweep_thread):
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = False
    try:
        assert sweeps.sweeps_start_in_process(interval_s=0.1) is None
    finally:
        celery_app.conf.task_always_eager = eager
