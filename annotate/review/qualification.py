"""Onboarding on gold: the qualification round before live work, and gold checks mixed into it.

A gold pair is a pair that holds its prompt's gold response: its better answer is known. A project with
`qualification_items` makes each reviewer answer that many gold pairs, with feedback, before any live
item; a project with `gold_rate` mixes gold pairs into live work, unannounced. Both come to the reviewer
through assignment_next (assignments.py), as first-time assignments of pairs they have not had, and each is
recorded as a GoldCheck. A gold check counts in its pair's assigned_count like any assignment, but may take a
pair past the project's overlap: every reviewer must be checked, however many others judged the pair.
"""

import math
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.utils import timezone

from annotate.review import queue_sql
from annotate.review.choices import swap_back
from annotate.review.errors import ReviewError
from annotate.review.models import (
    Assignment,
    GoldCheck,
    Judgment,
    Pair,
    Project,
    Prompt,
    QualificationAttempt,
    gold_pairs,
)
from annotate.review.projects import criteria_in_force

_RATE_SCALE = 1_000_000


def guess_pass_chance(*, items: int, pass_mark: float, attempts: int, right_share: float = 0.5) -> float:
    """The chance that a reviewer who guesses passes the round in one of their attempts: each gold item right with
    probability `right_share` (0.5: picking a side at random), independently; an attempt passes with at least
    pass_mark x items right (the rule of _attempt_finish)."""
    if items <= 0:
        return 1.0
    needed = max(0, math.ceil(pass_mark * items - 1e-9))
    one = sum(math.comb(items, k) * right_share ** k * (1 - right_share) ** (items - k)
              for k in range(needed, items + 1))
    return 1 - (1 - one) ** max(1, attempts)



def _latest_attempt(*, project: Project, reviewer: AbstractBaseUser) -> QualificationAttempt | None:
    return (QualificationAttempt.objects.filter(project=project, reviewer=reviewer).order_by("-number").first())


def _attempt_start(*, project: Project, reviewer: AbstractBaseUser, number: int, now: datetime) -> QualificationAttempt:
    return QualificationAttempt.objects.create(
        project=project, reviewer=reviewer, number=number, items=project.qualification_items,
        pass_mark=project.qualification_pass_mark, started_at=now,
    )


def _attempt_finish(attempt: QualificationAttempt, *, now: datetime) -> None:
    """Score a finished attempt: passed when its share right reaches the pass mark."""
    passed = attempt.answered > 0 and attempt.correct >= attempt.pass_mark * attempt.answered - 1e-9
    attempt.status = QualificationAttempt.Status.PASSED if passed else QualificationAttempt.Status.FAILED
    attempt.finished_at = now
    attempt.save(update_fields=["status", "finished_at"])


def _held_message(*, project: Project, attempt: QualificationAttempt) -> str:
    return (
        f"you did not pass the qualification round of {project.slug!r} ({attempt.correct} of {attempt.answered} "
        f"right in attempt {attempt.number}; the pass mark is {attempt.pass_mark:.0%}) and have no attempt left; "
        "an admin must let you try again or pass you"
    )


def _gold_pair_unseen(*, project: Project, reviewer: AbstractBaseUser) -> tuple[int, str] | None:
    """A gold pair the reviewer has never had as a first-time assignment, at random: (pair id, 'a' or 'b')."""
    row = (
        _gold_pairs_unseen(project=project, reviewer=reviewer)
        .order_by("?")  # a gold pair must not be guessable from its place in the queue
        .values_list("pk", "response_a_id", "prompt__gold_response_id")
        .first()
    )
    if row is None:
        return None
    pair_id, response_a_id, gold_id = row
    return pair_id, "a" if gold_id == response_a_id else "b"


def _gold_pairs_unseen(*, project: Project, reviewer: AbstractBaseUser):
    return gold_pairs(project).exclude(
        Exists(Assignment.objects.filter(pair=OuterRef("pk"), reviewer=reviewer, is_retest=False)))


def _no_gold_left(project: Project) -> ReviewError:
    return ReviewError(
        f"the qualification round of {project.slug!r} has no gold item left that you have not seen; "
        "an admin must import more gold items or pass you", status=409,
    )


def _gold_assignment_new(*, project: Project, reviewer: AbstractBaseUser, attempt: QualificationAttempt | None,
                         now: datetime) -> Assignment | None:
    """Assign the reviewer an unseen gold pair as a gold check (None when none is left for them)."""
    found = _gold_pair_unseen(project=project, reviewer=reviewer)
    if found is None:
        return None
    pair_id, expected = found
    # A plain UPDATE: it waits for a queue request holding the pair's row lock, which never waits for us.
    Pair.objects.filter(pk=pair_id).update(assigned_count=F("assigned_count") + 1)
    assignment = Assignment.objects.create(
        project=project, pair_id=pair_id, reviewer=reviewer, a_on_left=secrets.randbelow(2) == 1,
        status=Assignment.Status.ACTIVE, criteria_version=criteria_in_force(project), served_at=now,
        expires_at=now + timedelta(minutes=project.assignment_minutes),
    )
    GoldCheck.objects.create(assignment=assignment, project=project, reviewer=reviewer, attempt=attempt,
                             expected=expected, created_at=now)
    return assignment


def gold_before_live_work(*, project: Project, reviewer: AbstractBaseUser, now: datetime) -> Assignment | None:
    """A gold check the reviewer gets before anything else, or None to go on with the queue.

    Called by assignment_next under the reviewer's queue lock, once they hold no assignment; it keeps what
    this wrote when it refuses (ReviewError). A project without a qualification round or gold rate costs
    nothing here. In the round: the running attempt's next gold item; a failed attempt is followed by a
    new one while attempts are left; after the last, a 403 says they are held for an admin. An attempt
    that runs out of unseen gold pairs is scored on what was answered; with none answered (or none to
    start a new attempt with) a 409 says so, and the admin's pass or retry stays open (qualification_release).
    Passed (or no round): with probability gold_rate, a gold pair mixed into live work.
    """
    if project.qualification_items:
        attempt = _latest_attempt(project=project, reviewer=reviewer)
        failed = attempt is not None and attempt.status == QualificationAttempt.Status.FAILED
        if failed and attempt.number >= project.qualification_attempts:
            raise ReviewError(_held_message(project=project, attempt=attempt), status=403)
        if attempt is None or failed:
            if not _gold_pairs_unseen(project=project, reviewer=reviewer).exists():
                raise _no_gold_left(project)  # no attempt is started that could not get one item
            attempt = _attempt_start(project=project, reviewer=reviewer, number=(attempt.number if attempt else 0) + 1,
                                     now=now)
        if attempt.status == QualificationAttempt.Status.RUNNING:
            assignment = _gold_assignment_new(project=project, reviewer=reviewer, attempt=attempt, now=now)
            if assignment is not None:
                return assignment
            if not attempt.answered:
                raise _no_gold_left(project)
            # Out of unseen gold items: the attempt is scored on what was answered.
            _attempt_finish(attempt, now=now)
            if attempt.status != QualificationAttempt.Status.PASSED:
                return gold_before_live_work(project=project, reviewer=reviewer, now=now)
    if project.gold_rate > 0 and secrets.randbelow(_RATE_SCALE) < project.gold_rate * _RATE_SCALE:
        return _gold_assignment_new(project=project, reviewer=reviewer, attempt=None, now=now)
    return None


def qualification_state(*, project: Project, reviewer: AbstractBaseUser) -> dict | None:
    """Where the reviewer stands in the project's qualification round; None when the project has none."""
    if not project.qualification_items:
        return None
    attempt = _latest_attempt(project=project, reviewer=reviewer)
    if attempt is None:
        return {"status": "not_started", "attempt": 0, "attempts": project.qualification_attempts,
                "items": project.qualification_items, "answered": 0, "correct": 0,
                "pass_mark": project.qualification_pass_mark}
    status = attempt.status
    if status == QualificationAttempt.Status.FAILED and attempt.number >= project.qualification_attempts:
        status = "held"
    return {"status": status, "attempt": attempt.number, "attempts": max(project.qualification_attempts, attempt.number),
            "items": attempt.items, "answered": attempt.answered, "correct": attempt.correct,
            "pass_mark": attempt.pass_mark}


QUALIFICATION_ACTIONS = ("retry", "pass")


def qualification_release(*, project: Project, reviewer: AbstractBaseUser, action: str, admin: AbstractBaseUser,
                          now: datetime | None = None) -> QualificationAttempt:
    """An admin lets a reviewer who has not passed go on, whatever their state: `retry` starts a new attempt
    (it needs a gold pair they have not seen), `pass` passes them without one (also a reviewer who has not
    tried yet). Either way a new attempt row records it (attempts are never edited after they end); an
    attempt still running is first ended as stopped, and the gold item it had handed out is withdrawn.
    Locks the reviewer's queue lock, so their own request cannot start an attempt at the same time.
    """
    if action not in QUALIFICATION_ACTIONS:
        raise ReviewError(f"action: {action!r} must be one of {', '.join(QUALIFICATION_ACTIONS)}")
    if not project.qualification_items:
        raise ReviewError(f"project {project.slug!r} has no qualification round (qualification items is 0)",
                          status=409)
    now = now or timezone.now()
    name = reviewer.get_username()
    with transaction.atomic():
        queue_sql.lock_reviewer(reviewer_id=reviewer.pk)
        latest = _latest_attempt(project=project, reviewer=reviewer)
        if latest is not None and latest.status == QualificationAttempt.Status.PASSED:
            raise ReviewError(f"{name} has already passed the qualification round", status=409)
        if latest is None and action == "retry":
            raise ReviewError(f"{name} has not tried the qualification round yet; their first request starts it",
                              status=409)
        if action == "retry" and not _gold_pairs_unseen(project=project, reviewer=reviewer).exists():
            raise ReviewError(f"{name} has seen every gold item of {project.slug!r}; import more gold items, "
                              "or pass them", status=409)
        if latest is not None and latest.status == QualificationAttempt.Status.RUNNING:
            _attempt_stop(latest, admin=admin, now=now)
        attempt = _attempt_start(project=project, reviewer=reviewer, number=(latest.number if latest else 0) + 1,
                                 now=now)
        if action == "pass":
            attempt.status = QualificationAttempt.Status.PASSED
            attempt.items = 0
            attempt.finished_at = now
            attempt.decided_by = f"passed by {admin.get_username()}"
            attempt.save(update_fields=["status", "items", "finished_at", "decided_by"])
    return attempt


def _attempt_stop(attempt: QualificationAttempt, *, admin: AbstractBaseUser, now: datetime) -> None:
    """End a running attempt unscored, and withdraw its item the reviewer holds (back to the pool's count)."""
    attempt.status = QualificationAttempt.Status.STOPPED
    attempt.finished_at = now
    attempt.decided_by = f"stopped by {admin.get_username()}"
    attempt.save(update_fields=["status", "finished_at", "decided_by"])
    held = list(Assignment.objects.select_for_update().filter(
        pk__in=GoldCheck.objects.filter(attempt=attempt).values("assignment_id"), status=Assignment.Status.ACTIVE,
    ).values_list("pk", "pair_id"))
    Assignment.objects.filter(pk__in=[pk for pk, _ in held]).update(status=Assignment.Status.CANCELLED)
    for _, pair_id in sorted(held, key=lambda row: row[1]):
        Pair.objects.filter(pk=pair_id).update(assigned_count=F("assigned_count") - 1)


def gold_check_answered(*, assignment: Assignment, judgment: Judgment, expected: str, attempt_id: int | None,
                         now: datetime) -> dict | None:
    """Record the answer to a gold check; returns the reviewer's feedback for a qualification item, else None.

    A check mixed into live work stays silent. The feedback's `expected` is the side the gold answer was
    on for this reviewer (their own left/right), with the import's reason for it.
    """
    correct = judgment.winner == expected
    GoldCheck.objects.filter(assignment_id=assignment.pk).update(judgment=judgment, correct=correct)
    if attempt_id is None:
        return None
    attempt = QualificationAttempt.objects.select_for_update().select_related("project").get(pk=attempt_id)
    if attempt.status == QualificationAttempt.Status.RUNNING:  # an attempt that ended is never edited
        attempt.answered += 1
        attempt.correct += int(correct)
        attempt.save(update_fields=["answered", "correct"])
        if attempt.answered >= attempt.items:
            _attempt_finish(attempt, now=now)
    project = attempt.project
    reason = Prompt.objects.filter(pairs=assignment.pair_id).values_list("gold_reason", flat=True).first() or ""
    status = attempt.status
    next_step = "continue"
    if status == QualificationAttempt.Status.PASSED:
        next_step = "live"
    elif status == QualificationAttempt.Status.FAILED:
        next_step = "retry" if attempt.number < project.qualification_attempts else "held"
    return {
        "expected": swap_back(expected, a_on_left=assignment.a_on_left),
        "correct": correct,
        "reason": reason,
        "qualification": {
            "status": status, "attempt": attempt.number, "attempts": max(project.qualification_attempts, attempt.number),
            "items": attempt.items, "answered": attempt.answered, "correct": attempt.correct,
            "pass_mark": attempt.pass_mark, "next": next_step,
        },
    }


def gold_feedback_again(*, judgment: Judgment) -> dict | None:
    """The feedback of a qualification answer sent again with the same client_key (nothing is recounted)."""
    check = GoldCheck.objects.filter(judgment=judgment, attempt__isnull=False).select_related(
        "attempt__project", "assignment").first()
    if check is None:
        return None
    attempt, project = check.attempt, check.attempt.project
    reason = Prompt.objects.filter(pairs=judgment.pair_id).values_list("gold_reason", flat=True).first() or ""
    next_step = {"passed": "live", "running": "continue"}.get(attempt.status) or (
        "retry" if attempt.number < project.qualification_attempts else "held")
    return {
        "expected": swap_back(check.expected, a_on_left=check.assignment.a_on_left), "correct": bool(check.correct),
        "reason": reason,
        "qualification": {
            "status": attempt.status, "attempt": attempt.number,
            "attempts": max(project.qualification_attempts, attempt.number), "items": attempt.items,
            "answered": attempt.answered, "correct": attempt.correct, "pass_mark": attempt.pass_mark,
            "next": next_step,
        },
    }
