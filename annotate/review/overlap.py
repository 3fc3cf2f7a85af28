"""Adaptive overlap: how many reviewers a pair needs, decided from the votes it has.

A project with a fixed overlap gives every pair `overlap` reviewers. With a minimum overlap set, a pair
stops as soon as its votes are decided and a split pair gets more reviewers, up to the maximum (the
project's `overlap`). The decision uses the one consensus rule, strict_majority
(annotate/review/consensus.py), over the pair's votes as the export counts them: the current
judgments of first-time (non-retest) assignments, four choices a, b, tie, both_bad. Once a pair has
at least the minimum, it is decided when its strict-majority choice leads the runner-up by:

- ``lead2`` (the default): two votes. 2-0 stops at 2; 2-1 and 1-1 go on; 3-1 stops. A sequential
  test in the manner of "play until one side is two ahead": a lone dissent never ends a pair, and the
  runner-up would need two votes in a row just to draw level. bench/adaptive.py measures it against
  fixed overlaps: with a maximum of 6, the export is as accurate as a fixed overlap of 5 at about 37%
  fewer judgments; with a maximum of 5, more accurate than a fixed 3 at about the same judgments.
- ``settled``: more than the votes it could still get up to the maximum, so no further vote could change
  the winner. Whatever those votes would have been, the export makes the decision a fixed overlap of the
  maximum would have made with the same reviewers: no exported label changes, only judgments are saved.
  The cautious choice, and it saves less (a 2-0 pair with a maximum of 5 still asks a third reviewer;
  no pair can settle before floor(max / 2) + 1 votes, so that is where every pair starts).
- ``majority``: one vote (any strict majority). The cheapest: a 2-1 pair stops at 3 however high the
  maximum; the export is about as accurate as a fixed overlap of the minimum, with its split pairs
  resolved.

Whatever the rule, a pair still split at the maximum stops there (the export leaves it out). The rule is
pure numpy, no Django: the judgment path decides one pair, a settings change or bench/adaptive.py many at
once. `votes_of_pairs` reads pairs' votes from the database and `pairs_needed_recompute` decides every
started pair again after a settings change.
"""

from __future__ import annotations

import numpy as np
from django.db.models import Count, Q

from annotate.errors import UserMistake
from annotate.review.choices import WINNERS
from annotate.review.consensus import N_CHOICES, NO_CONSENSUS, strict_majority
from annotate.review.models import Assignment, Pair, Project, live_assignment

STOP_RULES = ("lead2", "settled", "majority")
MAX_OVERLAP = 50  # reviewers per pair; the queue's counters are small integers


class OverlapSettingsRejected(UserMistake):
    """Overlap settings that cannot work together; the message says which and how to fix them."""


def reviewers_count_check(*, name: str, value) -> None:
    """One overlap setting on its own: a whole number of reviewers per pair, 1 to MAX_OVERLAP."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_OVERLAP:
        raise OverlapSettingsRejected(
            f"{name} {value!r} must be a whole number of reviewers per pair from 1 to {MAX_OVERLAP}"
        )


def stop_rule_check(stop_rule) -> None:
    if stop_rule not in STOP_RULES:
        raise OverlapSettingsRejected(f"stop rule {stop_rule!r} is not one of {', '.join(STOP_RULES)}")


def overlap_settings_check(*, overlap: int, min_overlap: int | None, stop_rule: str) -> None:
    """Raise OverlapSettingsRejected (one line) unless these settings make a working queue.

    `overlap` is the fixed overlap, or the maximum when `min_overlap` is set (None: fixed).
    """
    reviewers_count_check(name="overlap" if min_overlap is None else "max overlap", value=overlap)
    if min_overlap is not None:
        reviewers_count_check(name="min overlap", value=min_overlap)
        if min_overlap > overlap:
            raise OverlapSettingsRejected(
                f"min overlap {min_overlap} is above max overlap {overlap}; set the minimum at or below the maximum"
            )
    stop_rule_check(stop_rule)


def is_adaptive(*, overlap: int, min_overlap: int | None) -> bool:
    """Whether pairs can stop before the maximum (a minimum below it is set)."""
    return min_overlap is not None and min_overlap < overlap


def reviewers_needed(votes, *, min_overlap: int, max_overlap: int, stop_rule: str) -> np.ndarray:
    """How many first-time reviewers each pair needs, from its votes: (p, 4) counts of a, b, tie, both_bad.

    A decided pair needs exactly the votes it has (it is closed: every vote is a counted assignment); an
    open one needs the fewest more votes after which it could be decided, never more than the maximum.
    Handing out those votes at once lets several reviewers work on a split pair together, and none of
    them can be wasted: fewer could not decide it.
    """
    votes = np.asarray(votes, dtype=np.int64).reshape(-1, N_CHOICES)
    n = votes.sum(axis=1)
    ordered = np.sort(votes, axis=1)
    lead = ordered[:, -1] - ordered[:, -2]  # top choice over the runner-up; 0 when the top is shared
    left = np.maximum(max_overlap - n, 0)  # votes the pair could still get
    # strict_majority is the consensus rule; pairs without votes have none (and strict_majority wants >= 1).
    winner = np.full(n.shape, NO_CONSENSUS, dtype=np.int8)
    voted = n > 0
    winner[voted] = strict_majority(votes[voted])[0]
    has_majority = winner != NO_CONSENSUS
    if stop_rule == "lead2":
        decided = has_majority & (lead >= 2)
        more = np.maximum(1, 2 - lead)  # 1-1 needs two more before it could be two ahead
    elif stop_rule == "settled":
        # Settled: even if every vote left went to the runner-up, the winner would still be ahead.
        decided = has_majority & (lead > left)
        # The fewest more votes after which it could be settled: k with lead + k > left - k.
        more = (left - lead) // 2 + 1
    elif stop_rule == "majority":
        decided = has_majority
        more = np.ones_like(n)  # one vote for a top choice gives it a strict majority
    else:
        raise ValueError(f"stop rule {stop_rule!r} is not one of {STOP_RULES}")
    needed = np.minimum(max_overlap, np.maximum(min_overlap, n + more))
    closed = (decided & (n >= min_overlap)) | (n >= max_overlap)
    return np.where(closed, n, needed).astype(np.int64)


def first_reviewers_needed(*, min_overlap: int, max_overlap: int, stop_rule: str) -> int:
    """What a pair without votes needs: where the queue starts every pair."""
    return int(reviewers_needed(np.zeros((1, N_CHOICES)), min_overlap=min_overlap, max_overlap=max_overlap,
                                stop_rule=stop_rule)[0])


def reviewers_with_one_more(*, assigned, needed, max_overlap: int) -> np.ndarray:
    """What each pair needs once it is offered one more reviewer (a model reviewer confidently disagrees with its
    majority: annotate/quality/model_reviewers.py): a pair that has the reviewers it needs (``assigned`` at least
    ``needed``) needs one more than it has, never above the maximum; an open pair keeps what it needs, since it
    gets more reviewers anyway. When that reviewer's judgment lands, reviewers_needed decides the pair again
    from its votes, as for any judgment."""
    assigned, needed = np.asarray(assigned, dtype=np.int64), np.asarray(needed, dtype=np.int64)
    return np.where((assigned >= needed) & (assigned < max_overlap), assigned + 1, needed)


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
