"""Adjudication: split pairs go to an adjudicator, who sees every reviewer's judgment and rules.

The queue is computed, not stored: a pair is waiting when its counted votes (the current judgment of each
original assignment, as the export counts them) have no strict majority (annotate/review/consensus.py:
strict_majority, the one consensus rule), it has at least `min_judgments` of them, nobody is judging it
right now, and it has no ruling yet. A filter can widen it to contested majorities (`max_share`) or narrow
it to a tag. An adjudicator (the Django group "adjudicator", or an admin) is never given a pair they judged.

An adjudicator sees the pair in an order of their own (AdjudicationAssignment.a_on_left, at random) and
every reviewer's click mapped to that same left/right (annotate/review/choices.py: the stored, un-swapped
winner swapped back for the adjudicator's order), with strength, per-criterion choices and rationale, and
beside it the click as its reviewer made it and whether they saw the same order (a rationale's "left" is
the reviewer's left). The criteria shown are the version in force, as a reviewer is served them now.
Reviewers are shown as "Reviewer 1", "Reviewer 2"... in the order they judged: a ruling is about the
answers, not about who wrote which judgment. Model names never appear.

Rulings (Adjudication) are append-only like judgments: ruling on a pair again is a new revision and the
latest counts. Exports may use them (annotate/exports: the `adjudications` filter).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from annotate.limits import MAX_RATIONALE_CHARS, share_number, text_within, whole_number
from annotate.review.choices import CLICKS, CRITERION_CLICKS, DECISIVE_CLICKS, WINNERS, swap_back, unswap
from annotate.review.consensus import NO_CONSENSUS, strict_majority
from annotate.review.errors import ReviewError
from annotate.review.judgments import choice_and_strength_check
from annotate.review.models import (
    Adjudication,
    AdjudicationAssignment,
    Assignment,
    Pair,
    Project,
    RationaleCheck,
    live_assignment,
    live_assignment_sql,
)
from annotate.review.overlap import votes_of_pairs
from annotate.review.rationale import FLAGS
from annotate.review.rendering import markdown_to_safe_html

HOLD_MINUTES = 30  # an adjudication not ruled on within this returns to the queue
BATCH_PAIRS = 2000  # pairs whose votes are read and decided at a time while the queue is walked
WAITING_COUNT_CAP = 50  # "50+ waiting" says as much as an exact count


@dataclass(frozen=True)
class QueueFilter:
    """Which pairs wait for adjudication.

    min_judgments  a pair needs at least this many counted votes (default: the project's overlap, at least 2)
    max_share      None: only split pairs (no strict majority); a share (0-1): also pairs whose majority
                   holds at most this share of the votes (0.67 takes 2-of-3 majorities)
    tag            only prompts with this tag
    """

    min_judgments: int
    max_share: float | None = None
    tag: str | None = None

    def as_dict(self) -> dict:
        return {"min_judgments": self.min_judgments, "max_share": self.max_share, "tag": self.tag}


def queue_filter_parse(params: Mapping[str, str], *, project: Project) -> QueueFilter:
    """The queue filter from query parameters; ReviewError names the first one to fix."""
    unknown = sorted(set(params) - {"min_judgments", "max_share", "tag", "pair"})
    if unknown:
        raise ReviewError(f"{unknown[0]}: unknown parameter; use min_judgments, max_share, tag or pair")
    min_judgments = max(2, project.overlap)
    raw = params.get("min_judgments")
    if raw not in (None, ""):
        min_judgments = whole_number("min_judgments", raw, low=2, high=1000, error=ReviewError,
                                     hint="a pair with one vote is never split")
    max_share = None
    raw = params.get("max_share")
    if raw not in (None, ""):
        max_share = share_number("max_share", raw, error=ReviewError,
                                 hint="the largest majority share that still goes to adjudication")
    tag = params.get("tag") or None
    return QueueFilter(min_judgments=min_judgments, max_share=max_share, tag=tag)


def _votes_by_pair(*, project: Project, min_judgments: int, after_pair: int, limit: int) -> list[tuple]:
    """(pair id, votes a, b, tie, both_bad) of pairs with enough counted votes, in pair order, after a pair id."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT a.pair_id,
                   SUM(CASE WHEN j.winner = 'a' THEN 1 ELSE 0 END),
                   SUM(CASE WHEN j.winner = 'b' THEN 1 ELSE 0 END),
                   SUM(CASE WHEN j.winner = 'tie' THEN 1 ELSE 0 END),
                   SUM(CASE WHEN j.winner = 'both_bad' THEN 1 ELSE 0 END)
            FROM review_assignment a JOIN review_judgment j ON j.id = a.current_judgment_id
            WHERE a.project_id = %s AND a.is_retest = %s AND a.pair_id > %s AND """ + live_assignment_sql("a") + """
            GROUP BY a.pair_id
            HAVING COUNT(*) >= %s
            ORDER BY a.pair_id
            LIMIT %s
            """,
            [project.pk, False, after_pair, min_judgments, limit],
        )
        return cursor.fetchall()


def _contested(rows: list[tuple], max_share: float | None) -> list[int]:
    """The pairs of `rows` that the filter sends to adjudication, by the one consensus rule."""
    if not rows:
        return []
    votes = np.array([row[1:] for row in rows], dtype=np.int64)
    winner, share = strict_majority(votes)
    wanted = winner == NO_CONSENSUS
    if max_share is not None:
        wanted |= share <= max_share + 1e-9
    return [row[0] for row, keep in zip(rows, wanted.tolist(), strict=True) if keep]


def _excluded(*, project: Project, adjudicator: AbstractBaseUser, pair_ids: list[int], now: datetime) -> set[int]:
    """Of these pairs, the ones not to hand out: ruled already, being judged or adjudicated now, judged by
    the adjudicator, or (with a tag filter) of another tag."""
    if not pair_ids:
        return set()
    ruled = set(Adjudication.objects.filter(pair_id__in=pair_ids).values_list("pair_id", flat=True))
    judging = set(Assignment.objects.filter(
        pair_id__in=pair_ids, status=Assignment.Status.ACTIVE, expires_at__gt=now, is_retest=False,
    ).values_list("pair_id", flat=True))
    held = set(AdjudicationAssignment.objects.filter(
        pair_id__in=pair_ids, status=AdjudicationAssignment.Status.ACTIVE, expires_at__gt=now,
    ).values_list("pair_id", flat=True))
    own = set(Assignment.objects.filter(pair_id__in=pair_ids, reviewer=adjudicator).values_list("pair_id", flat=True))
    return ruled | judging | held | own


def _waiting(*, project: Project, adjudicator: AbstractBaseUser, queue: QueueFilter, now: datetime) -> Iterator[int]:
    """Pairs waiting for this adjudicator, oldest pair first."""
    after = 0
    while rows := _votes_by_pair(project=project, min_judgments=queue.min_judgments, after_pair=after,
                                 limit=BATCH_PAIRS):
        after = rows[-1][0]
        contested = _contested(rows, queue.max_share)
        if queue.tag is not None and contested:
            tagged = Pair.objects.filter(pk__in=contested).values_list("pk", "prompt__tags")
            contested = [pk for pk, tags in tagged if queue.tag in (tags or [])]
            contested.sort()
        skip = _excluded(project=project, adjudicator=adjudicator, pair_ids=contested, now=now)
        yield from (pair_id for pair_id in contested if pair_id not in skip)


def waiting_count(*, project: Project, adjudicator: AbstractBaseUser, queue: QueueFilter,
                  now: datetime | None = None, cap: int = WAITING_COUNT_CAP) -> dict:
    """How many pairs wait for this adjudicator (counting stops at `cap`)."""
    now = now or timezone.now()
    count = 0
    for _ in _waiting(project=project, adjudicator=adjudicator, queue=queue, now=now):
        count += 1
        if count >= cap:
            break
    return {"waiting": count, "waiting_is_at_least": count >= cap}


def _expire_stale(*, project: Project, now: datetime) -> None:
    AdjudicationAssignment.objects.filter(
        project=project, status=AdjudicationAssignment.Status.ACTIVE, expires_at__lte=now,
    ).update(status=AdjudicationAssignment.Status.EXPIRED)


def _take(*, project: Project, adjudicator: AbstractBaseUser, pair_id: int, now: datetime) -> AdjudicationAssignment | None:
    """Hold the pair for the adjudicator; None when another adjudicator took it first."""
    try:
        with transaction.atomic():
            return AdjudicationAssignment.objects.create(
                project=project, pair_id=pair_id, adjudicator=adjudicator, a_on_left=secrets.randbelow(2) == 1,
                served_at=now, expires_at=now + timedelta(minutes=HOLD_MINUTES),
            )
    except IntegrityError:  # adjudication_one_open: someone holds it
        return None


def adjudication_next(*, project: Project, adjudicator: AbstractBaseUser, queue: QueueFilter,
                      pair_id: int | None = None, now: datetime | None = None) -> AdjudicationAssignment | None:
    """The adjudicator's next pair: the one they hold, else the oldest waiting pair; None when none waits.

    With `pair_id`, that pair whatever its votes (to rule on it again, say), unless someone holds it.
    """
    now = now or timezone.now()
    _expire_stale(project=project, now=now)
    holding = AdjudicationAssignment.objects.filter(
        project=project, adjudicator=adjudicator, status=AdjudicationAssignment.Status.ACTIVE, expires_at__gt=now,
    )
    if pair_id is not None:
        mine = holding.filter(pair_id=pair_id).first()
        if mine is not None:
            return mine
        if not Pair.objects.filter(pk=pair_id, project=project).exists():
            raise ReviewError(f"pair: {pair_id} is not a pair of project {project.slug!r}", status=404)
        if Assignment.objects.filter(pair_id=pair_id, reviewer=adjudicator).exists():
            raise ReviewError(f"pair: you judged pair {pair_id} yourself; another adjudicator must rule on it",
                              status=409)
        taken = _take(project=project, adjudicator=adjudicator, pair_id=pair_id, now=now)
        if taken is None:
            raise ReviewError(f"pair: another adjudicator is ruling on pair {pair_id} right now", status=409)
        return taken
    mine = holding.order_by("id").first()
    if mine is not None:
        return mine
    for candidate in _waiting(project=project, adjudicator=adjudicator, queue=queue, now=now):
        taken = _take(project=project, adjudicator=adjudicator, pair_id=candidate, now=now)
        if taken is not None:
            return taken
    return None


def _as_seen(winner: str, criteria: dict, *, a_on_left: bool) -> tuple[str, dict]:
    return (swap_back(winner, a_on_left=a_on_left),
            {key: swap_back(value, a_on_left=a_on_left) for key, value in (criteria or {}).items()})


def _as_they_saw(winner: str, criteria: dict, *, their_a_on_left: bool, a_on_left: bool) -> dict:
    """A judgment's clicks in its author's own order, and whether that order is the adjudicator's: a
    rationale's "left" and "right" are the author's. Says nothing about which answer is a."""
    choice, chosen = _as_seen(winner, criteria, a_on_left=their_a_on_left)
    return {"same_order": their_a_on_left == a_on_left, "choice": choice, "criteria": chosen}


def adjudication_payload(*, assignment: AdjudicationAssignment, queue: QueueFilter | None = None) -> dict:
    """What the adjudicator sees: the pair in their order, every reviewer's judgment in that same order,
    earlier rulings of the pair, and how many pairs wait. No model name, no reviewer name."""
    pair = Pair.objects.select_related("prompt", "response_a", "response_b").get(pk=assignment.pair_id)
    a_on_left = assignment.a_on_left
    left, right = (pair.response_a, pair.response_b) if a_on_left else (pair.response_b, pair.response_a)
    criteria = pair.project.criteria_versions.order_by("-version").first()
    counted = list(
        Assignment.objects.filter(live_assignment(), pair=pair, is_retest=False, current_judgment__isnull=False)
        .select_related("current_judgment", "current_judgment__criteria_version")
        .order_by("current_judgment__created_at", "current_judgment_id")
    )
    checks = {check.judgment_id: check for check in RationaleCheck.objects.filter(
        judgment_id__in=[a.current_judgment_id for a in counted])}
    judgments = []
    votes = dict.fromkeys(CLICKS, 0)
    for number, reviewed in enumerate(counted, start=1):
        judgment = reviewed.current_judgment
        choice, chosen = _as_seen(judgment.winner, judgment.criteria, a_on_left=a_on_left)
        votes[choice] += 1
        check = checks.get(judgment.pk)
        judgments.append({
            "reviewer": f"Reviewer {number}",
            "choice": choice,
            "strength": judgment.strength,
            "criteria": chosen,
            "criteria_version": judgment.criteria_version.version,
            "rationale": judgment.rationale,
            "rationale_flags": [name for name in FLAGS if check is not None and getattr(check, name)],
            "seconds": judgment.seconds_spent,
            "as_they_saw": _as_they_saw(judgment.winner, judgment.criteria, their_a_on_left=reviewed.a_on_left,
                                        a_on_left=a_on_left),
        })
    earlier = []
    for ruling in (Adjudication.objects.filter(pair=pair).select_related("adjudicator", "assignment")
                   .order_by("revision")):
        choice, chosen = _as_seen(ruling.winner, ruling.criteria, a_on_left=a_on_left)
        earlier.append({"revision": ruling.revision, "choice": choice, "strength": ruling.strength,
                        "criteria": chosen, "rationale": ruling.rationale,
                        "adjudicator": ruling.adjudicator.get_username(), "created_at": ruling.created_at.isoformat(),
                        "as_they_saw": _as_they_saw(ruling.winner, ruling.criteria,
                                                    their_a_on_left=ruling.assignment.a_on_left, a_on_left=a_on_left)})
    payload = {
        "id": assignment.pk,
        "pair": pair.pk,
        "prompt_id": pair.prompt.external_id,
        "prompt": [{"role": m["role"], "content": m["content"], "html": markdown_to_safe_html(m["content"])}
                   for m in pair.prompt.messages],
        "criteria": {"version": criteria.version, "instructions": criteria.instructions, "items": criteria.items}
        if criteria else {"version": None, "instructions": "", "items": []},
        "left": {"text": left.text, "html": markdown_to_safe_html(left.text)},
        "right": {"text": right.text, "html": markdown_to_safe_html(right.text)},
        "votes": votes,
        "judgments": judgments,
        "earlier_rulings": earlier,
        "expires_at": assignment.expires_at.isoformat(),
    }
    if queue is not None:
        adjudicator = assignment.adjudicator
        payload["queue"] = {**queue.as_dict(), **waiting_count(project=pair.project, adjudicator=adjudicator,
                                                               queue=queue)}
    return payload


def _checked_ruling(*, criteria_keys: list[str], min_rationale_chars: int, choice, strength, criteria,
                    rationale) -> tuple[str, int | None, dict, str]:
    choice_and_strength_check(choice, strength, who="the ruling prefers")
    if criteria is None:
        criteria = {}
    if not isinstance(criteria, dict):
        raise ReviewError("criteria: must be an object mapping criterion keys to left, right or tie (or be left out)")
    unknown = sorted(set(criteria) - set(criteria_keys))
    if unknown:
        raise ReviewError(f"criteria: unknown key(s) {unknown}; the criteria are {criteria_keys}")
    for key, value in criteria.items():
        if value not in CRITERION_CLICKS:
            raise ReviewError(f"criteria: {key!r} is {value!r}; use left, right or tie")
    needed = max(1, min_rationale_chars)
    if not isinstance(rationale, str) or len(rationale.strip()) < needed:
        raise ReviewError(f"rationale: write at least {needed} characters on why you rule as you do")
    text_within("rationale", rationale, MAX_RATIONALE_CHARS)
    return choice, (strength if choice in DECISIVE_CLICKS else None), criteria, rationale.strip()


def ruling_submit(*, assignment_id: int, adjudicator: AbstractBaseUser, choice: str, strength: int | None,
                  criteria: dict | None, rationale: str, client_key: uuid.UUID,
                  now: datetime | None = None) -> tuple[Adjudication, bool]:
    """Record the adjudicator's ruling on the pair they hold; returns (ruling, replayed).

    Clicks are the adjudicator's own left/right; the ruling is stored un-swapped. The same client_key
    again returns the first ruling. Locks the adjudication assignment, then numbers the revision.
    """
    now = now or timezone.now()
    earlier = Adjudication.objects.filter(client_key=client_key).first()
    if earlier is not None:
        if earlier.assignment_id == assignment_id and earlier.adjudicator_id == adjudicator.pk:
            return earlier, True
        raise ReviewError("client_key was already used for another ruling; send a new one", status=409)
    with transaction.atomic():
        assignment = (AdjudicationAssignment.objects.select_for_update()
                      .filter(pk=assignment_id, adjudicator=adjudicator).select_related("project").first())
        if assignment is None:
            raise ReviewError(f"adjudication {assignment_id} is not one of yours", status=404)
        if assignment.status == AdjudicationAssignment.Status.COMPLETED:
            raise ReviewError(f"adjudication {assignment_id} is already ruled; ask for the pair again to rule anew",
                              status=409)
        if assignment.status != AdjudicationAssignment.Status.ACTIVE or assignment.expires_at <= now:
            raise ReviewError(f"adjudication {assignment_id} expired and went back to the queue; ask for the next one",
                              status=410)
        project = assignment.project
        latest = project.criteria_versions.order_by("-version").first()
        choice, strength, criteria, rationale = _checked_ruling(
            criteria_keys=latest.keys if latest else [], min_rationale_chars=project.min_rationale_chars,
            choice=choice, strength=strength, criteria=criteria, rationale=rationale,
        )
        last = Adjudication.objects.filter(pair_id=assignment.pair_id).aggregate(n=Max("revision"))["n"] or 0
        ruling = Adjudication.objects.create(
            project=project, pair_id=assignment.pair_id, assignment=assignment, adjudicator=adjudicator,
            revision=last + 1, winner=unswap(choice, a_on_left=assignment.a_on_left), strength=strength,
            criteria={key: unswap(value, a_on_left=assignment.a_on_left) for key, value in criteria.items()},
            rationale=rationale, client_key=client_key, created_at=now,
        )
        assignment.status = AdjudicationAssignment.Status.COMPLETED
        assignment.save(update_fields=["status"])
    return ruling, False


def ruling_payload(*, ruling: Adjudication, a_on_left: bool) -> dict:
    """A ruling as its adjudicator made it: their left/right, never a/b."""
    choice, chosen = _as_seen(ruling.winner, ruling.criteria, a_on_left=a_on_left)
    return {"id": ruling.pk, "adjudication": ruling.assignment_id, "pair": ruling.pair_id, "revision": ruling.revision,
            "choice": choice, "strength": ruling.strength, "criteria": chosen, "rationale": ruling.rationale,
            "created_at": ruling.created_at.isoformat()}


def latest_rulings(*, project: Project) -> dict[int, str]:
    """{pair id: winner (a, b, tie, both_bad)} of the latest ruling of every ruled pair of the project."""
    latest: dict[int, tuple[int, str]] = {}
    for pair_id, revision, winner in Adjudication.objects.filter(project=project).values_list(
            "pair_id", "revision", "winner").iterator(chunk_size=10_000):
        if pair_id not in latest or revision > latest[pair_id][0]:
            latest[pair_id] = (revision, winner)
    return {pair_id: winner for pair_id, (_, winner) in latest.items()}


def rulings_list(*, project: Project, limit: int = 100) -> list[dict]:
    """The project's latest rulings, newest first, for admins: un-swapped (a/b), with the pair's votes."""
    rulings = list(Adjudication.objects.filter(project=project).select_related("adjudicator", "pair__prompt")
                   .order_by("-id")[:limit])
    votes = votes_of_pairs(sorted({r.pair_id for r in rulings}))
    return [{"id": r.pk, "pair": r.pair_id, "prompt_id": r.pair.prompt.external_id, "revision": r.revision,
             "winner": r.winner, "strength": r.strength, "criteria": r.criteria, "rationale": r.rationale,
             "adjudicator": r.adjudicator.get_username(), "created_at": r.created_at.isoformat(),
             "votes": dict(zip(WINNERS, votes[r.pair_id], strict=True))} for r in rulings]

