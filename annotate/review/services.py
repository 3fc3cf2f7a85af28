"""Writes of the review workflow: projects, criteria, imports, assignments, judgments, users.

Views and commands validate their input shape, call one function here, and shape the output.
Every function is keyword-only and raises ReviewError (with an HTTP-like status) for a user's mistake.
"""

import logging
import secrets
import time
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

import numpy as np
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Count, Exists, F, OuterRef, Q
from django.utils import timezone

from annotate.errors import UserMistake
from annotate.limits import MAX_CRITERIA, MAX_RATIONALE_CHARS, share_number, text_within, whole_number
from annotate.review import import_sql, queue_sql
from annotate.review.choices import CLICKS, CRITERION_CLICKS, DECISIVE_CLICKS, WINNERS, swap_back, unswap
from annotate.review.import_sql import ImportSummary
from annotate.review.importing import ImportedItem, items_read
from annotate.review.models import (
    PAIR_CLOSED,
    Assignment,
    CriteriaVersion,
    GoldCheck,
    Judgment,
    Pair,
    Project,
    Prompt,
    QualificationAttempt,
    RationaleCheck,
    ReviewerTally,
    gold_pairs,
    live_assignment,
    qualification_gold_short,
)
from annotate.review.overlap import (
    OverlapSettingsRejected,
    first_reviewers_needed,
    overlap_settings_check,
    reviewers_count_check,
    reviewers_needed,
    stop_rule_check,
)
from annotate.review.queue_priority import difference_uncertainty, pair_priorities
from annotate.review.rationale import TypingSignals, is_near_duplicate, looks_pasted, normalised, text_key
from annotate.review.selectors import roles_cache_key

logger = logging.getLogger(__name__)
ROLES = ("reviewer", "engineer", "admin", "adjudicator")
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


def _quality_settings_checked(
    *, rationale_flag_chars: int | None, qualification_items: int | None, qualification_pass_mark: float | None,
    qualification_attempts: int | None, gold_rate: float | None, standing_min_judgments: int | None,
) -> dict:
    """The onboarding, rationale and standing settings given, each checked; ReviewError names the first bad one."""
    def whole(name: str, value, low: int, high: int, meaning: str) -> int | None:
        return None if value is None else whole_number(name, value, low=low, high=high, error=ReviewError,
                                                       hint=meaning)

    def share(name: str, value, meaning: str) -> None:
        if value is not None:
            if isinstance(value, str):  # a JSON string is not a number, even one that reads as one
                raise ReviewError(f"{name}: {value!r} must be a number from 0 to 1 ({meaning})")
            share_number(name, value, error=ReviewError, hint=meaning)

    rationale_flag_chars = whole("rationale flag length", rationale_flag_chars, 0, 2000,
                                 "0 turns the too_short flag off")
    qualification_items = whole("qualification items", qualification_items, 0, 1000,
                                "gold items in the round; 0 means no round")
    share("qualification pass mark", qualification_pass_mark, "the share of the round's items to get right")
    qualification_attempts = whole("qualification attempts", qualification_attempts, 1, 100,
                                   "tries before an admin must decide")
    share("gold rate", gold_rate, "the share of live items that are gold checks")
    standing_min_judgments = whole("standing minimum", standing_min_judgments, 1, 100_000,
                                   "judgments before reviewers see their standing")
    given = {
        "rationale_flag_chars": rationale_flag_chars, "qualification_items": qualification_items,
        "qualification_pass_mark": qualification_pass_mark, "qualification_attempts": qualification_attempts,
        "gold_rate": gold_rate, "standing_min_judgments": standing_min_judgments,
    }
    return {key: value for key, value in given.items() if value is not None}


def _overlap_settings_given(
    *, overlap: int | None, min_overlap: int | None, max_overlap: int | None, overlap_stop_rule: str | None,
    leaderboard_priority: bool | None,
) -> dict:
    """The queue settings given, as Project fields: `overlap` alone is a fixed overlap (no minimum);
    `min_overlap`/`max_overlap` are adaptive (either may be left to its stored value). Their values are
    checked together with the stored ones once applied (_overlap_settings_apply)."""
    if overlap is not None and (min_overlap is not None or max_overlap is not None):
        raise ReviewError("give either overlap (a fixed overlap) or min/max overlap (adaptive), not both")
    if leaderboard_priority is not None and not isinstance(leaderboard_priority, bool):
        raise ReviewError(f"leaderboard priority {leaderboard_priority!r} must be true or false")
    try:  # each on its own before anything is written; together once applied
        for name, value in (("overlap", overlap), ("max overlap", max_overlap), ("min overlap", min_overlap)):
            if value is not None:
                reviewers_count_check(name=name, value=value)
        if overlap_stop_rule is not None:
            stop_rule_check(overlap_stop_rule)
    except OverlapSettingsRejected as exc:
        raise ReviewError(str(exc)) from None
    given: dict = {}
    if overlap is not None:
        given.update(overlap=overlap, min_overlap=None)
    if max_overlap is not None:
        given["overlap"] = max_overlap
    if min_overlap is not None:
        given["min_overlap"] = min_overlap
    if overlap_stop_rule is not None:
        given["overlap_stop_rule"] = overlap_stop_rule
    if leaderboard_priority is not None:
        given["leaderboard_priority"] = leaderboard_priority
    return given


def _overlap_settings_apply(*, project: Project, created: bool, given: dict) -> None:
    """Check the project's queue settings as stored now (in the caller's transaction: a refusal undoes the
    change), then decide again what every pair already started needs under them, and bring the queue
    priorities in line with the leaderboard switch."""
    try:
        overlap_settings_check(overlap=project.overlap, min_overlap=project.min_overlap,
                               stop_rule=project.overlap_stop_rule)
    except OverlapSettingsRejected as exc:
        raise ReviewError(str(exc)) from None
    if not created:
        pairs_needed_recompute(project=project)
    if given.get("leaderboard_priority") is True:
        transaction.on_commit(lambda: _queue_priorities_soon(project_id=project.pk))
    elif given.get("leaderboard_priority") is False and not created:
        queue_priorities_refresh(project=project)  # every priority back to 0


QUALITY_SETTINGS = ("rationale_flag_chars", "qualification_items", "qualification_pass_mark",
                    "qualification_attempts", "gold_rate", "standing_min_judgments")


def project_settings_update(
    *, project: Project, overlap: int | None = None, min_overlap: int | None = None, max_overlap: int | None = None,
    overlap_stop_rule: str | None = None, leaderboard_priority: bool | None = None, **quality,
) -> Project:
    """Change a project's queue, onboarding, rationale and standing settings (as project_create_or_update
    takes them; `quality` holds any of QUALITY_SETTINGS); all or nothing."""
    quality_given = _quality_settings_checked(**{name: quality.get(name) for name in QUALITY_SETTINGS})
    overlap_given = _overlap_settings_given(overlap=overlap, min_overlap=min_overlap, max_overlap=max_overlap,
                                            overlap_stop_rule=overlap_stop_rule,
                                            leaderboard_priority=leaderboard_priority)
    if not overlap_given and not quality_given:
        raise ReviewError("give at least one of overlap, min_overlap, max_overlap, overlap_stop_rule, "
                          f"leaderboard_priority, {', '.join(QUALITY_SETTINGS)}")
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        for key, value in {**quality_given, **overlap_given}.items():
            setattr(project, key, value)
        project.save(update_fields=[*quality_given, *overlap_given])
        _qualification_fits_gold(project=project, given=quality_given)
        if overlap_given:
            _overlap_settings_apply(project=project, created=False, given=overlap_given)
    return project


def _qualification_fits_gold(*, project: Project, given: dict) -> None:
    """Refuse (in the caller's transaction, so nothing is kept) a qualification round that the project's gold
    pairs cannot fill; checked when the round's items or attempts change. A project's gold that runs short
    later (an import) is shown on the quality dashboard instead."""
    changed = {"qualification_items", "qualification_attempts"} & set(given)
    if changed and (short := qualification_gold_short(project)) is not None:
        raise ReviewError(short)


def project_queue_settings_applied(*, project: Project, changed: list[str]) -> None:
    """After the admin's form saved these queue settings (already checked by Project.clean), in its transaction."""
    _overlap_settings_apply(project=project, created=False, given={name: getattr(project, name) for name in changed})


def _queue_priorities_soon(*, project_id: int) -> None:
    """Queue the priorities' first refresh (in-process without a broker); the periodic task retries it."""
    from kombu.exceptions import OperationalError as BrokerUnavailable

    from annotate.review.tasks import refresh_queue_priorities

    try:
        refresh_queue_priorities.delay(project_id)
    except BrokerUnavailable as error:
        logger.warning("could not queue the queue priorities of project %s: %s", project_id, error)


def project_create_or_update(
    *,
    slug: str,
    name: str | None,
    instructions: str,
    criteria_items: list[dict],
    overlap: int | None = None,
    min_overlap: int | None = None,
    max_overlap: int | None = None,
    overlap_stop_rule: str | None = None,
    leaderboard_priority: bool | None = None,
    retest_rate: float | None = None,
    max_pairs_per_prompt: int | None = None,
    min_rationale_chars: int | None = None,
    rationale_flag_chars: int | None = None,
    qualification_items: int | None = None,
    qualification_pass_mark: float | None = None,
    qualification_attempts: int | None = None,
    gold_rate: float | None = None,
    standing_min_judgments: int | None = None,
) -> tuple[Project, CriteriaVersion, bool]:
    """Create a project (or update the settings given) and load its criteria; returns (project, criteria, created)."""
    quality_settings = _quality_settings_checked(
        rationale_flag_chars=rationale_flag_chars, qualification_items=qualification_items,
        qualification_pass_mark=qualification_pass_mark, qualification_attempts=qualification_attempts,
        gold_rate=gold_rate, standing_min_judgments=standing_min_judgments,
    )
    overlap_settings = _overlap_settings_given(
        overlap=overlap, min_overlap=min_overlap, max_overlap=max_overlap, overlap_stop_rule=overlap_stop_rule,
        leaderboard_priority=leaderboard_priority,
    )
    if retest_rate is not None:
        share_number("retest rate", retest_rate, error=ReviewError, hint="the share of judged pairs shown again")
    settings = {
        "overlap": overlap, "retest_rate": retest_rate, "max_pairs_per_prompt": max_pairs_per_prompt,
        "min_rationale_chars": min_rationale_chars, **quality_settings,
    }
    settings = {key: value for key, value in settings.items() if value is not None}
    settings.update(overlap_settings)  # min_overlap None is a setting: a fixed overlap
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
        _qualification_fits_gold(project=project, given=quality_settings)
        if overlap_settings:
            _overlap_settings_apply(project=project, created=created, given=overlap_settings)
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
                status=Assignment.Status.ACTIVE, criteria_version=_criteria_in_force(project), served_at=now,
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
    now = now or timezone.now()
    _sweep_now_and_then(now)
    for attempt in range(DEADLOCK_RETRIES + 1):
        try:
            with transaction.atomic():
                taken = _assignment_next_locked(project=project, reviewer=reviewer, now=now)
        except OperationalError as exc:
            if attempt == DEADLOCK_RETRIES or getattr(exc.__cause__, "sqlstate", None) != DEADLOCK_DETECTED:
                raise
        else:
            if isinstance(taken, ReviewError):
                raise taken  # after the commit: what led to the refusal (an attempt scored) is kept
            return taken
    return None  # not reached: the last attempt returns or raises


def _assignment_next_locked(*, project: Project, reviewer: AbstractBaseUser,
                            now: datetime) -> Assignment | ReviewError | None:
    """assignment_next's work, in its transaction; a refusal of the qualification round is returned, not
    raised, so that the transaction keeps what the round wrote before it (raising would undo it)."""
    queue_sql.lock_reviewer(reviewer_id=reviewer.pk)
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
        return _serve(scheduled[0], project=project, now=now)
    take = _take_pair_postgres if connection.vendor == "postgresql" else _take_pair_sqlite
    taken = take(project=project, reviewer=reviewer, now=now)
    if taken is not None:
        return taken
    if scheduled:
        return _serve(scheduled[0], project=project, now=now)
    return None


# --- adaptive overlap and leaderboard priorities -----------------------------------------------------

RECOMPUTE_BATCH = 2000  # pairs decided again per statement after a settings change


def votes_of_pairs(pair_ids: list[int]) -> dict[int, list[int]]:
    """Each pair's votes as the export counts them (current judgments of first-time, live assignments): a, b, tie,
    both_bad."""
    votes = {pair_id: [0] * len(WINNERS) for pair_id in pair_ids}
    rows = (
        Assignment.objects.filter(live_assignment(), pair_id__in=pair_ids, is_retest=False,
                                  current_judgment__isnull=False)
        .values_list("pair_id", "current_judgment__winner")
        .annotate(n=Count("id"))
        .order_by()
    )
    for pair_id, winner, n in rows:
        votes[pair_id][WINNERS.index(winner)] += n
    return votes


def pairs_needed_recompute(*, project: Project) -> int:
    """Decide again what every started pair of the project needs, under its overlap settings now; returns
    how many pairs changed.

    Run when the settings change, in that transaction. Each batch of pairs is locked before its votes are
    read (PostgreSQL), so a judgment landing meanwhile is either counted here or decides its pair after.
    Untouched pairs keep 0 (the project's overlap, or what a pair without votes needs once taken).
    """
    if not project.overlap_is_adaptive:
        return Pair.objects.filter(project=project).exclude(reviewers_needed=0).update(reviewers_needed=0)
    changed, last_id = 0, 0
    while True:
        batch = list(
            Pair.objects.select_for_update(no_key=True)
            .filter(Q(assigned_count__gt=0) | ~Q(reviewers_needed=0), project=project, id__gt=last_id)
            .order_by("id")
            .values_list("id", "reviewers_needed")[:RECOMPUTE_BATCH]
        )
        if not batch:
            return changed
        last_id = batch[-1][0]
        votes = votes_of_pairs([pair_id for pair_id, _ in batch])
        needed = reviewers_needed([votes[pair_id] for pair_id, _ in batch], min_overlap=project.min_overlap,
                                  max_overlap=project.overlap, stop_rule=project.overlap_stop_rule)
        updates = [Pair(id=pair_id, reviewers_needed=int(new)) for (pair_id, old), new in zip(batch, needed, strict=True)
                   if new != old]
        Pair.objects.bulk_update(updates, ["reviewers_needed"])
        changed += len(updates)


PRIORITY_BOOTSTRAP = 200  # resamples behind the intervals the priorities read: a ranking, not a report
PRIORITY_WRITE_BATCH = 500  # pairs per short transaction: the queue skips rows locked by a write


def queue_priorities_refresh(*, project: Project, force: bool = False) -> int:
    """Leaderboard projects: write each open pair's queue priority from the models' ratings now; returns
    how many pairs changed. Off the request path (a periodic Celery task, annotate/review/tasks.py).

    Skipped when no judgment was made since the last refresh (unless `force`). A project without the
    leaderboard switch has every priority 0. Writes go in short transactions of PRIORITY_WRITE_BATCH
    pairs, since the queue skips pair rows that are locked.
    """
    from annotate.quality.ratings import bradley_terry_ratings
    from annotate.quality.selectors import judgment_table_for_project

    open_pairs = Pair.objects.filter(project=project).exclude(open_fill=PAIR_CLOSED)
    if not project.leaderboard_priority:
        return _priorities_write(open_pairs.exclude(queue_priority=0).values_list("id", flat=True), None)
    newest = Judgment.objects.filter(pair__project_id=project.pk).order_by("-pk").values_list("pk", flat=True).first() or 0
    if newest == project.priorities_watermark and not force:
        return 0
    table = judgment_table_for_project(project=project)
    ratings = bradley_terry_ratings(table=table, n_resamples=PRIORITY_BOOTSTRAP, rng=np.random.default_rng(0))
    rated = [table.model_names[i] for i in ratings.model]
    uncertainty = difference_uncertainty(ci_low=ratings.ci_low, ci_high=ratings.ci_high,
                                         comparisons=ratings.comparisons)
    rows = list(open_pairs.order_by("-id").values_list(  # the queue's order among equals: newest first
        "id", "queue_priority", "response_a__model", "response_a__model_version", "response_b__model",
        "response_b__model_version",
    ))
    wanted = pair_priorities(model_a=[f"{row[2]}@{row[3]}" for row in rows],
                             model_b=[f"{row[4]}@{row[5]}" for row in rows], rated=rated, uncertainty=uncertainty,
                             comparisons=ratings.comparisons)
    changed = _priorities_write([row[0] for row, new in zip(rows, wanted, strict=True) if new != row[1]],
                                {row[0]: int(new) for row, new in zip(rows, wanted, strict=True)})
    Project.objects.filter(pk=project.pk).update(priorities_watermark=newest)
    return changed


def _priorities_write(pair_ids, priority_of: dict[int, int] | None) -> int:
    """Set the pairs' queue priorities (None: all 0), a short transaction per batch."""
    pair_ids = list(pair_ids)
    for start in range(0, len(pair_ids), PRIORITY_WRITE_BATCH):
        with transaction.atomic():
            Pair.objects.bulk_update(
                [Pair(id=pair_id, queue_priority=priority_of[pair_id] if priority_of else 0)
                 for pair_id in pair_ids[start:start + PRIORITY_WRITE_BATCH]],
                ["queue_priority"],
            )
    return len(pair_ids)


# --- onboarding on gold ----------------------------------------------------------------------------
#
# A gold pair is a pair that holds its prompt's gold response: its better answer is known. A project with
# `qualification_items` makes each reviewer answer that many gold pairs, with feedback, before any live
# item; a project with `gold_rate` mixes gold pairs into live work, unannounced. Both come to the reviewer
# through assignment_next, as first-time assignments of pairs they have not had, and each is recorded as
# a GoldCheck. A gold check counts in its pair's assigned_count like any assignment, but may take a pair
# past the project's overlap: every reviewer must be checked, however many others judged the pair.

_RATE_SCALE = 1_000_000


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
        status=Assignment.Status.ACTIVE, criteria_version=_criteria_in_force(project), served_at=now,
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


def _gold_check_answered(*, assignment: Assignment, judgment: Judgment, expected: str, attempt_id: int | None,
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


def _gold_feedback_again(*, judgment: Judgment) -> dict | None:
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


# --- rationale checks ------------------------------------------------------------------------------


def rationale_text_key(rationale: str) -> str:
    """The reuse key of a rationale; empty for one without a word in it, which is never a reuse."""
    return text_key(rationale) if normalised(rationale) else ""


# The checks on PostgreSQL, in one round trip: the project's too_short bar, whether the reviewer wrote this
# text on another pair (and whether that earlier row is flagged yet), the assignment's gold check, the
# check row itself, and the rationales other reviewers wrote on the pair (compared in Python afterwards).
_RATIONALE_CHECK_SQL = """
    WITH ctx AS (
        SELECT p.rationale_flag_chars AS flag_chars,
               (SELECT c.reused FROM review_rationalecheck c
                WHERE c.project_id = %(project)s AND c.reviewer_id = %(reviewer)s AND c.text_key = %(key)s
                  AND c.pair_id <> %(pair)s AND c.text_key <> '' ORDER BY c.reused LIMIT 1) AS earlier,
               g.expected, g.attempt_id
        FROM review_project p LEFT JOIN review_goldcheck g ON g.assignment_id = %(assignment)s
        WHERE p.id = %(project)s
    ), flags AS (
        SELECT ctx.*, (ctx.flag_chars > 0 AND %(chars)s < ctx.flag_chars) AS too_short,
               (ctx.earlier IS NOT NULL) AS reused
        FROM ctx
    ), checked AS (
        INSERT INTO review_rationalecheck (judgment_id, project_id, reviewer_id, pair_id, text_key, chars,
                                           typing_seconds, typed_chars, pasted_chars, paste_events,
                                           too_short, reused, near_duplicate, pasted, flagged)
        SELECT %(judgment)s, %(project)s, %(reviewer)s, %(pair)s, %(key)s, %(chars)s, %(seconds)s, %(typed)s,
               %(pasted_chars)s, %(pastes)s, f.too_short, f.reused, false, %(pasted)s,
               f.too_short OR f.reused OR %(pasted)s
        FROM flags f
    )
    SELECT f.earlier, f.expected, f.attempt_id,
           ARRAY(SELECT j.rationale FROM review_assignment a JOIN review_judgment j ON j.id = a.current_judgment_id
                 WHERE a.pair_id = %(pair)s AND a.reviewer_id <> %(reviewer)s)
    FROM flags f
"""


def _rationale_checked(*, judgment: Judgment, assignment: Assignment, typing: TypingSignals | None) -> tuple:
    """Check the judgment's rationale and store what was found (RationaleCheck), in the judgment's transaction;
    returns the assignment's gold check as (expected answer, attempt id), (None, None) when it is not one.

    The reuse check is an index lookup (rationale_reuse); the near-duplicate check reads the pair's few
    other current judgments. The first reuse of a text flags the reviewer's earlier judgments with it too.
    """
    rationale = judgment.rationale
    key = rationale_text_key(rationale)
    pasted = looks_pasted(chars=len(rationale), typing=typing)
    values = {
        "judgment": judgment.pk, "project": assignment.project_id, "reviewer": judgment.reviewer_id,
        "pair": assignment.pair_id, "assignment": assignment.pk, "key": key, "chars": len(rationale),
        "seconds": typing.typing_seconds if typing else None, "typed": typing.typed_chars if typing else None,
        "pasted_chars": typing.pasted_chars if typing else None, "pastes": typing.paste_events if typing else None,
        "pasted": pasted,
    }
    if connection.vendor == "postgresql":
        ((earlier, expected, attempt_id, others),) = queue_sql._fetch(_RATIONALE_CHECK_SQL, values)
    else:
        ((flag_chars, earlier, expected, attempt_id),) = queue_sql._fetch(
            "SELECT p.rationale_flag_chars, "
            "(SELECT c.reused FROM review_rationalecheck c WHERE c.project_id = %(project)s "
            " AND c.reviewer_id = %(reviewer)s AND c.text_key = %(key)s AND c.pair_id <> %(pair)s "
            " AND c.text_key <> '' ORDER BY c.reused LIMIT 1), g.expected, g.attempt_id "
            "FROM review_project p LEFT JOIN review_goldcheck g ON g.assignment_id = %(assignment)s "
            "WHERE p.id = %(project)s", values)
        others = [row[0] for row in queue_sql._fetch(
            "SELECT j.rationale FROM review_assignment a JOIN review_judgment j ON j.id = a.current_judgment_id "
            "WHERE a.pair_id = %(pair)s AND a.reviewer_id <> %(reviewer)s", values)]
        too_short = flag_chars > 0 and len(rationale) < flag_chars
        RationaleCheck.objects.create(
            judgment=judgment, project_id=assignment.project_id, reviewer_id=judgment.reviewer_id,
            pair_id=assignment.pair_id, text_key=key, chars=len(rationale), typing_seconds=values["seconds"],
            typed_chars=values["typed"], pasted_chars=values["pasted_chars"], paste_events=values["pastes"],
            too_short=too_short, reused=earlier is not None, pasted=pasted,
            flagged=too_short or earlier is not None or pasted,
        )
    # Plain prepared statements rather than ORM updates: the first is on the judging path whenever a
    # rationale copies another, and the ORM's Python would cost more than the statement.
    if rationale and is_near_duplicate(rationale, others or ()):
        queue_sql._fetch("UPDATE review_rationalecheck SET near_duplicate = %(yes)s, flagged = %(yes)s "
                         "WHERE judgment_id = %(judgment)s", {"yes": True, "judgment": judgment.pk}, rows=False)
    if earlier is False:  # an unflagged earlier judgment with this text: it is a reuse now too
        queue_sql._fetch(
            "UPDATE review_rationalecheck SET reused = %(yes)s, flagged = %(yes)s WHERE project_id = %(project)s "
            "AND reviewer_id = %(reviewer)s AND text_key = %(key)s AND reused = %(no)s AND pair_id <> %(pair)s",
            {**values, "yes": True, "no": False}, rows=False)
    return expected, attempt_id


# --- judgments -------------------------------------------------------------------------------------


def choice_and_strength_check(choice, strength, *, who: str) -> None:
    """A click (left, right, tie, both_bad) and its strength, as a reviewer or an adjudicator sends them;
    ReviewError names the field to fix. `who` finishes "say how strongly ... it"."""
    if choice not in CLICKS:
        raise ReviewError(f"choice: {choice!r} is not one of {', '.join(CLICKS)}")
    if strength is not None and (isinstance(strength, bool) or not isinstance(strength, int) or not 1 <= strength <= 3):
        raise ReviewError(f"strength: {strength!r} must be 1, 2 or 3")
    if strength is None and choice in DECISIVE_CLICKS:
        raise ReviewError(f"strength: say how strongly {who} it: 1, 2 or 3")


def _checked_judgment(
    *, criteria_keys: list[str], min_rationale_chars: int, choice, strength, criteria, rationale
) -> tuple[str, int | None, dict, str]:
    """The judgment's fields after checking them, or ReviewError naming the first field to fix."""
    choice_and_strength_check(choice, strength, who="you prefer")
    if not isinstance(criteria, dict) or len(criteria) > MAX_CRITERIA:
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
    text_within("rationale", rationale, MAX_RATIONALE_CHARS)
    if choice not in DECISIVE_CLICKS:
        strength = None
    return choice, strength, criteria, rationale.strip()


def seconds_between(served_at: datetime | None, judged_at: datetime) -> float | None:
    """The time a reviewer spent, or None when unknown: never served, or a clock that went backwards between the
    server that served the pair and the one that took the judgment (a negative time is no time at all)."""
    if served_at is None:
        return None
    seconds = (judged_at - served_at).total_seconds()
    return seconds if seconds >= 0 else None


def judgment_submit(
    *,
    assignment_id: int,
    reviewer: AbstractBaseUser,
    choice: str,
    strength: int | None,
    criteria: dict,
    rationale: str,
    client_key: uuid.UUID,
    typing: TypingSignals | None = None,
    now: datetime | None = None,
) -> tuple[Judgment, bool]:
    """Record the reviewer's judgment of their assignment; returns (judgment, replayed).

    The same client_key again returns the judgment it first made (replayed=True) instead of a second
    one. Locks the assignment row, so two submissions for one assignment are taken one at a time.
    `typing` is what the reviewer page saw of the rationale being written (rationale checks).
    The judgment comes back with `feedback`: for an item of the qualification round, the gold answer as
    the reviewer saw it, the reason and where their attempt stands; None otherwise.
    """
    now = now or timezone.now()
    try:
        judgment, replayed = _judgment_submit_locked(
            assignment_id=assignment_id, reviewer=reviewer, choice=choice, strength=strength, criteria=criteria,
            rationale=rationale, client_key=client_key, typing=typing, now=now,
        )
    except IntegrityError:
        # The same client_key committed by another request between our check and our insert.
        earlier = Judgment.objects.filter(client_key=client_key).select_related("assignment").first()
        if earlier is not None and earlier.assignment_id == assignment_id and earlier.reviewer_id == reviewer.pk:
            _resend_check(earlier, a_on_left=earlier.assignment.a_on_left, choice=choice, strength=strength,
                          criteria=criteria, rationale=rationale)
            earlier.feedback = _gold_feedback_again(judgment=earlier)
            return earlier, True
        raise ReviewError("client_key was already used for another judgment; send a new one", status=409) from None
    if replayed:
        judgment.feedback = _gold_feedback_again(judgment=judgment)
    return judgment, replayed


def _resend_check(earlier: Judgment, *, a_on_left: bool, choice, strength, criteria, rationale) -> None:
    """A judgment sent again with its client_key must be the one stored under it (ReviewError 409 if not).

    Compared as stored: un-swapped, the rationale without its outer spaces, no strength for a tie or both
    bad. The typing counts are the page's account of the writing, not the answer, and are not compared.
    """
    def stored_as(click):
        return unswap(click, a_on_left=a_on_left) if isinstance(click, str) else click

    sent_criteria = ({key: stored_as(value) for key, value in criteria.items()}
                     if isinstance(criteria, dict) else criteria)
    differs = [name for name, sent, stored in [
        ("choice", stored_as(choice), earlier.winner),
        ("strength", strength if choice in DECISIVE_CLICKS else None, earlier.strength),
        ("criteria", sent_criteria, earlier.criteria),
        ("rationale", rationale.strip() if isinstance(rationale, str) else rationale, earlier.rationale),
    ] if sent != stored]
    if differs:
        raise ReviewError(
            f"client_key: already used for a different judgment of assignment {earlier.assignment_id} (it differs in "
            f"{', '.join(differs)}); what you sent now was not stored. To change the saved one, undo your last "
            "judgment and judge the pair again with a new client_key", status=409,
        )


def _judgment_submit_locked(
    *, assignment_id, reviewer, choice, strength, criteria, rationale, client_key, typing, now
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
            _resend_check(earlier, a_on_left=assignment.a_on_left, choice=choice, strength=strength,
                          criteria=criteria, rationale=rationale)
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
            seconds_spent=seconds_between(assignment.served_at, now),
            client_key_db=client_key_db, now=now,
        )
        gold_expected, gold_attempt_id = _rationale_checked(judgment=judgment, assignment=assignment, typing=typing)
        judgment.feedback = None
        if gold_expected:
            judgment.feedback = _gold_check_answered(assignment=assignment, judgment=judgment,
                                                     expected=gold_expected, attempt_id=gold_attempt_id, now=now)
        # Keep each reviewer's retests at the project's share of the pairs they judged. A qualification item
        # never comes back: its answer was shown.
        if (last_revision == 0 and not assignment.is_retest and rules["retest_rate"] > 0 and gold_attempt_id is None
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
        if GoldCheck.objects.filter(assignment_id=assignment.pk, attempt__isnull=False).exists():
            raise ReviewError("your last judgment is a qualification answer, and a qualification answer cannot be "
                              "undone: its expected answer was shown to you", status=409)
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
        if not assignment.is_retest:  # a withdrawn vote can reopen a pair that adaptive overlap had closed
            queue_sql.pair_needed_refresh(pair_id=assignment.pair_id)
    return assignment


# --- users -----------------------------------------------------------------------------------------


def user_add(*, username: str, role: str, password: str | None = None,
             replace_password: bool = True) -> tuple[AbstractBaseUser, str | None, bool]:
    """Create or update a user with one role; returns (user, the password set or None, created).

    A new user gets `password`, or a random one. An existing user's password is replaced only with
    `replace_password` (then by `password` or a random one); otherwise only their role changes.
    """
    if role not in ROLES:
        raise ReviewError(f"role {role!r} is not one of {', '.join(ROLES)}")
    user_model = get_user_model()
    username_field = user_model._meta.get_field(user_model.USERNAME_FIELD)
    try:
        username_field.clean(username, None)  # Django's username validator and length
    except ValidationError as exc:
        raise ReviewError(f"username {username[:160]!r}: {' '.join(exc.messages)}") from None
    with transaction.atomic():
        user, created = user_model.objects.get_or_create(username=username)
        if created or replace_password:
            password = password or secrets.token_urlsafe(12)
            user.set_password(password)
        else:
            password = None
        user.is_staff = role == "admin"
        user.save()
        groups = {name: Group.objects.get_or_create(name=name)[0] for name in ROLES}
        user.groups.remove(*[groups[name] for name in ROLES if name != role])
        user.groups.add(groups[role])
    cache.delete(roles_cache_key(user.pk))
    return user, password, created
