"""Leaderboard projects: which model pairs' comparisons the queue should hand out first.

Arena-style leaderboards spend judgments where they shrink the uncertainty of the rating differences
most. Each model pair's uncertainty is the standard error of its rating difference, from the
Bradley-Terry ratings' bootstrap intervals (annotate/quality/ratings.py): sqrt(se_i^2 + se_j^2) with
se = interval half-width / 1.96, as if the two were independent (the ratings module reports per-model
intervals, and a queue order needs a ranking of model pairs, not an exact test). One more comparison of
a model pair that already has c shrinks that error by about a factor sqrt(c / (c + 1)), so a pair's
score is se_difference * (1 - sqrt(c / (c + 1))), where c counts the comparisons already made and the
open pairs of the same model pair ahead of it in the queue. A model pair nobody can rate yet (a model
never compared, no intervals, or two pieces of the comparison graph no judgment joins) counts as twice
the largest error seen. Scores are scaled so that the first pair in the queue gets PRIORITY_MAX.
Both answers from the same model say nothing about models: priority 0.

Why this and not "the least certain order" (how likely two ratings are equal): measured with
bench/adaptive.py-style simulations, ordering by the p-value of equal ratings concentrated judgments on
near-ties and widened every interval; the shrink of the error spreads them, narrowing the intervals
where models were compared least (a new checkpoint, a model rarely answered) and costing nothing when
the pool is already balanced.

Symmetric in the two models, so it does not depend on which answer the import listed first; quantised,
so a refresh with a different bootstrap draw rewrites few rows. The scores are pure numpy; the writes
are here too. The refresh reads the models' ratings, which the quality app computes: it lives there
(annotate/quality/queue_priorities.py).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
from django.db import transaction
from django.db.models import QuerySet

from annotate.review.models import PAIR_CLOSED, Pair, Project

PRIORITY_MAX = 1000  # stored in Pair.queue_priority (a small integer): higher is handed out first
_Z_95 = NormalDist().inv_cdf(0.975)


def difference_uncertainty(*, ci_low: np.ndarray, ci_high: np.ndarray, comparisons: np.ndarray) -> np.ndarray:
    """(m, m) standard error of each two rated models' rating difference (ModelRatings fields); diagonal 0.

    `comparisons[i, j]` > 0 where i and j were compared: it says which models the comparison graph
    connects. Infinite where the difference cannot be rated: no intervals (NaN) or different pieces.
    """
    se = (np.asarray(ci_high, dtype=np.float64) - np.asarray(ci_low, dtype=np.float64)) / (2.0 * _Z_95)
    m = se.shape[0]
    if m == 0:
        return np.zeros((0, 0))
    error = np.sqrt(se[:, None] ** 2 + se[None, :] ** 2)
    error = np.where(np.isfinite(error), error, np.inf)
    # Imported here: every process that imports the review app's modules (web workers, each manage.py
    # command) would otherwise pay for SciPy's sparse graphs at start-up.
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    _, piece = connected_components(csr_matrix(np.asarray(comparisons) > 0), directed=False)
    error = np.where(piece[:, None] == piece[None, :], error, np.inf)
    np.fill_diagonal(error, 0.0)
    return error


def pair_priorities(*, model_a: list[str], model_b: list[str], rated: list[str], uncertainty: np.ndarray,
                    comparisons: np.ndarray) -> np.ndarray:
    """Each open pair's priority 0-PRIORITY_MAX, the pairs given in the queue's order (newest first).

    `model_a`/`model_b` name each pair's two answers' models ("model@version"); `rated`, `uncertainty`
    (difference_uncertainty) and `comparisons` are the rated models and their (m, m) matrices.
    """
    index = {name: i for i, name in enumerate(rated)}
    finite = uncertainty[np.isfinite(uncertainty) & (uncertainty > 0)]
    unknown = 2.0 * finite.max() if finite.size else 1.0
    ahead: dict[frozenset, int] = {}
    score = np.zeros(len(model_a))
    for k, (a, b) in enumerate(zip(model_a, model_b, strict=True)):
        if a == b:
            continue
        key = frozenset((a, b))
        if a in index and b in index and np.isfinite(uncertainty[index[a], index[b]]):
            error, counted = uncertainty[index[a], index[b]], comparisons[index[a], index[b]]
        else:
            error, counted = unknown, 0.0
        c = counted + ahead.get(key, 0)
        score[k] = error * (1.0 - np.sqrt(c / (c + 1.0)))
        ahead[key] = ahead.get(key, 0) + 1
    top = score.max() if score.size else 0.0
    return np.rint(PRIORITY_MAX * score / top).astype(np.int64) if top > 0 else np.zeros(score.size, dtype=np.int64)


PRIORITY_WRITE_BATCH = 500  # pairs per short transaction: the queue skips rows locked by a write


def open_pairs(*, project: Project) -> QuerySet[Pair]:
    """The project's pairs the queue can still hand out: the ones whose priorities count."""
    return Pair.objects.filter(project=project).exclude(open_fill=PAIR_CLOSED)


def queue_priorities_clear(*, project: Project) -> int:
    """Every open pair's queue priority back to 0, as in a project without the leaderboard switch; returns how
    many pairs changed."""
    return priorities_write(open_pairs(project=project).exclude(queue_priority=0).values_list("id", flat=True), None)


def priorities_write(pair_ids, priority_of: dict[int, int] | None) -> int:
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
