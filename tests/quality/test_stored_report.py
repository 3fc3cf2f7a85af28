"""The stored agreement report: the page and the API serve it, say how old it is, and a Celery task
recomputes it when judgments make it stale, once however many times the page is loaded."""

import io
import itertools
import json
import re
import uuid
from datetime import timedelta

import pytest
import redis
from django.core.management import call_command
from django.utils import timezone

from annotate.celery import app as celery_app
from annotate.exports.filters import filters_parse
from annotate.exports.pipeline import export_preview
from annotate.quality.models import StoredAgreementReport
from annotate.quality.services import STORED_BOOTSTRAP, stored_report_refresh
from annotate.review.models import Assignment
from tests.conftest import import_rows, judge_until_done, make_items
from tests.exports.helpers import REDIS_URL, Worker, configure_celery, needs_redis, wait_for
from tests.quality.helpers import prefers_model_0


def prefers_model_0_half_on_left():
    """prefers_model_0, with model-0 shown on the left for every other pair. The queue's left/right coin is
    not seeded, and by chance alone a careful reviewer's left rate can look biased and get them flagged
    next to lefty; set, the flags are decided by behaviour, in every run."""
    model_0_on_left = itertools.cycle([True, False])

    def pick(assignment) -> str:
        assignment.a_on_left = next(model_0_on_left)  # response a is model-0's
        Assignment.objects.filter(pk=assignment.pk).update(a_on_left=assignment.a_on_left)
        return prefers_model_0(assignment)

    return pick


def judged(make_project, make_user, slug: str = "stored"):
    project = make_project(slug=slug, overlap=4, retest_rate=0)  # room for a fourth reviewer later
    import_rows(project, make_items(30))
    for name in ("ann", "bob"):
        judge_until_done(project, make_user(name), prefers_model_0_half_on_left(), seconds=30)
    judge_until_done(project, make_user("lefty"), lambda assignment: "left", seconds=30)
    return project


@pytest.fixture
def judged_project(make_project, make_user):
    return judged(make_project, make_user)


@pytest.fixture
def admin_page(client, make_user):
    client.force_login(make_user("ada", "admin"))

    def get(slug: str = "stored") -> str:
        response = client.get(f"/projects/{slug}/quality/")
        assert response.status_code == 200
        return response.content.decode()

    return get


@pytest.fixture
def api(make_user, client_for):
    return client_for(make_user("eve", "engineer"))


def age_line(html: str) -> str:
    found = re.search(r'<p class="muted small" id="report-age">(.*?)</p>', html, re.S)
    return " ".join(found.group(1).split()) if found else ""


def judgments_figure(html: str) -> str:
    return re.search(r'figure-label">Judgments</div>\s*<div class="figure-value">(\d+)<', html).group(1)


@pytest.fixture
def queued_on_redis():
    """Tasks go to a Redis queue of this test's own, where no worker takes them; yields its length."""
    queue = f"quality-test-{uuid.uuid4().hex[:10]}"
    saved = {key: celery_app.conf[key] for key in ("broker_url", "task_always_eager", "task_routes")}
    configure_celery(broker_url=REDIS_URL, task_always_eager=False,
                     task_routes={"annotate.quality.tasks.*": {"queue": queue}})
    broker = redis.Redis.from_url(REDIS_URL)

    def queued() -> int:
        return broker.llen(queue)

    queued.name = queue
    yield queued
    configure_celery(**saved)
    for key in broker.scan_iter(f"*{queue}*"):  # the queue and kombu's bindings of it
        broker.delete(key)


# --- in-process Celery (the embedded default): the page that finds the report stale recomputes it ---


@pytest.mark.django_db
def test_the_page_says_how_old_the_stored_report_is(judged_project, admin_page):
    html = admin_page()
    assert age_line(html).startswith("Report computed 0 minutes ago, up to date")
    assert judgments_figure(html) == "90"
    StoredAgreementReport.objects.filter(project=judged_project).update(
        computed_at=timezone.now() - timedelta(minutes=7)
    )
    assert age_line(admin_page()).startswith("Report computed 7 minutes ago, up to date")


@pytest.mark.django_db
def test_without_a_broker_new_judgments_are_in_the_next_page_load(judged_project, admin_page, make_user):
    assert judgments_figure(admin_page()) == "90"
    judge_until_done(judged_project, make_user("dan"), prefers_model_0_half_on_left(), seconds=30)
    html = admin_page()
    assert judgments_figure(html) == "120" and "up to date" in age_line(html)


# --- a broker and no worker: the stale report is served while one recompute waits in the queue ------


@needs_redis
@pytest.mark.django_db
def test_new_judgments_mark_the_report_stale_and_queue_one_recompute(
    judged_project, admin_page, api, make_user, queued_on_redis
):
    stored_report_refresh(project=judged_project)
    assert "up to date" in age_line(admin_page()) and queued_on_redis() == 0
    judge_until_done(judged_project, make_user("dan"), prefers_model_0_half_on_left(), seconds=30)

    html = admin_page()
    assert age_line(html).startswith("Report computed 0 minutes ago, 30 new judgments since, recomputing")
    assert judgments_figure(html) == "90", "the stored figures, until the recompute is done"
    admin_page()
    body = api.get("/api/v1/projects/stored/agreement").json()
    assert queued_on_redis() == 1, "one recompute queued, not one per look"
    assert (body["stale"], body["judgments_since"], body["recomputing"], body["judgments"]) == (True, 30, True, 90)

    fresh = api.get("/api/v1/projects/stored/agreement?fresh=true").json()
    assert (fresh["stale"], fresh["judgments_since"], fresh["judgments"], fresh["stored"]) == (False, 0, 120, True)
    assert "up to date" in age_line(admin_page())
    assert queued_on_redis() == 1


@needs_redis
@pytest.mark.django_db
def test_before_the_first_report_the_page_says_it_is_coming_and_the_api_computes_it(
    judged_project, admin_page, api, queued_on_redis
):
    html = admin_page()
    assert "No report yet" in html and "being computed" in html and 'id="reviewer-table"' not in html
    assert queued_on_redis() == 1
    body = api.get("/api/v1/projects/stored/agreement").json()
    assert body["judgments"] == 90 and body["stale"] is False and body["computed_at"]
    assert "up to date" in age_line(admin_page())


# --- the API's parameters, the command, the export filter --------------------------------------------


@pytest.mark.django_db
def test_a_bootstrap_other_than_the_stored_one_is_computed_and_not_stored(judged_project, api):
    stored = api.get("/api/v1/projects/stored/agreement").json()
    assert stored["stored"] is True and stored["method"]["bootstrap_resamples"] == STORED_BOOTSTRAP
    small = api.get("/api/v1/projects/stored/agreement?bootstrap=40").json()
    assert small["stored"] is False and small["method"]["bootstrap_resamples"] == 40
    row = StoredAgreementReport.objects.get(project=judged_project)
    assert row.bootstrap == STORED_BOOTSTRAP and row.report["method"]["bootstrap_resamples"] == STORED_BOOTSTRAP


@pytest.mark.django_db
def test_bad_parameters_get_one_line_and_400(judged_project, api):
    for query, field in (("bootstrap=-1", "bootstrap"), ("bootstrap=5001", "bootstrap"), ("bootstrap=2.5", "bootstrap"),
                         ("bootstrap=lots", "bootstrap"), ("fresh=maybe", "fresh")):
        response = api.get(f"/api/v1/projects/stored/agreement?{query}")
        detail = response.json()["detail"]
        assert response.status_code == 400 and detail.startswith(f"{field}: ") and "\n" not in detail, query
    assert not StoredAgreementReport.objects.filter(project=judged_project).exists()


@pytest.mark.django_db
def test_the_command_computes_and_stores_the_report(judged_project):
    out = io.StringIO()
    call_command("agreement", "stored", stdout=out)
    assert "lefty" in out.getvalue() and "report stored for the dashboard and the API" in out.getvalue()
    row = StoredAgreementReport.objects.get(project=judged_project)
    assert row.report["judgments"] == 90 and row.computed_at and row.compute_seconds > 0
    out = io.StringIO()
    call_command("agreement", "stored", "--bootstrap", "0", stdout=out)
    assert "not stored" in out.getvalue()
    assert StoredAgreementReport.objects.get(project=judged_project).report["method"]["bootstrap_resamples"] == 1000


def _flagged_export(slug: str, out_dir) -> dict:
    call_command("export_snapshot", slug, "--out", str(out_dir), "--exclude-flagged",
                 stdout=io.StringIO(), stderr=io.StringIO())
    return json.loads((out_dir / "manifest.json").read_text())["agreement"]


@pytest.mark.django_db
def test_the_export_reads_the_stored_flags_and_recomputes_them_when_out_of_date(
    judged_project, make_user, tmp_path
):
    first = _flagged_export("stored", tmp_path / "one")  # nothing stored yet: computed for the export
    assert [r["username"] for r in first["flagged_reviewers"]] == ["lefty"]

    stored_report_refresh(project=judged_project)
    # The same judgments give the same flags whichever way they were found: the same snapshot.
    second = json.loads((tmp_path / "one" / "manifest.json").read_text())
    _flagged_export("stored", tmp_path / "two")
    assert json.loads((tmp_path / "two" / "manifest.json").read_text())["snapshot_id"] == second["snapshot_id"]
    # The filter trusts what is stored: flag ann there, and her judgments leave the export.
    row = StoredAgreementReport.objects.get(project=judged_project)
    for reviewer in row.report["reviewers"]:
        reviewer["flags"] = ["low_agreement"] if reviewer["username"] == "ann" else []
    row.save(update_fields=["report"])
    without_ann = export_preview(project=judged_project, filters=filters_parse({"exclude_flagged": True}))
    assert without_ann["judgments_counted"] == 60

    judge_until_done(judged_project, make_user("dan"), prefers_model_0_half_on_left(), seconds=30)
    third = _flagged_export("stored", tmp_path / "three")  # judgments since: ann's stored flag is not used
    assert [r["username"] for r in third["flagged_reviewers"]] == ["lefty"]


# --- a real worker ------------------------------------------------------------------------------------


@pytest.mark.postgres
@needs_redis
@pytest.mark.django_db(transaction=True)
def test_a_worker_recomputes_the_stale_report_off_the_request_path(
    make_project, make_user, client, queued_on_redis, tmp_path
):
    project = judged(make_project, make_user)
    client.force_login(make_user("ada", "admin"))

    def page() -> str:
        return client.get("/projects/stored/quality/").content.decode()

    assert "No report yet" in page() and "No report yet" in page()
    assert queued_on_redis() == 1
    worker = Worker(queue=queued_on_redis.name, name="quality@pairwise-tests", snapshot_root=tmp_path,
                    log=tmp_path / "worker.log")
    try:
        wait_for(lambda: StoredAgreementReport.objects.filter(project=project, report__isnull=False).exists(),
                 "the worker to store the first report")
        html = page()
        assert "up to date" in age_line(html) and judgments_figure(html) == "90"

        judge_until_done(project, make_user("dan"), prefers_model_0_half_on_left(), seconds=30)
        assert "30 new judgments since, recomputing" in age_line(page())
        wait_for(lambda: StoredAgreementReport.objects.get(project=project).judgments_covered == 120,
                 "the worker to recompute the stale report")
        html = page()
        assert "up to date" in age_line(html) and judgments_figure(html) == "120"
        assert StoredAgreementReport.objects.get(project=project).recompute_requested_at is None
    finally:
        worker.stop()
    assert queued_on_redis() == 0
