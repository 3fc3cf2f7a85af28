"""A reviewer's own standing on their page: shown after enough judgments, from the stored report, and
nothing in it about what another reviewer chose."""

import json

import pytest

from annotate.quality.selectors import agreement_report_for_project
from annotate.quality.standing import STANDING_STEP
from tests.conftest import import_rows, judge_until_done, make_items
from tests.review.helpers import judge


@pytest.fixture
def judged_project(make_project, make_user):
    """Four reviewers, 30 pairs (every third one gold), retests on: ann, bob and dan agree, cat goes left.

    With two others who agree, every pair of ann's has a majority among the others, whatever side cat's
    clicks landed on, so her agreement figure always counts all 30 pairs."""
    project = make_project(slug="standing", overlap=4, retest_rate=0.3, standing_min_judgments=5)
    rows = make_items(30)
    for row in rows[::3]:
        row["gold"] = {"preferred": 0, "reason": "It adds correctly."}
    import_rows(project, rows)

    def better(assignment):  # the first-listed answer, wherever it is shown
        return "left" if assignment.a_on_left else "right"

    judge_until_done(project, make_user("ann"), better)
    judge_until_done(project, make_user("bob"), better)
    judge_until_done(project, make_user("dan"), better)
    judge_until_done(project, make_user("cat"), lambda assignment: "left")
    return project


def standing_of(client, project):
    response = client.get(f"/api/v1/projects/{project.slug}/standing")
    assert response.status_code == 200
    return response


def test_standing_waits_for_the_projects_minimum(make_project, make_user, client_for):
    project = make_project(slug="early", standing_min_judgments=5)
    import_rows(project, make_items(3))
    rita = make_user("rita")
    judge_until_done(project, rita, lambda assignment: "left")
    body = standing_of(client_for(rita), project).json()
    assert body["available"] is False and body["figures"] == {}
    assert body["reason"] == "your standing appears once you have judged 5 pairs here; you have judged 3"


def test_standing_is_the_reviewers_own_row_of_the_report(judged_project, client_for):
    from django.contrib.auth import get_user_model

    ann = get_user_model().objects.get(username="ann")
    body = standing_of(client_for(ann), judged_project).json()
    assert body["available"] is True and body["judged"] >= 5
    row = next(r for r in agreement_report_for_project(project=judged_project, bootstrap=0)["reviewers"]
               if r["username"] == "ann")
    figures = body["figures"]
    assert figures["gold_accuracy"]["value"] == round(row["gold_accuracy"], 3) == 1.0
    assert figures["gold_accuracy"]["out_of"] == row["gold_judgments"] == 10
    assert figures["agreement_with_others"]["out_of"] == row["agreement_judgments"] == 30
    assert figures["agreement_with_others"]["value"] == round(row["agreement_with_others"], 3)
    retest = figures["retest_consistency"]
    assert retest["out_of"] == row["retests"]
    assert retest["value"] == (round(row["retest_consistency"], 3) if row["retests"] else None)


def test_a_rate_over_too_few_pairs_is_withheld_with_its_reason(make_project, make_user, client_for):
    project = make_project(slug="thin", overlap=2, retest_rate=0, standing_min_judgments=3)
    import_rows(project, make_items(4))
    rita = make_user("rita")
    judge_until_done(project, rita, lambda assignment: "left")
    judge_until_done(project, make_user("sam"), lambda assignment: "left")
    body = standing_of(client_for(rita), project).json()
    agreement = body["figures"]["agreement_with_others"]
    assert agreement["value"] is None and agreement["ci"] is None
    assert agreement["missing"] == "4 pairs where the other reviewers have a majority so far; shown from 10"
    assert body["figures"]["gold_accuracy"]["missing"] == "0 gold items so far; shown from 1"


def test_nothing_about_another_reviewer_reaches_a_reviewer(judged_project, client_for):
    from django.contrib.auth import get_user_model

    cat = get_user_model().objects.get(username="cat")
    response = standing_of(client_for(cat), judged_project)
    body = response.json()
    assert set(body) == {"judged", "min_judgments", "available", "reason", "as_of", "figures", "qualification",
                         "report_judgments_of_yours", "figures_after", "next_update_after"}
    assert set(body["figures"]) == {"gold_accuracy", "retest_consistency", "agreement_with_others"}
    for figure in body["figures"].values():
        assert set(figure) == {"value", "ci", "out_of", "of", "missing"}
    raw = response.content.decode()
    for other in ("ann", "bob", "model-0", "model-1", "p-000"):
        assert other not in raw
    # The reviewer's figures are rates over their own judgments: no per-pair entry, no list of anything.
    assert not any(isinstance(value, list) and len(value) > 2 for value in json.loads(raw)["figures"].values())


def test_only_reviewers_ask_for_their_standing(judged_project, make_user, client_for):
    response = client_for(make_user("eve", role="engineer")).get(f"/api/v1/projects/{judged_project.slug}/standing")
    assert response.status_code == 403


def test_one_more_judgment_never_moves_the_figures_so_the_others_choice_stays_hidden(make_project, make_user,
                                                                                      client_for):
    project = make_project(slug="hidden", overlap=2, retest_rate=0, standing_min_judgments=STANDING_STEP)
    import_rows(project, make_items(3 * STANDING_STEP))
    judge_until_done(project, make_user("ann"), lambda assignment: "left" if assignment.a_on_left else "right")
    cat = make_user("cat")
    client = client_for(cat)
    judge(project, cat, STANDING_STEP, agree=True)
    first = standing_of(client, project).json()
    assert first["figures"]["agreement_with_others"]["value"] == 1.0
    assert first["figures"]["agreement_with_others"]["out_of"] == STANDING_STEP
    assert (first["figures_after"], first["next_update_after"]) == (STANDING_STEP, 2 * STANDING_STEP)

    # One judgment against ann's choice: were the figures recomputed now, 10 of 11 would say what ann chose.
    judge(project, cat, 1, agree=False)
    after_one = standing_of(client, project).json()
    assert after_one["judged"] == STANDING_STEP + 1
    assert after_one["figures"] == first["figures"] and after_one["as_of"] == first["as_of"]

    judge(project, cat, STANDING_STEP - 1, agree=True)
    later = standing_of(client, project).json()["figures"]["agreement_with_others"]
    assert (later["value"], later["out_of"]) == (round((2 * STANDING_STEP - 1) / (2 * STANDING_STEP), 3),
                                                 2 * STANDING_STEP)


def test_the_header_and_the_standing_count_the_same_live_judgments_and_never_a_retest_as_left(
    make_project, make_user, client_for, valid_judgment
):
    """One meaning for each count (docs/agreement.md, "What the reviewer page counts"): "judged" is the
    reviewer's current live judgments, retests included and qualification answers not (the quality table's
    Judgments); "left" is the pairs they have not judged yet and could still be given, never a retest."""
    from tests.review.helpers import gold_items, live_items

    project = make_project(slug="counts", overlap=1, retest_rate=0.5, qualification_items=2,
                           qualification_pass_mark=0.5, standing_min_judgments=50)
    project.retest_gap = 1
    project.save(update_fields=["retest_gap"])
    import_rows(project, gold_items(4) + live_items(6))
    rita = make_user("rita")
    client = client_for(rita)

    def header():
        response = client.get(f"/api/v1/projects/{project.slug}/assignments/next")
        if response.status_code == 204:
            return None, {"judged": int(response["X-Judged"]), "remaining": 0}
        body = response.json()
        return body, body["progress"]

    def standing_judged():
        return standing_of(client, project).json()["judged"]

    def table_judgments():
        report = agreement_report_for_project(project=project, bootstrap=0)
        return next((row["judgments"] for row in report["reviewers"] if row["username"] == "rita"), 0)

    for _ in range(2):  # the qualification round: its answers are shown apart, not counted as judged
        body, progress = header()
        assert body["qualification"]["answered"] == _
        side = "left" if body["left"]["text"].startswith("Good") else "right"
        answered = client.post(f"/api/v1/assignments/{body['id']}/judgment", valid_judgment(side), format="json")
        assert answered.status_code == 201 and answered.json()["feedback"]["qualification"]["next"] in (
            "continue", "live")
    live_pairs = 8  # the 6 live pairs and the 2 gold pairs the round did not use
    body, progress = header()
    assert progress["judged"] == standing_judged() == table_judgments() == 0
    assert progress["remaining"] == live_pairs

    first_time, retests_seen = 0, 0
    while body is not None:
        is_retest = body["id"] in retest_ids(project, rita)
        answered = client.post(f"/api/v1/assignments/{body['id']}/judgment", valid_judgment("left"), format="json")
        assert answered.status_code == 201
        first_time += not is_retest
        retests_seen += is_retest
        body, progress = header()
        judged = first_time + retests_seen
        assert progress["judged"] == standing_judged() == table_judgments() == judged
        # The pair on screen counts as left only when it is a first judgment; a retest is never announced.
        assert progress["remaining"] == live_pairs - first_time
    assert retests_seen >= 2, "the reviewer was shown pairs again"
    assert (first_time, progress["remaining"]) == (live_pairs, 0)


def retest_ids(project, reviewer) -> set[int]:
    from annotate.review.models import Assignment

    return set(Assignment.objects.filter(project=project, reviewer=reviewer, is_retest=True)
               .values_list("pk", flat=True))


def test_a_reviewer_held_after_the_qualification_round_has_judged_nothing_live(make_project, make_user, client_for):
    """The round's answers are shown apart (the quality table counts them as 0 judgments): a held
    reviewer's header, home page row and standing all say 0 judged."""
    from annotate.review.selectors import reviewer_progress
    from tests.conftest import answer_gold
    from tests.review.helpers import gold_items, live_items

    project = make_project(slug="held", retest_rate=0, qualification_items=2, qualification_pass_mark=1.0,
                           qualification_attempts=1)
    import_rows(project, gold_items(3) + live_items(3))
    rita = make_user("rita")
    answer_gold(project, rita, right=False)
    answer_gold(project, rita, right=True)
    client = client_for(rita)
    assert client.get(f"/api/v1/projects/{project.slug}/assignments/next").status_code == 403  # held
    assert reviewer_progress(project=project, reviewer=rita)["judged"] == 0
    standing = standing_of(client, project).json()
    assert standing["judged"] == 0
    assert standing["reason"].endswith("you have judged 0")
