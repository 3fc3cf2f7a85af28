"""Exports run by a real Celery worker on Redis against the test database, including one killed mid-export."""

import datetime as dt
import uuid
from pathlib import Path

import psycopg
import pytest
from django.utils import timezone

from annotate.celery import app as celery_app
from annotate.exports import services
from annotate.exports.filters import filters_parse
from annotate.exports.models import Export
from tests.exports.helpers import REDIS_URL, Worker, configure_celery, database_url, needs_redis, wait_for
from training import snapshot


@pytest.fixture
def on_redis(tmp_path, settings):
    """Send this test's tasks through Redis to a queue of its own; yields a worker factory."""
    queue = f"exports-test-{uuid.uuid4().hex[:10]}"
    settings.SNAPSHOT_ROOT = tmp_path / "snapshots"
    saved = {key: celery_app.conf[key] for key in ("broker_url", "task_always_eager", "task_routes")}
    configure_celery(broker_url=REDIS_URL, task_always_eager=False,
                     task_routes={"annotate.exports.tasks.*": {"queue": queue}})
    workers: list[Worker] = []

    def start(name: str) -> Worker:
        worker = Worker(queue=queue, name=f"{name}@pairwise-tests", snapshot_root=settings.SNAPSHOT_ROOT,
                        log=tmp_path / "worker.log")
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()
    configure_celery(**saved)


def export_status(export_id: int) -> Export:
    return Export.objects.get(pk=export_id)


@pytest.mark.postgres
@needs_redis
@pytest.mark.django_db(transaction=True)
def test_a_worker_runs_the_export_the_api_started(voted_project, make_user, client_for, on_redis):
    on_redis(f"exports-{uuid.uuid4().hex[:6]}")
    api = client_for(make_user("ada", "admin"))
    started = api.post("/api/v1/projects/voted/exports", {"min_judgments": 2}, format="json")
    assert started.status_code == 202 and started.json()["status"] == "queued"
    export_id = started.json()["id"]

    wait_for(lambda: export_status(export_id).status in ("done", "failed"), "the export to finish")
    status = api.get(f"/api/v1/exports/{export_id}").json()
    assert status["status"] == "done", status["error"]
    assert status["progress"] == {"pairs_done": 12, "pairs_total": 12}
    assert export_status(export_id).worker.endswith("@pairwise-tests")
    data = snapshot.load(status["path"])
    assert len(data["train"]) + len(data["test"]) == 9


@pytest.mark.slow  # starts, kills and restarts a Celery worker
@pytest.mark.postgres
@needs_redis
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_export_leaves_no_snapshot_and_a_retry_completes(voted_project, make_user, client_for,
                                                                            on_redis, tmp_path):
    name = f"exports-{uuid.uuid4().hex[:6]}"
    worker = on_redis(name)
    api = client_for(make_user("ada", "admin"))
    # Hold the answers' table, so the export stops where it reads them: its folder claimed, no rows yet done.
    blocker = psycopg.connect(database_url().replace("postgres://", "postgresql://"), autocommit=False)
    blocker.execute("LOCK TABLE review_response IN ACCESS EXCLUSIVE MODE")
    try:
        export_id = api.post("/api/v1/projects/voted/exports", {}, format="json").json()["id"]
        out_dir = Path(export_status(export_id).out_dir)
        waiting = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
                   " AND pid <> pg_backend_pid()")
        with psycopg.connect(database_url().replace("postgres://", "postgresql://"), autocommit=True) as watcher:
            wait_for(lambda: watcher.execute(waiting).fetchall(), "the export to wait on the answers' table")
            assert export_status(export_id).status == "running"
            assert list(out_dir.parent.glob(f".{out_dir.name}.partial-*")), "the writer has claimed its folder"
            worker.kill()
            for (pid,) in watcher.execute(waiting).fetchall():
                watcher.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        blocker.rollback()
        blocker.close()

    assert export_status(export_id).status == "running"  # nobody was left to say otherwise
    on_redis(name)  # the same worker, restarted: it fails what it held when it died
    failed = wait_for(lambda: (e := export_status(export_id)).status == "failed" and e, "the export to be failed")
    assert "its worker" in failed.error and "retry it" in failed.error
    assert not out_dir.exists() and not list(out_dir.parent.glob(f".{out_dir.name}*"))

    retried = api.post(f"/api/v1/exports/{export_id}/retry")
    assert retried.status_code == 202 and retried.json()["attempt"] == 2
    wait_for(lambda: export_status(export_id).status in ("done", "failed"), "the retry to finish")
    done = export_status(export_id)
    assert done.status == "done", done.error
    assert len(snapshot.load(out_dir)["train"]) + done.counts["test"] == 9


@pytest.mark.django_db
def test_a_running_export_with_no_sign_of_life_is_failed_and_its_leftovers_removed(voted_project, tmp_path):
    out_dir = tmp_path / "snap"
    export = services.export_create(project=voted_project, filters=filters_parse({}), created_by=None,
                                    out_dir=out_dir, enqueue=False)
    # What a worker killed while writing leaves behind: a running row and the writer's hidden folder.
    Export.objects.filter(pk=export.pk).update(status="running", heartbeat_at=timezone.now(), worker="w1@host")
    (tmp_path / ".snap.partial-0123456789ab").mkdir()
    assert services.exports_fail_stale() == 0  # still within STALE_AFTER
    later = timezone.now() + services.STALE_AFTER + dt.timedelta(minutes=1)
    assert services.exports_fail_stale(now=later) == 1
    failed = export_status(export.pk)
    assert failed.status == "failed" and "no progress since" in failed.error and "w1@host" in failed.error
    assert list(tmp_path.iterdir()) == []
    retried = services.export_retry(export=failed)
    assert retried.status == "queued" and retried.attempt == 2
    assert services.export_run(export_id=export.pk, attempt=1) is None  # the dead attempt's message, redelivered
    assert services.export_run(export_id=export.pk, attempt=2).status == "done"
    assert snapshot.verify(out_dir)["counts"]["pairs_considered"] == 12
