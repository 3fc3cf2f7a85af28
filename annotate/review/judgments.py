"""Judgments: take a reviewer's judgment of their assignment (once per client_key), or withdraw their last one.

A judgment is stored un-swapped (annotate/review/choices.py) with the criteria version it was served under,
and its rationale checked as it is stored (rationale.py). Raises ReviewError (with an HTTP-like status) for a
user's mistake.
"""

import uuid
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from annotate.errors import UserMistake
from annotate.limits import MAX_CRITERIA, MAX_RATIONALE_CHARS, text_within
from annotate.review import queue_sql
from annotate.review.assignments import assignment_serve
from annotate.review.choices import CLICKS, CRITERION_CLICKS, DECISIVE_CLICKS, unswap
from annotate.review.errors import ReviewError
from annotate.review.models import Assignment, GoldCheck, Judgment, Project, ReviewerTally
from annotate.review.qualification import gold_check_answered, gold_feedback_again
from annotate.review.rationale import TypingSignals, rationale_checked

_client_key_field = Judgment._meta.get_field("client_key")


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
            earlier.feedback = gold_feedback_again(judgment=earlier)
            return earlier, True
        raise ReviewError("client_key was already used for another judgment; send a new one", status=409) from None
    if replayed:
        judgment.feedback = gold_feedback_again(judgment=judgment)
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

        def checked():
            return _checked_judgment(
                criteria_keys=rules["criteria_keys"], min_rationale_chars=rules["min_rationale_chars"], choice=choice,
                strength=strength, criteria=criteria, rationale=rationale,
            )

        def insert(fields, revision: int | None):
            choice, strength, criteria, rationale = fields
            return queue_sql.judgment_insert(
                assignment=assignment, reviewer_id=reviewer.pk, revision=revision,
                winner=unswap(choice, a_on_left=assignment.a_on_left), strength=strength,
                criteria={key: unswap(value, a_on_left=assignment.a_on_left) for key, value in criteria.items()},
                rationale=rationale,
                seconds_spent=seconds_between(assignment.served_at, now),
                client_key_db=client_key_db, now=now,
            )

        inserted = None
        if (connection.vendor == "postgresql" and assignment.status == Assignment.Status.ACTIVE
                and assignment.expires_at > now):
            # The usual judgment, one statement fewer: the insert itself numbers the revision and checks that
            # the client key is new (judgment_state's read, also after the lock). Anything else (a key used
            # before, a judgment to refuse) goes the way below, which answers it as it always has, in its order.
            try:
                fields = checked()
            except UserMistake:
                fields = None
            if fields is not None:
                inserted = insert(fields, None)
        if inserted is None:
            # Read after the lock, so a submission that waited on it sees what the one before it stored.
            earlier_id, last_revision = queue_sql.judgment_state(client_key_db=client_key_db,
                                                                 assignment_id=assignment.pk)
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
            inserted = insert(checked(), last_revision + 1)
        judgment, tally = inserted
        last_revision = judgment.revision - 1
        gold_expected, gold_attempt_id = rationale_checked(judgment=judgment, assignment=assignment, typing=typing)
        judgment.feedback = None
        if gold_expected:
            judgment.feedback = gold_check_answered(assignment=assignment, judgment=judgment,
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
        assignment = assignment_serve(assignment, project=project, now=now)
        assignment.save(update_fields=["current_judgment", "completed_at"])
        if not assignment.is_retest:  # a withdrawn vote can reopen a pair that adaptive overlap had closed
            queue_sql.pair_vote_withdraw(pair_id=assignment.pair_id, winner=last.winner)
            queue_sql.pair_needed_refresh(pair_id=assignment.pair_id, locked=True)
    return assignment
