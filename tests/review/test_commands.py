"""The admin's command line: create_project, add_user, seed_demo."""

import io

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command

from annotate.review import selectors
from annotate.review.assignments import assignment_next
from annotate.review.models import CriteriaVersion, Pair, Project

CRITERIA = """instructions: Pick the answer a careful teacher would give a ten-year-old.
criteria:
  - key: correct
    text: "Every fact and every step is right."
  - key: complete
    text: "It explains the conditions and the process, not only the result."
"""


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_a_new_criteria_file_makes_a_new_version_and_the_same_file_does_not(tmp_path):
    path = tmp_path / "criteria.yaml"
    path.write_text(CRITERIA)
    assert "created; criteria version 1" in run("create_project", "speed", "--name", "Speed", "--criteria", str(path),
                                                "--overlap", "2", "--retest", "0.2")
    assert "criteria version 1" in run("create_project", "speed", "--criteria", str(path))
    path.write_text(CRITERIA.replace("ten-year-old", "twelve-year-old"))
    assert "updated; criteria version 2" in run("create_project", "speed", "--criteria", str(path))
    project = Project.objects.get(slug="speed")
    # A quoted text keeps its comma.
    assert project.criteria_versions.get(version=1).items[1]["text"] == (
        "It explains the conditions and the process, not only the result."
    )
    assert (project.overlap, project.retest_rate) == (2, 0.2)
    assert list(CriteriaVersion.objects.values_list("version", flat=True).order_by("version")) == [1, 2]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("criteria: [", "expected the node content, but found '<stream end>' at line 1; fix the YAML syntax"),
        ("criteria: []", "'criteria' must be a non-empty list"),
        ("criteria:\n  - {key: Correct, text: x}", "key 'Correct' must be lower-case"),
        ("criteria:\n  - {key: a, text: x}\n  - {key: a, text: y}", "criterion key 'a' appears twice"),
        ("rules: x\ncriteria:\n  - {key: a, text: x}", "unknown key(s) ['rules']"),
        # YAML reads "B." as a key of its own: said plainly, never patched up.
        ("criteria:\n  - {key: a, text: A, B.}", "criterion 1 text stops at a comma (YAML read 'B.' as a key)"),
    ],
)
def test_a_bad_criteria_file_is_one_clear_error(tmp_path, text, says):
    path = tmp_path / "criteria.yaml"
    path.write_text(text)
    with pytest.raises(CommandError, match=says.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        run("create_project", "speed", "--criteria", str(path))
    assert not Project.objects.exists()


@pytest.mark.django_db
def test_add_user_gives_one_role_and_a_password_that_works():
    out = run("add_user", "rita", "--role", "reviewer")
    password = out.split("password: ")[1].strip()
    user = authenticate(username="rita", password=password)
    assert user is not None and list(user.groups.values_list("name", flat=True)) == ["reviewer"]
    run("add_user", "rita", "--role", "admin", "--password", "another-long-password")
    user.refresh_from_db()
    assert list(user.groups.values_list("name", flat=True)) == ["admin"] and user.is_staff
    with pytest.raises(CommandError):
        call_command("add_user", "x", "--role", "wizard")


@pytest.mark.slow  # seeds the whole demo
@pytest.mark.django_db
def test_seed_demo_loads_thirty_prompts_and_prints_working_accounts(own_data_folders):
    out = run("seed_demo")
    assert Pair.objects.filter(project__slug="demo").count() == 30
    accounts = {line.split()[1]: line.split()[2] for line in out.splitlines() if line.startswith("  ")}
    assert set(accounts) >= {"reviewer", "adjudicator", "engineer", "admin"}
    assert authenticate(username="reviewer", password=accounts["reviewer"]) is not None
    run("seed_demo")  # again: nothing doubles
    assert Pair.objects.filter(project__slug="demo").count() == 30

    # The plain demo goes straight to live pairs; the onboarding demo starts with its qualification round.
    reviewer = get_user_model().objects.get(username="reviewer")
    for slug, round_items in (("demo", None), ("demo-onboarding", 5)):
        project = Project.objects.get(slug=slug)
        assignment = assignment_next(project=project, reviewer=reviewer)
        shown = selectors.assignment_payload(assignment=assignment, project=project, reviewer=reviewer)
        assert shown.get("qualification", {}).get("items") == round_items


@pytest.mark.django_db
@pytest.mark.parametrize("command", [
    ["import_items", "spede", "items.jsonl"], ["export_snapshot", "spede", "--out", "snapshot"], ["agreement", "spede"],
    ["refresh_queue_priorities", "spede"], ["backup_project", "spede", "--out", "backup.jsonl"],
])
def test_every_command_taking_a_project_refuses_a_missing_one_in_the_same_line(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for slug in ("speed", "accuracy"):
        Project.objects.create(slug=slug, name=slug)
    with pytest.raises(CommandError) as refused:
        call_command(*command)
    assert str(refused.value) == ("no project 'spede' in this database (its projects: accuracy, speed); give one of "
                                  "those slugs, or create the project with manage.py create_project")
    assert not list(tmp_path.iterdir())  # nothing written
