"""Adjudication through the API: which pairs wait, what the adjudicator sees, and how a ruling is kept."""

import itertools
import json
import uuid

import numpy as np
import pytest

from annotate.review.adjudication import QueueFilter, waiting_count
from annotate.review.assignments import assignment_next
from annotate.review.consensus import NO_CONSENSUS, strict_majority
from annotate.review.judgments import judgment_submit, judgment_undo_last
from annotate.review.models import Adjudication, AdjudicationAssignment, Assignment, Pair
from annotate.review.queue_sql import pair_votes_recount
from tests.conftest import import_rows

MODEL_NAMES = ("secret-model-alpha", "secret-model-beta", "build-7781", "build-7782")


def items(count: int) -> list[dict]:
    return [{
        "prompt_id": f"q-{i}", "prompt": f"Question {i}: how far is it?",
        "responses": [{"text": f"First answer to {i}: far.", "model": "secret-model-alpha", "model_version": "build-7781"},
                      {"text": f"Second answer to {i}: near.", "model": "secret-model-beta",
                       "model_version": "build-7782"}],
        "tags": ["even" if i % 2 == 0 else "odd"],
    } for i in range(count)]


def click_for(assignment, winner: str) -> str:
    """The button a reviewer presses to store `winner` (a, b, tie, both_bad) on this assignment."""
    if winner in ("tie", "both_bad"):
        return winner
    return "left" if (winner == "a") == assignment.a_on_left else "right"


def vote(project, reviewer, winners: dict[str, str]) -> None:
    """The reviewer judges every pair they are given: winners maps prompt_id to the stored winner."""
    while (assignment := assignment_next(project=project, reviewer=reviewer)) is not None:
        winner = winners[assignment.pair.prompt.external_id]
        click = click_for(assignment, winner)
        judgment_submit(
            assignment_id=assignment.pk, reviewer=reviewer, choice=click, strength=2 if click in ("left", "right") else None,
            criteria={"correct": click if click in ("left", "right") else "tie", "complete": "tie"},
            rationale=f"{reviewer.username} thinks {winner} on {assignment.pair.prompt.external_id} for its reasons.",
            client_key=uuid.uuid4(),
        )


@pytest.fixture
def split_project(make_project, make_user):
    """Overlap 2, no retests: q-0 and q-2 split (a against b), q-1 agreed (a, a), q-3 split (tie against b)."""
    project = make_project(slug="split", overlap=2, retest_rate=0)
    import_rows(project, items(4))
    vote(project, make_user("ann"), {"q-0": "a", "q-1": "a", "q-2": "a", "q-3": "tie"})
    vote(project, make_user("bob"), {"q-0": "b", "q-1": "a", "q-2": "b", "q-3": "b"})
    return project


def pair_of(project, prompt_id: str) -> Pair:
    return Pair.objects.get(project=project, prompt__external_id=prompt_id)


def next_for(client, project, query: str = ""):
    return client.get(f"/api/v1/projects/{project.slug}/adjudications/next{query}")


def rule(client, adjudication_id: int, **body):
    body = {"choice": "left", "strength": 2, "rationale": "The left one answers the question that was asked.",
            "client_key": str(uuid.uuid4()), **body}
    return client.post(f"/api/v1/adjudications/{adjudication_id}/ruling", body, format="json")


def test_only_split_pairs_wait_and_each_is_ruled_once(split_project, make_user, client_for):
    client = client_for(make_user("judy", role="adjudicator"))
    waiting = {pair_of(split_project, p).pk for p in ("q-0", "q-2", "q-3")}
    seen = set()
    while (response := next_for(client, split_project)).status_code == 200:
        body = response.json()
        assert body["pair"] in waiting and body["pair"] not in seen
        seen.add(body["pair"])
        assert rule(client, body["id"]).status_code == 201
    assert response.status_code == 204
    assert seen == waiting, "every split pair came, and the agreed one (q-1) did not"
    assert Adjudication.objects.count() == 3


def test_the_adjudicator_sees_every_judgment_on_their_own_left_and_right(split_project, make_user, client_for):
    client = client_for(make_user("judy", role="adjudicator"))
    pair = pair_of(split_project, "q-0")
    held = next_for(client, split_project, f"?pair={pair.pk}").json()
    for a_on_left in (True, False):  # the adjudicator's own order, whichever the coin gives: both are checked
        AdjudicationAssignment.objects.filter(pk=held["id"]).update(a_on_left=a_on_left)
        shown = next_for(client, split_project, f"?pair={pair.pk}").json()
        assert shown["id"] == held["id"]
        first_side = "left" if shown["left"]["text"].startswith("First") else "right"
        second_side = "right" if first_side == "left" else "left"
        assert first_side == ("left" if a_on_left else "right")
        # ann preferred the first answer, bob the second: each card names the side where the answer
        # that reviewer preferred is on the adjudicator's screen, whatever side the reviewer saw it on.
        by_author = {card["rationale"].split()[0]: card for card in shown["judgments"]}
        assert by_author["ann"]["choice"] == first_side and by_author["ann"]["criteria"]["correct"] == first_side
        assert by_author["bob"]["choice"] == second_side and by_author["bob"]["criteria"]["correct"] == second_side
        assert by_author["ann"]["strength"] == 2 and by_author["ann"]["criteria"]["complete"] == "tie"
        assert {card["reviewer"] for card in shown["judgments"]} == {"Reviewer 1", "Reviewer 2"}
        assert shown["votes"] == {"left": 1, "right": 1, "tie": 0, "both_bad": 0}


def test_each_judgment_says_which_side_its_reviewer_saw_the_answer_on(split_project, make_user, client_for):
    """A rationale speaks of the reviewer's own left and right: the card says where they saw each answer."""
    client = client_for(make_user("judy", role="adjudicator"))
    pair = pair_of(split_project, "q-0")
    # Reviewers saw the pair in opposite orders, so whatever order the adjudicator gets, one of them saw it
    # the same way and one the other way round: both cases are checked on every run.
    reviewer_orders = {"ann": True, "bob": False}
    for name, a_on_left in reviewer_orders.items():
        Assignment.objects.filter(pair=pair, reviewer__username=name).update(a_on_left=a_on_left)
    held = next_for(client, split_project, f"?pair={pair.pk}").json()
    for adjudicator_a_on_left in (True, False):
        AdjudicationAssignment.objects.filter(pk=held["id"]).update(a_on_left=adjudicator_a_on_left)
        shown = next_for(client, split_project, f"?pair={pair.pk}").json()
        by_author = {card["rationale"].split()[0]: card for card in shown["judgments"]}
        for name, prefers_a in (("ann", True), ("bob", False)):
            card, a_on_left = by_author[name], reviewer_orders[name]
            their_click = "left" if prefers_a == a_on_left else "right"
            assert card["as_they_saw"] == {"same_order": a_on_left == adjudicator_a_on_left, "choice": their_click,
                                           "criteria": {"correct": their_click, "complete": "tie"}}
    raw = json.dumps(shown)
    for secret in (*MODEL_NAMES, "a_on_left", "response_a"):
        assert secret not in raw


def test_an_earlier_ruling_says_which_side_its_adjudicator_saw_the_answer_on(split_project, make_user, client_for):
    pair = pair_of(split_project, "q-0")
    first = client_for(make_user("judy", role="adjudicator"))
    body = next_for(first, split_project, f"?pair={pair.pk}").json()
    AdjudicationAssignment.objects.filter(pk=body["id"]).update(a_on_left=True)
    assert rule(first, body["id"], choice="left", criteria={"correct": "left"}).status_code == 201  # for a
    second = client_for(make_user("jack", role="adjudicator"))
    again = next_for(second, split_project, f"?pair={pair.pk}").json()
    for a_on_left in (True, False):
        AdjudicationAssignment.objects.filter(pk=again["id"]).update(a_on_left=a_on_left)
        (ruling,) = next_for(second, split_project, f"?pair={pair.pk}").json()["earlier_rulings"]
        assert ruling["choice"] == ("left" if a_on_left else "right")
        assert ruling["as_they_saw"] == {"same_order": a_on_left, "choice": "left", "criteria": {"correct": "left"}}


def test_no_model_name_or_reviewer_name_reaches_the_adjudicator(split_project, make_user, client_for):
    client = client_for(make_user("judy", role="adjudicator"))
    raw = next_for(client, split_project).content.decode()
    for secret in (*MODEL_NAMES, '"ann"', '"bob"', "a_on_left", "response_a"):
        assert secret not in raw


def test_a_ruling_is_stored_unswapped_and_ruling_again_adds_a_revision(split_project, make_user, client_for):
    client = client_for(make_user("judy", role="adjudicator"))
    pair = pair_of(split_project, "q-2")
    body = next_for(client, split_project, f"?pair={pair.pk}").json()
    second_on = "left" if body["left"]["text"].startswith("Second") else "right"
    created = rule(client, body["id"], choice=second_on, criteria={"correct": second_on})
    assert created.status_code == 201 and created.json()["choice"] == second_on
    first = Adjudication.objects.get()
    assert (first.winner, first.criteria, first.revision) == ("b", {"correct": "b"}, 1)

    # Ruled pairs leave the queue; asked for by id, the pair comes again and a new revision is added.
    again = next_for(client, split_project, f"?pair={pair.pk}").json()
    assert [r["revision"] for r in again["earlier_rulings"]] == [1]
    assert rule(client, again["id"], choice="tie", strength=None).status_code == 201
    assert list(Adjudication.objects.filter(pair=pair).order_by("revision").values_list("revision", "winner")) == [
        (1, "b"), (2, "tie")]


def test_the_same_client_key_is_one_ruling(split_project, make_user, client_for):
    client = client_for(make_user("judy", role="adjudicator"))
    body = next_for(client, split_project).json()
    key = str(uuid.uuid4())
    first, second = rule(client, body["id"], client_key=key), rule(client, body["id"], client_key=key)
    assert first.status_code == second.status_code == 201
    assert second.headers["Idempotent-Replayed"] == "true" and first.json()["id"] == second.json()["id"]
    assert Adjudication.objects.count() == 1


@pytest.mark.parametrize("role, status", [("reviewer", 403), ("engineer", 403), ("adjudicator", 200), ("admin", 200)])
def test_only_adjudicators_and_admins_adjudicate(split_project, make_user, client_for, role, status):
    client = client_for(make_user(f"someone-{role}", role=role))
    assert next_for(client, split_project).status_code == status
    assert client.get(f"/api/v1/projects/{split_project.slug}/adjudications").status_code == status


def test_an_adjudicator_never_rules_on_a_pair_they_judged(make_project, make_user, client_for):
    project = make_project(slug="own", overlap=2, retest_rate=0)
    import_rows(project, items(1))
    admin = make_user("ada", role="admin")  # admins may also review
    vote(project, admin, {"q-0": "a"})
    vote(project, make_user("bob"), {"q-0": "b"})
    client = client_for(admin)
    assert next_for(client, project).status_code == 204
    refused = next_for(client, project, f"?pair={pair_of(project, 'q-0').pk}")
    assert refused.status_code == 409 and "you judged pair" in refused.json()["detail"]
    assert next_for(client_for(make_user("judy", role="adjudicator")), project).status_code == 200


def test_two_adjudicators_never_hold_one_pair(split_project, make_user, client_for):
    held = [next_for(client_for(make_user(name, role="adjudicator")), split_project).json()["pair"]
            for name in ("judy", "jack", "jill")]
    assert len(set(held)) == 3
    assert next_for(client_for(make_user("joe", role="adjudicator")), split_project).status_code == 204


def test_a_pair_still_being_judged_does_not_wait(make_project, make_user, client_for):
    project = make_project(slug="busy", overlap=3, retest_rate=0)
    import_rows(project, items(1))
    vote(project, make_user("ann"), {"q-0": "a"})
    vote(project, make_user("bob"), {"q-0": "b"})
    assignment_next(project=project, reviewer=make_user("cat"))  # the third vote is on its way
    client = client_for(make_user("judy", role="adjudicator"))
    assert next_for(client, project, "?min_judgments=2").status_code == 204
    Assignment.objects.filter(reviewer__username="cat").update(status="expired")
    assert next_for(client, project, "?min_judgments=2").status_code == 200


def test_a_filter_widens_or_narrows_the_queue(make_project, make_user, client_for):
    project = make_project(slug="filtered", overlap=3, retest_rate=0)
    import_rows(project, items(2))  # q-0 tagged even: 2 of 3; q-1 tagged odd: split three ways
    vote(project, make_user("ann"), {"q-0": "a", "q-1": "a"})
    vote(project, make_user("bob"), {"q-0": "a", "q-1": "b"})
    vote(project, make_user("cat"), {"q-0": "b", "q-1": "tie"})
    client = client_for(make_user("judy", role="adjudicator"))
    listing = client.get(f"/api/v1/projects/{project.slug}/adjudications").json()
    assert listing["waiting"] == 1 and listing["filter"]["min_judgments"] == 3
    wider = client.get(f"/api/v1/projects/{project.slug}/adjudications?max_share=0.67").json()
    assert wider["waiting"] == 2
    assert client.get(f"/api/v1/projects/{project.slug}/adjudications?max_share=0.67&tag=even").json()["waiting"] == 1
    body = next_for(client, project, "?max_share=0.67&tag=even").json()
    assert body["prompt_id"] == "q-0" and body["queue"]["max_share"] == 0.67


@pytest.mark.parametrize("query, words", [
    ("?max_share=1.5", "max_share: 1.5 must be a number from 0 to 1"),
    ("?max_share=lots", "max_share: 'lots' must be a number from 0 to 1"),
    ("?min_judgments=1", "min_judgments: '1' must be a whole number from 2 to 1000"),
    ("?min_votes=2", "min_votes: unknown parameter"),
    ("?pair=abc", f"pair: 'abc' must be a whole number from 1 to {2**63 - 1}, written in the digits 0-9"),
])
def test_a_bad_queue_filter_is_one_line(split_project, make_user, client_for, query, words):
    response = next_for(client_for(make_user("judy", role="adjudicator")), split_project, query)
    assert response.status_code == 400
    assert response.json() == {"detail": response.json()["detail"]} and words in response.json()["detail"]
    assert "\n" not in response.json()["detail"]


@pytest.mark.parametrize("body, words", [
    ({"choice": "up"}, "choice: 'up' is not one of"),
    ({"choice": "left", "strength": None}, "strength: say how strongly"),
    ({"rationale": "ok"}, "rationale: write at least 15 characters"),
    ({"criteria": {"style": "left"}}, "criteria: unknown key(s) ['style']"),
    ({"client_key": "not-a-uuid"}, "client_key: 'not-a-uuid' is not a UUID"),
])
def test_a_bad_ruling_is_one_line_and_stores_nothing(split_project, make_user, client_for, body, words):
    client = client_for(make_user("judy", role="adjudicator"))
    adjudication = next_for(client, split_project).json()
    response = rule(client, adjudication["id"], **body)
    assert response.status_code == 400 and words in response.json()["detail"]
    assert not Adjudication.objects.exists()


def test_another_adjudicators_hold_cannot_be_ruled_on(split_project, make_user, client_for):
    mine = next_for(client_for(make_user("judy", role="adjudicator")), split_project).json()
    response = rule(client_for(make_user("jack", role="adjudicator")), mine["id"])
    assert response.status_code == 404 and "not one of yours" in response.json()["detail"]


def test_the_list_shows_rulings_unswapped_with_the_votes(split_project, make_user, client_for):
    client = client_for(make_user("judy", role="adjudicator"))
    pair = pair_of(split_project, "q-0")
    body = next_for(client, split_project, f"?pair={pair.pk}").json()
    first_on = "left" if body["left"]["text"].startswith("First") else "right"
    rule(client, body["id"], choice=first_on)
    listing = client.get(f"/api/v1/projects/{split_project.slug}/adjudications").json()
    (ruling,) = listing["rulings"]
    assert (ruling["pair"], ruling["winner"], ruling["adjudicator"]) == (pair.pk, "a", "judy")
    assert ruling["votes"] == {"a": 1, "b": 1, "tie": 0, "both_bad": 0}
    assert listing["waiting"] == 2
    assert json.dumps(listing).count("secret-model") == 0


def change_vote(project, reviewer, winner: str) -> None:
    """The reviewer undoes their last judgment and judges the pair again, for `winner` (a, b, tie, both_bad)."""
    assignment = judgment_undo_last(project=project, reviewer=reviewer)
    click = click_for(assignment, winner)
    judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=click,
                    strength=2 if click in ("left", "right") else None,
                    criteria={"correct": click if click in ("left", "right") else "tie", "complete": "tie"},
                    rationale=f"{reviewer.username} thinks again: {winner} for its reasons.", client_key=uuid.uuid4())


def waiting(client, project, query: str = "") -> int:
    return client.get(f"/api/v1/projects/{project.slug}/adjudications{query}").json()["waiting"]


def test_the_queue_follows_votes_that_change_a_pair_from_agreed_to_split_and_back(make_project, make_user, client_for):
    project = make_project(slug="changing", overlap=2, retest_rate=0)
    import_rows(project, items(1))
    bob = make_user("bob")
    vote(project, make_user("ann"), {"q-0": "a"})
    vote(project, bob, {"q-0": "a"})
    client = client_for(make_user("judy", role="adjudicator"))
    assert waiting(client, project) == 0 and next_for(client, project).status_code == 204  # 2-0: agreed

    judgment_undo_last(project=project, reviewer=bob)
    assert waiting(client, project) == 0, "one vote left is below the two a pair needs"
    judgment_submit_for(project, bob, "b")
    assert waiting(client, project) == 1  # 1-1: split
    change_vote(project, bob, "a")
    assert waiting(client, project) == 0 and next_for(client, project).status_code == 204  # agreed again
    change_vote(project, bob, "tie")
    assert waiting(client, project) == 1  # a against tie: split

    body = next_for(client, project).json()
    assert body["prompt_id"] == "q-0" and sorted(body["votes"].values()) == [0, 0, 1, 1]
    assert rule(client, body["id"]).status_code == 201
    assert waiting(client, project) == 0 and next_for(client, project).status_code == 204  # ruled: it left
    change_vote(project, bob, "b")  # still split, and ruled on: it does not come back
    assert waiting(client, project) == 0 and next_for(client, project).status_code == 204
    again = next_for(client, project, f"?pair={pair_of(project, 'q-0').pk}").json()  # asked for by id, it does
    assert sorted(again["votes"].values()) == [0, 0, 1, 1] and len(again["earlier_rulings"]) == 1


def judgment_submit_for(project, reviewer, winner: str) -> None:
    """The reviewer judges the pair they hold (given back to them by an undo), for `winner`."""
    assignment = Assignment.objects.get(project=project, reviewer=reviewer, status=Assignment.Status.ACTIVE)
    click = click_for(assignment, winner)
    judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=click,
                    strength=2 if click in ("left", "right") else None,
                    criteria={"correct": click if click in ("left", "right") else "tie", "complete": "tie"},
                    rationale=f"{reviewer.username} judges again: {winner}.", client_key=uuid.uuid4())


def test_a_pair_ruled_on_while_the_queue_was_read_is_not_handed_out_again(split_project, make_user, client_for):
    judy, jack = client_for(make_user("judy", role="adjudicator")), client_for(make_user("jack", role="adjudicator"))
    first = next_for(judy, split_project).json()
    assert first["prompt_id"] == "q-0" and rule(judy, first["id"]).status_code == 201
    # Jack's queue read the pair as waiting just before judy's ruling committed: the pair row says so.
    Pair.objects.filter(pk=first["pair"]).update(ruled=False)
    second = next_for(jack, split_project).json()
    assert second["prompt_id"] == "q-2"
    assert Adjudication.objects.filter(pair_id=first["pair"]).count() == 1


def test_split_and_a_widened_share_are_the_consensus_rule_for_every_vote_count(make_project, make_user):
    """The queue reads a pair's vote counters in SQL; for every count of each choice up to 3 it takes the pairs
    strict_majority calls split, and with max_share those whose top share is at most it."""
    project = make_project(slug="rule", overlap=2, retest_rate=0)
    import_rows(project, items(1))
    pair = pair_of(project, "q-0")
    judy = make_user("judy", role="adjudicator")
    filters = [QueueFilter(min_judgments=2, max_share=share) for share in (None, 0.5, 0.6, 0.67, 0.75, 1.0)]
    for counts in itertools.product(range(4), repeat=4):
        # Counters set as votes would leave them: what the queue reads, here without the judgments behind them.
        Pair.objects.filter(pk=pair.pk).update(**dict(zip(("votes_a", "votes_b", "votes_tie", "votes_both_bad"),
                                                          counts, strict=True)))
        stored = Pair.objects.get(pk=pair.pk)
        if sum(counts) == 0:
            assert not stored.votes_split and not stored.votes_contested
            continue
        winner, share = strict_majority(np.array([counts]))
        assert stored.votes_split == (winner[0] == NO_CONSENSUS), counts
        assert stored.votes_contested == (max(counts) < sum(counts)), counts
        for queue in filters:
            wanted = sum(counts) >= 2 and (winner[0] == NO_CONSENSUS or (
                queue.max_share is not None and share[0] <= queue.max_share + 1e-9))
            assert waiting_count(project=project, adjudicator=judy, queue=queue)["waiting"] == int(wanted), \
                (counts, queue.max_share)


def test_recounting_the_votes_gives_the_counters_the_votes_left(split_project, make_user, client_for):
    """What a restore or a bulk fill runs: the counters written from the judgments and rulings themselves."""
    client = client_for(make_user("judy", role="adjudicator"))
    body = next_for(client, split_project).json()
    rule(client, body["id"])
    columns = ("id", "votes_a", "votes_b", "votes_tie", "votes_both_bad", "votes_split", "ruled")
    kept = list(Pair.objects.filter(project=split_project).order_by("id").values_list(*columns))
    assert [row[-2:] for row in kept] == [(True, True), (False, False), (True, False), (True, False)]  # q-0 ruled
    Pair.objects.filter(project=split_project).update(votes_a=0, votes_b=0, votes_tie=0, votes_both_bad=0, ruled=False)
    assert pair_votes_recount(project_id=split_project.pk) == 4
    assert list(Pair.objects.filter(project=split_project).order_by("id").values_list(*columns)) == kept
    assert pair_votes_recount(project_id=split_project.pk) == 0  # nothing left to change
