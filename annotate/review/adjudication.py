"""Adjudication: split pairs go to an adjudicator, who sees every reviewer's judgment and rules.

A pair is waiting when its counted votes (the current judgment of each original assignment, as the export
counts them) have no strict majority (annotate/review/consensus.py: strict_majority, the one consensus rule),
it has at least `min_judgments` of them, nobody is judging it right now, and it has no ruling yet. A filter
can widen it to contested majorities (`max_share`) or narrow it to a tag. An adjudicator (the Django group
"adjudicator", or an admin) is never given a pair they judged. The oldest waiting pair comes first.

The votes are counted on the pair as they land (Pair.votes_*, with votes_split and votes_contested read from
them, and Pair.ruled set by the first ruling), so `next` is one indexed query that reads the first few waiting
pairs, however many pairs were judged, agreed on or ruled before them. Two adjudicators never hold one pair
(the adjudication_one_open constraint), and a pair ruled on while the queue was being read is not handed out.

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

import json
import secrets
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from annotate.limits import MAX_RATIONALE_CHARS, share_number, text_within, whole_number
from annotate.review.choices import CLICKS, CRITERION_CLICKS, DECISIVE_CLICKS, WINNERS, swap_back, unswap
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
)
from annotate.review.overlap import votes_of_pairs
from annotate.review.rationale import FLAGS
from annotate.review.rendering import markdown_to_safe_html

HOLD_MINUTES = 30  # an adjudication not ruled on within this returns to the queue
CANDIDATES = 20  # waiting pairs read at a time: enough for the adjudicators who ask at once to each take one
WAITING_COUNT_CAP = 50  # "50+ waiting" says as much as an exact count
SHARE_SLACK = 1e-9  # max_share 0.67 takes a 2-of-3 majority (0.666...)


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


def _waiting_sql(*, queue: QueueFilter) -> str:
    """The pairs waiting for an adjudicator under this filter, oldest first, from the pairs' vote counters
    (Pair.votes_*): the consensus rule of strict_majority and the share it gives, in SQL.

    A split pair is Pair.votes_split (two or more choices share the top count). A widened filter also takes a
    pair whose top count over its votes is at most max_share: every choice's count over the votes is, which is
    the same comparison of the same floating-point numbers (the top one is the largest). Each form reads a
    partial index of the pairs not yet ruled on, so the pairs ruled or agreed on before them are never read.
    """
    counted = " + ".join(f"p.votes_{winner}" for winner in WINNERS)
    if queue.max_share is None:
        wanted = "p.votes_split"
    else:
        within = " AND ".join(f"CAST(p.votes_{winner} AS DOUBLE PRECISION) / ({counted}) <= %(share)s"
                              for winner in WINNERS)
        wanted = f"(p.votes_split OR ({within}))"
        if queue.max_share + SHARE_SLACK < 1:  # a pair whose votes all agree has share 1: not taken
            wanted = f"p.votes_contested AND {wanted}"
    tagged = ""
    if queue.tag is not None:
        tags = ("pr.tags @> %(tags)s::jsonb" if connection.vendor == "postgresql"
                else "EXISTS (SELECT 1 FROM json_each(pr.tags) WHERE json_each.value = %(tag)s)")
        tagged = f"AND EXISTS (SELECT 1 FROM review_prompt pr WHERE pr.id = p.prompt_id AND {tags}) "
    return (
        f"SELECT p.id FROM review_pair p WHERE p.project_id = %(project)s AND NOT p.ruled AND {wanted} "
        f"AND {counted} >= %(min_judgments)s AND p.id > %(after)s {tagged}"
        # Being judged right now, held by an adjudicator, or judged by this adjudicator: not for them.
        "AND NOT EXISTS (SELECT 1 FROM review_assignment a WHERE a.pair_id = p.id AND a.status = 'active' "
        "AND a.expires_at > %(now)s AND NOT a.is_retest) "
        "AND NOT EXISTS (SELECT 1 FROM review_adjudicationassignment h WHERE h.pair_id = p.id "
        "AND h.status = 'active' AND h.expires_at > %(now)s) "
        "AND NOT EXISTS (SELECT 1 FROM review_assignment o WHERE o.pair_id = p.id AND o.reviewer_id = %(adjudicator)s) "
        "ORDER BY p.id LIMIT %(limit)s"
    )


def _waiting_batch(*, project: Project, adjudicator: AbstractBaseUser, queue: QueueFilter, now: datetime,
                   after: int, limit: int) -> list[int]:
    """Up to `limit` pairs waiting for this adjudicator, oldest first, after a pair id."""
    params = {"project": project.pk, "min_judgments": queue.min_judgments, "after": after, "now": now,
              "adjudicator": adjudicator.pk, "limit": limit,
              "share": None if queue.max_share is None else queue.max_share + SHARE_SLACK,
              "tag": queue.tag, "tags": json.dumps([queue.tag])}
    with connection.cursor() as cursor:
        cursor.execute(_waiting_sql(queue=queue), params)
        return [row[0] for row in cursor.fetchall()]


def _waiting(*, project: Project, adjudicator: AbstractBaseUser, queue: QueueFilter, now: datetime) -> Iterator[int]:
    """Pairs waiting for this adjudicator, oldest pair first."""
    after = 0
    while batch := _waiting_batch(project=project, adjudicator=adjudicator, queue=queue, now=now, after=after,
                                  limit=CANDIDATES):
        yield from batch
        after = batch[-1]


def waiting_count(*, project: Project, adjudicator: AbstractBaseUser, queue: QueueFilter,
                  now: datetime | None = None, cap: int = WAITING_COUNT_CAP) -> dict:
    """How many pairs wait for this adjudicator (counting stops at `cap`)."""
    now = now or timezone.now()
    count = len(_waiting_batch(project=project, adjudicator=adjudicator, queue=queue, now=now, after=0, limit=cap))
    return {"waiting": count, "waiting_is_at_least": count >= cap}


def _expire_stale(*, project: Project, now: datetime) -> None:
    AdjudicationAssignment.objects.filter(
        project=project, status=AdjudicationAssignment.Status.ACTIVE, expires_at__lte=now,
    ).update(status=AdjudicationAssignment.Status.EXPIRED)


class _RuledMeanwhile(Exception):
    """The pair was ruled on after the queue was read: the hold is undone."""


def _take(*, project: Project, adjudicator: AbstractBaseUser, pair_id: int, now: datetime,
          unruled: bool = False) -> AdjudicationAssignment | None:
    """Hold the pair for the adjudicator; None when another adjudicator took it first, or (`unruled`) ruled on it
    since the queue was read."""
    try:
        with transaction.atomic():
            held = AdjudicationAssignment.objects.create(
                project=project, pair_id=pair_id, adjudicator=adjudicator, a_on_left=secrets.randbelow(2) == 1,
                served_at=now, expires_at=now + timedelta(minutes=HOLD_MINUTES),
            )
            # The hold went in, so no one else holds the pair now; one who held it when the queue was read has
            # ruled since, and this statement (a snapshot after the insert) sees that ruling.
            if unruled and Adjudication.objects.filter(pair_id=pair_id).exists():
                raise _RuledMeanwhile
            return held
    except IntegrityError:  # adjudication_one_open: someone holds it
        return None
    except _RuledMeanwhile:
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
        taken = _take(project=project, adjudicator=adjudicator, pair_id=candidate, now=now, unruled=True)
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
        Pair.objects.filter(pk=assignment.pair_id, ruled=False).update(ruled=True)  # it leaves the queue
    return ruling, False


def ruling_payload(*, ruling: Adjudication, a_on_left: bool) -> dict:
    """A ruling as its adjudicator made it: their left/right, never a/b."""
    choice, chosen = _as_seen(ruling.winner, ruling.criteria, a_on_left=a_on_left)
    return {"id": ruling.pk, "adjudication": ruling.assignment_id, "pair": ruling.pair_id, "revision": ruling.revision,
            "choice": choice, "strength": ruling.strength, "criteria": chosen, "rationale": ruling.rationale,
            "created_at": ruling.created_at.isoformat()}


class Ruling(NamedTuple):
    """What a ruling decided: the winner (a, b, tie, both_bad, un-swapped) and how strongly (1-3; None for tie and
    both_bad)."""

    winner: str
    strength: int | None


def latest_rulings(*, project: Project) -> dict[int, Ruling]:
    """{pair id: its latest ruling} for every ruled pair of the project."""
    latest: dict[int, tuple[int, Ruling]] = {}
    for pair_id, revision, winner, strength in Adjudication.objects.filter(project=project).values_list(
            "pair_id", "revision", "winner", "strength").iterator(chunk_size=10_000):
        if pair_id not in latest or revision > latest[pair_id][0]:
            latest[pair_id] = (revision, Ruling(winner, strength))
    return {pair_id: ruling for pair_id, (_, ruling) in latest.items()}


def rulings_list(*, project: Project, limit: int = 100) -> list[dict]:
    """The project's latest rulings, newest first, for admins: un-swapped (a/b), with the pair's votes."""
    rulings = list(Adjudication.objects.filter(project=project).select_related("adjudicator", "pair__prompt")
                   .order_by("-id")[:limit])
    votes = votes_of_pairs(sorted({r.pair_id for r in rulings}))
    return [{"id": r.pk, "pair": r.pair_id, "prompt_id": r.pair.prompt.external_id, "revision": r.revision,
             "winner": r.winner, "strength": r.strength, "criteria": r.criteria, "rationale": r.rationale,
             "adjudicator": r.adjudicator.get_username(), "created_at": r.created_at.isoformat(),
             "votes": dict(zip(WINNERS, votes[r.pair_id], strict=True))} for r in rulings]

