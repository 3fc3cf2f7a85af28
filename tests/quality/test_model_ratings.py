"""Bradley–Terry ratings: a leaderboard that puts the stronger checkpoint on top, with honest CIs."""

import math

import numpy as np
import pytest
import statsmodels.api as sm

from annotate.quality.ratings import bradley_terry_ratings, fit_bradley_terry
from annotate.quality.synthetic import synthetic_project
from annotate.quality.table import JudgmentTable

NO_PRIOR = 1e-9


def _ratings(records, **kwargs):
    table = JudgmentTable.from_records(records)
    ratings = bradley_terry_ratings(
        table=table, n_resamples=kwargs.pop("n_resamples", 0), rng=np.random.default_rng(0), **kwargs
    )
    names = [table.model_names[i] for i in ratings.model]
    return table, ratings, dict(zip(names, ratings.rating.tolist(), strict=True))


def _duel(pair, winner, model_a="big@v2", model_b="small@v1", reviewer="ann"):
    return {"pair": pair, "reviewer": reviewer, "winner": winner, "model_a": model_a, "model_b": model_b}


def test_three_wins_in_four_give_a_rating_gap_of_log_3():
    """By hand: P(big beats small) = 3/4 = sigmoid(r_big - r_small), so the gap is ln(3)."""
    records = [_duel(1, "a"), _duel(2, "a"), _duel(3, "a"), _duel(4, "b")]
    _, ratings, by_name = _ratings(records, prior_precision=NO_PRIOR)
    assert by_name["big@v2"] - by_name["small@v1"] == pytest.approx(math.log(3), abs=1e-6)
    assert by_name["big@v2"] + by_name["small@v1"] == pytest.approx(0.0, abs=1e-9)
    assert ratings.wins.tolist() == [3, 1] and ratings.losses.tolist() == [1, 3]


def test_a_tie_counts_half_a_win_each_and_both_bad_too():
    records = [_duel(1, "a"), _duel(2, "b"), _duel(3, "tie"), _duel(4, "both_bad")]
    _, ratings, by_name = _ratings(records, prior_precision=NO_PRIOR)
    assert by_name["big@v2"] == pytest.approx(by_name["small@v1"], abs=1e-9)
    assert ratings.ties.tolist() == [2, 2]
    assert ratings.both_bad.tolist() == [1, 1]
    # One more win for big: big scores 2 + 1/2 + 1/2 = 3 of 5, small 1 + 1/2 + 1/2 = 2 -> gap ln(3/2).
    _, _, by_name = _ratings([*records[:1], *records], prior_precision=NO_PRIOR)
    assert by_name["big@v2"] - by_name["small@v1"] == pytest.approx(math.log(3 / 2), abs=1e-6)


def test_fit_equals_statsmodels_logistic_regression():
    """Bradley–Terry is a logistic regression on +1/-1 model indicators (first model as reference)."""
    rng = np.random.default_rng(4)
    m = 5
    truth = rng.normal(size=m)
    score = np.zeros((m, m))
    rows, successes, failures = [], [], []
    for i in range(m):
        for j in range(i + 1, m):
            n = int(rng.integers(20, 60))
            wins = rng.binomial(n, 1 / (1 + np.exp(truth[j] - truth[i])))
            score[i, j], score[j, i] = wins, n - wins
            design = np.zeros(m)
            design[i], design[j] = 1.0, -1.0
            rows.append(design[1:])
            successes.append(wins)
            failures.append(n - wins)
    glm = sm.GLM(np.column_stack([successes, failures]), np.array(rows), family=sm.families.Binomial()).fit()
    reference = np.concatenate([[0.0], glm.params])
    ours = fit_bradley_terry(score=score, prior_precision=NO_PRIOR)
    assert ours - ours[0] == pytest.approx(reference, abs=1e-6)


def test_fit_is_vectorised_over_resamples():
    scores = np.array([[[0, 3], [1, 0]], [[0, 1], [1, 0]]], dtype=float)
    batch = fit_bradley_terry(score=scores, prior_precision=NO_PRIOR)
    for score, row in zip(scores, batch, strict=True):
        assert row == pytest.approx(fit_bradley_terry(score=score, prior_precision=NO_PRIOR))


def test_a_model_that_won_every_comparison_gets_a_large_but_finite_rating():
    _, ratings, by_name = _ratings([_duel(i, "a") for i in range(10)], n_resamples=50)
    assert np.isfinite(ratings.rating).all() and np.isfinite(ratings.ci_low).all()
    assert by_name["big@v2"] > by_name["small@v1"] + 2


def test_stronger_model_gets_higher_rating_and_ci_excludes_the_weaker():
    project = synthetic_project(n_pairs=3000, n_reviewers=12, n_models=3, plant_faults=False, seed=2)
    ratings = bradley_terry_ratings(table=project.table, n_resamples=200, rng=np.random.default_rng(0))
    order = np.argsort(ratings.rating)
    assert ratings.model[order].tolist() == np.argsort(project.model_strength).tolist()
    strongest, weakest = order[-1], order[0]
    assert ratings.ci_low[strongest] > ratings.ci_high[weakest]
    assert (ratings.ci_low <= ratings.rating).all() and (ratings.rating <= ratings.ci_high).all()


def test_same_model_pairs_and_retests_are_left_out():
    records = [
        _duel(1, "a"),
        _duel(2, "b", model_a="big@v2", model_b="big@v2"),  # same model twice: no information
        {**_duel(1, "b"), "is_retest": True},
    ]
    _, ratings, by_name = _ratings(records)
    assert set(by_name) == {"big@v2", "small@v1"}
    assert ratings.wins.tolist() == [1, 0] and ratings.losses.tolist() == [0, 1]


def test_models_never_compared_with_each_other_are_reported_as_separate_groups():
    records = [_duel(1, "a"), _duel(2, "a", model_a="x@1", model_b="y@1")]
    _, ratings, _ = _ratings(records)
    assert ratings.components == 2


def test_no_comparisons_gives_an_empty_leaderboard():
    table = JudgmentTable.from_records([{"pair": 1, "reviewer": "ann", "winner": "a"}])
    ratings = bradley_terry_ratings(table=table, n_resamples=10, rng=np.random.default_rng(0))
    assert ratings.model.size == 0 and ratings.components == 0
