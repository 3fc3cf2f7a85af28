"""The local backend end to end: a real Celery worker on Redis runs a two-step DPO on the tiny checkpoint,
launched from the API, from a snapshot exported from judged pairs; the checkpoint it makes is registered
with its parent and the lineage pages show where it came from."""

import io

import pytest
import redis
from django.core.management import call_command

from annotate.celery import app as celery_app
from annotate.runs.models import Checkpoint, Run
from annotate.runs.queue import QUEUE
from tests.conftest import TORCH_THREADS
from tests.exports.conftest import voted_project  # noqa: F401 - judged pairs to export
from tests.exports.helpers import REDIS_URL, Worker, configure_celery, needs_redis, wait_for
from tests.runs.conftest import process_alive

TWO_STEPS = {"learning_rate": 1e-3, "max_steps": 2, "per_device_train_batch_size": 4, "logging_steps": 1,
             "torch_threads": TORCH_THREADS, "use_cpu": True, "report_to": ["none"]}


# The launch's config check goes to the default queue, the run to the training queue: one worker takes both here.
WORKER_QUEUES = f"celery,{QUEUE}"


@pytest.fixture
def training_worker(tmp_path, run_root, monkeypatch):
    """Tasks sent through Redis to a worker of the training and default queues, on the test database and run root."""
    redis.Redis.from_url(REDIS_URL).delete(QUEUE, "celery")  # nothing left over from an earlier, interrupted session
    monkeypatch.setenv("PAIRWISE_RUN_ROOT", str(run_root))
    saved = {key: celery_app.conf[key] for key in ("broker_url", "task_always_eager")}
    configure_celery(broker_url=REDIS_URL, task_always_eager=False)
    worker = Worker(queue=WORKER_QUEUES, name="training@pairwise-tests", snapshot_root=tmp_path / "snapshots",
                    log=tmp_path / "worker.log")
    yield worker
    worker.stop()
    configure_celery(**saved)


@pytest.mark.slow
@pytest.mark.postgres
@needs_redis
@pytest.mark.django_db(transaction=True)
def test_a_dpo_run_launched_from_the_api_succeeds_on_a_worker_and_its_lineage_shows(
        voted_project, base_checkpoint, make_user, client_for, client, training_worker, tmp_path):  # noqa: F811
    snapshot = tmp_path / "snapshot"
    call_command("export_snapshot", "voted", "--out", str(snapshot), "--test-ratio", "0.3", stdout=io.StringIO())
    engineer = make_user("eve", "engineer")
    started = client_for(engineer).post("/api/v1/runs", {"kind": "dpo", "base_checkpoint": "tiny-sft",
                                                         "snapshot": str(snapshot), "config": TWO_STEPS},
                                        format="json")
    assert started.status_code == 202, started.json()
    run_id = started.json()["id"]

    wait_for(lambda: Run.objects.get(pk=run_id).finished, "the run to end", timeout=600)
    run = Run.objects.get(pk=run_id)
    assert run.status == "succeeded", (run.error, run.log_tail[-2000:], training_worker.log.read_text()[-2000:])
    assert run.exit_code == 0 and run.worker == "training@pairwise-tests"
    assert [row["step"] for row in run.metrics if "loss" in row] == [1, 2]
    made = Checkpoint.objects.get(run=run)
    assert made.parent == base_checkpoint and made.content_hash == run.record["output_checkpoint"]["content_hash"]

    client.force_login(engineer)
    run_page = client.get(f"/runs/{run_id}/").content.decode()
    judgments = run.snapshot_manifest["counts"]["judgments_in_rows"]
    assert f"{judgments} judgments behind" in run_page and run.snapshot_manifest["snapshot_id"] in run_page
    assert made.name in run_page and "preference accuracy (log-likelihood)" in run_page
    parent_page = client.get(f"/checkpoints/{base_checkpoint.pk}/").content.decode()
    assert made.name in parent_page.split('id="children-dpo"')[1].split('id="children-grpo"')[0]
    child_page = client.get(f"/checkpoints/{made.pk}/").content.decode()
    assert base_checkpoint.name in child_page and f"run {run_id}" in child_page


@pytest.mark.slow
@pytest.mark.postgres
@needs_redis
@pytest.mark.django_db(transaction=True)
def test_a_restarted_worker_follows_its_live_run_again_and_can_still_cancel_it(
        base_checkpoint, tiny_snapshot, make_user, client_for, training_worker, tmp_path):
    api = client_for(make_user("eve", "engineer"))
    long_run = {**TWO_STEPS, "max_steps": 5000, "per_device_train_batch_size": 2, "torch_threads": 1}
    run_id = api.post("/api/v1/runs", {"kind": "dpo", "base_checkpoint": "tiny-sft", "snapshot": str(tiny_snapshot),
                                       "config": long_run}, format="json").json()["id"]
    wait_for(lambda: len(Run.objects.get(pk=run_id).metrics) >= 1, "the first metrics row", timeout=300)
    pid = Run.objects.get(pk=run_id).pid

    training_worker.kill()  # the trainer lives on in its own process group
    assert process_alive(pid) and Run.objects.get(pk=run_id).status == "running"
    steps_before = len(Run.objects.get(pk=run_id).metrics)
    restarted = Worker(queue=WORKER_QUEUES, name="training@pairwise-tests", snapshot_root=tmp_path / "snapshots",
                       log=tmp_path / "worker.log")
    try:
        wait_for(lambda: len(Run.objects.get(pk=run_id).metrics) > steps_before + 1, "the run to be followed again")
        assert api.post(f"/api/v1/runs/{run_id}/cancel").status_code == 202
        wait_for(lambda: Run.objects.get(pk=run_id).finished, "the cancel to stop the trainer")
    finally:
        restarted.stop()
    run = Run.objects.get(pk=run_id)
    assert run.status == "cancelled" and "process group was stopped" in run.error
    assert not process_alive(pid)
