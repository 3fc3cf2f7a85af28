"""A reviewer far ahead of the others: the queue still gives only unseen pairs, retests, and no over-assignment."""

import uuid
from collections import Counter

from annotate.review import queue_sql, selectors
from annotate.review.assignments import assignment_next
from annotate.review.judgments import judgment_submit
from annotate.review.models import Assignment, Pair, ReviewerTally
from tests.conftest import import_rows, make_items
from tests.review.helpers import give_history


def judge(assignment, reviewer):
    judgment_submit(
        assignment_id=assignment.pk, reviewer=reviewer, choice="tie", strength=None,
        criteria={"correct": "tie", "complete": "tie"}, rationale="Both answers are equally good here.",
        client_key=uuid.uuid4(),
    )


def test_a_reviewer_far_ahead_gets_every_unseen_pair_once_their_retests_and_never_an_over_assigned_pair(
    make_project, make_user
):
    history, unseen = 2000, 30
    assert history > 10 * queue_sql.STARTED_LOOKAHEAD  # their own started pairs fill the queue's front
    project = make_project(overlap=3, retest_rate=0.1)
    import_rows(project, make_items(history + unseen))
    newest_first = list(Pair.objects.filter(project=project).order_by("-id").values_list("id", flat=True))
    ahead, others = make_user("ahead"), [make_user(f"other{i}") for i in range(3)]
    # The queue's own order when nobody else has started: newest pairs first.
    give_history(project, ahead, newest_first[:history], retest_every=10)
    # The others are behind: two have judged one old pair (the fullest pair now open to the one ahead),
    # one has started the oldest pair, far behind all of the ahead reviewer's started pairs in the queue.
    nearly_done, started_by_other = newest_first[-2], newest_first[-1]
    give_history(project, others[0], [nearly_done])
    give_history(project, others[1], [nearly_done])
    give_history(project, others[2], [started_by_other])

    served = []
    while (assignment := assignment_next(project=project, reviewer=ahead)) is not None:
        served.append(assignment)
        judge(assignment, ahead)

    first_time = [a.pair_id for a in served if not a.is_retest]
    assert first_time[0] == nearly_done  # fullest first, past their own two thousand started pairs
    # Every pair they had not seen, each once, the one started deep in the queue included; none they had.
    assert sorted(first_time) == sorted(newest_first[history:])
    # Their retests kept coming at the project's share, left and right exchanged, after the gap.
    retests = [a for a in served if a.is_retest]
    assert len(retests) == int(0.1 * (history + unseen)) - history // 10 == 3
    for retest in retests:
        original = retest.retest_of
        assert original.pair_id in first_time and retest.a_on_left != original.a_on_left
        gap = served.index(retest) - next(i for i, a in enumerate(served) if a.pk == original.pk)
        fresh_left = any(not a.is_retest for a in served[served.index(retest):])
        # Not straight after the original, unless no fresh pair was left to put between them.
        assert gap > project.retest_gap or not fresh_left
    tally = ReviewerTally.objects.get(project=project, reviewer=ahead)
    assert (tally.judged_once, tally.retests) == (history + unseen, int(0.1 * (history + unseen)))
    # No pair over its overlap, and every pair's counter equals its live first-time assignments.
    live = Counter(Assignment.objects.filter(project=project, is_retest=False, status__in=["active", "completed"])
                   .values_list("pair_id", flat=True))
    counters = dict(Pair.objects.filter(project=project).values_list("id", "assigned_count"))
    assert max(live.values()) <= project.overlap and live[nearly_done] == 3
    assert all(counters[pair_id] == live[pair_id] for pair_id in counters)
    assert selectors.reviewer_progress(project=project, reviewer=ahead)["remaining"] == 0


def test_pairs_the_others_started_reach_the_reviewer_ahead_once_no_untouched_pair_is_left(make_project, make_user):
    """The queue looks at only the front of the started pairs before taking an untouched one; a pair
    someone else started further back must still come before the queue answers 'nothing left'."""
    history = 3 * queue_sql.STARTED_LOOKAHEAD
    project = make_project(overlap=2, retest_rate=0)
    import_rows(project, make_items(history + 6))
    oldest_first = list(Pair.objects.filter(project=project).order_by("id").values_list("id", flat=True))
    ahead, behind = make_user("ahead"), make_user("behind")
    give_history(project, ahead, oldest_first[6:])
    give_history(project, behind, oldest_first[:3])  # started, behind all of the ahead reviewer's pairs
    given = []
    while (assignment := assignment_next(project=project, reviewer=ahead)) is not None:
        given.append(assignment.pair_id)
        judge(assignment, ahead)
    # The untouched ones first (newest first), then the ones the other reviewer started.
    assert given == oldest_first[5:2:-1] + oldest_first[2::-1]
    # The reviewer behind is given the fullest pairs first: the ones the reviewer ahead has judged.
    assert assignment_next(project=project, reviewer=behind).pair_id == oldest_first[-1]
