"""The reviewer API as a reviewer's browser and a script use it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from annotate.review.models import Assignment, Judgment
from tests.conftest import import_rows


def next_for(client, project):
    return client.get(f"/api/v1/projects/{project.slug}/assignments/next")


def submit(client, assignment_id, body):
    return client.post(f"/api/v1/assignments/{assignment_id}/judgment", body, format="json")


@pytest.fixture
def secret_project(make_project):
    project = make_project(slug="blind", retest_rate=0)
    import_rows(project, [{
        "prompt_id": "secret-prompt-id-77", "prompt": "Which is faster?",
        "responses": [{"text": "The train, at 120 km/h.", "model": "hidden-model-alpha", "model_version": "ckpt-9931"},
                      {"text": "The bus.", "model": "hidden-model-beta", "model_version": "ckpt-1234"}],
    }])
    return project


def test_next_shows_the_answers_but_nothing_that_reveals_models_or_order(secret_project, make_user, client_for):
    response = next_for(client_for(make_user("rita")), secret_project)
    assert response.status_code == 200
    body = response.json()
    assert set(body) >= {"id", "prompt", "criteria", "left", "right", "progress"}
    assert {body["left"]["text"], body["right"]["text"]} == {"The train, at 120 km/h.", "The bus."}
    assert body["criteria"]["version"] == 1 and [c["key"] for c in body["criteria"]["items"]] == ["correct", "complete"]
    raw = response.content.decode()
    assignment = Assignment.objects.get(pk=body["id"])
    for secret in ["hidden-model", "ckpt-", "secret-prompt-id", "a_on_left", "response_a", "pair",
                   f'"{assignment.pair.response_a_id}"']:
        assert secret not in raw


def test_a_judgment_is_stored_unswapped_and_returned_as_the_reviewer_made_it(
    secret_project, make_user, client_for, valid_judgment
):
    client = client_for(make_user("rita"))
    body = next_for(client, secret_project).json()
    train_on_left = body["left"]["text"].startswith("The train")
    pick_train = "left" if train_on_left else "right"
    created = submit(client, body["id"], valid_judgment(pick_train, strength=3,
                                                        criteria={"correct": pick_train, "complete": "tie"}))
    assert created.status_code == 201
    assert created.json()["choice"] == pick_train and created.json()["criteria"]["correct"] == pick_train
    judgment = Judgment.objects.get()
    train = judgment.pair.response_a if judgment.pair.response_a.text.startswith("The train") else judgment.pair.response_b
    stored_winner = judgment.pair.response_a if judgment.winner == "a" else judgment.pair.response_b
    assert stored_winner == train
    assert judgment.criteria["correct"] == judgment.winner and judgment.strength == 3
    assert judgment.criteria_version.version == 1 and judgment.seconds_spent >= 0
    assert "a" not in created.json().values() and "b" not in created.json().values()


def test_the_same_client_key_again_is_the_same_judgment(project, make_user, client_for, valid_judgment):
    client = client_for(make_user("rita"))
    assignment_id = next_for(client, project).json()["id"]
    body = valid_judgment()
    first, second = submit(client, assignment_id, body), submit(client, assignment_id, body)
    assert first.status_code == second.status_code == 201
    assert first.json() == second.json() and second.headers["Idempotent-Replayed"] == "true"
    assert Judgment.objects.count() == 1


def test_the_same_client_key_with_the_same_answer_in_other_words_is_the_same_judgment(
    project, make_user, client_for, valid_judgment
):
    client = client_for(make_user("rita"))
    assignment_id = next_for(client, project).json()["id"]
    body = valid_judgment("tie", strength=None)
    first = submit(client, assignment_id, body)
    # Stored the same: the rationale is kept without its outer spaces, a tie has no strength, the page's
    # account of the typing is not part of the answer.
    again = submit(client, assignment_id, {**body, "rationale": f"  {body['rationale']}\n", "strength": 3,
                                           "typing": {"typing_seconds": 9, "typed_chars": 40, "pasted_chars": 0,
                                                      "paste_events": 0}})
    assert first.status_code == again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert first.json() == again.json() and Judgment.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "differs"),
    [
        ({"choice": "right", "criteria": {"correct": "right", "complete": "tie"}}, "choice, criteria"),
        ({"strength": 3}, "strength"),
        ({"rationale": "On second thought the right one is clearer."}, "rationale"),
    ],
)
def test_the_same_client_key_with_a_changed_answer_is_refused_and_the_first_stays(
    project, make_user, client_for, valid_judgment, change, differs
):
    client = client_for(make_user("rita"))
    assignment_id = next_for(client, project).json()["id"]
    body = valid_judgment("left")
    assert submit(client, assignment_id, body).status_code == 201
    changed = submit(client, assignment_id, {**body, **change})
    assert changed.status_code == 409
    detail = changed.json()["detail"]
    assert detail.startswith(f"client_key: already used for a different judgment of assignment {assignment_id} "
                             f"(it differs in {differs}); what you sent now was not stored")
    assert "undo your last judgment" in detail
    judgment = Judgment.objects.get()
    assert judgment.rationale == body["rationale"] and judgment.strength == 2


@pytest.mark.parametrize(
    ("change", "status", "says"),
    [
        ({"rationale": "  "}, 400, "rationale: write at least 15 characters"),
        ({"rationale": None}, 400, "rationale"),
        ({"choice": "middle"}, 400, "choice: 'middle' is not one of left, right, tie, both_bad"),
        ({"strength": 4}, 400, "strength: 4 must be 1, 2 or 3"),
        ({"strength": None}, 400, "strength: say how strongly"),
        ({"criteria": {"correct": "left"}}, 400, "criteria: choose left, right or tie for 'complete'"),
        ({"criteria": {"correct": "left", "complete": "tie", "style": "left"}}, 400, "unknown key(s) ['style']"),
        ({"criteria": {"correct": "up", "complete": "tie"}}, 400, "'correct' is 'up'"),
        ({"client_key": "not-a-uuid"}, 400, "client_key"),
    ],
)
def test_bad_judgments_say_what_to_fix_and_store_nothing(
    project, make_user, client_for, valid_judgment, change, status, says
):
    client = client_for(make_user("rita"))
    assignment_id = next_for(client, project).json()["id"]
    response = submit(client, assignment_id, valid_judgment(**change))
    assert response.status_code == status
    assert says in response.json()["detail"]
    assert not Judgment.objects.exists()
    assert Assignment.objects.get(pk=assignment_id).status == "active"


def test_someone_elses_assignment_is_not_found(project, make_user, client_for, valid_judgment):
    owner, other = client_for(make_user("rita")), client_for(make_user("otto"))
    assignment_id = next_for(owner, project).json()["id"]
    response = submit(other, assignment_id, valid_judgment())
    assert response.status_code == 404
    assert not Judgment.objects.exists()


def test_a_judged_assignment_cannot_be_judged_again_without_undo(project, make_user, client_for, valid_judgment):
    client = client_for(make_user("rita"))
    assignment_id = next_for(client, project).json()["id"]
    assert submit(client, assignment_id, valid_judgment()).status_code == 201
    again = submit(client, assignment_id, valid_judgment("right"))
    assert again.status_code == 409 and "undo" in again.json()["detail"]


def test_undo_is_a_new_revision_and_the_pair_comes_back(project, make_user, client_for, valid_judgment):
    client = client_for(make_user("rita"))
    first = next_for(client, project).json()
    submit(client, first["id"], valid_judgment("left"))
    assert next_for(client, project).json()["progress"]["judged"] == 1
    undone = client.post(f"/api/v1/projects/{project.slug}/judgments/undo")
    assert undone.status_code == 200 and undone.json()["id"] == first["id"]
    assert undone.json()["progress"]["judged"] == 0
    assert client.post(f"/api/v1/projects/{project.slug}/judgments/undo").status_code == 409  # one step only
    assert next_for(client, project).json()["id"] == first["id"]  # the reopened one comes first
    assert submit(client, first["id"], valid_judgment("right")).status_code == 201
    revisions = list(Judgment.objects.filter(assignment_id=first["id"]).order_by("revision"))
    assert [(j.revision, j.retracted) for j in revisions] == [(1, False), (2, True), (3, False)]
    assert Assignment.objects.get(pk=first["id"]).current_judgment == revisions[-1]


def test_204_when_nothing_is_left(make_project, make_user, client_for, valid_judgment):
    project = make_project(slug="tiny", overlap=1, retest_rate=0)
    import_rows(project, [{"prompt_id": "only", "prompt": "Hi", "responses": [{"text": "a", "model": "m"},
                                                                             {"text": "b", "model": "n"}]}])
    client = client_for(make_user("rita"))
    assignment_id = next_for(client, project).json()["id"]
    submit(client, assignment_id, valid_judgment())
    assert next_for(client, project).status_code == 204


def test_roles_and_anonymous_visitors(project, make_user, client_for):
    assert Client().get(f"/api/v1/projects/{project.slug}/assignments/next").status_code in (401, 403)
    assert next_for(client_for(make_user("eng", "engineer")), project).status_code == 403
    assert next_for(client_for(make_user("adm", "admin")), project).status_code == 200
    assert next_for(client_for(make_user("rita")), type("P", (), {"slug": "nope"})).status_code == 404
    for page in ["/", f"/review/{project.slug}/", "/admin/"]:
        response = Client().get(page)
        assert response.status_code == 302 and "login" in response["Location"]
    assert Client().get("/accounts/login/").status_code == 200


def test_the_reviewer_page_is_served_to_reviewers_and_holds_no_answers(project, make_user):
    browser = Client()
    browser.force_login(make_user("rita"))
    page = browser.get(f"/review/{project.slug}/")
    assert page.status_code == 200
    assert b"review.js" in page.content and b"Answer 0" not in page.content  # answers come from the API
    engineer = Client()
    engineer.force_login(make_user("eng", "engineer"))
    assert engineer.get(f"/review/{project.slug}/").status_code == 403


def test_session_auth_needs_the_csrf_token(project, make_user, valid_judgment):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(make_user("rita"))
    assignment_id = browser.get(f"/api/v1/projects/{project.slug}/assignments/next").json()["id"]
    response = browser.post(f"/api/v1/assignments/{assignment_id}/judgment", json.dumps(valid_judgment()),
                            content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]


def test_openapi_schema_lists_the_reviewer_endpoints(make_user, client_for):
    schema = client_for(make_user("rita")).get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "/api/v1/projects/{slug}/assignments/next" in schema
    assert "/api/v1/assignments/{assignment_id}/judgment" in schema
    assert "client_key" in schema


# Two requests of the embedded server at once, as two reviewers' (or one page's next and standing) are: the
# first reads, the second writes and commits meanwhile, then the first writes. Run on the embedded
# defaults (no DATABASE_URL: the app's own SQLite file and options), in a process of its own.
TWO_WRITERS = """
import json, threading
import django
django.setup()
from django.db import connection, transaction

with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE tally (reviewer TEXT)")
connection.close()
first_read, second_done, errors = threading.Event(), threading.Event(), []

def first():
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM tally")
            first_read.set()
            second_done.wait(3)  # the second's commit, if the database lets it in before this one's
            cursor.execute("INSERT INTO tally VALUES ('first')")
    except Exception as exc:
        errors.append(f"first: {exc}")
    finally:
        connection.close()

def second():
    first_read.wait()
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("INSERT INTO tally VALUES ('second')")
    except Exception as exc:
        errors.append(f"second: {exc}")
    finally:
        second_done.set()
        connection.close()

threads = [threading.Thread(target=first), threading.Thread(target=second)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
with connection.cursor() as cursor:
    cursor.execute("SELECT reviewer FROM tally ORDER BY reviewer")
    print(json.dumps({"errors": errors, "stored": [row[0] for row in cursor.fetchall()]}))
"""


def test_two_writers_at_once_on_the_embedded_database_take_turns_instead_of_database_is_locked(tmp_path):
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env.update(PAIRWISE_DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="annotate.settings")
    result = subprocess.run([sys.executable, "-c", TWO_WRITERS], cwd=Path(__file__).resolve().parents[2], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {"errors": [], "stored": ["first", "second"]}
