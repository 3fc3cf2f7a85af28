"""Per-reviewer quality in Pairwise: agreement with others, position bias, retest consistency, gold, speed.

All figures are computed for every reviewer at once with bincount/sort over the rows of a
``JudgmentTable``; nothing loops over reviewers or rows in Python.

Which rows count where:
- agreement with others, gold accuracy: original judgments only (``is_retest`` false);
- left-choice rate (position bias): every judgment, retests included, because each one is a
  separate click with its own random order; ties and both_bad are not a side and are left out;
- retest consistency: each retest against the same reviewer's earliest original judgment of that
  pair; consistent when the un-swapped choice (a / b / tie / both_bad) is the same;
- speed: every judgment with a known time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from annotate.quality.table import JudgmentTable
from annotate.review.choices import WINNER_B, WINNERS

N_WINNER_VALUES = len(WINNERS)

FLAG_POSITION_BIAS = "position_bias"
FLAG_LOW_AGREEMENT = "low_agreement"
FLAG_INCONSISTENT_RETEST = "inconsistent_retest"
FLAG_TOO_FAST = "too_fast"
FLAG_FAILING_GOLD = "failing_gold"


@dataclass(frozen=True)
class ReviewerFlagRules:
    """When a reviewer gets a flag. Rate flags need evidence: the Wilson 95% upper bound must be
    below the threshold, so a reviewer with three judgments is never flagged on noise."""

    position_bias_alpha: float = 0.01  # Holm-adjusted binomial p-value across reviewers
    position_bias_min_effect: float = 0.10  # and |left rate - 0.5| at least this
    min_decisive_for_bias: int = 10
    low_agreement_margin: float = 0.15  # below the median reviewer's agreement with others
    min_agreement_judgments: int = 20
    retest_consistency_min: float = 0.70
    min_retests: int = 5
    gold_accuracy_min: float = 0.60
    min_gold: int = 5
    too_fast_seconds: float = 3.0  # a median below this is too fast whatever the project
    too_fast_fraction: float = 0.25  # ... or below this share of the median reviewer's median
    min_timed_judgments: int = 10


@dataclass(frozen=True)
class RateWithInterval:
    """Counts and rates for every reviewer; all arrays have shape (r,), NaN where ``total`` is 0."""

    hits: np.ndarray
    total: np.ndarray
    rate: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray


@dataclass(frozen=True)
class ReviewerQuality:
    """Per-reviewer figures, index = reviewer index of the table; arrays have shape (r,)."""

    judgments: np.ndarray
    agreement: RateWithInterval  # hits = agrees with the leave-one-out majority of the others
    left: RateWithInterval  # hits = clicked left, total = a/b choices (retests included)
    left_p_value: np.ndarray  # two-sided exact binomial test of left rate = 0.5; NaN if no choices
    left_p_adjusted: np.ndarray  # Holm-adjusted across reviewers
    retest: RateWithInterval  # hits = same un-swapped choice as the original
    gold: RateWithInterval  # hits = chose the gold-preferred answer
    median_seconds: np.ndarray
    timed_judgments: np.ndarray
    flags: list[list[str]] = field(default_factory=list)
    agreement_reference: float | None = None  # median agreement the low_agreement flag compares to
    too_fast_below: float | None = None  # the median time under which too_fast is set


@dataclass(frozen=True)
class LeaveOneOutAgreement:
    """Per original judgment (rows where ``is_retest`` is false, in table order); shape (m,).

    ``counted`` is false where the other reviewers of the pair have no unique plurality choice
    (no others, or a tie among them); ``agrees`` is meaningful only where counted.
    """

    rows: np.ndarray  # (m,) row numbers in the table
    counted: np.ndarray
    agrees: np.ndarray


def wilson_interval(
    *, hits: np.ndarray, total: np.ndarray, confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for (k,) hit counts out of (k,) totals; NaN where total is 0."""
    hits = np.asarray(hits, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    low = np.full(hits.shape, np.nan)
    high = np.full(hits.shape, np.nan)
    some = total > 0
    if np.any(some):
        # Imported here: SciPy's statistics take a second to import, and every process starts the apps.
        from statsmodels.stats.proportion import proportion_confint

        low[some], high[some] = proportion_confint(
            hits[some], total[some], alpha=1 - confidence, method="wilson"
        )
    return low, high


def binomial_two_sided_p(*, hits: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Exact two-sided binomial p-value of hits/total against 1/2, vectorised; NaN where total is 0.

    For p = 1/2 the distribution is symmetric, so the two-sided p-value (scipy's binomtest
    definition) is twice the smaller tail, capped at 1.
    """
    hits = np.asarray(hits, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    from scipy.stats import binom  # imported here, as in wilson_interval

    tails = np.minimum(binom.cdf(hits, total, 0.5), binom.sf(hits - 1, total, 0.5))
    return np.where(total > 0, np.minimum(1.0, 2.0 * tails), np.nan)


def _rate(hits: np.ndarray, total: np.ndarray) -> RateWithInterval:
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(total > 0, hits / np.maximum(total, 1), np.nan)
    low, high = wilson_interval(hits=hits, total=total)
    return RateWithInterval(hits=hits, total=total, rate=rate, ci_low=low, ci_high=high)


def leave_one_out_agreement(*, table: JudgmentTable) -> LeaveOneOutAgreement:
    """Does each original judgment match the plurality choice of the other reviewers of its pair?"""
    rows = np.flatnonzero(~table.is_retest)
    pair = table.pair_index[rows]
    winner = table.winner[rows].astype(np.int64)
    n_pairs = table.pair_ids.size
    votes = np.bincount(pair * N_WINNER_VALUES + winner, minlength=n_pairs * N_WINNER_VALUES)
    others = votes.reshape(n_pairs, N_WINNER_VALUES)[pair].astype(np.int32)
    others[np.arange(rows.size), winner] -= 1
    top = others.max(axis=1) if rows.size else np.zeros(0, dtype=np.int32)
    unique_top = (others == top[:, None]).sum(axis=1) == 1
    counted = (top > 0) & unique_top
    agrees = others.argmax(axis=1) == winner if rows.size else np.zeros(0, dtype=bool)
    return LeaveOneOutAgreement(rows=rows, counted=counted, agrees=agrees & counted)


@dataclass(frozen=True)
class RetestMatches:
    """Each retest matched to the same reviewer's earliest original judgment of the pair; shape (t,)."""

    retest_rows: np.ndarray
    original_rows: np.ndarray
    consistent: np.ndarray
    swapped: np.ndarray  # the retest showed the answers in the other order
    unmatched: int  # retests with no original judgment among current rows


def match_retests(*, table: JudgmentTable) -> RetestMatches:
    """Pair every retest row with its original (same pair, same reviewer, not a retest)."""
    n_reviewers = max(len(table.reviewer_names), 1)
    key = table.pair_index * n_reviewers + table.reviewer
    original = np.flatnonzero(~table.is_retest)
    retest = np.flatnonzero(table.is_retest)
    order = original[np.lexsort((table.created_at[original], key[original]))]
    sorted_keys = key[order]
    first = np.ones(order.size, dtype=bool)
    first[1:] = sorted_keys[1:] != sorted_keys[:-1]
    earliest, earliest_keys = order[first], sorted_keys[first]
    position = np.searchsorted(earliest_keys, key[retest])
    position = np.minimum(position, max(earliest_keys.size - 1, 0))
    matched = earliest_keys.size > 0
    found = (earliest_keys[position] == key[retest]) if matched else np.zeros(retest.size, dtype=bool)
    retest_rows = retest[found]
    original_rows = earliest[position[found]] if matched else np.zeros(0, dtype=np.int64)
    return RetestMatches(
        retest_rows=retest_rows,
        original_rows=original_rows,
        consistent=table.winner[retest_rows] == table.winner[original_rows],
        swapped=table.left_is_a[retest_rows] != table.left_is_a[original_rows],
        unmatched=int(retest.size - retest_rows.size),
    )


def _median_by_group(
    *, group: np.ndarray, values: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray]:
    """(g,) median of (n,) values per group index and (g,) counts; NaN for empty groups."""
    counts = np.bincount(group, minlength=n_groups)
    medians = np.full(n_groups, np.nan)
    if values.size == 0:
        return medians, counts
    order = np.lexsort((values, group))
    sorted_values = values[order].astype(np.float64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    has = counts > 0
    low = starts[has] + (counts[has] - 1) // 2
    high = starts[has] + counts[has] // 2
    medians[has] = (sorted_values[low] + sorted_values[high]) / 2.0
    return medians, counts


def reviewer_quality(
    *,
    table: JudgmentTable,
    rules: ReviewerFlagRules | None = None,
    loo: LeaveOneOutAgreement | None = None,
    retests: RetestMatches | None = None,
) -> ReviewerQuality:
    """Every reviewer's figures and flags. ``loo`` and ``retests`` may be passed to reuse work."""
    rules = rules or ReviewerFlagRules()
    n = max(len(table.reviewer_names), 0)
    loo = loo if loo is not None else leave_one_out_agreement(table=table)
    retests = retests if retests is not None else match_retests(table=table)

    def count(rows: np.ndarray) -> np.ndarray:
        return np.bincount(table.reviewer[rows], minlength=n).astype(np.int64)

    judgments = np.bincount(table.reviewer, minlength=n).astype(np.int64)
    agreement = _rate(count(loo.rows[loo.agrees]), count(loo.rows[loo.counted]))

    decisive = np.flatnonzero(table.winner <= WINNER_B)
    left = _rate(count(decisive[table.clicked_left[decisive]]), count(decisive))
    left_p = binomial_two_sided_p(hits=left.hits, total=left.total)
    left_p_adjusted = np.full(n, np.nan)
    tested = np.isfinite(left_p)
    if np.any(tested):
        from statsmodels.stats.multitest import multipletests  # imported here, as in wilson_interval

        left_p_adjusted[tested] = multipletests(left_p[tested], method="holm")[1]

    retest = _rate(count(retests.retest_rows[retests.consistent]), count(retests.retest_rows))

    gold_rows = np.flatnonzero((table.gold >= 0) & ~table.is_retest)
    gold_hit = gold_rows[table.winner[gold_rows] == table.gold[gold_rows]]
    gold = _rate(count(gold_hit), count(gold_rows))

    timed = np.flatnonzero(np.isfinite(table.seconds))
    median_seconds, timed_counts = _median_by_group(
        group=table.reviewer[timed].astype(np.int64), values=table.seconds[timed], n_groups=n
    )

    flags: list[list[str]] = [[] for _ in range(n)]
    biased = (
        (left.total >= rules.min_decisive_for_bias)
        & (np.nan_to_num(left_p_adjusted, nan=1.0) < rules.position_bias_alpha)
        & (np.abs(np.nan_to_num(left.rate, nan=0.5) - 0.5) >= rules.position_bias_min_effect)
    )
    enough_agreement = agreement.total >= rules.min_agreement_judgments
    reference = float(np.median(agreement.rate[enough_agreement])) if np.any(enough_agreement) else None
    low_agreement = (
        enough_agreement & (agreement.ci_high < reference - rules.low_agreement_margin)
        if reference is not None
        else np.zeros(n, dtype=bool)
    )
    inconsistent = (retest.total >= rules.min_retests) & (retest.ci_high < rules.retest_consistency_min)
    failing_gold = (gold.total >= rules.min_gold) & (gold.ci_high < rules.gold_accuracy_min)
    enough_timed = timed_counts >= rules.min_timed_judgments
    too_fast_below = None
    too_fast = np.zeros(n, dtype=bool)
    if np.any(enough_timed):
        too_fast_below = max(
            rules.too_fast_seconds, rules.too_fast_fraction * float(np.median(median_seconds[enough_timed]))
        )
        too_fast = enough_timed & (median_seconds < too_fast_below)
    for name, mask in (
        (FLAG_POSITION_BIAS, biased),
        (FLAG_LOW_AGREEMENT, low_agreement),
        (FLAG_INCONSISTENT_RETEST, inconsistent),
        (FLAG_TOO_FAST, too_fast),
        (FLAG_FAILING_GOLD, failing_gold),
    ):
        for reviewer in np.flatnonzero(mask):
            flags[reviewer].append(name)

    return ReviewerQuality(
        judgments=judgments,
        agreement=agreement,
        left=left,
        left_p_value=left_p,
        left_p_adjusted=left_p_adjusted,
        retest=retest,
        gold=gold,
        median_seconds=median_seconds,
        timed_judgments=timed_counts,
        flags=flags,
        agreement_reference=reference,
        too_fast_below=too_fast_below,
    )
