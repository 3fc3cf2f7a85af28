"""The one job lifecycle (annotate/jobs.py) as the export, the training run and the model reviewer's scoring live
it: each model's stored labels mapped onto one vocabulary, a job claimed once under its row lock, a heartbeat that
stops counting once the job is not this attempt's, a silent job failed with one line, cancel, and the broker-down
rule (a named thread with no broker; one line on the row when the broker cannot be reached)."""

import datetime as dt
import threading

import pytest
from django.db import transaction
from django.utils import timezone

from annotate.celery import app as celery_app
from annotate.exports.models import Export
from annotate.exports.services import EXPORT_JOB
from annotate.jobs import JobFinished, JobStatus
from annotate.quality.model_reviewers import MODEL_REVIEWER_JOB, as_read
from annotate.quality.models import ModelReviewer
from annotate.runs.folder import STATUS_OF_RECORD
from annotate.runs.models import Checkpoint, Run
from annotate.runs.queue import QUEUE, RUN_JOB
from tests.exports.helpers import configure_celery
from training.run_folder import RecordStatus

LONG_AGO = dt.datetime(2024, 3, 1, 9, 30, 0, tzinfo=dt.UTC)


@pytest.fixture
def checkpoint(db):
    return Checkpoint.objects.create(name="rm-made-up", uri="/nowhere/rm", content_hash="sha256:" + "0" * 64)


def an_export(project, **fields) -> Export:
    return Export.objects.create(project=project, filters={}, out_dir="/nowhere/export", **fields)


def a_model_reviewer(project, checkpoint, **fields) -> ModelReviewer:
    return ModelReviewer.objects.create(project=project, checkpoint=checkpoint, content_hash=checkpoint.content_hash,
                                        identity="reward_model@" + checkpoint.content_hash, **fields)


def test_every_stored_label_has_one_place_in_the_lifecycle_and_reads_back_as_itself():
    for job, model in ((EXPORT_JOB, Export), (RUN_JOB, Run), (MODEL_REVIEWER_JOB, ModelReviewer)):
        outside = set(model.Status.values) - set(job.labels)
        assert outside == ({Run.Status.CHECKING} if model is Run else set()), model  # the config check comes first
        for label, state in job.labels.items():
            assert job.label(state) == label and job.status_of(label) == state
    assert EXPORT_JOB.status_of("done") == MODEL_REVIEWER_JOB.status_of("done") == JobStatus.SUCCEEDED
    assert MODEL_REVIEWER_JOB.status_of("scoring") == JobStatus.RUNNING
    assert RUN_JOB.status_of("checking") is None
    # run.json's states end a run in one of the lifecycle's, under the labels a Run stores.
    assert {RUN_JOB.label(state) for state in STATUS_OF_RECORD.values()} == {"succeeded", "failed", "cancelled"}
    assert set(STATUS_OF_RECORD) == {RecordStatus.COMPLETED, RecordStatus.FAILED, RecordStatus.INTERRUPTED}
    assert MODEL_REVIEWER_JOB.queue == RUN_JOB.queue == QUEUE  # both need the training stack's worker
    assert EXPORT_JOB.queue is None


@pytest.mark.django_db
def test_a_job_is_claimed_once_by_its_own_attempt_and_a_detached_reviewer_by_none(make_project, checkpoint):
    project = make_project()
    export = an_export(project, attempt=2)
    assert EXPORT_JOB.claim(export.pk, 1, worker="w1") is None  # a stale attempt's message
    claimed = EXPORT_JOB.claim(export.pk, 2, worker="w1", stage="starting")
    assert (claimed.status, claimed.worker, claimed.stage) == ("running", "w1", "starting")
    assert claimed.started_at == claimed.heartbeat_at is not None
    assert EXPORT_JOB.claim(export.pk, 2, worker="w2") is None  # delivered twice: runs once
    assert Export.objects.get(pk=export.pk).worker == "w1"

    reviewer = a_model_reviewer(project, checkpoint, detached_at=timezone.now())
    assert MODEL_REVIEWER_JOB.claim(reviewer.pk, reviewer.attempt) is None
    assert ModelReviewer.objects.get(pk=reviewer.pk).status == "queued"


@pytest.mark.django_db
def test_a_heartbeat_counts_only_while_the_job_runs_under_its_attempt(make_project, checkpoint):
    reviewer = a_model_reviewer(make_project(), checkpoint)
    assert not MODEL_REVIEWER_JOB.heartbeat(reviewer.pk, reviewer.attempt)  # queued: nothing runs yet
    MODEL_REVIEWER_JOB.claim(reviewer.pk, reviewer.attempt)
    assert ModelReviewer.objects.get(pk=reviewer.pk).status == "scoring"
    assert MODEL_REVIEWER_JOB.heartbeat(reviewer.pk, reviewer.attempt)
    ModelReviewer.objects.filter(pk=reviewer.pk).update(attempt=reviewer.attempt + 1)  # scored again meanwhile
    assert not MODEL_REVIEWER_JOB.heartbeat(reviewer.pk, reviewer.attempt)


@pytest.mark.django_db
def test_a_silent_job_is_failed_with_its_line_or_read_as_failed_as_each_kind_does(make_project, checkpoint):
    project = make_project()
    silent, beating = an_export(project), an_export(project)
    for export in (silent, beating):
        EXPORT_JOB.claim(export.pk, export.attempt, worker="w1")
    Export.objects.filter(pk=silent.pk).update(heartbeat_at=LONG_AGO)
    cleaned = []
    failed = EXPORT_JOB.lost_mark(after=dt.timedelta(minutes=10), reason=lambda row: f"no word since {row.last_heard:%Y}",
                                  on_failed=cleaned.append, stage="")
    assert failed == [silent.pk] and [row.pk for row in cleaned] == [silent.pk]
    ended = Export.objects.get(pk=silent.pk)
    assert (ended.status, ended.error, ended.stage) == ("failed", "no word since 2024", "")
    assert ended.finished_at is not None
    assert Export.objects.get(pk=beating.pk).status == "running"

    # A model reviewer's scoring is failed where it is read, not written: its row keeps what its worker wrote.
    reviewer = a_model_reviewer(project, checkpoint)
    MODEL_REVIEWER_JOB.claim(reviewer.pk, reviewer.attempt)
    ModelReviewer.objects.filter(pk=reviewer.pk).update(heartbeat_at=LONG_AGO)
    read = as_read(ModelReviewer.objects.get(pk=reviewer.pk))
    assert read.status == "failed" and read.error.startswith("scoring stopped reporting: no sign of it for")
    assert ModelReviewer.objects.get(pk=reviewer.pk).status == "scoring"


@pytest.mark.django_db
def test_cancel_ends_a_waiting_job_at_once_asks_a_running_one_and_refuses_an_ended_one(checkpoint):
    waiting, checking, running = (Run.objects.create(kind="dpo", base_checkpoint=checkpoint, folder="", status=status)
                                  for status in ("queued", "checking", "queued"))
    RUN_JOB.claim(running.pk, worker="w1")
    assert RUN_JOB.cancel(waiting.pk).status == "cancelled"
    assert RUN_JOB.cancel(checking.pk, before_start=("checking",)).status == "cancelled"
    asked = RUN_JOB.cancel(running.pk)
    assert (asked.status, asked.cancel_requested) == ("running", True)  # its worker stops its process group
    with pytest.raises(JobFinished):
        RUN_JOB.cancel(waiting.pk)


@pytest.mark.django_db(transaction=True)
def test_with_no_broker_a_job_runs_in_a_thread_named_for_it(make_project, checkpoint):
    assert celery_app.conf.task_always_eager  # the embedded defaults
    project = make_project()
    reviewer = a_model_reviewer(project, checkpoint)
    with transaction.atomic():
        ModelReviewer.objects.select_for_update().get(pk=reviewer.pk)  # its claim waits here until this commits
        MODEL_REVIEWER_JOB.send(reviewer.pk, reviewer.attempt)
        [thread] = [t for t in threading.enumerate() if t.name == f"model-reviewer-{reviewer.pk}"]
    assert thread.daemon
    thread.join(timeout=120)
    ended = ModelReviewer.objects.get(pk=reviewer.pk)
    assert (ended.status, ended.error) == ("failed", f"project {project.slug!r} has no judged pairs to score")


@pytest.mark.django_db
def test_a_broker_that_cannot_be_reached_fails_the_queued_job_with_one_line(make_project, checkpoint):
    project = make_project()
    export, reviewer = an_export(project), a_model_reviewer(project, checkpoint)
    run = Run.objects.create(kind="dpo", base_checkpoint=checkpoint, folder="")
    saved = {key: celery_app.conf[key] for key in ("broker_url", "task_always_eager")}
    configure_celery(broker_url="redis://127.0.0.1:9/0", task_always_eager=False)  # a broker nobody listens on
    try:
        EXPORT_JOB.send(export.pk, export.attempt)
        MODEL_REVIEWER_JOB.send(reviewer.pk, reviewer.attempt)
        RUN_JOB.send(run.pk)
    finally:
        configure_celery(**saved)
    lines = {
        "export": Export.objects.get(pk=export.pk), "scoring": ModelReviewer.objects.get(pk=reviewer.pk),
        "run": Run.objects.get(pk=run.pk)}
    for noun, row in lines.items():
        assert row.status == "failed" and "\n" not in row.error, noun
        assert row.error.startswith(f"the {noun} could not be queued (") and "check CELERY_BROKER_URL" in row.error
    assert lines["export"].error.endswith(", then retry it") and lines["export"].finished_at is not None
    assert lines["scoring"].error.endswith(", then score again")
