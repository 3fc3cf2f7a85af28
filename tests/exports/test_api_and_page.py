"""Exports over the API and on the exports page, on the embedded default (tasks run in-process)."""

import json

import pytest
from django.test import Client

from annotate.exports.models import Export

pytestmark = pytest.mark.django_db


@pytest.fixture
def engineer_api(make_user, client_for):
    return client_for(make_user("eve", "engineer"))


def test_post_starts_an_export_and_get_polls_it_to_done(voted_project, engineer_api, settings, tmp_path,
                                                         django_capture_on_commit_callbacks):
    settings.SNAPSHOT_ROOT = tmp_path
    with django_capture_on_commit_callbacks(execute=True):
        response = engineer_api.post("/api/v1/projects/voted/exports", {"min_judgments": 3, "test_ratio": 0.25},
                                     format="json")
    assert response.status_code == 202
    export_id = response.json()["id"]

    status = engineer_api.get(f"/api/v1/exports/{export_id}").json()
    assert status["status"] == "done" and status["error"] is None
    assert status["progress"] == {"pairs_done": 12, "pairs_total": 12}
    assert status["filters"]["min_judgments"] == 3 and status["created_by"] == "eve"
    assert status["counts"]["train"] + status["counts"]["test"] == 9
    assert set(status["files"]) == {"manifest.json", "train.jsonl", "test.jsonl"}

    download = engineer_api.get(status["files"]["manifest.json"])
    assert download.status_code == 200
    manifest = json.loads(b"".join(download.streaming_content))
    assert manifest["snapshot_id"] == status["snapshot_id"]
    assert (tmp_path / "voted" / f"export-{export_id:06d}" / "train.jsonl").is_file()
    assert engineer_api.get(f"/api/v1/exports/{export_id}/files/..%2Fsecret_key").status_code == 404

    listed = engineer_api.get("/api/v1/projects/voted/exports").json()
    assert [e["id"] for e in listed] == [export_id]
    again = engineer_api.post(f"/api/v1/exports/{export_id}/retry")
    assert again.status_code == 409 and "only a failed export can be retried" in again.json()["detail"]


def test_a_filtered_export_counts_its_progress_over_the_pairs_it_considers(voted_project, engineer_api, settings,
                                                                          tmp_path, django_capture_on_commit_callbacks):
    settings.SNAPSHOT_ROOT = tmp_path
    with django_capture_on_commit_callbacks(execute=True):
        response = engineer_api.post("/api/v1/projects/voted/exports",
                                     {"judged_since": "2000-01-01", "judged_until": "2000-01-02"}, format="json")
    status = engineer_api.get(f"/api/v1/exports/{response.json()['id']}").json()
    # Every vote was made today, none in 2000: nothing to consider, and the bar says 0 of 0, not 0 of 12.
    assert status["status"] == "done"
    assert status["progress"] == {"pairs_done": 0, "pairs_total": 0}


def test_preview_counts_what_an_export_would_hold(voted_project, engineer_api):
    response = engineer_api.post("/api/v1/projects/voted/exports/preview", {"min_agreement": 1}, format="json")
    assert response.status_code == 200
    preview = response.json()
    assert preview["train"] + preview["test"] == 6
    assert preview["excluded"]["below_min_agreement"] == 3 and preview["excluded"]["tie_majority"] == 1
    assert not Export.objects.exists()


def test_bad_filters_are_400_with_one_line_and_reviewers_are_refused(voted_project, engineer_api, make_user,
                                                                    client_for):
    bad = engineer_api.post("/api/v1/projects/voted/exports", {"min_agreement": 2}, format="json")
    assert bad.status_code == 400
    assert bad.json()["detail"] == "min_agreement: 2.0 must be a number from 0 to 1"
    unknown = engineer_api.post("/api/v1/projects/voted/exports", {"exclude_tie": True}, format="json")
    assert unknown.status_code == 400 and unknown.json()["detail"].startswith("exclude_tie: unknown filter")
    assert not Export.objects.exists()
    reviewer = client_for(make_user("rita"))
    assert reviewer.post("/api/v1/projects/voted/exports", {}, format="json").status_code == 403
    assert engineer_api.post("/api/v1/projects/none/exports", {}, format="json").status_code == 404


def test_the_exports_page_previews_exports_and_lists_downloads(voted_project, make_user, settings, tmp_path,
                                                               django_capture_on_commit_callbacks):
    settings.SNAPSHOT_ROOT = tmp_path
    browser = Client()
    browser.force_login(make_user("ada", "admin"))
    assert 'href="/projects/voted/exports/"' in browser.get("/").content.decode()

    page = browser.post("/projects/voted/exports/", {"action": "preview", "min_agreement": "1", "test_ratio": "0.1",
                                                     "seed": "0", "min_judgments": "1", "gold": "include"})
    html = page.content.decode()
    assert page.status_code == 200 and 'id="preview"' in html and "below_min_agreement" in html

    page = browser.post("/projects/voted/exports/", {"action": "preview", "min_agreement": "7"})
    assert "min_agreement: 7.0 must be a number from 0 to 1" in page.content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        started = browser.post("/projects/voted/exports/", {"action": "export", "min_judgments": "1"})
    assert started.status_code == 302
    html = browser.get(started["Location"]).content.decode()
    export = Export.objects.get()
    assert export.status == "done" and export.snapshot_id in html
    assert f"/api/v1/exports/{export.pk}/files/train.jsonl" in html

    reviewer = Client()
    reviewer.force_login(make_user("rita"))
    assert reviewer.get("/projects/voted/exports/").status_code == 403
