"""Cancelling an export: a queued one at once, a running one at its next heartbeat, never a finished one; over the
API and with the exports page's button. A cancelled export leaves no snapshot folder, whole or half."""

import pytest
from django.test import Client

from annotate.celery import app as celery_app
from annotate.exports import pipeline, services
from annotate.exports.filters import filters_parse
from annotate.exports.models import Export
from training.atomic_write import PARTIAL_MARK

pytestmark = pytest.mark.django_db


@pytest.fixture
def engineer_api(make_user, client_for):
    return client_for(make_user("eve", "engineer"))


@pytest.fixture
def small_batches(monkeypatch):
    """Progress (a heartbeat) every few pairs, so the 12-pair project's export beats several times while writing."""
    monkeypatch.setattr(pipeline, "CONSENSUS_BATCH", 2)


def queued_export(project, tmp_path) -> Export:
    return services.export_create(project=project, filters=filters_parse({}), created_by=None,
                                  out_dir=tmp_path / "snap", enqueue=False)


def partial_folders(tmp_path) -> list:
    return [path.name for path in tmp_path.iterdir() if PARTIAL_MARK in path.name]


def test_a_queued_export_is_cancelled_at_once_and_its_task_then_does_nothing(voted_project, engineer_api, tmp_path):
    export = queued_export(voted_project, tmp_path)

    response = engineer_api.post(f"/api/v1/exports/{export.pk}/cancel")
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "cancelled" and body["cancelled_by"] == "eve"
    assert body["error"].startswith("cancelled by eve before it started")
    assert body["finished_at"] is not None

    # The message sent when it was queued is delivered: there is nothing to claim.
    assert celery_app.tasks[services.EXPORT_SNAPSHOT](export.pk, export.attempt) == "skipped"
    assert Export.objects.get(pk=export.pk).status == "cancelled"
    assert list(tmp_path.iterdir()) == []


def test_a_running_export_stops_at_its_next_heartbeat_and_leaves_no_folder(voted_project, engineer_api, tmp_path,
                                                                            small_batches):
    export = queued_export(voted_project, tmp_path)
    seen_while_running = []

    def cancel_at_first_batch(done: int, total: int | None) -> None:
        if seen_while_running:
            return
        # Mid-run, deterministically: the writer's hidden folder holds the first rows.
        seen_while_running.append((done, total, partial_folders(tmp_path)))
        response = engineer_api.post(f"/api/v1/exports/{export.pk}/cancel")
        assert response.status_code == 202
        body = response.json()
        assert body["status"] == "running" and body["cancel_requested"] and body["cancelled_by"] == "eve"

    ended = services.export_run(export_id=export.pk, attempt=export.attempt, on_progress=cancel_at_first_batch)

    done, total, partial = seen_while_running[0]
    assert total == 12 and 0 < done < 12 and len(partial) == 1
    assert ended.status == "cancelled" and ended.finished_at is not None
    assert ended.error == (f"cancelled by eve while writing rows ({ended.pairs_done} of 12 pairs done); nothing was "
                           "written, start a new export to get a snapshot")
    assert ended.pairs_done < 12  # it stopped at the next heartbeat, not at the end
    assert "\n" not in ended.error
    assert list(tmp_path.iterdir()) == []  # no snapshot and no hidden partial folder
    assert engineer_api.get(f"/api/v1/exports/{export.pk}").json()["files"] == {}


def test_an_export_that_has_ended_is_not_cancelled_and_a_missing_one_is_404(voted_project, engineer_api, tmp_path):
    export = queued_export(voted_project, tmp_path)
    assert services.export_run(export_id=export.pk, attempt=export.attempt).status == "done"

    refused = engineer_api.post(f"/api/v1/exports/{export.pk}/cancel")
    assert refused.status_code == 409
    assert refused.json()["detail"] == f"export {export.pk} is done; only a queued or running export can be cancelled"
    assert Export.objects.get(pk=export.pk).status == "done" and (tmp_path / "snap" / "manifest.json").exists()

    assert engineer_api.post(f"/api/v1/exports/{export.pk + 1000}/cancel").status_code == 404


def test_a_retry_of_a_failed_export_forgets_the_cancel_asked_of_its_failed_attempt(voted_project, tmp_path,
                                                                                 make_user):
    export = queued_export(voted_project, tmp_path)
    Export.objects.filter(pk=export.pk).update(status="failed", error="the disk was full", cancel_requested=True,
                                               cancelled_by=make_user("ada", "admin"))
    retried = services.export_retry(export=Export.objects.get(pk=export.pk))
    assert not retried.cancel_requested and retried.cancelled_by is None
    assert services.export_run(export_id=export.pk, attempt=retried.attempt).status == "done"


def test_the_exports_page_cancels_a_queued_and_a_running_export(voted_project, make_user, settings, tmp_path,
                                                                small_batches):
    settings.SNAPSHOT_ROOT = tmp_path
    browser = Client()
    browser.force_login(make_user("ada", "admin"))
    queued = services.export_create(project=voted_project, filters=filters_parse({}), created_by=None, enqueue=False)
    cancel_url = f"/projects/voted/exports/{queued.pk}/cancel"

    html = browser.get("/projects/voted/exports/").content.decode()
    assert f'action="{cancel_url}"' in html and "Cancel export" in html
    page = browser.post(cancel_url, follow=True)
    html = page.content.decode()
    assert f"Export {queued.pk} cancelled." in html
    assert f'id="export-{queued.pk}-cancelled"' in html and "cancelled by ada before it started" in html
    assert f'action="{cancel_url}"' not in html

    page = browser.post(cancel_url, follow=True)  # twice: refused in one line, as a message on the page
    assert f"export {queued.pk} is cancelled; only a queued or running export can be cancelled" in (
        page.content.decode())

    running = services.export_create(project=voted_project, filters=filters_parse({}), created_by=None,
                                     enqueue=False)
    pages_while_running = []

    def cancel_from_the_page(done: int, total: int | None) -> None:
        if pages_while_running:
            return
        before = browser.get("/projects/voted/exports/").content.decode()
        after = browser.post(f"/projects/voted/exports/{running.pk}/cancel", follow=True).content.decode()
        pages_while_running.append((before, after))

    ended = services.export_run(export_id=running.pk, attempt=running.attempt, on_progress=cancel_from_the_page)
    before, after = pages_while_running[0]
    assert f'action="/projects/voted/exports/{running.pk}/cancel"' in before
    assert f"Export {running.pk} is stopping" in after and f'id="export-{running.pk}-stopping"' in after
    assert "stopping: cancelled by ada" in after

    assert ended.status == "cancelled"
    html = browser.get("/projects/voted/exports/").content.decode()
    assert f'id="export-{running.pk}-cancelled"' in html and "cancelled by ada while writing rows" in html
    assert not (tmp_path / "voted").exists() or list((tmp_path / "voted").iterdir()) == []
