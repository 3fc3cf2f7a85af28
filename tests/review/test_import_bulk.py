"""The bulk import: a file read line by line, checked as a whole in staging tables, stored set by set.

The file is staged a chunk at a time; these tests make the chunks tiny, so that a problem found in a
later chunk must still undo everything staged before it.
"""

import io
import json
import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from annotate.review import import_sql
from annotate.review.import_sql import items_import_file
from annotate.review.importing import ImportRejected, items_parse
from annotate.review.models import Pair, Prompt, Response
from tests.conftest import import_rows, make_items
from training.snapshot import prompt_key


@pytest.fixture(autouse=True)
def tiny_chunks(monkeypatch):
    monkeypatch.setattr(import_sql, "CHUNK_ITEMS", 3)


def jsonl(rows) -> bytes:
    return "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows).encode()


def import_file(project, body: bytes):
    return items_import_file(project=project, lines=io.BytesIO(body))


def stored(project) -> dict:
    """What the project holds, by prompt_id: tags, gold answer's text, answers' texts, paired texts."""
    held = {}
    for prompt in Prompt.objects.filter(project=project).prefetch_related("responses"):
        pairs = Pair.objects.filter(prompt=prompt).select_related("response_a", "response_b")
        held[prompt.external_id] = {
            "tags": prompt.tags,
            "gold": prompt.gold_response.text if prompt.gold_response else None,
            "answers": sorted(r.text for r in prompt.responses.all()),
            "pairs": sorted(tuple(sorted((p.response_a.text, p.response_b.text))) for p in pairs),
        }
    return held


def test_a_file_of_many_chunks_is_stored_whole_with_each_prompts_key(make_project):
    project = make_project()
    rows = make_items(10, responses=3)
    rows[4]["gold"] = {"preferred": 2}
    summary = import_file(project, jsonl(rows))
    assert (summary.prompts_created, summary.prompts_existing, summary.responses_created, summary.pairs_created) == (
        10, 0, 30, 30)
    held = stored(project)
    assert held["p-0004"]["gold"] == rows[4]["responses"][2]["text"]
    assert held["p-0009"]["answers"] == sorted(r["text"] for r in rows[9]["responses"])
    for prompt in Prompt.objects.filter(project=project):
        assert prompt.content_key == prompt_key(prompt.messages)
    # Pairs are made in the file's order: the last line's pairs are the newest.
    assert Pair.objects.order_by("-id").first().prompt.external_id == "p-0009"


def test_a_problem_in_a_late_chunk_stores_nothing(make_project):
    project = make_project()
    rows = make_items(10)
    with pytest.raises(ImportRejected) as rejected:
        import_file(project, jsonl([*rows, dict(rows[1], prompt="Another question")]))
    assert rejected.value.errors == ["line 11: prompt_id 'p-0001' already appears on line 2"]
    with pytest.raises(ImportRejected) as rejected:
        import_file(project, jsonl([*rows, '{"prompt_id": "late"']))
    assert rejected.value.errors[0].startswith("line 11: not valid JSON")
    assert not Prompt.objects.exists() and not Response.objects.exists() and not Pair.objects.exists()


def test_the_file_import_lists_the_same_errors_as_the_parser(make_project):
    project = make_project()
    good = make_items(3)
    rows = [good[0], "{not json", good[1], good[0], dict(good[2], colour=1), good[1]]
    body = jsonl(rows) + b"\xff\xfe\n"
    with pytest.raises(ImportRejected) as parsed:
        items_parse(io.BytesIO(body))
    with pytest.raises(ImportRejected) as imported:
        import_file(project, body)
    assert imported.value.errors == parsed.value.errors
    assert [error.split(":")[0] for error in imported.value.errors] == [
        "line 2", "line 4", "line 5", "line 6", "line 7"]
    assert imported.value.errors[1] == "line 4: prompt_id 'p-0000' already appears on line 1"
    assert imported.value.errors[4] == "line 7: not UTF-8 text (byte 1 of the line is 0xff); save the file as UTF-8"


def test_a_file_with_too_many_errors_lists_the_first_200(make_project):
    project = make_project()
    with pytest.raises(ImportRejected) as rejected:
        import_file(project, b"[]\n" * 250)
    assert len(rejected.value.errors) == 201
    assert rejected.value.errors[-1] == "line 200: stopped after 200 errors"


def test_an_empty_file_is_rejected(make_project):
    with pytest.raises(ImportRejected, match="the file has no items"):
        import_file(make_project(), b"\n  \n")


def test_reimporting_a_file_stores_nothing_new_and_a_new_answer_only_itself(make_project, tmp_path):
    project = make_project()
    rows = make_items(3)
    rows[0]["tags"] = ["math"]
    path = tmp_path / "items.jsonl"
    path.write_bytes(jsonl(rows))

    def run() -> str:
        out = io.StringIO()
        call_command("import_items", project.slug, str(path), stdout=out)
        return out.getvalue()

    assert "3 new prompt(s), 0 already known, 6 new response(s), 3 new pair(s)" in run()
    before = stored(project)
    assert "0 new prompt(s), 3 already known, 0 new response(s), 0 new pair(s)" in run()
    assert stored(project) == before

    rows[0]["responses"].append({"text": "A third answer", "model": "model-2"})
    rows[0]["tags"] = ["code", "math"]
    rows[0]["gold"] = {"preferred": 2}
    path.write_bytes(jsonl(rows))
    assert "0 new prompt(s), 3 already known, 1 new response(s), 2 new pair(s)" in run()
    after = stored(project)
    assert after["p-0000"]["tags"] == ["math", "code"]  # kept, then the new ones in the file's order
    assert after["p-0000"]["gold"] == "A third answer"
    assert len(after["p-0000"]["pairs"]) == 3
    assert {key: value for key, value in after.items() if key != "p-0000"} == {
        key: value for key, value in before.items() if key != "p-0000"}


def test_the_same_answer_twice_in_a_line_is_stored_once(make_project):
    project = make_project()
    answer = {"text": "Paris.", "model": "m", "model_version": "1"}
    summary = import_file(project, jsonl([{"prompt_id": "capital", "prompt": "Capital of France?",
                                           "responses": [answer, answer, {"text": "Lyon.", "model": "m"}]}]))
    assert (summary.responses_created, summary.pairs_created) == (2, 1)


def test_a_changed_prompt_text_rejects_the_file_and_names_each_line(make_project):
    project = make_project()
    import_file(project, jsonl(make_items(4)))
    rows = make_items(5)
    rows[1]["prompt"] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": rows[1]["prompt"]}]
    rows[3]["prompt"] = "Something else"
    with pytest.raises(ImportRejected) as rejected:
        import_file(project, jsonl(rows))
    assert [error.split(":")[0] for error in rejected.value.errors] == ["line 2", "line 4"]
    assert "'p-0003' already exists with a different prompt" in rejected.value.errors[1]
    assert Prompt.objects.filter(project=project).count() == 4


def test_capped_pairs_do_not_depend_on_the_order_of_the_answers(make_project):
    rows = make_items(2, responses=5)
    reordered = [dict(row, responses=list(reversed(row["responses"]))) for row in reversed(rows)]
    first, second = (make_project(slug=slug, max_pairs_per_prompt=3) for slug in ("capped", "reordered"))
    import_file(first, jsonl(rows))
    import_file(second, jsonl(reordered))
    assert {key: value["pairs"] for key, value in stored(first).items()} == {
        key: value["pairs"] for key, value in stored(second).items()}
    assert all(len(value["pairs"]) == 3 for value in stored(first).values())

    rows[0]["responses"].append({"text": "One more answer", "model": "model-9"})
    summary = import_file(first, jsonl(rows))
    assert (summary.responses_created, summary.pairs_created) == (1, 0)  # the prompt is at its cap


def test_the_cap_tops_up_a_prompt_when_raised(make_project):
    project = make_project(max_pairs_per_prompt=1)
    import_rows(project, make_items(1, responses=4))
    project.max_pairs_per_prompt = 4
    project.save()
    summary = import_rows(project, make_items(1, responses=4))
    assert summary.pairs_created == 3 and Pair.objects.filter(project=project).count() == 4


@pytest.mark.parametrize("text", ["nul \u0000 inside", "half a \ud83d surrogate pair"])
def test_text_a_database_cannot_hold_is_one_clear_error(make_project, text):
    project = make_project()
    rows = make_items(2)
    rows[1]["responses"][0]["text"] = text
    with pytest.raises(ImportRejected) as rejected:
        import_file(project, jsonl(rows))
    assert len(rejected.value.errors) == 1 and rejected.value.errors[0].startswith("line 2: holds \\u0000 or an")
    assert not Prompt.objects.exists()


def test_an_escaped_emoji_is_text_like_any_other(make_project):
    project = make_project()
    rows = make_items(1)
    rows[0]["responses"][0]["text"] = "Well done \U0001f600"  # json.dumps writes it as a surrogate pair
    import_file(project, jsonl(rows))
    assert Response.objects.filter(text="Well done \U0001f600").exists()


def test_names_longer_than_their_columns_are_errors_not_crashes(make_project):
    rows = make_items(1)
    rows[0]["responses"][1]["model"] = "m" * 201
    with pytest.raises(ImportRejected) as rejected:
        import_file(make_project(), jsonl(rows))
    assert rejected.value.errors == ["line 1: response 1 'model' is longer than 200 characters"]


def test_the_api_names_the_line_that_is_not_utf8(make_project, make_user, client_for):
    project = make_project()
    admin = client_for(make_user("ada", "admin"))
    body = jsonl(make_items(2)) + b"\xff oops\n"
    response = admin.post(f"/api/v1/projects/{project.slug}/items", {"file": io.BytesIO(body)}, format="multipart")
    assert response.status_code == 400 and response.json()["errors"] == ["line 3: not UTF-8 text (byte 1 of the line is 0xff); save the file as UTF-8"]
    assert not Prompt.objects.exists()


def test_the_command_names_a_missing_project_and_file(make_project, tmp_path):
    with pytest.raises(CommandError, match="no project 'nope'"):
        call_command("import_items", "nope", str(tmp_path / "x.jsonl"))
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_items", make_project().slug, str(tmp_path / "x.jsonl"))


def test_a_prompt_saved_one_by_one_gets_its_key(make_project):
    project = make_project()
    prompt = Prompt.objects.create(project=project, external_id="by-hand", messages=[{"role": "user", "content": "Hi"}])
    assert prompt.content_key == prompt_key("Hi")
    prompt.messages = [{"role": "user", "content": "Hello"}]
    prompt.save(update_fields=["messages"])
    prompt.refresh_from_db()
    assert prompt.content_key == prompt_key("Hello")


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_uploads_of_one_file_at_once_store_it_once(make_project):
    project = make_project()
    body = jsonl(make_items(20, responses=3))
    summaries, failures = [], []

    def upload():
        try:
            summaries.append(import_file(project, body))
        except Exception as error:  # reported by the assertion below
            failures.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=upload) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert sorted(summary.prompts_created for summary in summaries) == [0, 20]
    assert Prompt.objects.filter(project=project).count() == 20 and Pair.objects.filter(project=project).count() == 60


@pytest.fixture
def plans_of_statements():
    """The plan of every statement the connection runs from here on, as PostgreSQL's auto_explain logs it."""
    plans = []

    def keep(notice):
        plans.append(notice.message_primary)

    connection.ensure_connection()
    connection.connection.add_notice_handler(keep)
    with connection.cursor() as cursor:
        for statement in ("LOAD 'auto_explain'", "SET auto_explain.log_min_duration = 0",
                          "SET client_min_messages = log"):
            cursor.execute(statement)
    yield plans
    with connection.cursor() as cursor:
        cursor.execute("RESET client_min_messages")
        cursor.execute("RESET auto_explain.log_min_duration")
    connection.connection.remove_notice_handler(keep)


@pytest.mark.postgres
def test_after_a_one_prompt_import_a_large_one_still_finds_prompts_by_their_id(make_project, plans_of_statements,
                                                                             django_capture_on_commit_callbacks,
                                                                             monkeypatch):
    """Statistics taken of a table of one prompt say every column is unique, project_id too; planned on
    them, a lookup of a prompt_id would read all the project's prompts through prompt_content_key (12
    times as long for 10,000 prompts). The import refreshes them once it has outgrown them."""
    monkeypatch.setattr(import_sql, "CHUNK_ITEMS", 500)  # tables of many pages, where plans differ
    project = make_project()
    rows = make_items(1001)
    with django_capture_on_commit_callbacks(execute=True):  # the statistics refreshed after the commit
        import_file(project, jsonl(rows[:1]))
    plans_of_statements.clear()
    import_file(project, jsonl(rows[1:]))
    lookups = [plan for plan in plans_of_statements if "p.external_id = s.external_id" in plan]
    # The first chunk's check runs on whatever statistics the table had (the suite's earlier tests leave
    # their own); after it the import has refreshed them, and every lookup goes through the prompt_id's index.
    assert lookups[1:] and [plan for plan in lookups[1:] if "prompt_content_key" in plan] == []
    assert [plan for plan in lookups[1:] if "prompt_external_id_unique" not in plan] == []
    assert Prompt.objects.filter(project=project).count() == 1001
