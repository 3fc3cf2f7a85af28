"""The assignment queue: overlap, no repeats, retests swapped, expiry, random stored order."""

from datetime import timedelta

import pytest
from django.utils import timezone

from annotate.review import selectors
from annotate.review.assignments import assignment_next, assignments_expire_stale
from annotate.review.errors import ReviewError
from annotate.review.judgments import judgment_submit, judgment_undo_last
from annotate.review.models import Assignment, Judgment, Pair, ReviewerTally
from tests.conftest import import_rows, make_items


def judge(assignment, reviewer, choice="left"):
    return judgment_submit(
        assignment_id=assignment.pk, reviewer=reviewer, choice=choice, strength=2,
        criteria={"correct": "left", "complete": "tie"}, rationale="Left is right and explains it fully.",
        client_key=__import__("uuid").uuid4(),
    )[0]


@pytest.mark.parametrize("prepared_statements", [True, False], ids=["prepared", "plain"])
def test_each_pair_gets_overlap_distinct_reviewers_and_no_more(make_project, make_user, settings, prepared_statements):
    settings.PAIRWISE_PREPARED_STATEMENTS = prepared_statements  # DB_PREPARED_STATEMENTS, both ways
    project = make_project(overlap=2, retest_rate=0)
    import_rows(project, make_items(3))
    reviewers = [make_user(f"r{i}") for i in range(4)]
    for reviewer in reviewers:
        while (assignment := assignment_next(project=project, reviewer=reviewer)) is not None:
            judge(assignment, reviewer)
    per_pair = {p.pk: set(Assignment.objects.filter(pair=p).values_list("reviewer", flat=True)) for p in Pair.objects.all()}
    assert all(len(reviewers_of_pair) == 2 for reviewers_of_pair in per_pair.values())
    per_reviewer = Assignment.objects.values_list("reviewer", "pair")
    assert len(per_reviewer) == len(set(per_reviewer)) == 6  # nobody got a pair twice
    assert Judgment.objects.count() == 6


def test_a_reviewer_reloading_gets_the_assignment_they_hold(project, make_user):
    reviewer = make_user("rita")
    first = assignment_next(project=project, reviewer=reviewer)
    again = assignment_next(project=project, reviewer=reviewer)
    assert first.pk == again.pk


def test_a_share_of_judged_pairs_comes_back_swapped_after_a_gap(make_project, make_user):
    project = make_project(overlap=1, retest_rate=0.5)
    project.retest_gap = 2
    project.save()
    import_rows(project, make_items(8))
    reviewer = make_user("rita")
    served = []
    while (assignment := assignment_next(project=project, reviewer=reviewer)) is not None:
        served.append(assignment)
        judge(assignment, reviewer)
    retests = [a for a in served if a.is_retest]
    assert len(retests) == 4  # half of the 8 pairs judged once
    for retest in retests:
        original = retest.retest_of
        assert retest.pair_id == original.pair_id and retest.a_on_left != original.a_on_left
        fresh_left = any(not a.is_retest for a in served[served.index(retest):])
        # Not straight after the original, unless no fresh pair was left to put between them.
        assert served.index(retest) - served.index(original) > 2 or not fresh_left


def test_left_and_right_are_random_and_stored(make_project, make_user):
    project = make_project(overlap=1, retest_rate=0)
    import_rows(project, make_items(60))
    reviewer = make_user("rita")
    sides = []
    while (assignment := assignment_next(project=project, reviewer=reviewer)) is not None:
        sides.append(assignment.a_on_left)
        judge(assignment, reviewer)
    assert 10 < sum(sides) < 50  # 60 fair coin flips; all-one-side has chance 2**-59


def test_an_expired_assignment_returns_to_the_pool(make_project, make_user):
    project = make_project(overlap=1, retest_rate=0)
    import_rows(project, make_items(1))
    slow, quick = make_user("slow"), make_user("quick")
    held = assignment_next(project=project, reviewer=slow)
    assert assignment_next(project=project, reviewer=quick) is None
    later = timezone.now() + timedelta(minutes=project.assignment_minutes + 1)
    assert assignments_expire_stale(now=later) == 1
    given = assignment_next(project=project, reviewer=quick, now=later)
    assert given is not None and given.pair_id == held.pair_id
    with pytest.raises(ReviewError) as late:
        judge(held, slow)
    assert late.value.status == 410 and "expired" in str(late.value)


def recounted_tally(project, reviewer) -> dict:
    """What the reviewer's tally must say, counted from their assignments the slow way."""
    mine = Assignment.objects.filter(project=project, reviewer=reviewer)
    return {
        "judged": mine.filter(status="completed").count(),
        "judged_once": mine.filter(status="completed", is_retest=False).count(),
        "retests": mine.filter(is_retest=True).exclude(status="cancelled").count(),
    }


def test_the_reviewer_tally_always_equals_a_recount_through_judging_undo_and_retests(make_project, make_user):
    project = make_project(overlap=1, retest_rate=0.5)
    project.retest_gap = 1
    project.save()
    import_rows(project, make_items(6))
    reviewer = make_user("rita")
    undone = 0
    while (assignment := assignment_next(project=project, reviewer=reviewer)) is not None:
        judge(assignment, reviewer)
        if undone < 2 and not assignment.is_retest:
            # Undo a first-time judgment (cancelling the retest it scheduled), then judge it again.
            reopened = judgment_undo_last(project=project, reviewer=reviewer)
            assert reopened.pk == assignment.pk
            undone += 1
            tally = ReviewerTally.objects.get(project=project, reviewer=reviewer)
            assert {f: getattr(tally, f) for f in ("judged", "judged_once", "retests")} == recounted_tally(project, reviewer)
            judge(reopened, reviewer, choice="right")
        tally = ReviewerTally.objects.get(project=project, reviewer=reviewer)
        assert {f: getattr(tally, f) for f in ("judged", "judged_once", "retests")} == recounted_tally(project, reviewer)
    assert undone == 2
    assert recounted_tally(project, reviewer) == {"judged": 9, "judged_once": 6, "retests": 3}
    progress = selectors.reviewer_progress(project=project, reviewer=reviewer)
    assert progress["judged"] == 9 and progress["remaining"] == 0


def test_progress_counts_open_pairs_up_to_a_cap_and_says_when_there_are_more(make_project, make_user):
    project = make_project(overlap=1, retest_rate=0)
    import_rows(project, make_items(selectors.REMAINING_COUNT_CAP + 5))
    reviewer = make_user("rita")
    assignment_next(project=project, reviewer=reviewer)
    progress = selectors.reviewer_progress(project=project, reviewer=reviewer)
    # The held assignment plus open pairs counted up to the cap; the true number is larger.
    assert progress == {"judged": 0, "remaining": selectors.REMAINING_COUNT_CAP + 1, "remaining_is_at_least": True}

    small = make_project(slug="small", overlap=1, retest_rate=0)
    import_rows(small, make_items(3))
    assignment_next(project=small, reviewer=reviewer)
    assert selectors.reviewer_progress(project=small, reviewer=reviewer) == {
        "judged": 0, "remaining": 3, "remaining_is_at_least": False,
    }
