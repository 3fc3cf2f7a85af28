"""Bradley–Terry ratings of source models from un-swapped judgments: a leaderboard for checkpoints.

P(model i's answer preferred over model j's) = sigmoid(rating_i - rating_j); ratings are in
logits and centred to mean 0. A tie or both_bad counts as half a win for each side (the usual
Bradley–Terry treatment of ties). Judgments of a pair whose two answers come from the same model
say nothing about models and are skipped; retests are skipped (each pair counts once per reviewer).

The fit is a damped Newton ascent on the log-likelihood with a weak Gaussian prior
(``prior_precision``) so that a model that won every comparison, or a comparison graph in pieces,
still gets a finite rating. No installed library fits Bradley–Terry with ties and a prior
vectorised over bootstrap resamples (statsmodels' Logit fits one data set at a time and fails on
perfect separation); the tests check this fit against statsmodels' logistic regression.

Bootstrap over pairs: as for alpha, a pair enters the fit only through (model a, model b, a wins,
b wins, ties), so resampling pairs is a multinomial draw over the distinct such rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from annotate.quality.agreement import count_distinct_rows
from annotate.quality.table import JudgmentTable
from annotate.review.choices import WINNER_A, WINNER_B, WINNER_BOTH_BAD

_BATCH_ELEMENTS = 2_000_000  # bootstrap fits per batch x models**2


@dataclass(frozen=True)
class ModelRatings:
    """Ratings of the m models that appear in comparisons; (m,) arrays, (m, m) matrices.

    ``model`` indexes the table's ``model_names``. ``score[i, j]`` is the number of comparisons i
    won against j with ties counted half; ``comparisons[i, j]`` = score[i, j] + score[j, i].
    ``ci_low``/``ci_high`` are NaN when no bootstrap ran. ``ties`` includes ``both_bad``.
    """

    model: np.ndarray
    rating: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    wins: np.ndarray
    losses: np.ndarray
    ties: np.ndarray
    both_bad: np.ndarray
    score: np.ndarray
    comparisons: np.ndarray
    # Connected pieces of the comparison graph; with more than one, ratings across pieces are not comparable.
    components: int


def fit_bradley_terry(
    *, score: np.ndarray, prior_precision: float = 0.1, max_iterations: int = 100
) -> np.ndarray:
    """Maximum a posteriori log-strengths for (..., m, m) score matrices -> (..., m), mean 0.

    ``score[..., i, j]`` = (possibly fractional) wins of i over j. Vectorised over leading axes.
    """
    score = np.asarray(score, dtype=np.float64)
    m = score.shape[-1]
    total = score + np.swapaxes(score, -1, -2)
    theta = np.zeros(score.shape[:-1])
    eye = np.eye(m)
    for _ in range(max_iterations):
        p = 1.0 / (1.0 + np.exp(-(theta[..., :, None] - theta[..., None, :])))
        gradient = (score - total * p).sum(axis=-1) - prior_precision * theta
        curvature = total * p * (1.0 - p)
        hessian = curvature - eye * (curvature.sum(axis=-1)[..., :, None] + prior_precision)
        step = np.linalg.solve(hessian, gradient[..., None])[..., 0]
        # Damping: far from the optimum a full Newton step on a logistic likelihood can overshoot.
        largest = np.abs(step).max(axis=-1, keepdims=True)
        step = step * np.minimum(1.0, 2.0 / np.maximum(largest, 1e-300))
        theta = theta - step
        if largest.size == 0 or float(largest.max()) < 1e-10:
            break
    return theta - theta.mean(axis=-1, keepdims=True)


def bradley_terry_ratings(
    *,
    table: JudgmentTable,
    n_resamples: int,
    rng: np.random.Generator,
    prior_precision: float = 0.1,
    confidence: float = 0.95,
) -> ModelRatings:
    """Fit Bradley–Terry over the models of ``table`` with a bootstrap CI over pairs."""
    # Imported here: SciPy takes a fifth of a second to import, and every process starts the apps.
    from scipy import sparse
    from scipy.sparse.csgraph import connected_components

    rows = np.flatnonzero(~table.is_retest & (table.model_a != table.model_b))
    model_a, model_b, winner = table.model_a[rows], table.model_b[rows], table.winner[rows]
    model = np.unique(np.concatenate([model_a, model_b]))
    m = model.size
    local_a = np.searchsorted(model, model_a).astype(np.int64)
    local_b = np.searchsorted(model, model_b).astype(np.int64)

    a_won, b_won = winner == WINNER_A, winner == WINNER_B
    tied = ~(a_won | b_won)
    wins = np.bincount(local_a[a_won], minlength=m) + np.bincount(local_b[b_won], minlength=m)
    losses = np.bincount(local_a[b_won], minlength=m) + np.bincount(local_b[a_won], minlength=m)
    ties = np.bincount(local_a[tied], minlength=m) + np.bincount(local_b[tied], minlength=m)
    bad = winner == WINNER_BOTH_BAD
    both_bad = np.bincount(local_a[bad], minlength=m) + np.bincount(local_b[bad], minlength=m)

    # One resampling unit per (pair, model a, model b): its a-wins, b-wins and ties.
    unit_key = (table.pair_index[rows] * m + local_a) * m + local_b
    unit_keys, unit = np.unique(unit_key, return_inverse=True)
    n_units = unit_keys.size
    unit_a = (unit_keys // m) % m
    unit_b = unit_keys % m
    unit_counts = np.stack(
        [np.bincount(unit[mask], minlength=n_units) for mask in (a_won, b_won, tied)], axis=1
    )
    # Each unit written with its lower-numbered model first (a-wins and b-wins exchanged where that
    # reverses it): the same groups, so the same bootstrap draws, whichever answer the import listed first.
    reverse = unit_a > unit_b
    unit_a, unit_b = np.where(reverse, unit_b, unit_a), np.where(reverse, unit_a, unit_b)
    unit_counts = np.where(reverse[:, None], unit_counts[:, [1, 0, 2]], unit_counts)
    groups, frequency = count_distinct_rows(rows=np.column_stack([unit_a, unit_b, unit_counts]))
    # Each group adds (a wins + ties/2) to score[a, b] and (b wins + ties/2) to score[b, a].
    contribution = sparse.csr_matrix(
        (
            np.concatenate([groups[:, 2] + groups[:, 4] / 2.0, groups[:, 3] + groups[:, 4] / 2.0]),
            (
                np.concatenate([np.arange(len(groups))] * 2),
                np.concatenate([groups[:, 0] * m + groups[:, 1], groups[:, 1] * m + groups[:, 0]]),
            ),
        ),
        shape=(len(groups), m * m),
    )
    score = (contribution.T @ frequency.astype(np.float64)).reshape(m, m)
    rating = fit_bradley_terry(score=score, prior_precision=prior_precision) if m else np.zeros(0)

    ci_low = np.full(m, np.nan)
    ci_high = np.full(m, np.nan)
    if n_resamples > 0 and m >= 2 and n_units > 0:
        total = int(frequency.sum())
        replicates = np.empty((n_resamples, m))
        # Fit in batches so that the (batch, m, m) Newton arrays stay small with many models.
        batch = max(1, _BATCH_ELEMENTS // (m * m))
        for start in range(0, n_resamples, batch):
            size = min(batch, n_resamples - start)
            resampled = rng.multinomial(total, frequency / total, size=size).astype(np.float64)
            scores = np.asarray((contribution.T @ resampled.T).T).reshape(size, m, m)
            replicates[start : start + size] = fit_bradley_terry(
                score=scores, prior_precision=prior_precision
            )
        tail = (1.0 - confidence) / 2.0
        ci_low, ci_high = np.quantile(replicates, [tail, 1.0 - tail], axis=0)

    graph = sparse.csr_matrix(score + score.T > 0) if m else sparse.csr_matrix((0, 0))
    components = int(connected_components(graph, directed=False)[0]) if m else 0
    return ModelRatings(
        model=model,
        rating=rating,
        ci_low=ci_low,
        ci_high=ci_high,
        wins=wins,
        losses=losses,
        ties=ties,
        both_bad=both_bad,
        score=score,
        comparisons=score + score.T,
        components=components,
    )
