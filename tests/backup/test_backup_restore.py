"""A project backed up and restored into an empty database gives the same agreement report and the same
snapshot, byte for byte; a damaged file is refused in one line and nothing is written."""

import hashlib
import json
import uuid
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from annotate.backup.contents import PROJECT_ROWS, LineHasher, line_bytes, project_models
from annotate.quality.selectors import agreement_report_for_project
from annotate.quality.services import stored_report_refresh
from annotate.review import adjudication
from annotate.review.assignments import assignment_next
from annotate.review.judgments import judgment_submit, judgment_undo_last
from annotate.review.models import Adjudication, GoldCheck, Judgment, Project, QualificationAttempt
from annotate.review.projects import criteria_version_add
from tests.conftest import import_rows, judge_until_done

REVIEWERS = ("ann", "bob", "cat")
EXPORT_OPTIONS = ["--adjudications", "split", "--test-ratio", "0.3"]


def items(count: int) -> list[dict]:
    """Prompts q-00..: three answers each (three pairs); q-00 and q-01 are gold items."""
    rows = []
    for i in range(count):
        row = {"prompt_id": f"q-{i:02d}", "prompt": f"Question {i}: how many legs do {i} spiders have?",
               "responses": [{"text": f"Answer {k} to {i}: {8 * i + k} legs.", "model": f"model-{k}",
                              "model_version": f"v{k}"} for k in range(3)],
               "tags": ["even" if i % 2 == 0 else "odd"]}
        if i < 2:
            row["gold"] = {"preferred": 0, "reason": "Eight legs a spider."}
        rows.append(row)
    return rows


def pick_for(name: str):
    """A reviewer's clicks: fixed per reviewer and pair, so reviewers agree on some pairs and split on others."""
    def pick(assignment) -> str:
        digest = hashlib.sha256(f"{name}:{assignment.pair_id}".encode()).digest()
        return ("left", "right", "left", "right", "tie")[digest[0] % 5]
    return pick


def build_project(make_project, make_user) -> Project:
    """Judgments with retests, a qualification round and gold checks, an undone and re-made judgment, rulings."""
    project = make_project(slug="kept", overlap=3, retest_rate=0.3, qualification_items=1,
                           qualification_pass_mark=0.0, gold_rate=0.1)
    import_rows(project, items(12))
    criteria_version_add(project=project, instructions="Count the legs.",
                         items=[{"key": "correct", "text": "Right number."},
                                {"key": "complete", "text": "Says why."}])
    for name in REVIEWERS:
        reviewer = make_user(name)
        judge_until_done(project, reviewer, pick_for(name))
    ann = get_user_model().objects.get(username="ann")
    judgment_undo_last(project=project, reviewer=ann)  # a retracted revision
    judge_until_done(project, ann, lambda assignment: "both_bad")  # and a new one
    judy = make_user("judy", role="adjudicator")
    queue = adjudication.queue_filter_parse({}, project=project)
    for _ in range(3):
        held = adjudication.adjudication_next(project=project, adjudicator=judy, queue=queue)
        if held is None:
            break
        adjudication.ruling_submit(assignment_id=held.pk, adjudicator=judy, choice="left", strength=2, criteria=None,
                                   rationale="The left one counts the legs right.", client_key=uuid.uuid4())
    make_user("dan")  # a reviewer with nothing judged yet is not in the backup: no row points at them
    stored_report_refresh(project=project)
    return project


def without_timestamps(value):
    if isinstance(value, dict):
        return {key: without_timestamps(item) for key, item in value.items() if not key.endswith("_at")}
    if isinstance(value, list):
        return [without_timestamps(item) for item in value]
    return value


def rows_kept(project: Project) -> dict[str, list[dict]]:
    """Every kept row's values by id, created_at included; a user it points at by username (ids differ here)."""
    user_model = get_user_model()
    rows = {}
    for model, lookup in project_models():
        names = [f"{field.name}__username" if field.is_relation and field.related_model is user_model
                 else field.attname for field in model._meta.concrete_fields]
        rows[model._meta.label_lower] = list(model._base_manager.filter(**{lookup: project.pk})
                                             .order_by("pk").values(*names))
    return rows


def snapshot_files(folder: Path) -> tuple[str, dict[str, str]]:
    manifest = json.loads((folder / "manifest.json").read_text())
    hashes = {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
              for path in sorted(folder.iterdir()) if path.name != "manifest.json"}
    return manifest["snapshot_id"], hashes


def row_counts(project: Project) -> dict[str, int]:
    return {model._meta.label_lower: model._base_manager.filter(**{lookup: project.pk}).count()
            for model, lookup in project_models()}


@pytest.mark.django_db(transaction=True)
def test_restore_into_an_empty_database_gives_the_same_report_and_snapshot(make_project, make_user, tmp_path):
    project = build_project(make_project, make_user)
    assert Judgment.objects.filter(retracted=True).exists() and Adjudication.objects.exists()
    assert GoldCheck.objects.exists() and QualificationAttempt.objects.exists()
    assert project.assignments.filter(is_retest=True, current_judgment__isnull=False).exists()
    report_before = agreement_report_for_project(project=project, bootstrap=200)
    call_command("export_snapshot", "kept", "--out", str(tmp_path / "before"), *EXPORT_OPTIONS)
    counts_before, rows_before = row_counts(project), rows_kept(project)
    assert rows_before["review.judgment"] and all(row["created_at"] for row in rows_before["review.judgment"])
    backup = tmp_path / "kept.jsonl"
    call_command("backup_project", "kept", "--out", str(backup))

    call_command("flush", interactive=False)  # an empty database: no project, no users, no groups
    assert not Project.objects.exists() and not get_user_model().objects.exists()
    call_command("restore_project", str(backup))

    project = Project.objects.get(slug="kept")
    assert row_counts(project) == counts_before
    assert rows_kept(project) == rows_before  # every value as it was: created_at not set anew by the restore
    assert without_timestamps(agreement_report_for_project(project=project, bootstrap=200)) == \
        without_timestamps(report_before)
    call_command("export_snapshot", "kept", "--out", str(tmp_path / "after"), *EXPORT_OPTIONS)
    assert snapshot_files(tmp_path / "after") == snapshot_files(tmp_path / "before")
    judy = get_user_model().objects.get(username="judy")
    assert [group.name for group in judy.groups.all()] == ["adjudicator"] and not judy.has_usable_password()
    assert not get_user_model().objects.filter(username="dan").exists()

    # Work goes on: a new reviewer's judgment gets an id past the restored ones.
    eve = make_user("eve")
    assignment = assignment_next(project=project, reviewer=eve)
    judgment, _ = judgment_submit(
        assignment_id=assignment.pk, reviewer=eve, choice="left", strength=2,
        criteria={"correct": "left", "complete": "tie"}, rationale="Eight legs for every spider here.",
        client_key=uuid.uuid4())
    assert judgment.pk > max(Judgment.objects.exclude(pk=judgment.pk).values_list("pk", flat=True))


@pytest.fixture
def backup_file(make_project, make_user, tmp_path) -> Path:
    project = make_project(slug="small", overlap=2, retest_rate=0)
    import_rows(project, items(3))
    for name in REVIEWERS[:2]:
        judge_until_done(project, make_user(name), pick_for(name))
    path = tmp_path / "small.jsonl"
    call_command("backup_project", "small", "--out", str(path))
    return path


def restore_refused(path: Path) -> str:
    """The one-line error of a refused restore; checks that nothing was written."""
    before = {model._meta.label_lower: model._base_manager.count() for model, _ in project_models()}
    users_before = get_user_model().objects.count()
    with pytest.raises(CommandError) as refused:
        call_command("restore_project", str(path))
    message = str(refused.value)
    assert "\n" not in message and "Traceback" not in message
    assert {model._meta.label_lower: model._base_manager.count() for model, _ in project_models()} == before
    assert get_user_model().objects.count() == users_before
    return message


def resealed(path: Path, lines: list[bytes]) -> Path:
    """Edited lines with the closing line made anew, as if the file had been written so: only the rows are wrong."""
    hasher = LineHasher()
    for line in lines[:-1]:
        hasher.add(line)
    out = path.with_name("resealed.jsonl")
    out.write_bytes(b"".join([*lines[:-1], line_bytes(hasher.closing_record())]))
    return out


def damaged(path: Path, edit) -> Path:
    lines = path.read_bytes().splitlines(keepends=True)
    out = path.with_name("damaged.jsonl")
    out.write_bytes(b"".join(edit(lines)))
    return out


@pytest.mark.django_db
def test_a_project_that_exists_is_not_restored_over(backup_file):
    assert "project 'small' already exists" in restore_refused(backup_file)


@pytest.mark.django_db
def test_a_truncated_file_is_refused(backup_file):
    Project.objects.filter(slug="small").update(slug="renamed")
    message = restore_refused(damaged(backup_file, lambda lines: lines[:-3]))
    assert "without its closing line: it is truncated" in message
    cut = restore_refused(damaged(backup_file, lambda lines: [*lines[:-1], lines[-1][:20]]))
    assert f"line {len(backup_file.read_bytes().splitlines())} is cut off" in cut


@pytest.mark.django_db
def test_a_garbled_line_is_named(backup_file):
    Project.objects.filter(slug="small").update(slug="renamed")
    message = restore_refused(damaged(backup_file, lambda lines: [*lines[:6], b'{"model": "review.pa\n', *lines[7:]]))
    assert "line 7: not JSON" in message


@pytest.mark.django_db
def test_an_edited_value_fails_the_checksum(backup_file):
    Project.objects.filter(slug="small").update(slug="renamed")

    def edit(lines):
        return [line.replace(b'"winner":"a"', b'"winner":"b"') for line in lines]

    assert b'"winner":"a"' in backup_file.read_bytes()
    message = restore_refused(damaged(backup_file, edit))
    assert "sha256 does not match" in message and f"line {len(backup_file.read_bytes().splitlines())}" in message


@pytest.mark.django_db
def test_ids_taken_by_another_project_roll_everything_back(backup_file):
    # The project is renamed, not removed: its rows still hold the ids the backup's rows need.
    Project.objects.filter(slug="small").update(slug="renamed")
    message = restore_refused(backup_file)
    assert "line 4: cannot be stored here" in message  # line 1 the header, 2-3 the users, 4 the project
    assert "restore into an empty database" in message


@pytest.mark.django_db(transaction=True)
def test_an_id_taken_twice_in_the_file_names_its_own_line(backup_file):
    # Rows are stored many to an INSERT: the error still names the row's own line, not its batch's first.
    call_command("flush", interactive=False)
    lines = backup_file.read_bytes().splitlines(keepends=True)
    prompts = [number for number, line in enumerate(lines) if b'"model":"review.prompt"' in line]
    first, third = (json.loads(lines[number]) for number in (prompts[0], prompts[2]))
    third["pk"] = first["pk"]
    lines[prompts[2]] = line_bytes(third)
    message = restore_refused(resealed(backup_file, lines))
    assert f"line {prompts[2] + 1}: cannot be stored here" in message


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("name", "value", "refusal"), [
    ("strength", "strong", "value must be an integer"),  # refused by the field's conversion
    pytest.param("strength", 70000, "out of range", marks=pytest.mark.postgres),  # by the database: a smallint
    ("reviewer", ["nobody"], "does not exist"),  # a user the file does not list
    ("created_at", "yesterday", "invalid format"),
])
def test_a_wrong_value_names_its_own_line(backup_file, name, value, refusal):
    call_command("flush", interactive=False)
    lines = backup_file.read_bytes().splitlines(keepends=True)
    judgments = [number for number, line in enumerate(lines) if b'"model":"review.judgment"' in line]
    record = json.loads(lines[judgments[2]])
    record["fields"][name] = value
    lines[judgments[2]] = line_bytes(record)
    message = restore_refused(resealed(backup_file, lines))
    assert f"line {judgments[2] + 1}: " in message and refusal in message and "the file is damaged" in message


@pytest.mark.django_db(transaction=True)
def test_a_row_pointing_at_no_row_is_refused(backup_file):
    # A judgment of a pair the file does not hold: found when the keys are checked, whenever that is.
    call_command("flush", interactive=False)
    lines = backup_file.read_bytes().splitlines(keepends=True)
    judgments = [number for number, line in enumerate(lines) if b'"model":"review.judgment"' in line]
    record = json.loads(lines[judgments[2]])
    record["fields"]["pair"] = 999999
    lines[judgments[2]] = line_bytes(record)
    message = restore_refused(resealed(backup_file, lines))
    assert "the backup's rows do not fit together" in message and "pair_id" in message


@pytest.mark.django_db
def test_a_file_that_is_not_a_backup_is_refused(tmp_path, backup_file):
    other = tmp_path / "items.jsonl"
    other.write_text('{"prompt_id": "p1", "prompt": "hi"}\n')
    assert "line 1 is not the header of a Pairwise project backup" in restore_refused(other)


def test_every_model_tied_to_a_project_is_kept_or_left_out_on_purpose():
    """A new model pointing at a project's rows must be added to the backup (or to LEFT_OUT, with why)."""
    from django.apps import apps

    from annotate.backup.contents import LEFT_OUT

    kept = {label for label, _ in PROJECT_ROWS}
    for model in apps.get_models():
        label = model._meta.label_lower
        points_at_kept = any(field.is_relation and field.related_model is not None
                             and field.related_model._meta.label_lower in kept and field.concrete
                             for field in model._meta.get_fields())
        if points_at_kept:
            assert label in kept or label in LEFT_OUT, f"{label} points at a project's rows but is not in the backup"


@pytest.mark.django_db
def test_a_backup_reads_the_same_number_of_queries_however_many_rows(make_project, make_user, tmp_path):
    """Users are written by username: joined to the rows that point at them, never fetched once per row (a
    project of a million judgments would otherwise take millions of queries)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries_for_backup(slug: str, prompts: int) -> tuple[int, int]:
        project = make_project(slug=slug, overlap=2, retest_rate=0)
        import_rows(project, items(prompts))
        for name in REVIEWERS[:2]:
            judge_until_done(project, make_user(f"{name}-{slug}"), pick_for(name))
        with CaptureQueriesContext(connection) as queries:
            call_command("backup_project", slug, "--out", str(tmp_path / f"{slug}.jsonl"))
        lines = (tmp_path / f"{slug}.jsonl").read_bytes().count(b"\n")
        return len(queries), lines

    small_queries, small_lines = queries_for_backup("few", 2)
    large_queries, large_lines = queries_for_backup("more", 8)
    assert large_lines > small_lines + 40  # four times the pairs, judgments and assignments
    assert large_queries == small_queries
