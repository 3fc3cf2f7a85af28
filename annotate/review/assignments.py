"""The reviewer queue: hand a reviewer their next assignment, and return assignments held too long to the pool.

The hot path's statements are in queue_sql.py; this decides which of them to run. Raises ReviewError (with
an HTTP-like status) for a user's mistake.
"""

import secrets
import time
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from annotate.review import queue_sql
from annotate.review.errors import ReviewError
from annotate.review.models import Assignment, Pair, Project
from annotate.review.overlap import first_reviewers_needed
from annotate.review.projects import criteria_in_force
from annotate.review.qualification import gold_before_live_work

_last_sweep = 0.0
SWEEP_EVERY_SECONDS = 10.0


def assignments_expire_stale(*, now: datetime | None = None, limit: int = 1000) -> int:
    """Return held-too-long assignments to the pool; returns how many expired.

    Locks the stale assignment rows (SKIP LOCKED: one sweeper takes each), then the pairs' counters.
    """
    now = now or timezone.now()
    with transaction.atomic():
        stale = list(
            Assignment.objects.select_for_update(skip_locked=True)
            .filter(status=Assignment.Status.ACTIVE, expires_at__lte=now)
            .order_by("id")
            .values_list("id", "pair_id", "is_retest")[:limit]
        )
        if not stale:
            return 0
        Assignment.objects.filter(id__in=[row[0] for row in stale]).update(status=Assignment.Status.EXPIRED)
        released: dict[int, int] = {}
        for _, pair_id, is_retest in stale:
            if not is_retest:
                released[pair_id] = released.get(pair_id, 0) + 1
        for pair_id in sorted(released):  # a fixed order, so two sweepers cannot deadlock on pairs
            Pair.objects.filter(pk=pair_id).update(assigned_count=F("assigned_count") - released[pair_id])
    return len(stale)


def _sweep_now_and_then(now: datetime) -> None:
    global _last_sweep
    if time.monotonic() - _last_sweep >= SWEEP_EVERY_SECONDS:
        _last_sweep = time.monotonic()
        assignments_expire_stale(now=now)


def assignment_serve(assignment: Assignment, *, project: Project, now: datetime) -> Assignment:
    """Hand the assignment out now, under the criteria in force now (the judgment will record them)."""
    if assignment.criteria_version_id is None:
        assignment.criteria_version = criteria_in_force(project)
    assignment.status = Assignment.Status.ACTIVE
    assignment.served_at = now
    assignment.expires_at = now + timedelta(minutes=project.assignment_minutes)
    assignment.save(update_fields=["status", "served_at", "expires_at", "criteria_version"])
    return assignment


# How long a request keeps trying when every pair left for the reviewer is being taken by other requests
# right now (each holds it for one short transaction), before it answers with what else it has.
LOCKED_PAIRS_PATIENCE_SECONDS = 10.0
DEADLOCK_RETRIES = 3
DEADLOCK_DETECTED = "40P01"  # PostgreSQL's SQLSTATE for a transaction it aborted to break a deadlock


def _take_pair_postgres(*, project: Project, reviewer: AbstractBaseUser, now: datetime) -> Assignment | None:
    """Take a pair new to the reviewer, or None when none is left for them.

    Pair rows are only ever locked with SKIP LOCKED, never waited for: a lock that found its row changed
    and failed the re-check is kept to the end of the transaction, so two requests each waiting for a pair
    the other kept could deadlock. When every pair left for the reviewer is locked by requests taking it
    right now, this tries again shortly, rather than wrongly answering "nothing left".
    """
    given_up_at = time.monotonic() + LOCKED_PAIRS_PATIENCE_SECONDS
    everywhere = False  # first only the front of the queue and the untouched pairs: what a request needs
    first_needed = _first_needed(project)
    while True:
        taken = queue_sql.take_fresh_pair(
            project_id=project.pk, reviewer_id=reviewer.pk, overlap=project.overlap,
            a_on_left=secrets.randbelow(2) == 1, now=now,
            expires_at=now + timedelta(minutes=project.assignment_minutes), everywhere=everywhere,
            first_needed=first_needed,
        )
        if taken is not None:
            return taken
        if everywhere:
            left = queue_sql.first_open_pair(project_id=project.pk, reviewer_id=reviewer.pk, overlap=project.overlap)
            if left is None or time.monotonic() > given_up_at:
                return None
            time.sleep(0.005)
        everywhere = True


def _take_pair_sqlite(*, project: Project, reviewer: AbstractBaseUser, now: datetime) -> Assignment | None:
    """Take a pair new to the reviewer, or None when none is left for them.

    SQLite has no row locks: its single-writer database lock serialises the count's UPDATE, which
    re-checks that the pair still needs a reviewer, so a pair is never over-assigned here either.
    """
    first_needed = _first_needed(project)
    for _ in range(100):
        candidate = queue_sql.first_open_pair(project_id=project.pk, reviewer_id=reviewer.pk, overlap=project.overlap)
        if candidate is None:
            return None
        if queue_sql.claim_pair(pair_id=candidate, overlap=project.overlap, first_needed=first_needed):
            return Assignment.objects.create(
                project=project, pair_id=candidate, reviewer=reviewer, a_on_left=secrets.randbelow(2) == 1,
                status=Assignment.Status.ACTIVE, criteria_version=criteria_in_force(project), served_at=now,
                expires_at=now + timedelta(minutes=project.assignment_minutes),
            )
    return None


def _first_needed(project: Project) -> int | None:
    """With adaptive overlap, what a pair without votes needs (written on it when first taken); else None."""
    if not project.overlap_is_adaptive:
        return None
    return first_reviewers_needed(min_overlap=project.min_overlap, max_overlap=project.overlap,
                                  stop_rule=project.overlap_stop_rule)


def assignment_next(*, project: Project, reviewer: AbstractBaseUser, now: datetime | None = None) -> Assignment | None:
    """The reviewer's next assignment, or None when nothing is left for them.

    Order: an assignment they already hold; a retest that is due; a fresh pair; any waiting retest.
    Among fresh pairs the fullest open pair first (so a split pair that adaptive overlap keeps open
    comes before untouched ones), then untouched pairs, by queue priority in leaderboard projects.

    Locks: the reviewer's queue lock, a transaction-scoped PostgreSQL advisory lock keyed by the
    reviewer (so one reviewer's parallel requests cannot each take a pair), then one pair row with
    FOR NO KEY UPDATE SKIP LOCKED (so concurrent reviewers take different pairs instead of queueing).
    The pair's assigned_count only changes under that lock, and the UPDATE re-checks that it is below
    what the pair needs (the project's overlap, or with adaptive overlap the pair's own number, never
    above the maximum), so a pair is never given to more reviewers than it needs.
    SQLite has no row locks; there, its single-writer database lock gives the same guarantee.

    Even SKIP LOCKED waits while PostgreSQL follows a row's chain of newer versions, so two takes can
    deadlock on a pair both are changing; PostgreSQL then aborts one, which undid all it did and is
    run again (at most DEADLOCK_RETRIES times).
    """
    return _assignment_next(project=project, reviewer=reviewer, now=now)[1]


def assignment_next_in_project(*, slug: str, reviewer: AbstractBaseUser,
                               now: datetime | None = None) -> tuple[Project | None, Assignment | None]:
    """assignment_next in the project with this slug: (the project, the assignment or None), or (None, None)
    when no project has this slug.

    For the reviewer API: the project is read in the statement that takes the reviewer's queue lock, a round
    trip fewer than reading it first.
    """
    return _assignment_next(slug=slug, reviewer=reviewer, now=now)


def _assignment_next(*, reviewer: AbstractBaseUser, now: datetime | None, project: Project | None = None,
                     slug: str = "") -> tuple[Project | None, Assignment | None]:
    """assignment_next for the project given, or for the one with this slug (read under the reviewer's lock)."""
    now = now or timezone.now()
    _sweep_now_and_then(now)
    for attempt in range(DEADLOCK_RETRIES + 1):
        try:
            with transaction.atomic():
                if slug:
                    project = queue_sql.project_by_slug_locking_reviewer(slug=slug, reviewer_id=reviewer.pk)
                    if project is None:
                        return None, None
                else:
                    queue_sql.lock_reviewer(reviewer_id=reviewer.pk)
                taken = _assignment_next_locked(project=project, reviewer=reviewer, now=now)
        except OperationalError as exc:
            if attempt == DEADLOCK_RETRIES or getattr(exc.__cause__, "sqlstate", None) != DEADLOCK_DETECTED:
                raise
        else:
            if isinstance(taken, ReviewError):
                raise taken  # after the commit: what led to the refusal (an attempt scored) is kept
            return project, taken
    return project, None  # not reached: the last attempt returns or raises


def _assignment_next_locked(*, project: Project, reviewer: AbstractBaseUser,
                            now: datetime) -> Assignment | ReviewError | None:
    """assignment_next's work, in its transaction, under the reviewer's queue lock (queue_sql.lock_reviewer,
    taken by the caller); a refusal of the qualification round is returned, not raised, so that the
    transaction keeps what the round wrote before it (raising would undo it)."""
    waiting, judged = queue_sql.reviewer_open_assignments(project_id=project.pk, reviewer_id=reviewer.pk)
    held = [a for a in waiting if a.status == Assignment.Status.ACTIVE and a.expires_at > now]
    if held:
        return held[0]
    try:
        gold = gold_before_live_work(project=project, reviewer=reviewer, now=now)
    except ReviewError as refusal:
        return refusal
    if gold is not None:
        return gold
    scheduled = sorted(
        (a for a in waiting if a.status == Assignment.Status.SCHEDULED), key=lambda a: (a.due_after_judgments, a.pk)
    )
    if scheduled and scheduled[0].due_after_judgments <= judged:
        return assignment_serve(scheduled[0], project=project, now=now)
    take = _take_pair_postgres if connection.vendor == "postgresql" else _take_pair_sqlite
    taken = take(project=project, reviewer=reviewer, now=now)
    if taken is not None:
        return taken
    if scheduled:
        return assignment_serve(scheduled[0], project=project, now=now)
    return None
