"""The home page: each project's figures, counted for all projects at once, and what each role can act on."""

import re
import uuid
from html.parser import HTMLParser

import pytest
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotate.exports.filters import filters_parse
from annotate.exports.models import Export
from annotate.exports.services import export_create
from annotate.review.assignments import assignment_next
from annotate.review.judgments import judgment_submit
from annotate.roles import roles_cache_key
from annotate.runs.models import Checkpoint, Run
from tests.conftest import answer_gold, import_rows, make_items
from tests.review.helpers import gold_items, live_items

pytestmark = pytest.mark.django_db


class HomePage(HTMLParser):
    """What a person reads on the page: each table row's cells by label, its links, and the sections."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.rows: dict[str, dict] = {}
        self.sections: set[str] = set()
        self._row: dict | None = None
        self._cell: str | None = None
        self._link: dict | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section" and attrs.get("id"):
            self.sections.add(attrs["id"])
        if tag == "tr" and attrs.get("id"):
            self._row = self.rows.setdefault(attrs["id"], {"cells": {}, "links": []})
        if self._row is not None and tag in ("td", "th") and attrs.get("data-label"):
            self._cell = attrs["data-label"]
            self._row["cells"][self._cell] = ""
        if self._row is not None and tag == "a":
            self._link = {"text": "", "href": attrs.get("href", "")}
            self._row["links"].append(self._link)

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = None
        if tag == "a":
            self._link = None
        if tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._row["cells"][self._cell] += data
        if self._link is not None:
            self._link["text"] += data

    def cell(self, row: str, label: str) -> str:
        return " ".join(self.rows[row]["cells"][label].split())

    def link_texts(self, row: str) -> list[str]:
        return [" ".join(link["text"].split()) for link in self.rows[row]["links"]]


def judge(project, reviewer, winners: list[str]) -> None:
    """The reviewer judges their next len(winners) pairs, preferring response a or b (as stored) in turn."""
    for winner in winners:
        assignment = assignment_next(project=project, reviewer=reviewer)
        choice = "left" if (winner == "a") == assignment.a_on_left else "right"
        judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=choice, strength=2,
                        criteria={"correct": choice, "complete": "tie"},
                        rationale="Chosen for being right and clear.", client_key=uuid.uuid4())


@pytest.fixture
def projects(make_project, make_user, settings, tmp_path, django_capture_on_commit_callbacks,
             jobs_in_this_thread):
    """"speed": 5 pairs, overlap 2; rita judges all five for a, sam three of them, the third for b, so three
    pairs reached their overlap and one of them is split. A finished export, then a queued one.
    "onboard": a qualification round of one item and one attempt, which hal failed."""
    settings.SNAPSHOT_ROOT = tmp_path
    speed = make_project(slug="speed", overlap=2, retest_rate=0)
    import_rows(speed, make_items(5))
    judge(speed, make_user("rita"), ["a"] * 5)
    judge(speed, make_user("sam"), ["a", "a", "b"])
    with django_capture_on_commit_callbacks(execute=True):
        done = export_create(project=speed, filters=filters_parse({"test_ratio": "0.5"}), created_by=None)
    export_create(project=speed, filters=filters_parse({}), created_by=None, enqueue=False)  # still queued

    onboard = make_project(slug="onboard", overlap=3, retest_rate=0, qualification_items=1,
                           qualification_attempts=1)
    import_rows(onboard, gold_items(3) + live_items(2))
    answer_gold(onboard, make_user("hal"), right=False)
    return {"speed": speed, "onboard": onboard, "export": Export.objects.get(pk=done.pk)}


def home_for(client, make_user, username: str, role: str) -> HomePage:
    client.force_login(make_user(username, role))
    response = client.get("/")
    assert response.status_code == 200
    return HomePage(response.content.decode())


def test_an_admin_sees_each_projects_figures(projects, client, make_user):
    export = projects["export"]
    assert export.status == "done"
    page = home_for(client, make_user, "ada", "admin")

    assert page.cell("project-speed", "Pairs") == "5"
    assert page.cell("project-speed", "Judged") == "60% 3 of 5"
    assert page.cell("project-speed", "Waiting to adjudicate") == "1"  # sam's b against rita's a
    assert page.cell("project-speed", "Held reviewers") == "0"
    shown = page.cell("project-speed", "Latest export")
    assert shown.startswith(f"export {export.pk} train {export.counts['train']} · test {export.counts['test']}")
    assert export.counts["train"] + export.counts["test"] == 4  # every voted pair but the split one
    assert {"text": f"export {export.pk}", "href": f"/projects/speed/exports/#export-{export.pk}"} in [
        {"text": " ".join(link["text"].split()), "href": link["href"]} for link in page.rows["project-speed"]["links"]]

    # hal failed the only attempt: held until an admin lets them go on; the link leads to where that is done.
    assert page.cell("project-onboard", "Held reviewers") == "1 held"
    assert page.cell("project-onboard", "Judged") == "0% 0 of 5"
    assert page.cell("project-onboard", "Latest export") == "none yet"
    assert page.link_texts("project-speed")[-4:] == ["Review", "Adjudicate", "Quality", "Exports"]


def test_the_counts_for_every_project_take_a_fixed_number_of_queries(projects, client, make_user, make_project):
    client.force_login(make_user("erin", "engineer"))
    client.get("/")  # the first request also reads the user's roles, which are then cached
    with CaptureQueriesContext(connection) as two_projects:
        client.get("/")
    for slug in ("more-1", "more-2", "more-3"):
        import_rows(make_project(slug=slug), make_items(3))
    with CaptureQueriesContext(connection) as five_projects:
        assert client.get("/").status_code == 200
    assert len(five_projects) == len(two_projects)


def test_a_reviewer_sees_what_is_left_for_them_and_no_runs(projects, client, make_user):
    page = home_for(client, make_user, "tom", "reviewer")
    # Two pairs still have one judgment of the two they need, and tom judged none of them.
    assert page.cell("project-speed", "Left for you") == "2"
    assert page.link_texts("project-speed") == ["Review"]
    assert "Latest export" not in page.rows["project-speed"]["cells"]
    assert "Waiting to adjudicate" not in page.rows["project-speed"]["cells"]
    assert "latest-runs" not in page.sections and "latest-checkpoints" not in page.sections

    held = home_for(client, make_user, "hal", "reviewer")
    assert held.cell("project-onboard", "Left for you") == "held: ask an admin"
    rita = home_for(client, make_user, "rita", "reviewer")
    assert rita.cell("project-speed", "Left for you") == "0"


def test_an_adjudicator_sees_the_waiting_count_and_adjudicate(projects, client, make_user):
    page = home_for(client, make_user, "judy", "adjudicator")
    assert page.cell("project-speed", "Waiting to adjudicate") == "1"
    assert page.link_texts("project-speed") == ["Adjudicate"]
    # A pair sam judged is never theirs to rule on.
    sam = home_for(client, make_user, "sam", "adjudicator")
    assert sam.cell("project-speed", "Waiting to adjudicate") == "0"


def test_an_engineer_sees_the_latest_runs_and_checkpoints(projects, client, make_user, tmp_path):
    base = Checkpoint.objects.create(name="tiny-base", uri=str(tmp_path / "base"))
    run = Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=base, folder=str(tmp_path / "run"))
    made = Checkpoint.objects.create(name="tiny-dpo", uri=str(tmp_path / "run" / "checkpoint"), parent=base, run=run)
    queued = Run.objects.create(kind="grpo", status="queued", base_checkpoint=made, folder=str(tmp_path / "next"))

    page = home_for(client, make_user, "erin", "engineer")
    assert {"latest-runs", "latest-checkpoints"} <= page.sections
    assert page.cell(f"run-{run.pk}", "Status") == "succeeded"
    assert page.cell(f"run-{run.pk}", "Base checkpoint") == "tiny-base"
    assert page.cell(f"run-{run.pk}", "Made checkpoint") == "tiny-dpo"
    assert page.cell(f"run-{queued.pk}", "Kind") == "grpo" and page.cell(f"run-{queued.pk}", "Made checkpoint") == "—"
    assert list(page.rows).index(f"run-{queued.pk}") < list(page.rows).index(f"run-{run.pk}"), "newest first"
    assert page.rows[f"run-{run.pk}"]["links"] == [
        {"text": f"run {run.pk}", "href": f"/runs/{run.pk}/"},
        {"text": "tiny-base", "href": f"/checkpoints/{base.pk}/"},
        {"text": "tiny-dpo", "href": f"/checkpoints/{made.pk}/"},
    ]
    assert page.cell(f"checkpoint-{made.pk}", "Parent") == "tiny-base"
    assert page.cell(f"checkpoint-{made.pk}", "Made by") == f"run {run.pk} dpo"
    assert page.cell(f"checkpoint-{base.pk}", "Made by") == "registered"
    # An engineer exports and reads the figures but neither reviews nor adjudicates.
    assert page.link_texts("project-speed")[-2:] == ["Quality", "Exports"]
    assert "Review" not in page.link_texts("project-speed")
    assert "Held reviewers" not in page.rows["project-speed"]["cells"]
    html = client.get("/").content.decode()
    assert re.search(r'<a class="button" href="/runs/">Training runs</a>', html)


def test_a_user_without_a_role_sees_no_project(projects, client):
    nobody = get_user_model().objects.create_user(username="nobody", password="a-long-test-password")
    cache.delete(roles_cache_key(nobody.pk))  # an earlier test's user may have had this id, and roles are cached
    client.force_login(nobody)
    html = client.get("/").content.decode()
    page = HomePage(html)
    assert not any(row.startswith("project-") for row in page.rows)
    assert "ask an admin to give you one" in html
    assert "latest-runs" not in page.sections
