"""Many reviewers at once: the queue never gives a pair to more reviewers than the overlap."""

import uuid
from collections import Counter

import pytest
from django.db import connection

from annotate.review import queue_sql
from annotate.review.assignments import assignment_next
from annotate.review.judgments import judgment_submit
from annotate.review.models import Assignment, Judgment, Pair
from tests.conftest import import_rows, make_items
from tests.review.helpers import give_history, run_at_once

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def test_fifty_reviewers_asking_at_once_never_over_assign(make_project, make_user):
    assert connection.vendor == "postgresql"
    project = make_project(overlap=3, retest_rate=0)
    import_rows(project, make_items(10))  # 10 pairs x 3 = 30 slots for 50 reviewers
    reviewers = [make_user(f"r{i:02d}") for i in range(50)]
    given = run_at_once(50, lambda i: assignment_next(project=project, reviewer=reviewers[i]))
    assert sum(a is not None for a in given) == 30
    per_pair = Counter(Assignment.objects.filter(project=project).values_list("pair_id", flat=True))
    assert set(per_pair.values()) == {3}


def test_reviewers_racing_through_a_project_judge_each_pair_exactly_overlap_times(make_project, make_user):
    project = make_project(overlap=3, retest_rate=0)
    import_rows(project, make_items(20))
    reviewers = [make_user(f"r{i:02d}") for i in range(12)]

    def judge_until_done(i: int) -> int:
        judged = 0
        while (assignment := assignment_next(project=project, reviewer=reviewers[i])) is not None:
            judgment_submit(
                assignment_id=assignment.pk, reviewer=reviewers[i], choice="tie", strength=None,
                criteria={"correct": "tie", "complete": "tie"}, rationale="Both answers are equally good here.",
                client_key=uuid.uuid4(),
            )
            judged += 1
        return judged

    judged = run_at_once(12, judge_until_done)
    assert sum(judged) == 60
    per_pair = Counter(Judgment.objects.values_list("pair_id", flat=True))
    assert len(per_pair) == 20 and set(per_pair.values()) == {3}


def test_the_same_judgment_sent_twice_at_once_is_stored_once(project, make_user):
    reviewer = make_user("rita")
    assignment = assignment_next(project=project, reviewer=reviewer)
    key = uuid.uuid4()

    def send(_: int):
        return judgment_submit(
            assignment_id=assignment.pk, reviewer=reviewer, choice="left", strength=1,
            criteria={"correct": "left", "complete": "left"}, rationale="Left is right and explains it fully.",
            client_key=key,
        )

    results = run_at_once(8, send)
    assert len({judgment.pk for judgment, _ in results}) == 1
    assert sorted(replayed for _, replayed in results) == [False] + [True] * 7
    assert Judgment.objects.count() == 1


def test_a_reviewer_far_ahead_racing_the_others_never_gets_a_pair_twice_nor_over_assigns(make_project, make_user):
    project = make_project(overlap=3, retest_rate=0)
    history = 2 * queue_sql.STARTED_LOOKAHEAD  # the queue's front is all theirs
    import_rows(project, make_items(history + 20))
    newest_first = list(Pair.objects.filter(project=project).order_by("-id").values_list("id", flat=True))
    reviewers = [make_user("ahead")] + [make_user(f"r{i:02d}") for i in range(7)]
    give_history(project, reviewers[0], newest_first[:history])

    def judge_until_done(i: int) -> None:
        while (assignment := assignment_next(project=project, reviewer=reviewers[i])) is not None:
            judgment_submit(
                assignment_id=assignment.pk, reviewer=reviewers[i], choice="tie", strength=None,
                criteria={"correct": "tie", "complete": "tie"}, rationale="Both answers are equally good here.",
                client_key=uuid.uuid4(),
            )

    run_at_once(8, judge_until_done)
    per_pair = Counter(Judgment.objects.filter(pair__project=project).values_list("pair_id", flat=True))
    assert len(per_pair) == history + 20 and set(per_pair.values()) == {3}
    # Nobody judged a pair twice: not the reviewer ahead (their history is in the count), nor anyone else.
    assert set(Counter(Judgment.objects.values_list("reviewer_id", "pair_id")).values()) == {1}
