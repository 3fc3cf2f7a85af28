"""Blinding: model names never reach a reviewer or an adjudicator. Each model name and version carries a
unique marker; every page and API response those roles can reach (their errors and headers included)
and every static file is searched for any of them."""

import uuid
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from rest_framework.test import APIClient

from tests.conftest import import_rows, judge_until_done

pytestmark = pytest.mark.django_db


@pytest.fixture
def marked(make_project, make_user):
    """A project whose answers come from models named with markers, with split pairs waiting to be ruled."""
    markers = [f"MODELMARK{uuid.uuid4().hex}" for _ in range(4)]
    project = make_project("blind", overlap=3)  # a third reviewer still has work
    rows = [{"prompt_id": f"p{i}", "prompt": f"Question {i}?",
             "responses": [{"text": f"Answer {k} to {i}", "model": markers[k], "model_version": markers[k + 2]}
                           for k in range(2)]} for i in range(3)]
    import_rows(project, rows)
    judge_until_done(project, make_user("ann"), lambda assignment: "tie")
    judge_until_done(project, make_user("bob"), lambda assignment: "both_bad")
    return project, markers


def _seen(response) -> str:
    headers = "\n".join(f"{name}: {value}" for name, value in response.items())
    return headers + "\n" + response.content.decode(errors="replace")


def _walk(client: APIClient, project, role: str) -> list[str]:
    """Everything the role reads in a session of work: pages, the queue, their submissions, errors."""
    slug = project.slug
    seen = [_seen(client.get(path)) for path in ("/", f"/review/{slug}/", f"/adjudicate/{slug}/", "/audit/")]
    if role == "reviewer":
        for _ in range(10):  # more than the project holds; a refused judgment must not loop forever
            if (response := client.get(f"/api/v1/projects/{slug}/assignments/next")).status_code != 200:
                break
            seen.append(_seen(response))
            url = f"/api/v1/assignments/{response.json()['id']}/judgment"
            seen.append(_seen(client.post(url, {"choice": "sideways"}, format="json")))  # an error
            judged = client.post(url, {
                "choice": "left", "strength": 2, "criteria": {"correct": "left", "complete": "tie"},
                "rationale": "Left is right, as it says.", "client_key": str(uuid.uuid4())}, format="json")
            assert judged.status_code == 201, judged.content
            seen.append(_seen(judged))
        seen.append(_seen(client.post(f"/api/v1/projects/{slug}/judgments/undo")))
        seen.append(_seen(client.get(f"/api/v1/projects/{slug}/standing")))
    else:
        for _ in range(10):
            if (response := client.get(f"/api/v1/projects/{slug}/adjudications/next?min_judgments=2")).status_code != 200:
                break
            seen.append(_seen(response))
            url = f"/api/v1/adjudications/{response.json()['id']}/ruling"
            seen.append(_seen(client.post(url, {"choice": "sideways"}, format="json")))
            ruling = client.post(url, {"choice": "left", "strength": 1, "rationale": "Left is right, as it says.",
                                       "client_key": str(uuid.uuid4())}, format="json")
            assert ruling.status_code == 201, ruling.content
            seen.append(_seen(ruling))
        seen.append(_seen(client.get(f"/api/v1/projects/{slug}/adjudications")))
    # Routes the role may not use still answer something: a refusal must not name a model either.
    for path in (f"/api/v1/projects/{slug}/agreement", f"/projects/{slug}/quality/", f"/projects/{slug}/exports/",
                 f"/api/v1/projects/{slug}/exports"):
        seen.append(_seen(client.get(path)))
    return seen


@pytest.mark.parametrize("role", ["reviewer", "adjudicator"])
def test_no_page_response_or_header_names_a_model(marked, make_user, role):
    project, markers = marked
    client = APIClient()
    client.force_login(make_user(f"blind-{role}", role=role))
    seen = _walk(client, project, role)
    worked = [text for text in seen if "Answer 0 to" in text]
    assert worked, "the walk never reached an answer, so it proves nothing"
    leaks = [(marker, text[:200]) for text in seen for marker in markers if marker in text]
    assert leaks == []


def test_no_static_file_names_a_model(marked):
    _, markers = marked
    files = [Path(finder_path) for finder in finders.get_finders() for _, storage in finder.list([])
             for finder_path in [storage.path(_)]]
    assert files, "no static files were found to search"
    for file in files:
        data = file.read_bytes()
        assert not any(marker.encode() in data for marker in markers), file
