"""What a reviewer or an admin can send that once made a 500 or was stored unbounded: digits of other
scripts, huge numbers, NUL, oversized text; and the import file's gaps (a BOM, identical answers, empty
chat messages). Each is one line saying what to fix, and nothing is stored."""

import io
import json

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError

from annotate import limits
from annotate.review.importing import ImportRejected, items_parse
from annotate.review.models import Judgment, Prompt
from annotate.runs.models import TaskSet
from tests.security.helpers import assert_one_json_line
from training.json_input import MAX_JSON_DEPTH, MAX_NUMBER_CHARS

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviewer_client(project, make_user, client_for):
    return client_for(make_user("rita"))


def _next_id(client, project) -> int:
    return client.get(f"/api/v1/projects/{project.slug}/assignments/next").json()["id"]


@pytest.mark.parametrize("strength", ["²", "٣", "３", "2.0", " ", str(10**400)])
def test_a_strength_in_other_digits_is_one_line_400(project, reviewer_client, valid_judgment, strength):
    url = f"/api/v1/assignments/{_next_id(reviewer_client, project)}/judgment"
    body = assert_one_json_line(reviewer_client.post(url, valid_judgment(strength=strength), format="json"), 400)
    assert body["detail"].startswith("strength: ") and "must be a whole number from 1 to 3" in body["detail"]
    assert len(body["detail"]) < 200
    assert not Judgment.objects.exists()


def test_a_strength_as_ascii_text_still_counts(project, reviewer_client, valid_judgment):
    url = f"/api/v1/assignments/{_next_id(reviewer_client, project)}/judgment"
    assert reviewer_client.post(url, valid_judgment(strength="3"), format="json").status_code == 201
    assert Judgment.objects.get().strength == 3


def test_a_huge_json_strength_is_400(project, reviewer_client, valid_judgment):
    url = f"/api/v1/assignments/{_next_id(reviewer_client, project)}/judgment"
    body = assert_one_json_line(reviewer_client.post(url, valid_judgment(strength=2**70), format="json"), 400)
    assert body["detail"] == f"strength: {2**70} must be 1, 2 or 3"


def test_a_rationale_over_the_limit_says_both_lengths(project, reviewer_client, valid_judgment):
    url = f"/api/v1/assignments/{_next_id(reviewer_client, project)}/judgment"
    rationale = "why " * 250_000  # 1,000,000 characters: under the body limit, over this one
    body = assert_one_json_line(reviewer_client.post(url, valid_judgment(rationale=rationale), format="json"), 400)
    assert body["detail"] == (f"rationale is 1,000,000 characters; at most {limits.MAX_RATIONALE_CHARS:,}: shorten it")
    assert not Judgment.objects.exists()
    fits = "w" * limits.MAX_RATIONALE_CHARS
    assert reviewer_client.post(url, valid_judgment(rationale=fits), format="json").status_code == 201


@pytest.mark.parametrize("text, holds", [("left is right\x00 really", "a NUL character"),
                                         ("left is right\ud83d really", "an unpaired surrogate (\\ud800-\\udfff)")])
def test_text_that_cannot_be_stored_is_400_not_500(project, reviewer_client, valid_judgment, text, holds):
    # Refused on every database, though SQLite could store a NUL: what one stores, PostgreSQL could restore.
    url = f"/api/v1/assignments/{_next_id(reviewer_client, project)}/judgment"
    body = json.dumps(valid_judgment(rationale=text))  # ASCII: a lone surrogate goes as its \\u escape
    response = reviewer_client.post(url, body, content_type="application/json")
    assert assert_one_json_line(response, 400)["detail"] == f"rationale contains {holds}; remove it"
    assert not Judgment.objects.exists()


@pytest.mark.parametrize("query, message", [
    ("?bootstrap=²", "bootstrap: '²' must be a whole number from 0 to 5000, written in the digits 0-9"),
    ("?bootstrap=٣", "bootstrap: '٣' must be a whole number from 0 to 5000, written in the digits 0-9"),
    ("?bootstrap=99999", "bootstrap: '99999' must be a whole number from 0 to 5000"),
])
def test_agreement_bootstrap_in_other_digits_is_400(project, make_user, client_for, query, message):
    admin = client_for(make_user("ada", role="admin"))
    assert assert_one_json_line(admin.get(f"/api/v1/projects/{project.slug}/agreement{query}"), 400)["detail"] == message


@pytest.mark.parametrize("filters, message", [
    ({"criteria_versions": [10**30]}, "criteria_versions: " + repr(10**30) + " must be a whole number from 1 to 2147483647"),
    ({"criteria_versions": "١"}, "criteria_versions: '١' must be a whole number from 1 to 2147483647, written in the digits 0-9"),
    ({"min_judgments": "²"}, "min_judgments: '²' must be a whole number from 1 to 2147483647, written in the digits 0-9"),
    ({"seed": 2**40}, f"seed: {2**40} must be a whole number from 0 to 4294967295"),
])
def test_export_preview_numbers_are_checked_before_the_database(project, make_user, client_for, filters, message):
    admin = client_for(make_user("ada", role="admin"))
    response = admin.post(f"/api/v1/projects/{project.slug}/exports/preview", filters, format="json")
    assert assert_one_json_line(response, 400)["detail"] == message


@pytest.mark.parametrize("query", ["?pair=²", f"?pair={2**63}", "?min_judgments=٣"])
def test_adjudication_queue_numbers_are_ascii(project, make_user, client_for, query):
    adjudicator = client_for(make_user("adam", role="adjudicator"))
    detail = assert_one_json_line(adjudicator.get(f"/api/v1/projects/{project.slug}/adjudications/next{query}"), 400)
    assert detail["detail"].startswith(query[1:].split("=")[0] + ": ") and "must be a whole number from" in detail["detail"]


# --- the import file ------------------------------------------------------------------------------

def _row(**overrides) -> dict:
    row = {"prompt_id": "p1", "prompt": "What is 2 + 2?",
           "responses": [{"text": "4", "model": "m1"}, {"text": "5", "model": "m2"}]}
    return row | overrides


def _rejected(lines) -> list[str]:
    with pytest.raises(ImportRejected) as rejected:
        items_parse(lines)
    return rejected.value.errors


def test_a_byte_order_mark_is_not_part_of_the_first_line():
    data = ("\ufeff" + json.dumps(_row()) + "\n").encode()
    assert [item.prompt_id for item in items_parse(io.BytesIO(data))] == ["p1"]
    assert [item.prompt_id for item in items_parse(data.decode().splitlines())] == ["p1"]


def test_identical_answers_and_empty_chat_messages_are_refused_by_line():
    lines = [
        json.dumps(_row()),
        json.dumps(_row(prompt_id="p2", responses=[{"text": "4 ", "model": "m1"}, {"text": "4", "model": "m2"}])),
        json.dumps(_row(prompt_id="p3", prompt=[{"role": "system", "content": "  "}, {"role": "user", "content": "Hi"}])),
    ]
    assert _rejected(lines) == [
        "line 2: all answers are identical; nothing to compare",
        "line 3: prompt message 0 (system) has empty 'content'; write the message or leave it out",
    ]


def test_import_limits_are_named_with_both_sizes():
    long_answer = "x" * (limits.MAX_RESPONSE_CHARS + 1)
    many = [{"text": f"answer {i}", "model": f"m{i}"} for i in range(limits.MAX_RESPONSES_PER_PROMPT + 1)]
    lines = [
        json.dumps(_row(responses=[{"text": long_answer, "model": "m1"}, {"text": "5", "model": "m2"}])),
        json.dumps(_row(prompt_id="p2", prompt="q" * (limits.MAX_PROMPT_CHARS + 1))),
        json.dumps(_row(prompt_id="p3", responses=many)),
    ]
    assert _rejected(lines) == [
        f"line 1: response 0: its text is {limits.MAX_RESPONSE_CHARS + 1:,} characters; "
        f"at most {limits.MAX_RESPONSE_CHARS:,}",
        f"line 2: the prompt is {limits.MAX_PROMPT_CHARS + 1:,} characters; at most {limits.MAX_PROMPT_CHARS:,} "
        "(all messages together)",
        f"line 3: {limits.MAX_RESPONSES_PER_PROMPT + 1} responses; at most {limits.MAX_RESPONSES_PER_PROMPT} to one "
        "prompt (each two of them make a pair to judge)",
    ]


def test_the_api_import_takes_a_file_saved_with_a_byte_order_mark(make_project, make_user, client_for):
    project = make_project("bom")
    admin = client_for(make_user("ada", role="admin"))
    good = b"\xef\xbb\xbf" + json.dumps(_row()).encode() + b"\n"
    response = admin.post(f"/api/v1/projects/{project.slug}/items", {"file": io.BytesIO(good)}, format="multipart")
    assert response.status_code == 201, response.content
    assert Prompt.objects.filter(project=project).count() == 1


# --- JSON nested deep, uploads to pages --------------------------------------------------------------

NESTED = "[" * 50_000 + "]" * 50_000  # 100 KB: deeper than Python's recursion can follow


@pytest.mark.parametrize("method, url", [
    ("post", "/api/v1/assignments/{assignment}/judgment"),
    ("post", "/api/v1/projects/{slug}/exports"),
    ("post", "/api/v1/projects/{slug}/exports/preview"),
    ("post", "/api/v1/projects/{slug}/qualification"),
    ("patch", "/api/v1/projects/{slug}/settings"),
    ("post", "/api/v1/runs"),
    ("post", "/api/v1/runs/compare"),
    ("post", "/api/v1/runs/evaluate"),
])
# ... and 400 levels inside a body's field: within what Python's reader can follow, still too deep
@pytest.mark.parametrize("body", [NESTED, '{"choice": "left", "criteria": {"correct": ' + "[" * 400 + "]" * 400 + "}}"])
def test_json_nested_deep_is_one_line_400(project, make_user, client_for, method, url, body):
    admin = client_for(make_user("ada", role="admin"))
    url = url.format(slug=project.slug, assignment=_next_id(admin, project))
    refused = assert_one_json_line(getattr(admin, method)(url, body, content_type="application/json"), 400)
    assert refused["detail"] == (f"the JSON body nests arrays or objects more than {MAX_JSON_DEPTH} levels "
                                 "deep; send a flatter one")
    assert not Judgment.objects.exists()


def test_json_nested_to_the_limit_is_read_as_usual(project, reviewer_client, valid_judgment):
    url = f"/api/v1/assignments/{_next_id(reviewer_client, project)}/judgment"
    deep = "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1)  # inside the body's own object
    body = json.dumps(valid_judgment()).replace('"rationale"', f'"extra": {deep}, "rationale"')
    assert reviewer_client.post(url, body, content_type="application/json").status_code == 201


def test_an_import_line_nested_deep_is_named_by_line(make_project):
    with pytest.raises(ImportRejected) as rejected:
        items_parse([json.dumps(_row()), NESTED])
    assert rejected.value.errors == [f"line 2: nests arrays or objects more than {MAX_JSON_DEPTH} levels deep"]


# What Python's own JSON reader cannot read (RecursionError, int's digit limit): each is the same one-line 400 as any
# other bad body or line, at every place JSON comes in, with what was wrong.
OBJECTS_NESTED = '{"a": ' * 5000 + "1" + "}" * 5000
LONG_NUMBER = "1" * 100_000
HOSTILE_JSON = {
    "brackets": ("[" * 100_000, f"nests arrays or objects more than {MAX_JSON_DEPTH} levels deep"),
    "objects": (OBJECTS_NESTED, f"nests arrays or objects more than {MAX_JSON_DEPTH} levels deep"),
    "digits": ('{"families": ["speed"], "n": ' + LONG_NUMBER + ', "seed": 1}',
               f"holds a number written with 100,000 characters; at most {MAX_NUMBER_CHARS:,}"),
    "float": ('{"families": ["speed"], "n": 3, "seed": 1e999}', "holds the number 1e999, too large for a 64-bit float"),
}


@pytest.mark.parametrize("kind", HOSTILE_JSON)
@pytest.mark.parametrize("url", ["/api/v1/task-sets", "/api/v1/runs", "/api/v1/projects/{slug}/exports"])
def test_json_bodies_python_cannot_read_are_one_line_400(project, make_user, client_for, kind, url):
    body, reason = HOSTILE_JSON[kind]
    admin = client_for(make_user("ada", role="admin"))
    refused = assert_one_json_line(admin.post(url.format(slug=project.slug), body, content_type="application/json"),
                                   400)
    assert refused["detail"].startswith(f"the JSON body {reason}; ")


@pytest.mark.parametrize("kind", HOSTILE_JSON)
def test_jsonl_uploads_python_cannot_read_are_refused_by_line(make_project, make_user, client_for, kind,
                                                              django_capture_on_commit_callbacks,
                                                              task_set_checks_in_this_thread):
    line, reason = HOSTILE_JSON[kind]
    project = make_project("hostile")
    admin = client_for(make_user("ada", role="admin"))
    with django_capture_on_commit_callbacks(execute=True):  # a task set's check runs once its row is committed
        tasks = admin.post("/api/v1/task-sets", {"file": SimpleUploadedFile("tasks.jsonl", line.encode() + b"\n")},
                           format="multipart")
    assert tasks.status_code == 202, tasks.content[:300]
    checked = admin.get(f"/api/v1/task-sets/{tasks.json()['id']}").json()
    assert (checked["status"], checked["error"]) == ("refused",
                                                     f"tasks.jsonl: line 1: {reason}; fix these lines and run again")
    items = admin.post(f"/api/v1/projects/{project.slug}/items",
                       {"file": SimpleUploadedFile("items.jsonl", line.encode() + b"\n")}, format="multipart")
    assert assert_one_json_line(items, 400)["errors"] == [f"line 1: {reason}"]
    assert not Prompt.objects.exists() and not TaskSet.objects.exists()  # no set a run may read


@pytest.fixture
def admin_page_client(client, make_user):
    client.force_login(make_user("ada", role="admin"))
    return client


def test_an_upload_to_a_page_form_has_the_same_cap_as_the_api(make_project, admin_page_client, settings):
    project = make_project("capped")
    settings.PAIRWISE_MAX_UPLOAD_BYTES = 2000
    lines = "".join(json.dumps(_row(prompt_id=f"p{i}")) + "\n" for i in range(20)).encode()
    assert len(lines) > 2000
    url = f"/admin/review/project/{project.pk}/import/"
    refused = admin_page_client.post(url, {"file": io.BytesIO(lines)})
    assert refused.status_code == 413
    assert refused["Content-Type"].startswith("text/html")
    assert (f"request body too large: {refused.wsgi_request.META['CONTENT_LENGTH']} bytes, and the limit for a "
            "multipart upload is 2000 bytes") in refused.content.decode()
    assert f'href="{url}"' in refused.content.decode()  # back to the form
    assert not Prompt.objects.filter(project=project).exists()
    settings.PAIRWISE_MAX_UPLOAD_BYTES = 20_000
    assert admin_page_client.post(url, {"file": io.BytesIO(lines)}).status_code == 302
    assert Prompt.objects.filter(project=project).count() == 20


# --- add_user ---------------------------------------------------------------------------------------

def _add_user(*args) -> str:
    out = io.StringIO()
    call_command("add_user", *args, stdout=out)
    return out.getvalue()


def test_add_user_without_a_password_keeps_an_existing_users_password():
    _add_user("rita", "--role", "reviewer", "--password", "her-own-long-password")
    out = _add_user("rita", "--role", "adjudicator")
    assert out.strip() == ("user rita exists: role is now adjudicator; password unchanged "
                           "(give --password to set one)")
    user = authenticate(username="rita", password="her-own-long-password")
    assert user is not None and list(user.groups.values_list("name", flat=True)) == ["adjudicator"]


@pytest.mark.parametrize("username", ["rita smith", "<script>", "x" * 151, ""])
def test_add_user_refuses_a_bad_username_in_one_line(username):
    with pytest.raises(CommandError) as refused:
        _add_user(username, "--role", "reviewer")
    assert str(refused.value).startswith(f"username {username[:160]!r}: ")
    assert "\n" not in str(refused.value)
    assert not get_user_model().objects.filter(username=username).exists()


@pytest.mark.parametrize(("value", "message"), [
    (True, "gold rate: True must be a number from 0 to 1"),
    ("nan", "gold rate: nan must be a number from 0 to 1"),
    (float("inf"), "gold rate: inf must be a number from 0 to 1"),
    ("1e309", "gold rate: inf must be a number from 0 to 1"),
    ("half", "gold rate: 'half' must be a number from 0 to 1"),
    ([0.5], "gold rate: [0.5] must be a number from 0 to 1"),
    (-0.0001, "gold rate: -0.0001 must be a number from 0 to 1"),
])
def test_every_share_setting_refuses_what_is_not_a_number_in_its_range_in_one_line(value, message):
    from annotate.errors import UserMistake
    from annotate.limits import share_number

    with pytest.raises(UserMistake) as refused:
        share_number("gold rate", value)
    assert str(refused.value) == message
    assert share_number("gold rate", "0.25") == share_number("gold rate", 0.25) == 0.25
    assert share_number("test_ratio", 0.9, high=0.9) == 0.9
