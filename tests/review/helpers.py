"""Shared by the review tests: reviewers racing at once, a long judging history written in bulk, gold and live
items to import, and a reviewer who judges a given number of pairs."""

import threading
import uuid
from datetime import timedelta

from django.db import connections
from django.db.models import F
from django.utils import timezone

from annotate.review.assignments import assignment_next
from annotate.review.judgments import judgment_submit
from annotate.review.models import Assignment, Judgment, Pair, ReviewerTally


def run_at_once(count: int, work) -> list:
    """Run work(i) in `count` threads released together; each thread has its own DB connection."""
    barrier = threading.Barrier(count)
    results: list = [None] * count
    errors: list = []

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except Exception as exc:  # collected and re-raised in the test, with its thread
            errors.append((i, exc))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


def give_history(project, reviewer, pair_ids: list[int], *, retest_every: int = 0) -> None:
    """The reviewer has judged these pairs (and a retest of every `retest_every`-th), as the queue would
    have left it, in a few bulk statements instead of thousands of requests."""
    criteria = project.criteria_versions.order_by("-version").first()
    clock = timezone.now() - timedelta(days=30)
    assignments = []
    for index, pair_id in enumerate(pair_ids):
        clock += timedelta(seconds=20)
        first = Assignment(project=project, pair_id=pair_id, reviewer=reviewer, a_on_left=index % 2 == 0,
                           status=Assignment.Status.COMPLETED, criteria_version=criteria, served_at=clock,
                           completed_at=clock)
        assignments.append(first)
        if retest_every and index % retest_every == retest_every - 1:
            assignments.append(Assignment(
                project=project, pair_id=pair_id, reviewer=reviewer, a_on_left=index % 2 != 0, is_retest=True,
                status=Assignment.Status.COMPLETED, criteria_version=criteria, served_at=clock, completed_at=clock,
            ))
    Assignment.objects.bulk_create(assignments, batch_size=500)
    originals = {a.pair_id: a for a in assignments if not a.is_retest}
    retests = [a for a in assignments if a.is_retest]
    for retest in retests:
        retest.retest_of = originals[retest.pair_id]
    Assignment.objects.bulk_update(retests, ["retest_of"], batch_size=500)
    judgments = Judgment.objects.bulk_create(
        [Judgment(assignment=a, pair_id=a.pair_id, reviewer=reviewer, revision=1, winner="tie",
                  criteria={"correct": "tie", "complete": "tie"}, criteria_version=criteria,
                  rationale="Both answers are equally good here.", client_key=uuid.uuid4())
         for a in assignments],
        batch_size=500,
    )
    for assignment, judgment in zip(assignments, judgments, strict=True):
        assignment.current_judgment = judgment
    Assignment.objects.bulk_update(assignments, ["current_judgment"], batch_size=500)
    Pair.objects.filter(pk__in=pair_ids).update(assigned_count=F("assigned_count") + 1, votes_tie=F("votes_tie") + 1)
    ReviewerTally.objects.create(project=project, reviewer=reviewer, judged=len(assignments),
                                 judged_once=len(pair_ids), retests=len(retests))


REASON = "It divides the total distance by the total time; the other averages the speeds."


def gold_items(count: int, *, first: int = 0) -> list[dict]:
    """Gold prompts g-N: the better answer is listed second for odd N, so 'a' is not always right."""
    rows = []
    for i in range(first, first + count):
        good, bad = f"Good answer {i}: total distance over total time.", f"Poor answer {i}: the mean of the speeds."
        rows.append({"prompt_id": f"g-{i}", "prompt": f"Gold question {i}: the average speed?",
                     "responses": [{"text": t, "model": m} for t, m in ((good, "m1"), (bad, "m2"))][:: 1 if i % 2 == 0 else -1],
                     "gold": {"preferred": 0 if i % 2 == 0 else 1, "reason": f"{REASON} ({i})"}})
    return rows


def live_items(count: int) -> list[dict]:
    return [{"prompt_id": f"live-{i}", "prompt": f"Live question {i}?",
             "responses": [{"text": f"One live answer {i}.", "model": "m1"},
                           {"text": f"Another live answer {i}.", "model": "m2"}]} for i in range(count)]


def judge(project, reviewer, count: int, *, agree: bool) -> None:
    """The reviewer judges `count` pairs, picking the first-listed answer (agree) or the other one."""
    for _ in range(count):
        assignment = assignment_next(project=project, reviewer=reviewer)
        first = "left" if assignment.a_on_left else "right"
        choice = first if agree else {"left": "right", "right": "left"}[first]
        judgment_submit(assignment_id=assignment.pk, reviewer=reviewer, choice=choice, strength=2,
                        criteria={"correct": choice, "complete": "tie"},
                        rationale="Chosen for being right and clear.", client_key=uuid.uuid4())
