"""Importing into a project: prompts, responses and pairs, all or nothing."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from annotate.review.importing import ImportRejected
from annotate.review.models import Pair, Prompt, Response
from tests.conftest import import_rows, make_items


def test_reimporting_the_same_prompt_ids_adds_nothing(make_project):
    project = make_project()
    first = import_rows(project, make_items(3, responses=3))
    again = import_rows(project, make_items(3, responses=3))
    assert (first.prompts_created, first.responses_created, first.pairs_created) == (3, 9, 9)
    assert (again.prompts_created, again.prompts_existing, again.responses_created, again.pairs_created) == (0, 3, 0, 0)
    assert Pair.objects.filter(project=project).count() == 9


def test_a_new_answer_to_a_known_prompt_is_paired_with_the_old_ones(make_project):
    project = make_project()
    import_rows(project, make_items(1, responses=2))
    more = make_items(1, responses=3)
    summary = import_rows(project, more)
    assert (summary.responses_created, summary.pairs_created) == (1, 2)


def test_identical_answers_are_never_paired(make_project):
    project = make_project()
    row = {"prompt_id": "same", "prompt": "Say hi", "responses": [
        {"text": "Hi!", "model": "a"}, {"text": "Hi!", "model": "b"}, {"text": "Hello.", "model": "c"}]}
    summary = import_rows(project, [row])
    pairs = Pair.objects.filter(project=project).select_related("response_a", "response_b")
    assert summary.pairs_created == 2
    assert all(p.response_a.text != p.response_b.text for p in pairs)


def test_pairs_per_prompt_are_capped_and_the_choice_is_repeatable(make_project):
    capped = [make_project(slug=f"capped{i}", max_pairs_per_prompt=2) for i in range(2)]
    for project in capped:
        import_rows(project, make_items(1, responses=5))
    chosen = [
        sorted((p.response_a.text, p.response_b.text) for p in Pair.objects.filter(project=project))
        for project in capped
    ]
    assert len(chosen[0]) == 2 and chosen[0] == chosen[1]


def test_gold_points_at_the_preferred_response(make_project):
    project = make_project()
    rows = make_items(1)
    rows[0]["gold"] = {"preferred": 1}
    import_rows(project, rows)
    prompt = Prompt.objects.get(project=project)
    assert prompt.gold_response.text == rows[0]["responses"][1]["text"]


def test_a_changed_prompt_under_a_known_id_rejects_the_whole_file(make_project):
    project = make_project()
    import_rows(project, make_items(2))
    rows = make_items(3)
    rows[1]["prompt"] = "A different question"
    with pytest.raises(ImportRejected) as rejected:
        import_rows(project, rows)
    assert rejected.value.errors == [
        "line 2: prompt_id 'p-0001' already exists with a different prompt; give the new prompt its own prompt_id"
    ]
    assert Prompt.objects.filter(project=project).count() == 2  # line 3's new prompt was not stored either


def test_import_command_rejects_a_bad_file_whole(make_project, tmp_path):
    project = make_project()
    rows = [json.dumps(r) for r in make_items(3)]
    rows[2] = '{"prompt_id": "broken"'
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(rows))
    err = io.StringIO()
    with pytest.raises(CommandError, match="rejected whole, nothing was stored"):
        call_command("import_items", project.slug, str(path), stderr=err)
    assert "line 3: not valid JSON" in err.getvalue()
    assert not Prompt.objects.filter(project=project).exists()
    assert not Response.objects.exists()


def test_import_command_stores_a_good_file(make_project, tmp_path):
    project = make_project()
    path = tmp_path / "items.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in make_items(4)))
    out = io.StringIO()
    call_command("import_items", project.slug, str(path), stdout=out)
    assert "4 new prompt(s)" in out.getvalue() and "4 new pair(s)" in out.getvalue()


def test_import_api_is_for_admins_and_reports_every_error(make_project, make_user, client_for):
    project = make_project()
    url = f"/api/v1/projects/{project.slug}/items"
    good = "\n".join(json.dumps(r) for r in make_items(2)).encode()
    upload = lambda body: {"file": io.BytesIO(body)}  # noqa: E731
    reviewer = client_for(make_user("rita"))
    assert reviewer.post(url, upload(good), format="multipart").status_code == 403
    admin = client_for(make_user("ada", "admin"))
    bad = admin.post(url, upload(good + b"\n[1, 2]\n{}"), format="multipart")
    assert bad.status_code == 400
    assert bad.json()["errors"][0] == "line 3: must be a JSON object"
    assert bad.json()["errors"][1].startswith("line 4: ")
    assert not Prompt.objects.exists()
    ok = admin.post(url, upload(good), format="multipart")
    assert ok.status_code == 201 and ok.json()["pairs_created"] == 2
