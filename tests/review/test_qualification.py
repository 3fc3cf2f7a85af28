"""Onboarding on gold through the API: the qualification round, its feedback, retries, the hold, an admin's
release, and gold checks mixed into live work."""

import io
import uuid

import pytest
from django.core.management import CommandError, call_command

from annotate.review.assignments import assignment_next
from annotate.review.import_sql import items_import
from annotate.review.judgments import judgment_submit
from annotate.review.models import Assignment, GoldCheck, Pair, QualificationAttempt
from annotate.review.qualification import guess_pass_chance
from tests.conftest import import_rows
from tests.review.helpers import REASON, gold_items, live_items


@pytest.fixture
def onboarding(make_project):
    project = make_project(slug="onboard", overlap=3, retest_rate=0, qualification_items=3,
                           qualification_pass_mark=0.66, qualification_attempts=2)
    import_rows(project, gold_items(8) + live_items(4))
    return project


def next_for(client, project):
    return client.get(f"/api/v1/projects/{project.slug}/assignments/next")


def good_side(body: dict) -> str:
    return "left" if body["left"]["text"].startswith("Good") else "right"


def answer(client, body: dict, *, right: bool, valid_judgment):
    side = good_side(body) if right else {"left": "right", "right": "left"}[good_side(body)]
    rationale = f"Judged item {body['id']} carefully: the chosen answer uses total distance over total time."
    return client.post(f"/api/v1/assignments/{body['id']}/judgment", valid_judgment(side, rationale=rationale),
                       format="json")


def test_gold_items_come_first_with_feedback_then_live_items_after_passing(onboarding, make_user, client_for,
                                                                           valid_judgment):
    client = client_for(make_user("rita"))
    for number, right in enumerate((True, False, True), start=1):
        body = next_for(client, onboarding).json()
        assert body["left"]["text"].split()[0] in ("Good", "Poor"), "only gold items during the round"
        assert body["qualification"] == {"attempt": 1, "attempts": 2, "items": 3, "answered": number - 1,
                                         "correct": (0, 1, 1)[number - 1], "pass_mark": 0.66}
        feedback = answer(client, body, right=right, valid_judgment=valid_judgment).json()["feedback"]
        # The expected answer is named by the side this reviewer saw it on, with the import's reason.
        assert feedback["expected"] == good_side(body) and feedback["correct"] is right
        assert feedback["reason"].startswith(REASON)
        assert feedback["qualification"]["answered"] == number
        assert feedback["qualification"]["next"] == ("live" if number == 3 else "continue")
    assert QualificationAttempt.objects.get().status == "passed"
    live = next_for(client, onboarding).json()
    assert live["left"]["text"].split()[0] in ("One", "Another") and "qualification" not in live
    done = answer(client, live, right=True, valid_judgment=valid_judgment)
    assert "feedback" not in done.json()


@pytest.mark.parametrize("a_on_left", [True, False])
def test_the_expected_side_follows_the_reviewers_own_order(onboarding, make_user, client_for, valid_judgment,
                                                          a_on_left):
    client = client_for(make_user("rita"))
    body = next_for(client, onboarding).json()
    Assignment.objects.filter(pk=body["id"]).update(a_on_left=a_on_left)
    body = next_for(client, onboarding).json()  # the same assignment, now in the order set above
    pair = Pair.objects.select_related("prompt").get(assignments__pk=body["id"])
    gold_is_a = pair.prompt.gold_response_id == pair.response_a_id
    expected = "left" if gold_is_a == a_on_left else "right"
    assert good_side(body) == expected
    feedback = answer(client, body, right=True, valid_judgment=valid_judgment).json()["feedback"]
    assert feedback["expected"] == expected and feedback["correct"] is True


def test_a_reviewer_who_fails_retries_then_waits_for_an_admin(onboarding, make_user, client_for, valid_judgment):
    rita = make_user("rita")
    client = client_for(rita)
    for attempt in (1, 2):
        for _ in range(3):
            body = next_for(client, onboarding).json()
            assert body["qualification"]["attempt"] == attempt
            feedback = answer(client, body, right=False, valid_judgment=valid_judgment).json()["feedback"]
        assert feedback["qualification"]["status"] == "failed"
        assert feedback["qualification"]["next"] == ("retry" if attempt == 1 else "held")
    held = next_for(client, onboarding)
    assert held.status_code == 403
    assert held.json()["detail"] == (
        "you did not pass the qualification round of 'onboard' (0 of 3 right in attempt 2; the pass mark is 66%) "
        "and have no attempt left; an admin must let you try again or pass you")
    # A retry never shows a gold item the reviewer has already seen (and had explained).
    seen = list(Assignment.objects.filter(reviewer=rita).values_list("pair_id", flat=True))
    assert len(seen) == len(set(seen)) == 6

    admin = client_for(make_user("ada", role="admin"))
    assert client_for(make_user("eve", role="engineer")).post(
        f"/api/v1/projects/{onboarding.slug}/qualification", {"username": "rita", "action": "pass"},
        format="json").status_code == 403
    released = admin.post(f"/api/v1/projects/{onboarding.slug}/qualification", {"username": "rita", "action": "retry"},
                          format="json")
    assert released.status_code == 201 and released.json()["status"] == "running" and released.json()["attempt"] == 3
    body = next_for(client, onboarding).json()
    assert body["qualification"]["attempt"] == 3 and body["qualification"]["attempts"] == 3

    bad = admin.post(f"/api/v1/projects/{onboarding.slug}/qualification", {"username": "rita", "action": "forgive"},
                     format="json")
    assert bad.status_code == 400 and bad.json()["detail"] == "action: 'forgive' must be one of retry, pass"


def test_an_admin_can_pass_a_held_reviewer(onboarding, make_user, client_for, valid_judgment):
    client = client_for(make_user("rita"))
    onboarding.qualification_attempts = 1
    onboarding.save()
    for _ in range(3):
        answer(client, next_for(client, onboarding).json(), right=False, valid_judgment=valid_judgment)
    assert next_for(client, onboarding).status_code == 403
    admin = client_for(make_user("ada", role="admin"))
    passed = admin.post(f"/api/v1/projects/{onboarding.slug}/qualification", {"username": "rita", "action": "pass"},
                        format="json")
    assert passed.status_code == 201 and passed.json()["status"] == "passed"
    assert QualificationAttempt.objects.order_by("-number").first().decided_by == "passed by ada"
    assert "qualification" not in next_for(client, onboarding).json()
    results = admin.get(f"/api/v1/projects/{onboarding.slug}/qualification").json()
    (row,) = results["reviewers"]
    assert row["username"] == "rita" and row["status"] == "passed"
    assert [(a["number"], a["status"], a["correct"]) for a in row["attempts"]] == [(1, "failed", 0), (2, "passed", 0)]


def test_a_qualification_answer_cannot_be_undone(onboarding, make_user, client_for, valid_judgment):
    client = client_for(make_user("rita"))
    answer(client, next_for(client, onboarding).json(), right=False, valid_judgment=valid_judgment)
    undo = client.post(f"/api/v1/projects/{onboarding.slug}/judgments/undo")
    assert undo.status_code == 409 and "qualification answer cannot be undone" in undo.json()["detail"]


def test_with_no_unseen_gold_left_the_attempt_is_scored_on_what_was_answered(make_project, make_user, client_for,
                                                                              valid_judgment):
    project = make_project(slug="scarce", retest_rate=0, qualification_items=5, qualification_pass_mark=0.5)
    import_rows(project, gold_items(2) + live_items(1))
    client = client_for(make_user("rita"))
    for _ in range(2):
        answer(client, next_for(client, project).json(), right=True, valid_judgment=valid_judgment)
    body = next_for(client, project).json()
    assert "qualification" not in body and body["left"]["text"].split()[0] in ("One", "Another")
    attempt = QualificationAttempt.objects.get()
    assert (attempt.status, attempt.answered, attempt.correct) == ("passed", 2, 2)



def test_a_round_without_gold_items_says_so_in_one_line(make_project, make_user, client_for):
    project = make_project(slug="goldless", retest_rate=0, qualification_items=2)
    import_rows(project, live_items(2))
    response = next_for(client_for(make_user("rita")), project)
    assert response.status_code == 409
    assert response.json()["detail"] == ("the qualification round of 'goldless' has no gold item left that you have "
                                         "not seen; an admin must import more gold items or pass you")


def test_gold_is_mixed_into_live_work_at_the_project_rate_and_never_announced(make_project, make_user, client_for,
                                                                              valid_judgment):
    project = make_project(slug="mixed", overlap=1, retest_rate=0, gold_rate=1.0)
    import_rows(project, gold_items(2) + live_items(2))
    for name in ("rita", "sam"):
        client = client_for(make_user(name))
        kinds = []
        while (response := next_for(client, project)).status_code == 200:
            body = response.json()
            assert "qualification" not in body
            kinds.append(body["left"]["text"].split()[0] in ("Good", "Poor"))
            judged = answer(client, body, right=True, valid_judgment=valid_judgment).json()
            assert "feedback" not in judged, "a gold check in live work stays silent"
        # Every reviewer is checked on every gold pair, even past the overlap of 1.
        assert kinds.count(True) == 2
    checks = GoldCheck.objects.filter(attempt__isnull=True)
    assert checks.count() == 4 and all(check.correct for check in checks)
    # The gold pairs' counts say how many reviewers hold or judged them, gold checks included.
    assert sorted(Pair.objects.filter(prompt__external_id__startswith="g-").values_list("assigned_count", flat=True)) == [2, 2]


def test_a_gold_rate_of_zero_mixes_nothing(make_project, make_user):
    project = make_project(slug="plain", overlap=1, retest_rate=0)
    import_rows(project, gold_items(3) + live_items(3))
    reviewer = make_user("rita")
    judged = []
    while (assignment := assignment_next(project=project, reviewer=reviewer)) is not None:
        judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice="tie", strength=None,
                        criteria={"correct": "tie", "complete": "tie"},
                        rationale="Both answers say the same thing in other words.", client_key=uuid.uuid4())
        judged.append(assignment.pair.prompt.external_id)
    # Every pair was served and judged as live work, the gold ones too (at overlap 1, once each) ...
    assert sorted(judged) == sorted(item["prompt_id"] for item in gold_items(3) + live_items(3))
    # ... and none of them was checked against its gold answer.
    assert not GoldCheck.objects.exists()


def test_the_import_keeps_the_gold_reason_and_refuses_a_bad_one(make_project):
    from annotate.review.importing import ImportRejected, items_parse
    from annotate.review.models import Prompt

    project = make_project(slug="reasons")
    import_rows(project, gold_items(1))
    assert Prompt.objects.get(external_id="g-0").gold_reason == f"{REASON} (0)"
    changed = gold_items(1)
    changed[0]["gold"]["reason"] = "A better reason."
    import_rows(project, changed)
    assert Prompt.objects.get(external_id="g-0").gold_reason == "A better reason."
    bad = gold_items(1, first=5)
    bad[0]["gold"]["why"] = "typo"
    with pytest.raises(ImportRejected) as rejected:
        items_import(project=project, items=items_parse([__import__("json").dumps(bad[0])]))
    assert rejected.value.errors == ["line 1: gold has unknown key(s) ['why']; use preferred and reason"]


@pytest.mark.parametrize("option, value, words", [
    ("--pass-mark", "1.5", "qualification pass mark: 1.5 must be a number from 0 to 1"),
    ("--pass-mark", "-0.1", "qualification pass mark: -0.1 must be a number from 0 to 1"),
    ("--gold-rate", "2", "gold rate: 2.0 must be a number from 0 to 1"),
    ("--qualification-attempts", "0", "qualification attempts: 0 must be a whole number from 1 to 100"),
    ("--qualification-items", "-3", "qualification items: -3 must be a whole number from 0 to 1000"),
    ("--rationale-flag-chars", "-1", "rationale flag length: -1 must be a whole number from 0 to 2000"),
    ("--standing-after", "0", "standing minimum: 0 must be a whole number from 1 to 100000"),
])
def test_bad_settings_are_refused_in_one_line(db, tmp_path, option, value, words):
    criteria = tmp_path / "criteria.yaml"
    criteria.write_text("instructions: Pick the better one.\ncriteria:\n  - key: correct\n    text: It is right.\n")
    with pytest.raises(CommandError) as refused:
        call_command("create_project", "strict", "--criteria", str(criteria), option, value, stdout=io.StringIO())
    assert words in str(refused.value) and "\n" not in str(refused.value)
    from annotate.review.models import Project

    assert not Project.objects.filter(slug="strict").exists(), "nothing half-written"


def test_good_settings_are_kept(db, tmp_path):
    criteria = tmp_path / "criteria.yaml"
    criteria.write_text("instructions: Pick the better one.\ncriteria:\n  - key: correct\n    text: It is right.\n")
    call_command("create_project", "kept", "--criteria", str(criteria), "--qualification-items", "4", "--pass-mark",
                 "0.75", "--qualification-attempts", "3", "--gold-rate", "0.05", "--rationale-flag-chars", "60",
                 "--standing-after", "30", stdout=io.StringIO())
    from annotate.review.models import Project

    project = Project.objects.get(slug="kept")
    assert (project.qualification_items, project.qualification_pass_mark, project.qualification_attempts,
            project.gold_rate, project.rationale_flag_chars, project.standing_min_judgments) == (4, 0.75, 3, 0.05, 60, 30)


@pytest.mark.parametrize("body, words", [
    ({"qualification_pass_mark": 1.5}, "qualification pass mark: 1.5 must be a number from 0 to 1"),
    ({"qualification_pass_mark": "high"}, "qualification pass mark: 'high' must be a number from 0 to 1"),
    ({"gold_rate": -0.2}, "gold rate: -0.2 must be a number from 0 to 1"),
    ({"qualification_attempts": 0}, "qualification attempts: 0 must be a whole number from 1 to 100"),
    ({"standing_min_judgments": 2.5}, "standing minimum: 2.5 must be a whole number from 1 to 100000"),
    ({"qualification_items": 4, "min_overlap": 4}, "min overlap 4 is above max overlap 3"),
])
def test_the_settings_api_refuses_bad_onboarding_settings_in_one_line_and_changes_nothing(
        onboarding, make_user, client_for, body, words):
    admin = client_for(make_user("ada", role="admin"))
    url = f"/api/v1/projects/{onboarding.slug}/settings"
    before = admin.get(url).json()
    refused = admin.patch(url, body, format="json")
    assert refused.status_code == 400
    assert refused.json()["detail"].startswith(words) and "\n" not in refused.json()["detail"]
    assert admin.get(url).json() == before


def test_the_settings_api_turns_the_round_on_for_the_next_request(make_project, make_user, client_for):
    project = make_project(slug="later", overlap=3, retest_rate=0)
    import_rows(project, gold_items(3) + live_items(2))
    assert "qualification" not in next_for(client_for(make_user("rita")), project).json()  # no round yet
    admin = client_for(make_user("ada", role="admin"))
    changed = admin.patch(f"/api/v1/projects/{project.slug}/settings",
                          {"qualification_items": 2, "qualification_pass_mark": 1.0, "qualification_attempts": 1,
                           "gold_rate": 0.1}, format="json")
    assert changed.status_code == 200
    assert {k: changed.json()[k] for k in ("qualification_items", "qualification_pass_mark", "gold_rate")} == {
        "qualification_items": 2, "qualification_pass_mark": 1.0, "gold_rate": 0.1}
    sam = client_for(make_user("sam"))
    assert next_for(sam, project).json()["qualification"]["items"] == 2
    assert client_for(make_user("rex")).patch(f"/api/v1/projects/{project.slug}/settings",
                                              {"gold_rate": 0.5}, format="json").status_code == 403


def test_an_admin_cannot_release_a_reviewer_who_passed_or_has_not_tried(onboarding, make_user, client_for,
                                                                      valid_judgment):
    client = client_for(make_user("rita"))
    admin = client_for(make_user("ada", role="admin"))

    def release(action):
        return admin.post(f"/api/v1/projects/{onboarding.slug}/qualification", {"username": "rita", "action": action},
                          format="json")

    assert release("retry").json()["detail"] == ("rita has not tried the qualification round yet; "
                                                 "their first request starts it")
    for _ in range(3):
        answer(client, next_for(client, onboarding).json(), right=True, valid_judgment=valid_judgment)
    refused = release("retry")
    assert refused.status_code == 409 and refused.json()["detail"] == "rita has already passed the qualification round"


def test_an_admin_can_pass_a_reviewer_in_the_middle_of_an_attempt(onboarding, make_user, client_for, valid_judgment):
    rita = make_user("rita")
    client = client_for(rita)
    admin = client_for(make_user("ada", role="admin"))
    answer(client, next_for(client, onboarding).json(), right=True, valid_judgment=valid_judgment)
    held_item = next_for(client, onboarding).json()  # the attempt's second item, now in rita's hands
    passed = admin.post(f"/api/v1/projects/{onboarding.slug}/qualification", {"username": "rita", "action": "pass"},
                        format="json")
    assert passed.status_code == 201 and passed.json()["status"] == "passed"
    (row,) = admin.get(f"/api/v1/projects/{onboarding.slug}/qualification").json()["reviewers"]
    assert [(a["number"], a["status"], a["answered"], a["decided_by"]) for a in row["attempts"]] == [
        (1, "stopped", 1, "stopped by ada"), (2, "passed", 0, "passed by ada")]
    # The item the stopped attempt had handed out is withdrawn: its answer is refused, its pair freed.
    late = answer(client, held_item, right=True, valid_judgment=valid_judgment)
    assert late.status_code == 410
    assert Pair.objects.get(assignments__pk=held_item["id"]).assigned_count == 0
    live = next_for(client, onboarding).json()
    assert "qualification" not in live and live["left"]["text"].split()[0] in ("One", "Another")


def demo_like(make_project):
    """The demo's first onboarding project: configured before its import, with 3 gold pairs for 2 items x 2 attempts."""
    project = make_project(slug="short", overlap=3, retest_rate=0, qualification_items=2, qualification_pass_mark=0.5,
                           qualification_attempts=2)
    import_rows(project, gold_items(3) + live_items(2))
    return project


def test_a_last_attempt_that_runs_out_of_gold_is_kept_as_failed_and_the_admin_can_act(make_project, make_user,
                                                                                      client_for, valid_judgment):
    project = demo_like(make_project)
    rita = make_user("rita")
    client = client_for(rita)
    for _ in range(2):
        answer(client, next_for(client, project).json(), right=False, valid_judgment=valid_judgment)
    body = next_for(client, project).json()
    assert body["qualification"]["attempt"] == 2
    answer(client, body, right=False, valid_judgment=valid_judgment)
    held = next_for(client, project)  # no unseen gold left: attempt 2 is scored on its one answer
    assert held.status_code == 403 and "0 of 1 right in attempt 2" in held.json()["detail"]
    last = QualificationAttempt.objects.get(reviewer=rita, number=2)
    assert last.status == "failed" and last.finished_at is not None, "the score is kept, not rolled back"
    assert next_for(client, project).status_code == 403, "asking again changes nothing"

    admin = client_for(make_user("ada", role="admin"))
    url = f"/api/v1/projects/{project.slug}/qualification"
    (row,) = admin.get(url).json()["reviewers"]
    assert row["status"] == "held"
    retry = admin.post(url, {"username": "rita", "action": "retry"}, format="json")
    assert retry.status_code == 409 and retry.json()["detail"] == (
        "rita has seen every gold item of 'short'; import more gold items, or pass them")
    passed = admin.post(url, {"username": "rita", "action": "pass"}, format="json")
    assert passed.status_code == 201 and passed.json()["status"] == "passed"
    assert "qualification" not in next_for(client, project).json()


def test_a_failed_attempt_with_no_gold_left_for_the_next_one_starts_nothing(make_project, make_user, client_for,
                                                                            valid_judgment):
    project = make_project(slug="two", retest_rate=0, qualification_items=2, qualification_pass_mark=1.0,
                           qualification_attempts=3)
    import_rows(project, gold_items(2) + live_items(1))
    rita = make_user("rita")
    client = client_for(rita)
    for _ in range(2):
        answer(client, next_for(client, project).json(), right=False, valid_judgment=valid_judgment)
    refused = next_for(client, project)
    assert refused.status_code == 409 and "no gold item left that you have not seen" in refused.json()["detail"]
    assert list(QualificationAttempt.objects.filter(reviewer=rita).values_list("number", "status")) == [(1, "failed")]


def test_qualification_settings_the_gold_cannot_fill_are_refused_in_one_line(make_project, make_user, client_for,
                                                                            tmp_path):
    project = make_project(slug="fit", overlap=3, retest_rate=0)
    import_rows(project, gold_items(3) + live_items(2))
    admin = client_for(make_user("ada", role="admin"))
    url = f"/api/v1/projects/{project.slug}/settings"
    refused = admin.patch(url, {"qualification_items": 2, "qualification_attempts": 2}, format="json")
    assert refused.status_code == 400 and refused.json()["detail"] == (
        "qualification items 2 x attempts 2 need 4 gold pairs but project 'fit' has 3; import more gold items or "
        "lower the qualification items or attempts")
    assert admin.get(url).json()["qualification_items"] == 0, "nothing half-written"
    assert admin.patch(url, {"qualification_items": 1, "qualification_attempts": 3}, format="json").status_code == 200
    criteria = tmp_path / "criteria.yaml"
    criteria.write_text("instructions: Pick the better one.\ncriteria:\n  - key: correct\n    text: It is right.\n")
    with pytest.raises(CommandError) as command_refused:
        call_command("create_project", "fit", "--criteria", str(criteria), "--qualification-attempts", "4",
                     stdout=io.StringIO())
    assert str(command_refused.value).startswith("qualification items 1 x attempts 4 need 4 gold pairs")


@pytest.mark.slow  # seeds the whole demo
def test_the_demo_onboarding_settings_fit_the_demo_gold(db, own_data_folders):
    from annotate.review.models import Project, gold_pairs, qualification_gold_short

    call_command("seed_demo", stdout=io.StringIO())
    project = Project.objects.get(slug="demo-onboarding")
    assert qualification_gold_short(project) is None
    assert gold_pairs(project).count() >= project.qualification_items * project.qualification_attempts
    call_command("seed_demo", stdout=io.StringIO())  # again: the settings are checked against the imported gold


@pytest.mark.parametrize(("items", "pass_mark", "attempts", "chance"), [
    (2, 0.5, 2, 1 - (1 / 4) ** 2),  # 1 right of 2: only both wrong fails (1/4), in both attempts
    (2, 0.8, 1, 1 / 4),  # both right
    (5, 1.0, 2, 1 - (31 / 32) ** 2),  # the onboarding demo's round: 6.2%
    (5, 0.8, 1, 6 / 32),  # 4 or 5 right: 5 + 1 of 32 outcomes
    (3, 0.6, 1, 4 / 8),  # 2 or 3 right: 3 + 1 of 8 (1.8 rounds up to 2, as the round's own rule)
    (0, 0.8, 2, 1.0),  # no round: nothing to fail
])
def test_the_chance_that_a_guesser_passes_is_worked_out_by_hand(items, pass_mark, attempts, chance):
    assert guess_pass_chance(items=items, pass_mark=pass_mark, attempts=attempts) == pytest.approx(chance)


def test_a_guesser_passes_the_demo_onboarding_round_rarely():
    from annotate.runs.management.commands.seed_demo import ONBOARDING_SETTINGS

    chance = guess_pass_chance(items=ONBOARDING_SETTINGS["qualification_items"],
                               pass_mark=ONBOARDING_SETTINGS["qualification_pass_mark"],
                               attempts=ONBOARDING_SETTINGS["qualification_attempts"])
    assert chance < 0.07
