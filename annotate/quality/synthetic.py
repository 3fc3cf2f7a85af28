"""Synthetic Pairwise judgments with known truth and planted faulty reviewers.

Used by the benchmark (bench/agreement.py) and the tests to check that the statistics find what
was planted: a stronger model wins, an always-left reviewer is flagged for position bias, a random
clicker for low agreement, a self-contradicting reviewer for inconsistent retests. Fully
vectorised, so a million judgments take about a second.

The truth of a pair is "a", "b" or "tie": a tie with probability ``true_tie_share``, else a over b
with the Bradley–Terry probability of the two source models. A careful reviewer reports the truth
with their own accuracy (drawn in ``accuracy_range``) and otherwise picks the other side, tie or
both_bad; on a retest (shown in the swapped order) they repeat their choice with probability
``retest_repeat`` and otherwise answer afresh.

With ``better_first`` every pair lists the stronger model's answer as response a, as an import
file sorted best-first would: most decisive judgments are then "a", which is what made
orientation-blind agreement figures collapse (docs/agreement.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from annotate.quality.table import NO_GOLD, JudgmentTable
from annotate.review.choices import WINNER_A, WINNER_B, WINNER_BOTH_BAD, WINNER_TIE

ALWAYS_LEFT = "always-left"
RANDOM_CLICKER = "random-clicker"
SELF_CONTRADICTING = "self-contradicting"
PLANTED_REVIEWERS = (ALWAYS_LEFT, RANDOM_CLICKER, SELF_CONTRADICTING)


@dataclass(frozen=True)
class SyntheticProject:
    """A generated table and the truth behind it."""

    table: JudgmentTable
    model_strength: np.ndarray  # (m,) Bradley–Terry log-strengths of model_names, in order
    planted: dict[str, int]  # planted fault -> reviewer index


def _careful_choice(truth: np.ndarray, correct: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(n,) choices: the truth where ``correct``, else another choice (the other side more often)."""
    noise = rng.random(truth.shape)
    other_side = np.where(truth == WINNER_A, WINNER_B, WINNER_A)
    wrong_on_side = np.where(noise < 0.6, other_side, np.where(noise < 0.85, WINNER_TIE, WINNER_BOTH_BAD))
    wrong_on_tie = np.where(noise < 0.45, WINNER_A, np.where(noise < 0.9, WINNER_B, WINNER_BOTH_BAD))
    wrong = np.where(truth == WINNER_TIE, wrong_on_tie, wrong_on_side)
    return np.where(correct, truth, wrong).astype(np.int8)


def synthetic_project(
    *,
    n_pairs: int,
    n_reviewers: int,
    judgments_per_pair: int = 3,
    retest_share: float = 1 / 9,
    n_models: int = 6,
    gold_share: float = 0.02,
    true_tie_share: float = 0.08,
    accuracy_range: tuple[float, float] = (0.75, 0.92),
    retest_repeat: float = 0.9,
    plant_faults: bool = True,
    better_first: bool = False,
    days: float = 30.0,
    seed: int = 0,
) -> SyntheticProject:
    """Generate ``n_pairs * judgments_per_pair * (1 + retest_share)`` judgments.

    With ``plant_faults`` reviewers 0, 1, 2 are the always-left clicker, the random clicker and
    the self-contradicting reviewer (who flips a and b on every retest). With ``better_first``
    response a is always the stronger model's answer.
    """
    if judgments_per_pair > n_reviewers:
        raise ValueError("judgments_per_pair cannot exceed n_reviewers")
    rng = np.random.default_rng(seed)
    strength = np.linspace(-1.0, 1.0, n_models)
    model_names = [f"sft@v{i + 1}" for i in range(n_models)]
    names = [f"reviewer-{i:03d}" for i in range(n_reviewers)]
    planted: dict[str, int] = {}
    if plant_faults:
        for index, name in enumerate(PLANTED_REVIEWERS[: min(3, n_reviewers)]):
            names[index] = name
            planted[name] = index

    # Pairs: two different models, a truth, maybe gold.
    model_a = rng.integers(0, n_models, n_pairs)
    model_b = (model_a + rng.integers(1, n_models, n_pairs)) % n_models
    if better_first:
        weaker_first = strength[model_a] < strength[model_b]
        model_a, model_b = np.where(weaker_first, model_b, model_a), np.where(weaker_first, model_a, model_b)
    p_a = 1.0 / (1.0 + np.exp(-(strength[model_a] - strength[model_b])))
    draw = rng.random(n_pairs)
    truth = np.where(
        draw < true_tie_share, WINNER_TIE, np.where(rng.random(n_pairs) < p_a, WINNER_A, WINNER_B)
    )
    gold = np.where((rng.random(n_pairs) < gold_share) & (truth != WINNER_TIE), truth, NO_GOLD)

    # Distinct reviewers per pair: a random start plus distinct offsets, modulo n_reviewers.
    offsets = np.zeros((n_pairs, judgments_per_pair), dtype=np.int64)
    for column in range(1, judgments_per_pair):
        candidate = rng.integers(1, n_reviewers, n_pairs)
        clash = (offsets[:, :column] == candidate[:, None]).any(axis=1)
        while clash.any():
            candidate[clash] = rng.integers(1, n_reviewers, int(clash.sum()))
            clash = (offsets[:, :column] == candidate[:, None]).any(axis=1)
        offsets[:, column] = candidate
    reviewer = ((rng.integers(0, n_reviewers, n_pairs)[:, None] + offsets) % n_reviewers).ravel()
    pair = np.repeat(np.arange(n_pairs, dtype=np.int64), judgments_per_pair)
    n = pair.size

    accuracy = rng.uniform(*accuracy_range, n_reviewers)
    speed = rng.uniform(20.0, 60.0, n_reviewers)  # median seconds of each reviewer
    left_is_a = rng.random(n) < 0.5
    winner = _careful_choice(truth[pair], rng.random(n) < accuracy[reviewer], rng)

    # Retests: a share of the original judgments again, shown in the swapped order, a day or more later.
    retest_of = np.flatnonzero(rng.random(n) < retest_share)
    retest_winner = np.where(
        rng.random(retest_of.size) < retest_repeat,
        winner[retest_of],
        _careful_choice(
            truth[pair[retest_of]], rng.random(retest_of.size) < accuracy[reviewer[retest_of]], rng
        ),
    ).astype(np.int8)
    all_pair = np.concatenate([pair, pair[retest_of]])
    all_reviewer = np.concatenate([reviewer, reviewer[retest_of]])
    all_left_is_a = np.concatenate([left_is_a, ~left_is_a[retest_of]])
    all_winner = np.concatenate([winner, retest_winner])
    is_retest = np.concatenate([np.zeros(n, dtype=bool), np.ones(retest_of.size, dtype=bool)])
    created_at = 1.7e9 + rng.uniform(0.0, days * 86400.0, n)
    all_created = np.concatenate(
        [created_at, created_at[retest_of] + rng.uniform(86400.0, 3 * 86400.0, retest_of.size)]
    )

    if ALWAYS_LEFT in planted:
        rows = all_reviewer == planted[ALWAYS_LEFT]
        all_winner[rows] = np.where(all_left_is_a[rows], WINNER_A, WINNER_B)
    if RANDOM_CLICKER in planted:
        rows = all_reviewer == planted[RANDOM_CLICKER]
        all_winner[rows] = rng.integers(0, 4, int(rows.sum()))
        speed[planted[RANDOM_CLICKER]] = 4.0  # clicking without reading is quick
    if SELF_CONTRADICTING in planted:
        rows = np.flatnonzero(is_retest & (all_reviewer == planted[SELF_CONTRADICTING]))
        original = winner[retest_of[rows - n]]
        all_winner[rows] = np.where(original == WINNER_A, WINNER_B, WINNER_A)

    total = all_pair.size
    decisive = all_winner <= WINNER_B
    strength_column = np.where(decisive, 1 + rng.binomial(2, 0.5, total), 0).astype(np.int8)
    seconds = (speed[all_reviewer] * rng.lognormal(0.0, 0.4, total)).astype(np.float32)
    criteria = {}
    for key in ("correct", "complete"):
        follows = rng.random(total) < 0.85
        value = np.where(follows, np.where(decisive, all_winner, 2), rng.integers(0, 3, total))
        criteria[key] = np.where(rng.random(total) < 0.05, -1, value).astype(np.int8)

    table = JudgmentTable(
        pair=all_pair + 1000,  # ids need not be dense
        reviewer=all_reviewer,
        winner=all_winner,
        strength=strength_column,
        left_is_a=all_left_is_a,
        is_retest=is_retest,
        seconds=seconds,
        created_at=all_created,
        gold=gold[all_pair],
        model_a=model_a[all_pair],
        model_b=model_b[all_pair],
        criteria=criteria,
        reviewer_names=names,
        model_names=model_names,
    )
    return SyntheticProject(table=table, model_strength=strength, planted=planted)
