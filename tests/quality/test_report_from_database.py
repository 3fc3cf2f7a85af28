"""The agreement report as admins get it: from stored judgments, over the API and the command line."""

import io
import json

import pytest
from django.core.management import call_command

from annotate.quality.selectors import judgment_table_for_project
from tests.conftest import import_rows, judge_until_done, make_items
from tests.quality.helpers import prefers_model_0

pytestmark = pytest.mark.django_db


@pytest.fixture
def judged_project(make_project, make_user):
    project = make_project(slug="judged", overlap=3, retest_rate=0)
    import_rows(project, make_items(30))
    for name in ("ann", "bob"):
        judge_until_done(project, make_user(name), prefers_model_0)
    judge_until_done(project, make_user("lefty"), lambda assignment: "left")
    return project


def test_the_table_holds_unswapped_choices_and_model_names(judged_project):
    table = judgment_table_for_project(project=judged_project)
    assert len(table.pair) == 90
    assert sorted(table.reviewer_names) == ["ann", "bob", "lefty"]
    assert sorted(table.model_names) == ["model-0@v0", "model-1@v1"]
    ann = table.reviewer_names.index("ann")
    assert set(table.winner[table.reviewer == ann].tolist()) == {0}  # always response a, un-swapped


def test_the_api_report_finds_the_left_clicker_and_the_better_model(judged_project, make_user, client_for):
    response = client_for(make_user("ada", "admin")).get(f"/api/v1/projects/{judged_project.slug}/agreement?bootstrap=200")
    assert response.status_code == 200
    report = response.json()
    json.dumps(report, allow_nan=False)
    assert report["judgments"] == 90 and report["pairs_with_overlap"] == 30
    reviewers = {r["username"]: r for r in report["reviewers"]}
    assert reviewers["lefty"]["left_rate"] == 1.0 and "position_bias" in reviewers["lefty"]["flags"]
    assert reviewers["ann"]["agreement_with_others"] > reviewers["lefty"]["agreement_with_others"]
    best = max(report["models"], key=lambda m: m["rating"])
    assert best["model"] == "model-0@v0" and best["wins"] > best["losses"]


def test_a_project_with_no_judgments_gives_nulls_and_reasons(make_project, make_user, client_for):
    project = make_project(slug="empty")
    response = client_for(make_user("ada", "admin")).get(f"/api/v1/projects/{project.slug}/agreement")
    assert response.status_code == 200
    report = response.json()
    assert report["krippendorff_alpha"]["nominal"]["value"] is None and report["notes"]


def test_reviewers_cannot_read_the_report_and_bad_parameters_are_400(judged_project, make_user, client_for):
    url = f"/api/v1/projects/{judged_project.slug}/agreement"
    assert client_for(make_user("rita")).get(url).status_code == 403
    engineer = client_for(make_user("eve", "engineer"))
    bad = engineer.get(url + "?bootstrap=lots")
    assert bad.status_code == 400 and "bootstrap" in bad.json()["detail"]


def test_the_command_prints_json_and_a_table(judged_project):
    out = io.StringIO()
    call_command("agreement", judged_project.slug, "--json", "--bootstrap", "50", stdout=out)
    assert json.loads(out.getvalue())["judgments"] == 90
    out = io.StringIO()
    call_command("agreement", judged_project.slug, "--bootstrap", "0", stdout=out)
    assert "lefty" in out.getvalue() and "position_bias" in out.getvalue()
