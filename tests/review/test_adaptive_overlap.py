"""Adaptive overlap: a decided pair stops at the minimum, a split pair gets more reviewers (up to the
maximum) before fresh pairs are handed out, and leaderboard projects hand out their least certain model
pairs first. Driven through the reviewer API as reviewers use it; settings through the command line, the
API and the admin."""

import io
import itertools
import uuid
from collections import Counter

import numpy as np
import pytest
from django.contrib import admin
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client, RequestFactory

from annotate.quality.queue_priorities import queue_priorities_refresh
from annotate.review.assignments import assignment_next, assignments_expire_stale
from annotate.review.choices import WINNERS, swap_back
from annotate.review.consensus import NO_CONSENSUS, strict_majority
from annotate.review.judgments import judgment_submit
from annotate.review.models import Assignment, Judgment, Pair, Project
from annotate.review.overlap import first_reviewers_needed, reviewers_needed
from annotate.review.queue_priority import PRIORITY_MAX, difference_uncertainty, pair_priorities
from tests.conftest import import_rows, make_items
from tests.review.helpers import run_at_once

pytestmark = pytest.mark.django_db

RATIONALE = "The chosen answer gets the number and the unit right."


def next_for(client, project):
    return client.get(f"/api/v1/projects/{project.slug}/assignments/next")


def take(client, project) -> Assignment:
    """The reviewer's next assignment (the pair is read from the database: the API never shows it)."""
    response = next_for(client, project)
    assert response.status_code == 200, response.content
    return Assignment.objects.get(pk=response.json()["id"])


def judge(client, assignment: Assignment, winner: str) -> int:
    """Vote for response a or b (or tie / both_bad) as the reviewer sees it, left or right; returns the pair."""
    click = swap_back(winner, a_on_left=assignment.a_on_left)
    criterion = click if click in ("left", "right") else "tie"
    created = client.post(f"/api/v1/assignments/{assignment.pk}/judgment", {
        "choice": click, "strength": 2 if click in ("left", "right") else None,
        "criteria": {"correct": criterion, "complete": "tie"}, "rationale": RATIONALE,
        "client_key": str(uuid.uuid4()),
    }, format="json")
    assert created.status_code == 201, created.content
    return assignment.pair_id


def vote(client, project, winner: str) -> int:
    """Ask for the next pair and vote on it; returns the pair's id."""
    return judge(client, take(client, project), winner)


def judgments_of(pair_id: int) -> int:
    """The pair's votes: current judgments of first-time assignments."""
    return Assignment.objects.filter(pair_id=pair_id, is_retest=False, current_judgment__isnull=False).count()


@pytest.fixture
def one_pair(make_project):
    def make(**settings):
        project = make_project(slug="adaptive", retest_rate=0, **settings)
        import_rows(project, make_items(1))
        return project

    return make


@pytest.fixture
def reviewers(make_user, client_for):
    return [client_for(make_user(f"r{i}")) for i in range(6)]


# --- the rule ----------------------------------------------------------------------------------------


def test_a_pair_whose_two_votes_agree_stops_at_the_minimum(one_pair, reviewers):
    project = one_pair(min_overlap=2, max_overlap=3)
    pair = vote(reviewers[0], project, "a")
    assert vote(reviewers[1], project, "a") == pair
    assert next_for(reviewers[2], project).status_code == 204  # decided: no third reviewer
    assert judgments_of(pair) == 2


def test_a_split_pair_gets_one_more_reviewer_and_stops_at_the_maximum(one_pair, reviewers):
    project = one_pair(min_overlap=2, max_overlap=3)
    pair = vote(reviewers[0], project, "a")
    vote(reviewers[1], project, "b")
    assert vote(reviewers[2], project, "b") == pair  # 1-1 is split: a third reviewer decides it
    assert next_for(reviewers[3], project).status_code == 204  # the maximum
    assert judgments_of(pair) == 3


def test_the_majority_rule_goes_on_while_split_and_stops_at_the_maximum(one_pair, reviewers):
    project = one_pair(min_overlap=2, max_overlap=4, overlap_stop_rule="majority")
    pair = vote(reviewers[0], project, "a")
    vote(reviewers[1], project, "b")  # 1-1
    vote(reviewers[2], project, "tie")  # 1-1-1: still no strict majority
    assert vote(reviewers[3], project, "b") == pair  # 1-2-1 at the maximum
    assert next_for(reviewers[4], project).status_code == 204
    assert judgments_of(pair) == 4


def test_lead2_stops_a_pair_two_votes_ahead_and_hands_a_split_pair_to_two_reviewers_at_once(one_pair, reviewers):
    project = one_pair(min_overlap=2, max_overlap=5)  # lead2 is the default rule
    pair = vote(reviewers[0], project, "a")
    vote(reviewers[1], project, "b")  # 1-1: no single vote can put one side two ahead
    third, fourth = take(reviewers[2], project), take(reviewers[3], project)
    assert third.pair_id == fourth.pair_id == pair
    assert next_for(reviewers[4], project).status_code == 204  # both places are held
    judge(reviewers[2], third, "a")
    judge(reviewers[3], fourth, "a")  # 3-1: two ahead, below the maximum
    assert next_for(reviewers[4], project).status_code == 204
    assert judgments_of(pair) == 4


def test_settled_waits_until_no_vote_left_could_change_the_winner(one_pair, reviewers):
    # Up to 5: 2-0 could still become 2-3, so a third is asked; 3-0 cannot be overturned by two more.
    project = one_pair(min_overlap=2, max_overlap=5, overlap_stop_rule="settled")
    pair = vote(reviewers[0], project, "a")
    vote(reviewers[1], project, "a")
    vote(reviewers[2], project, "a")
    assert next_for(reviewers[3], project).status_code == 204
    assert judgments_of(pair) == 3


def test_a_fixed_overlap_is_unchanged(one_pair, reviewers):
    project = one_pair(overlap=2)
    pair = vote(reviewers[0], project, "a")
    vote(reviewers[1], project, "b")  # split, but the overlap is fixed
    assert next_for(reviewers[2], project).status_code == 204
    assert judgments_of(pair) == 2 and Pair.objects.get(pk=pair).reviewers_needed == 0


def test_a_split_pair_comes_before_started_and_fresh_pairs(make_project, reviewers):
    project = make_project(slug="adaptive", retest_rate=0, min_overlap=2, max_overlap=3)
    import_rows(project, make_items(6))
    first, second = take(reviewers[0], project), take(reviewers[1], project)
    assert first.pair_id == second.pair_id  # a started pair comes first: the two hold the same one
    started = take(reviewers[2], project)  # it is full for now: someone starts another pair
    assert started.pair_id != first.pair_id
    judge(reviewers[0], first, "a")
    judge(reviewers[1], second, "b")  # split: it needs a third reviewer
    # Fuller than the other started pair and than every untouched one: the split pair comes first.
    assert take(reviewers[3], project).pair_id == first.pair_id
    assert take(reviewers[4], project).pair_id == started.pair_id  # the split pair has its three now


def test_undo_takes_the_vote_back_and_a_new_split_reopens_the_pair(one_pair, reviewers):
    project = one_pair(min_overlap=2, max_overlap=3)
    pair = vote(reviewers[0], project, "a")
    vote(reviewers[1], project, "a")
    assert next_for(reviewers[2], project).status_code == 204
    undone = reviewers[1].post(f"/api/v1/projects/{project.slug}/judgments/undo")
    assert undone.status_code == 200
    assert next_for(reviewers[2], project).status_code == 204  # reviewer 1 holds it again
    assert vote(reviewers[1], project, "b") == pair  # and now disagrees: 1-1
    assert vote(reviewers[2], project, "a") == pair
    assert judgments_of(pair) == 3


def test_an_expired_assignment_of_a_split_pair_goes_back_to_the_pool(one_pair, reviewers):
    project = one_pair(min_overlap=2, max_overlap=3)
    pair = vote(reviewers[0], project, "a")
    vote(reviewers[1], project, "b")
    taken = next_for(reviewers[2], project).json()
    assert next_for(reviewers[3], project).status_code == 204  # the third place is held
    Assignment.objects.filter(pk=taken["id"]).update(expires_at="2000-01-01T00:00:00Z")
    assignments_expire_stale()
    assert vote(reviewers[3], project, "a") == pair


def test_retests_of_an_adaptive_pair_come_back_swapped_and_do_not_count_as_votes(make_project, make_user, client_for):
    project = make_project(slug="adaptive", retest_rate=1.0, min_overlap=2, max_overlap=3)
    project.retest_gap = 1
    project.save()
    import_rows(project, make_items(3))
    rita, otto, ines = (client_for(make_user(name)) for name in ("rita", "otto", "ines"))
    first = vote(rita, project, "a")
    vote(otto, project, "a")  # decided at 2
    vote(rita, project, "b")  # rita's second pair
    retest = next_for(rita, project).json()
    retest_assignment = Assignment.objects.get(pk=retest["id"])
    assert retest_assignment.is_retest and retest_assignment.pair_id == first
    assert retest_assignment.a_on_left != retest_assignment.retest_of.a_on_left
    client_vote = swap_back("b", a_on_left=retest_assignment.a_on_left)  # rita changes her mind on the retest
    rita.post(f"/api/v1/assignments/{retest['id']}/judgment", {
        "choice": client_vote, "strength": 1, "criteria": {"correct": client_vote, "complete": "tie"},
        "rationale": RATIONALE, "client_key": str(uuid.uuid4())}, format="json")
    assert judgments_of(first) == 2  # a retest is not a vote: the pair stays decided
    assert first not in {vote(ines, project, "a") for _ in range(2)}


# --- settings ----------------------------------------------------------------------------------------

CRITERIA = """instructions: Pick the better answer.
criteria:
  - key: correct
    text: "Every fact and every step is right."
  - key: complete
    text: "It explains the process."
"""


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--min-overlap", "4", "--max-overlap", "2"],
         "min overlap 4 is above max overlap 2; set the minimum at or below the maximum"),
        (["--min-overlap", "5"], "min overlap 5 is above max overlap 3; set the minimum at or below the maximum"),
        (["--overlap", "3", "--min-overlap", "2"], "give either overlap (a fixed overlap) or min/max overlap"),
        (["--max-overlap", "0"], "max overlap 0 must be a whole number of reviewers per pair from 1 to 50"),
        (["--min-overlap", "-1"], "min overlap -1 must be a whole number of reviewers per pair from 1 to 50"),
    ],
)
def test_bad_overlap_settings_on_the_command_line_are_one_line_and_store_nothing(tmp_path, args, says):
    path = tmp_path / "criteria.yaml"
    path.write_text(CRITERIA)
    with pytest.raises(CommandError) as error:
        call_command("create_project", "speed", "--criteria", str(path), *args, stdout=io.StringIO())
    assert str(error.value) == says or str(error.value).startswith(says)
    assert "\n" not in str(error.value)
    assert not Project.objects.filter(slug="speed").exists()


def test_the_command_line_sets_adaptive_overlap_and_back_to_fixed(tmp_path):
    path = tmp_path / "criteria.yaml"
    path.write_text(CRITERIA)
    call_command("create_project", "speed", "--criteria", str(path), "--min-overlap", "2", "--max-overlap", "5",
                 "--stop-rule", "majority", "--leaderboard-priority", "on", stdout=io.StringIO())
    project = Project.objects.get(slug="speed")
    assert (project.min_overlap, project.overlap, project.overlap_stop_rule, project.leaderboard_priority) == (
        2, 5, "majority", True)
    call_command("create_project", "speed", "--criteria", str(path), "--overlap", "3", stdout=io.StringIO())
    project.refresh_from_db()
    assert (project.min_overlap, project.overlap, project.overlap_is_adaptive) == (None, 3, False)


def test_the_settings_api_refuses_bad_settings_in_one_line_and_changes_nothing(make_project, make_user, client_for):
    project = make_project(slug="adaptive", min_overlap=2, max_overlap=3)
    admin_client = client_for(make_user("ada", "admin"))
    url = f"/api/v1/projects/{project.slug}/settings"
    for body, says in [
        ({"min_overlap": 5}, "min overlap 5 is above max overlap 3; set the minimum at or below the maximum"),
        ({"min_overlap": 4, "max_overlap": 2}, "min overlap 4 is above max overlap 2"),
        ({"max_overlap": "many"}, "max overlap 'many' must be a whole number"),
        ({"overlap_stop_rule": "vibes"}, "stop rule 'vibes' is not one of lead2, settled, majority"),
        ({"leaderboard_priority": "yes"}, "leaderboard priority 'yes' must be true or false"),
        ({"overlap": 9, "min_overlap": 2}, "give either overlap"),
        ({"speed": 1}, "unknown setting(s) speed"),
    ]:
        response = admin_client.patch(url, body, format="json")
        assert response.status_code == 400, body
        assert response.json()["detail"].startswith(says) and "\n" not in response.json()["detail"]
    assert admin_client.get(url).json() == {
        "overlap": 3, "min_overlap": 2, "max_overlap": 3, "adaptive": True, "overlap_stop_rule": "lead2",
        "leaderboard_priority": False, "rationale_flag_chars": 40, "qualification_items": 0,
        "qualification_pass_mark": 0.8, "qualification_attempts": 2, "gold_rate": 0.0, "standing_min_judgments": 20}
    assert client_for(make_user("rita")).patch(url, {"min_overlap": 1}, format="json").status_code == 403


def test_switching_a_fixed_project_to_adaptive_reopens_its_split_pairs(make_project, make_user, client_for):
    project = make_project(slug="adaptive", overlap=2, retest_rate=0)
    import_rows(project, make_items(2))
    rita, otto, ines = (client_for(make_user(name)) for name in ("rita", "otto", "ines"))
    split = vote(rita, project, "a")
    assert vote(otto, project, "b") == split
    agreed = vote(rita, project, "a")
    assert vote(otto, project, "a") == agreed
    assert next_for(ines, project).status_code == 204  # fixed overlap 2: both pairs are done
    response = client_for(make_user("ada", "admin")).patch(
        f"/api/v1/projects/{project.slug}/settings", {"min_overlap": 2, "max_overlap": 3}, format="json")
    assert response.status_code == 200 and response.json()["adaptive"] is True
    assert vote(ines, project, "a") == split  # the split one reopened, the agreed one did not
    assert next_for(client_for(make_user("ivan")), project).status_code == 204
    back = client_for(make_user("ada2", "admin")).patch(
        f"/api/v1/projects/{project.slug}/settings", {"min_overlap": None}, format="json")
    assert back.json()["adaptive"] is False and back.json()["overlap"] == 3
    assert set(Pair.objects.filter(project=project).values_list("reviewers_needed", flat=True)) == {0}


def _admin_form_data(project: Project, **changes) -> dict:
    """The project's change form as the admin page would post it, with some fields changed."""
    request = RequestFactory().get("/")
    request.user = type("U", (), {"is_superuser": True, "has_perm": lambda *a: True})()
    model_admin = admin.site._registry[Project]
    form = model_admin.get_form(request, project)(instance=project)
    data = {}
    for name in form.fields:
        value = form[name].value()
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = value
    versions = list(project.criteria_versions.order_by("-version"))
    data.update({"criteria_versions-TOTAL_FORMS": len(versions), "criteria_versions-INITIAL_FORMS": len(versions),
                 "criteria_versions-MIN_NUM_FORMS": 0, "criteria_versions-MAX_NUM_FORMS": 1000})
    for i, version in enumerate(versions):
        data.update({f"criteria_versions-{i}-id": version.pk, f"criteria_versions-{i}-project": project.pk})
    for name, value in changes.items():
        if value is False:
            data.pop(name, None)
        else:
            data[name] = "on" if value is True else value
    return data


def test_the_admin_form_refuses_a_minimum_above_the_maximum_and_applies_a_good_change(make_project, make_user):
    project = make_project(slug="adaptive", overlap=2, retest_rate=0)
    import_rows(project, make_items(1))
    user = make_user("ada", "admin")
    user.is_superuser = True
    user.save()
    browser = Client()
    browser.force_login(user)
    url = f"/admin/review/project/{project.pk}/change/"
    page = browser.post(url, _admin_form_data(project, min_overlap=3))
    assert page.status_code == 200  # the form again, with the error
    assert b"min overlap 3 is above max overlap 2; set the minimum at or below the maximum" in page.content
    project.refresh_from_db()
    assert project.min_overlap is None
    saved = browser.post(url, _admin_form_data(project, min_overlap=2, overlap=4))
    assert saved.status_code == 302
    project.refresh_from_db()
    assert (project.min_overlap, project.overlap, project.overlap_is_adaptive) == (2, 4, True)


# --- many reviewers at once (PostgreSQL row locks) ---------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stop_rule", ["lead2", "settled", "majority"])
def test_reviewers_racing_through_an_adaptive_project_never_over_assign_and_stop_each_pair_where_its_votes_say(
    make_project, make_user, stop_rule
):
    assert connection.vendor == "postgresql"
    project = make_project(slug=f"race-{stop_rule}", retest_rate=0, min_overlap=2, max_overlap=5,
                           overlap_stop_rule=stop_rule)
    import_rows(project, make_items(25))
    users = [make_user(f"r{i:02d}") for i in range(10)]

    def judge_until_done(i: int) -> int:
        judged = 0
        while (assignment := assignment_next(project=project, reviewer=users[i])) is not None:
            # Reviewers disagree on some pairs: reviewer i prefers b on pairs where (i + pair) % 3 == 0.
            winner = "b" if (i + assignment.pair_id) % 3 == 0 else "a"
            click = swap_back(winner, a_on_left=assignment.a_on_left)
            judgment_submit(
                assignment_id=assignment.pk, reviewer=users[i], choice=click, strength=1,
                criteria={"correct": click, "complete": "tie"}, rationale=RATIONALE, client_key=uuid.uuid4(),
            )
            judged += 1
        return judged

    # A reviewer who finds nothing left stops; a pair whose last votes land split opens again afterwards,
    # so reviewers come back (as they would the next day) until a round finds nothing at all.
    judged = []
    while sum(round_judged := run_at_once(10, judge_until_done)):
        judged += round_judged
    assignments = Counter(Assignment.objects.filter(project=project, is_retest=False).values_list("pair_id", flat=True))
    assert max(assignments.values()) <= 5  # never past the maximum
    assert set(Counter(Judgment.objects.values_list("reviewer_id", "pair_id")).values()) == {1}  # no repeats
    votes = {pair.pk: [0, 0, 0, 0] for pair in Pair.objects.filter(project=project)}
    for pair_id, winner in Judgment.objects.filter(pair__project=project).values_list("pair_id", "winner"):
        votes[pair_id][WINNERS.index(winner)] += 1
    counts = np.array(list(votes.values()))
    n = counts.sum(axis=1)
    # Every pair stopped exactly where its votes are decided (or at the maximum), none short of it.
    assert (reviewers_needed(counts, min_overlap=2, max_overlap=5, stop_rule=stop_rule) == n).all()
    assert sum(judged) == n.sum() and n.min() >= 2
    assert (n > first_reviewers_needed(min_overlap=2, max_overlap=5, stop_rule=stop_rule)).any()  # splits went on


# --- the rule as a function: its promises --------------------------------------------------------------


def _sequences(max_overlap: int):
    for n in range(1, max_overlap + 1):
        yield from itertools.product(range(4), repeat=n)


@pytest.mark.parametrize(("min_overlap", "max_overlap"), [(1, 3), (2, 3), (2, 5), (3, 5), (1, 4)])
def test_settled_pairs_get_the_winner_the_maximum_would_have_given(min_overlap, max_overlap):
    """Whatever the votes after a settled pair stops, a fixed overlap of the maximum ends on the same winner."""
    for sequence in _sequences(max_overlap):
        counts = np.bincount(sequence, minlength=4)
        if len(sequence) < max_overlap and reviewers_needed(
                counts, min_overlap=min_overlap, max_overlap=max_overlap, stop_rule="settled")[0] == len(sequence):
            winner = strict_majority(counts)[0][0]
            assert winner != NO_CONSENSUS
            for rest in itertools.product(range(4), repeat=max_overlap - len(sequence)):
                final = counts + np.bincount(rest, minlength=4)
                assert strict_majority(final)[0][0] == winner, (sequence, rest)


def test_what_a_pair_needs_does_not_depend_on_which_answer_is_a_or_on_the_order_of_votes():
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 4, size=(500, 4))
    exchanged = counts[:, [1, 0, 2, 3]]  # responses a and b listed the other way round
    for rule in ("lead2", "settled", "majority"):
        for low, high in [(2, 3), (2, 5), (3, 7)]:
            needed = reviewers_needed(counts, min_overlap=low, max_overlap=high, stop_rule=rule)
            assert (needed == reviewers_needed(exchanged, min_overlap=low, max_overlap=high, stop_rule=rule)).all()
            assert ((needed >= np.minimum(counts.sum(axis=1), high)) & (needed <= np.maximum(high, counts.sum(axis=1)))).all()
            order = rng.permutation(len(counts))
            assert (reviewers_needed(counts[order], min_overlap=low, max_overlap=high, stop_rule=rule)
                    == needed[order]).all()


def test_with_min_equal_to_max_every_pair_needs_the_fixed_overlap():
    counts = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [3, 0, 0, 0], [1, 1, 1, 0]])
    for rule in ("lead2", "settled", "majority"):
        assert list(reviewers_needed(counts, min_overlap=3, max_overlap=3, stop_rule=rule)) == [3, 3, 3, 3, 3]


# --- leaderboard priority ------------------------------------------------------------------------------


def test_priorities_go_to_the_least_certain_rating_differences_and_spread_over_model_pairs():
    ci_low, ci_high = np.array([0.7, -0.3, -1.0]), np.array([1.3, 0.3, 1.0])  # model 2 is the least certain
    comparisons = np.full((3, 3), 10.0) - 10 * np.eye(3)
    error = difference_uncertainty(ci_low=ci_low, ci_high=ci_high, comparisons=comparisons)
    assert np.allclose(error, error.T) and (np.diag(error) == 0).all()
    assert error[0, 2] > error[0, 1] and error[1, 2] > error[0, 1]
    apart = np.array([[0, 1, 0], [1, 0, 0], [0, 0, 0]])  # model 2 never compared: its differences are unknown
    assert np.isinf(difference_uncertainty(ci_low=ci_low, ci_high=ci_high, comparisons=apart)[0, 2])
    rated = ["m0", "m1", "m2"]
    given = {"model_a": ["m1", "m1", "m0", "m1", "new", "new"], "model_b": ["m2", "m2", "m1", "m1", "m0", "m0"]}
    priority = pair_priorities(**given, rated=rated, uncertainty=error, comparisons=comparisons)
    assert priority[4] == PRIORITY_MAX  # a model nobody compared yet comes first
    assert priority[0] > priority[2]  # then the least certain difference
    assert priority[1] < priority[0] and priority[5] < priority[4]  # a model pair's next pair waits behind
    assert priority[3] == 0  # one model on both sides says nothing about models
    # Which answer the import listed first does not matter.
    swapped = pair_priorities(model_a=given["model_b"], model_b=given["model_a"], rated=rated, uncertainty=error,
                              comparisons=comparisons)
    assert (priority == swapped).all()


def _leaderboard_items(start: int, count: int, models: tuple[str, ...]) -> list[dict]:
    """Prompts answered by each of these models: a pair for every two of them."""
    return [
        {"prompt_id": f"q{i:03d}", "prompt": f"Question {i}?",
         "responses": [{"text": f"Answer {i} of {model}", "model": model} for model in models]}
        for i in range(start, start + count)
    ]


def _models(pair: Pair) -> frozenset:
    return frozenset({pair.response_a.model, pair.response_b.model})


def test_a_leaderboard_project_hands_out_its_least_certain_model_pairs_first(make_project, make_user, client_for):
    project = make_project(slug="arena", overlap=1, retest_rate=0, leaderboard_priority=True)
    import_rows(project, _leaderboard_items(0, 12, ("strong", "weak", "close")))
    judge = make_user("judge")
    close_votes = itertools.cycle(["a", "b"])  # strong beats both others; weak and close split evenly
    while (assignment := assignment_next(project=project, reviewer=judge)) is not None:
        pair = assignment.pair
        models = {pair.response_a.model: "a", pair.response_b.model: "b"}
        winner = models["strong"] if "strong" in models else next(close_votes)
        click = swap_back(winner, a_on_left=assignment.a_on_left)
        judgment_submit(assignment_id=assignment.pk, reviewer=judge, choice=click, strength=2,
                        criteria={"correct": click, "complete": "tie"}, rationale=RATIONALE,
                        client_key=uuid.uuid4())
    # A new checkpoint joins: three prompts answered by all four models.
    import_rows(project, _leaderboard_items(100, 3, ("strong", "weak", "close", "fresh")))
    call_command("refresh_queue_priorities", project.slug, stdout=io.StringIO())
    client = client_for(make_user("rita"))
    handed_out = []
    for _ in range(9):
        body = next_for(client, project).json()
        assert not {"strong", "weak", "close", "fresh"} & set(str(body).replace("Answer", "").split())  # no model names
        handed_out.append(_models(Assignment.objects.get(pk=body["id"]).pair))
        client.post(f"/api/v1/assignments/{body['id']}/judgment", {
            "choice": "tie", "strength": None, "criteria": {"correct": "tie", "complete": "tie"},
            "rationale": RATIONALE, "client_key": str(uuid.uuid4())}, format="json")
    assert all("fresh" in models for models in handed_out)  # the new model's differences first
    assert len(set(handed_out[:3])) == 3  # one of each of its model pairs before a second of any
    assert next_for(client, project).status_code == 200  # the rest still come, after


def test_turning_the_leaderboard_switch_off_puts_every_priority_back_to_zero(make_project, make_user, client_for):
    project = make_project(slug="arena", overlap=1, retest_rate=0, leaderboard_priority=True)
    import_rows(project, _leaderboard_items(0, 2, ("strong", "weak", "close")))
    queue_priorities_refresh(project=project, force=True)
    # Nothing judged yet: every model pair is unknown; the second pair of a model pair waits behind the first.
    second = round(PRIORITY_MAX * (1 - 0.5 ** 0.5))  # one more comparison after one shrinks the error less
    assert sorted(Pair.objects.filter(project=project).values_list("queue_priority", flat=True)) == (
        [second] * 3 + [PRIORITY_MAX] * 3)
    client_for(make_user("ada", "admin")).patch(f"/api/v1/projects/{project.slug}/settings",
                                                {"leaderboard_priority": False}, format="json")
    assert set(Pair.objects.filter(project=project).values_list("queue_priority", flat=True)) == {0}


def test_turning_the_leaderboard_switch_on_refreshes_the_priorities_once_committed(
        make_project, make_user, client_for, django_capture_on_commit_callbacks):
    project = make_project(slug="arena", overlap=1, retest_rate=0)
    import_rows(project, _leaderboard_items(0, 2, ("strong", "weak", "close")))
    judge = make_user("judge")
    assignment = assignment_next(project=project, reviewer=judge)
    judgment_submit(assignment_id=assignment.pk, reviewer=judge, choice="left", strength=2,
                    criteria={"correct": "left", "complete": "tie"}, rationale=RATIONALE, client_key=uuid.uuid4())
    assert set(Pair.objects.filter(project=project).values_list("queue_priority", flat=True)) == {0}
    with django_capture_on_commit_callbacks(execute=True):  # the review app signals; the quality app refreshes
        client_for(make_user("ada", "admin")).patch(f"/api/v1/projects/{project.slug}/settings",
                                                    {"leaderboard_priority": True}, format="json")
    assert Pair.objects.filter(project=project, queue_priority__gt=0).exists()


# --- the migration -------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_pairs_stored_before_adaptive_overlap_keep_their_place_in_the_queue():
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("review", "0004_prompt_content_key")], [("review", "0006_adaptive_overlap")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    project = old.get_model("review", "Project").objects.create(slug="old", name="Old", overlap=3)
    prompt = old.get_model("review", "Prompt").objects.create(project=project, external_id="q", messages=[
        {"role": "user", "content": "2+2?"}], content_key="k")
    response = old.get_model("review", "Response")
    answers = [response.objects.create(prompt=prompt, text=f"{n}", text_sha256=f"{n}", model=f"m{n}") for n in range(4)]
    old_pair = old.get_model("review", "Pair")
    for count, (a, b) in zip([0, 1, 2, 3], [(0, 1), (0, 2), (0, 3), (1, 2)], strict=True):
        old_pair.objects.create(project=project, prompt=prompt, response_a=answers[a], response_b=answers[b],
                                assigned_count=count)

    executor = MigrationExecutor(connection)
    executor.migrate(after)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())  # back to where the other tests expect the schema

    rows = sorted(Pair.objects.filter(project_id=project.pk).values_list("assigned_count", "open_fill", "reviewers_needed"))
    assert rows == [(0, 0, 0), (1, 1, 0), (2, 2, 0), (3, 3, 0)]  # open_fill is the count: the same order
    stored = Project.objects.get(pk=project.pk)
    assert (stored.min_overlap, stored.overlap_is_adaptive, stored.leaderboard_priority) == (None, False, False)
