"""Writes of the review workflow: projects, criteria, imports, assignments, judgments, users.

Views and commands validate their input shape, call one function here, and shape the output.
Every function is keyword-only and raises ReviewError (with an HTTP-like status) for a user's mistake.
"""

import secrets
import time
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.cache import cache
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from annotate.errors import UserMistake
from annotate.review import import_sql, queue_sql
from annotate.review.choices import CLICKS, CRITERION_CLICKS, DECISIVE_CLICKS, unswap
from annotate.review.import_sql import ImportSummary
from annotate.review.importing import ImportedItem, items_read
from annotate.review.models import (
    Assignment,
    CriteriaVersion,
    Judgment,
    Pair,
    Project,
    ReviewerTally,
)
from annotate.review.selectors import roles_cache_key

ROLES = ("reviewer", "engineer", "admin")
_client_key_field = Judgment._meta.get_field("client_key")


class ReviewError(UserMistake):
    """A review mistake the user can fix."""


# --- projects and criteria -------------------------------------------------------------------------


def criteria_version_add(*, project: Project, instructions: str, items: list[dict]) -> tuple[CriteriaVersion, bool]:
    """The project's criteria as given: a new version if they differ from the latest, else the latest.

    Locks the project row so two loads at once cannot both take the same version number.
    """
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        latest = project.criteria_versions.order_by("-version").first()
        if latest and latest.instructions == instructions and latest.items == items:
            return latest, False
        version = CriteriaVersion.objects.create(
            project=project, version=(latest.version + 1) if latest else 1, instructions=instructions, items=items
        )
        return version, True


def project_create_or_update(
    *,
    slug: str,
    name: str | None,
    instructions: str,
    criteria_items: list[dict],
    overlap: int | None = None,
    retest_rate: float | None = None,
    max_pairs_per_prompt: int | None = None,
    min_rationale_chars: int | None = None,
) -> tuple[Project, CriteriaVersion, bool]:
    """Create a project (or update the settings given) and load its criteria; returns (project, criteria, created)."""
    if overlap is not None and not 1 <= overlap <= 50:
        raise ReviewError(f"overlap {overlap} must be between 1 and 50 reviewers per pair")
    if retest_rate is not None and not 0.0 <= retest_rate <= 1.0:
        raise ReviewError(f"retest rate {retest_rate} must be between 0 and 1")
    settings = {
        "overlap": overlap, "retest_rate": retest_rate, "max_pairs_per_prompt": max_pairs_per_prompt,
        "min_rationale_chars": min_rationale_chars,
    }
    settings = {key: value for key, value in settings.items() if value is not None}
    with transaction.atomic():
        project = Project.objects.filter(slug=slug).first()
        created = project is None
        if created:
            project = Project.objects.create(slug=slug, name=name or slug, **settings)
        elif settings or name:
            for key, value in settings.items():
                setattr(project, key, value)
            if name:
                project.name = name
            project.save()
        criteria, _ = criteria_version_add(project=project, instructions=instructions, items=criteria_items)
    return project, criteria, created


# --- import ----------------------------------------------------------------------------------------


def items_import(*, project: Project, items: Iterable[ImportedItem]) -> ImportSummary:
    """Store checked items (from `items_parse`): new prompts, new responses, new pairs; all or nothing.

    Re-importing a prompt_id adds only responses not already there (a response is its model, version
    and text) and pairs them with the old ones; its new tags are added, its gold set as given. A
    prompt_id that exists with a different prompt text rejects the whole file, since judgments already
    made would lose their meaning. Identical texts are never paired; the project's pair cap holds.
    """
    return import_sql.items_store(project=project, items=items, read_errors=[], empty_is_error=False)


def items_import_file(*, project: Project, lines: Iterable[str | bytes]) -> ImportSummary:
    """Read, check and store an import file (JSONL lines) as `items_import` does, in one streaming pass.

    Memory does not grow with the file. ImportRejected lists every problem as 'line N: reason', and
    then nothing is stored.
    """
    read_errors: list[tuple[int, str]] = []
    return import_sql.items_store(project=project, items=items_read(lines, read_errors), read_errors=read_errors,
                                  empty_is_error=True)


# --- assignments -----------------------------------------------------------------------------------

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


def _criteria_in_force(project: Project) -> CriteriaVersion:
    criteria = project.criteria_versions.order_by("-version").first()
    if criteria is None:
        raise ReviewError(f"project {project.slug!r} has no criteria yet; an admin must load them first", status=409)
    return criteria


def _serve(assignment: Assignment, *, project: Project, now: datetime) -> Assignment:
    """Hand the assignment out now, under the criteria in force now (the judgment will record them)."""
    if assignment.criteria_version_id is None:
        assignment.criteria_version = _criteria_in_force(project)
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
    while True:
        taken = queue_sql.take_fresh_pair(
            project_id=project.pk, reviewer_id=reviewer.pk, overlap=project.overlap,
            a_on_left=secrets.randbelow(2) == 1, now=now,
            expires_at=now + timedelta(minutes=project.assignment_minutes), everywhere=everywhere,
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
    re-checks `assigned_count < overlap`, so a pair is never over-assigned here either.
    """
    for _ in range(100):
        candidate = queue_sql.first_open_pair(project_id=project.pk, reviewer_id=reviewer.pk, overlap=project.overlap)
        if candidate is None:
            return None
        if Pair.objects.filter(pk=candidate, assigned_count__lt=project.overlap).update(
            assigned_count=F("assigned_count") + 1
        ):
            return Assignment.objects.create(
                project=project, pair_id=candidate, reviewer=reviewer, a_on_left=secrets.randbelow(2) == 1,
                status=Assignment.Status.ACTIVE, criteria_version=_criteria_in_force(project), served_at=now,
                expires_at=now + timedelta(minutes=project.assignment_minutes),
            )
    return None


def assignment_next(*, project: Project, reviewer: AbstractBaseUser, now: datetime | None = None) -> Assignment | None:
    """The reviewer's next assignment, or None when nothing is left for them.

    Order: an assignment they already hold; a retest that is due; a fresh pair; any waiting retest.

    Locks: the reviewer's queue lock, a transaction-scoped PostgreSQL advisory lock keyed by the
    reviewer (so one reviewer's parallel requests cannot each take a pair), then one pair row with
    FOR NO KEY UPDATE SKIP LOCKED (so concurrent reviewers take different pairs instead of queueing).
    The pair's assigned_count only changes under that lock, and the UPDATE re-checks
    `assigned_count < overlap`, so a pair is never given to more than `overlap` reviewers.
    SQLite has no row locks; there, its single-writer database lock gives the same guarantee.

    Even SKIP LOCKED waits while PostgreSQL follows a row's chain of newer versions, so two takes can
    deadlock on a pair both are changing; PostgreSQL then aborts one, which undid all it did and is
    run again (at most DEADLOCK_RETRIES times).
    """
    now = now or timezone.now()
    _sweep_now_and_then(now)
    for attempt in range(DEADLOCK_RETRIES + 1):
        try:
            with transaction.atomic():
                return _assignment_next_locked(project=project, reviewer=reviewer, now=now)
        except OperationalError as exc:
            if attempt == DEADLOCK_RETRIES or getattr(exc.__cause__, "sqlstate", None) != DEADLOCK_DETECTED:
                raise
    return None  # not reached: the last attempt returns or raises


def _assignment_next_locked(*, project: Project, reviewer: AbstractBaseUser, now: datetime) -> Assignment | None:
    """assignment_next's work, in its transaction."""
    queue_sql.lock_reviewer(reviewer_id=reviewer.pk)
    waiting, judged = queue_sql.reviewer_open_assignments(project_id=project.pk, reviewer_id=reviewer.pk)
    held = [a for a in waiting if a.status == Assignment.Status.ACTIVE and a.expires_at > now]
    if held:
        return held[0]
    scheduled = sorted(
        (a for a in waiting if a.status == Assignment.Status.SCHEDULED), key=lambda a: (a.due_after_judgments, a.pk)
    )
    if scheduled and scheduled[0].due_after_judgments <= judged:
        return _serve(scheduled[0], project=project, now=now)
    take = _take_pair_postgres if connection.vendor == "postgresql" else _take_pair_sqlite
    taken = take(project=project, reviewer=reviewer, now=now)
    if taken is not None:
        return taken
    if scheduled:
        return _serve(scheduled[0], project=project, now=now)
    return None


# --- judgments -------------------------------------------------------------------------------------


def _checked_judgment(
    *, criteria_keys: list[str], min_rationale_chars: int, choice, strength, criteria, rationale
) -> tuple[str, int | None, dict, str]:
    """The judgment's fields after checking them, or ReviewError naming the first field to fix."""
    if choice not in CLICKS:
        raise ReviewError(f"choice: {choice!r} is not one of {', '.join(CLICKS)}")
    if strength is not None and (isinstance(strength, bool) or not isinstance(strength, int) or not 1 <= strength <= 3):
        raise ReviewError(f"strength: {strength!r} must be 1, 2 or 3")
    if strength is None and choice in DECISIVE_CLICKS:
        raise ReviewError("strength: say how strongly you prefer it: 1, 2 or 3")
    if not isinstance(criteria, dict):
        raise ReviewError("criteria: must be an object mapping each criterion key to left, right or tie")
    keys = criteria_keys
    unknown = sorted(set(criteria) - set(keys))
    if unknown:
        raise ReviewError(f"criteria: unknown key(s) {unknown}; this assignment's criteria are {keys}")
    for key in keys:
        if key not in criteria:
            raise ReviewError(f"criteria: choose left, right or tie for {key!r}")
        if criteria[key] not in CRITERION_CLICKS:
            raise ReviewError(f"criteria: {key!r} is {criteria[key]!r}; use left, right or tie")
    if not isinstance(rationale, str) or len(rationale.strip()) < min_rationale_chars:
        raise ReviewError(f"rationale: write at least {min_rationale_chars} characters on why you chose as you did")
    if choice not in DECISIVE_CLICKS:
        strength = None
    return choice, strength, criteria, rationale.strip()


def judgment_submit(
    *,
    assignment_id: int,
    reviewer: AbstractBaseUser,
    choice: str,
    strength: int | None,
    criteria: dict,
    rationale: str,
    client_key: uuid.UUID,
    now: datetime | None = None,
) -> tuple[Judgment, bool]:
    """Record the reviewer's judgment of their assignment; returns (judgment, replayed).

    The same client_key again returns the judgment it first made (replayed=True) instead of a second
    one. Locks the assignment row, so two submissions for one assignment are taken one at a time.
    """
    now = now or timezone.now()
    try:
        return _judgment_submit_locked(
            assignment_id=assignment_id, reviewer=reviewer, choice=choice, strength=strength, criteria=criteria,
            rationale=rationale, client_key=client_key, now=now,
        )
    except IntegrityError:
        # The same client_key committed by another request between our check and our insert.
        earlier = Judgment.objects.filter(client_key=client_key).first()
        if earlier is not None and earlier.assignment_id == assignment_id and earlier.reviewer_id == reviewer.pk:
            return earlier, True
        raise ReviewError("client_key was already used for another judgment; send a new one", status=409) from None


def _judgment_submit_locked(
    *, assignment_id, reviewer, choice, strength, criteria, rationale, client_key, now
) -> tuple[Judgment, bool]:
    with transaction.atomic():
        locked = queue_sql.lock_assignment_for_judgment(assignment_id=assignment_id, reviewer_id=reviewer.pk)
        if locked is None:
            raise ReviewError(f"assignment {assignment_id} is not one of yours", status=404)
        assignment, rules = locked
        client_key_db = _client_key_field.get_db_prep_value(client_key, connection)
        # Read after the lock, so a submission that waited on it sees what the one before it stored.
        earlier_id, last_revision = queue_sql.judgment_state(client_key_db=client_key_db, assignment_id=assignment.pk)
        if earlier_id is not None:
            earlier = Judgment.objects.get(pk=earlier_id)
            if earlier.assignment_id != assignment.pk:
                raise ReviewError("client_key was already used for another judgment; send a new one", status=409)
            return earlier, True
        if assignment.status == Assignment.Status.COMPLETED:
            raise ReviewError(
                f"assignment {assignment_id} is already judged; undo your last judgment to change it", status=409
            )
        if assignment.status != Assignment.Status.ACTIVE or assignment.expires_at <= now:
            raise ReviewError(
                f"assignment {assignment_id} expired and went back to the pool; ask for the next one", status=410
            )
        choice, strength, criteria, rationale = _checked_judgment(
            criteria_keys=rules["criteria_keys"], min_rationale_chars=rules["min_rationale_chars"], choice=choice,
            strength=strength, criteria=criteria, rationale=rationale,
        )
        judgment, tally = queue_sql.judgment_insert(
            assignment=assignment, reviewer_id=reviewer.pk, revision=last_revision + 1,
            winner=unswap(choice, a_on_left=assignment.a_on_left), strength=strength,
            criteria={key: unswap(value, a_on_left=assignment.a_on_left) for key, value in criteria.items()},
            rationale=rationale,
            seconds_spent=(now - assignment.served_at).total_seconds() if assignment.served_at else None,
            client_key_db=client_key_db, now=now,
        )
        # Keep each reviewer's retests at the project's share of the pairs they judged.
        if (last_revision == 0 and not assignment.is_retest and rules["retest_rate"] > 0
                and tally["retests"] < int(rules["retest_rate"] * tally["judged_once"] + 1e-9)):
            Assignment.objects.create(
                project_id=assignment.project_id, pair_id=assignment.pair_id, reviewer=reviewer,
                a_on_left=not assignment.a_on_left, is_retest=True, retest_of=assignment,
                status=Assignment.Status.SCHEDULED, due_after_judgments=tally["judged"] + rules["retest_gap"],
            )
            queue_sql.tally_add_retest(project_id=assignment.project_id, reviewer_id=reviewer.pk)
    return judgment, False


def judgment_undo_last(*, project: Project, reviewer: AbstractBaseUser, now: datetime | None = None) -> Assignment:
    """Withdraw the reviewer's last judgment in the project and give its assignment back to them.

    The withdrawal is a new, retracted revision; the judgment itself stays on record. A retest that
    the withdrawn judgment scheduled, and that was not yet shown, is cancelled. Locks the reviewer's
    queue lock, then the assignment row.
    """
    now = now or timezone.now()
    with transaction.atomic():
        queue_sql.lock_reviewer(reviewer_id=reviewer.pk)
        last = Judgment.objects.filter(reviewer=reviewer, pair__project=project).order_by("-id").first()
        if last is None or last.retracted:
            raise ReviewError("there is no judgment to undo", status=409)
        assignment = Assignment.objects.select_for_update().get(pk=last.assignment_id)
        if assignment.current_judgment_id != last.pk:
            raise ReviewError("there is no judgment to undo", status=409)
        Judgment.objects.create(
            assignment=assignment, pair_id=assignment.pair_id, reviewer=reviewer, revision=last.revision + 1,
            retracted=True, criteria_version=last.criteria_version, client_key=uuid.uuid4(),
        )
        cancelled = assignment.retests.filter(status=Assignment.Status.SCHEDULED).update(
            status=Assignment.Status.CANCELLED
        )
        ReviewerTally.objects.filter(project=project, reviewer=reviewer).update(
            judged=F("judged") - 1, judged_once=F("judged_once") - (0 if assignment.is_retest else 1),
            retests=F("retests") - cancelled,
        )
        assignment.current_judgment = None
        assignment.completed_at = None
        assignment = _serve(assignment, project=project, now=now)
        assignment.save(update_fields=["current_judgment", "completed_at"])
    return assignment


# --- users -----------------------------------------------------------------------------------------


def user_add(*, username: str, role: str, password: str | None = None) -> tuple[AbstractBaseUser, str, bool]:
    """Create or update a user with one role; returns (user, password, created). A password is made if none is given."""
    if role not in ROLES:
        raise ReviewError(f"role {role!r} is not one of {', '.join(ROLES)}")
    password = password or secrets.token_urlsafe(12)
    user_model = get_user_model()
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(username=username)
        user.set_password(password)
        user.is_staff = role == "admin"
        user.save()
        groups = {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}
        user.groups.remove(*[groups[name] for name in ROLES if name != role])
        user.groups.add(groups[role])
    cache.delete(roles_cache_key(user.pk))
    return user, password, created
