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
so a refresh with a different bootstrap draw rewrites few rows. The scores are pure numpy;
`queue_priorities_refresh` reads the ratings and writes the pairs' priorities.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
from django.db import transaction

from annotate.review.models import PAIR_CLOSED, Judgment, Pair, Project

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
