"""Agreement statistics against published examples worked by hand, and against the libraries."""

import krippendorff
import numpy as np
import pytest
from scipy.stats import binomtest
from statsmodels.stats.inter_rater import cohens_kappa

from annotate.quality.agreement import (
    alpha_from_coincidences,
    cohen_kappa_by_rater_pair,
    cohen_kappa_from_tables,
    coincidence_matrix,
    count_distinct_rows,
    fleiss_kappa_complete,
    krippendorff_alpha,
    percent_agreement,
    unit_value_counts,
)
from annotate.quality.reviewers import binomial_two_sided_p

NAN = np.nan
# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", Annenberg School for
# Communication, section C: four observers A-D, twelve units, values 1-5, NaN = missing.
KRIPPENDORFF_2011 = np.array(
    [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
        [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
    ]
)

# Fleiss (1971) as worked on Wikipedia ("Fleiss' kappa", worked example): 10 subjects, 14 raters
# each, 5 categories. By hand: P-bar = 0.378, P-bar-e = 0.213, kappa = 0.210.
FLEISS_WIKIPEDIA = np.array(
    [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
)


def _value_counts_of(reliability: np.ndarray, values: list[int]) -> np.ndarray:
    """(units, values) counts from an (observers, units) reliability matrix."""
    return np.stack([(reliability == value).sum(axis=0) for value in values], axis=1)


def test_krippendorff_2011_nominal_alpha_matches_the_hand_computation():
    """Krippendorff (2011), section C: n = 40 pairable values with marginals 9, 13, 10, 5, 3 and
    8 off-diagonal coincidences, so nominal alpha = 1 - 39 * 8 / (40**2 - sum n_c**2) = 0.743."""
    counts = _value_counts_of(KRIPPENDORFF_2011, [1, 2, 3, 4, 5])
    coincidences = coincidence_matrix(value_counts=counts)
    assert coincidences.sum() == pytest.approx(40)
    assert coincidences.sum(axis=1) == pytest.approx([9, 13, 10, 5, 3])
    off_diagonal = coincidences.sum() - np.trace(coincidences)
    assert off_diagonal == pytest.approx(8)
    by_hand = 1 - 39 * 8 / (40**2 - (9**2 + 13**2 + 10**2 + 5**2 + 3**2))
    assert by_hand == pytest.approx(0.743, abs=5e-4)

    estimate = krippendorff_alpha(
        value_counts=counts, level="nominal", n_resamples=0, rng=np.random.default_rng(0)
    )
    assert estimate.value == pytest.approx(by_hand)
    assert alpha_from_coincidences(coincidences=coincidences, level="nominal") == pytest.approx(by_hand)


def test_krippendorff_2011_ordinal_alpha_is_0_815():
    """Krippendorff (2011), section C, ordinal metric: alpha = 0.815 (published value)."""
    counts = _value_counts_of(KRIPPENDORFF_2011, [1, 2, 3, 4, 5])
    estimate = krippendorff_alpha(
        value_counts=counts, level="ordinal", n_resamples=0, rng=np.random.default_rng(0)
    )
    assert estimate.value == pytest.approx(0.815, abs=5e-4)
    vectorised = alpha_from_coincidences(
        coincidences=coincidence_matrix(value_counts=counts), level="ordinal"
    )
    assert vectorised == pytest.approx(estimate.value)


@pytest.mark.parametrize("level", ["nominal", "ordinal"])
def test_vectorised_alpha_equals_the_krippendorff_package_on_random_data(level):
    rng = np.random.default_rng(7)
    for _ in range(20):
        counts = rng.multinomial(rng.integers(2, 6), rng.dirichlet(np.ones(5)), size=rng.integers(3, 40))
        expected = krippendorff.alpha(value_counts=counts, level_of_measurement=level)
        got = alpha_from_coincidences(coincidences=coincidence_matrix(value_counts=counts), level=level)
        assert got == pytest.approx(expected, abs=1e-10)


def test_fleiss_1971_wikipedia_example_gives_kappa_0_210_and_agreement_0_378():
    estimate, raters, units = fleiss_kappa_complete(value_counts=FLEISS_WIKIPEDIA)
    assert (raters, units) == (14, 10)
    assert estimate.value == pytest.approx(0.210, abs=1e-3)
    assert percent_agreement(value_counts=FLEISS_WIKIPEDIA) == pytest.approx(0.378, abs=1e-3)


def test_fleiss_kappa_uses_only_pairs_with_the_complete_overlap():
    """A pair with fewer judgments than the rest is left out rather than breaking Fleiss' kappa."""
    partial = np.array([[1, 0, 0, 0, 0]])
    estimate, raters, units = fleiss_kappa_complete(value_counts=np.vstack([FLEISS_WIKIPEDIA, partial]))
    assert (raters, units) == (14, 10)
    assert estimate.value == pytest.approx(0.210, abs=1e-3)


def test_cohen_kappa_wikipedia_worked_example_is_0_4():
    """Wikipedia, "Cohen's kappa", simple example: 50 grant proposals, both readers yes 20,
    A yes / B no 5, A no / B yes 10, both no 15: p_o = 0.7, p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5,
    kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4."""
    table = np.array([[20, 5], [10, 15]])
    assert cohen_kappa_from_tables(tables=table[None])[0] == pytest.approx(0.4)

    # The same data as judgments: unit i, reviewer 0 and 1, value 0 = yes, 1 = no.
    cells = [(0, 0)] * 20 + [(0, 1)] * 5 + [(1, 0)] * 10 + [(1, 1)] * 15
    units = np.repeat(np.arange(50), 2)
    raters = np.tile([0, 1], 50)
    values = np.array(cells).ravel()
    pairs = cohen_kappa_by_rater_pair(
        unit_index=units, rater_index=raters, value_index=values, n_raters=2, n_values=2, min_shared=20
    )
    assert pairs.rater_a.tolist() == [0] and pairs.rater_b.tolist() == [1]
    assert pairs.shared.tolist() == [50]
    assert pairs.observed_agreement[0] == pytest.approx(0.7)
    assert pairs.kappa[0] == pytest.approx(0.4)


def test_cohen_kappa_equals_statsmodels_on_random_tables():
    rng = np.random.default_rng(3)
    tables = rng.integers(0, 30, size=(50, 4, 4))
    ours = cohen_kappa_from_tables(tables=tables)
    for table, kappa in zip(tables, ours, strict=True):
        assert kappa == pytest.approx(cohens_kappa(table, return_results=False))


def test_cohen_kappa_is_undefined_when_both_reviewers_always_say_the_same():
    assert np.isnan(cohen_kappa_from_tables(tables=np.array([[[30, 0], [0, 0]]]))[0])


def test_cohen_kappa_skips_reviewer_pairs_below_the_minimum_and_counts_three_way_overlap():
    # Three reviewers on the same 25 units: three reviewer pairs with 25 shared units each.
    units = np.repeat(np.arange(25), 3)
    raters = np.tile([2, 0, 1], 25)
    values = np.tile([0, 0, 1], 25)
    pairs = cohen_kappa_by_rater_pair(
        unit_index=units, rater_index=raters, value_index=values, n_raters=3, n_values=2, min_shared=20
    )
    assert sorted(zip(pairs.rater_a.tolist(), pairs.rater_b.tolist(), strict=True)) == [
        (0, 1),
        (0, 2),
        (1, 2),
    ]
    assert pairs.shared.tolist() == [25, 25, 25]
    none = cohen_kappa_by_rater_pair(
        unit_index=units, rater_index=raters, value_index=values, n_raters=3, n_values=2, min_shared=26
    )
    assert none.kappa.size == 0


def test_pattern_bootstrap_matches_resampling_pairs_one_by_one():
    """Drawing pattern frequencies from a multinomial is the pair bootstrap; compare its spread
    with a plain resampling of units."""
    rng = np.random.default_rng(11)
    counts = rng.multinomial(3, [0.6, 0.3, 0.1], size=300)
    estimate = krippendorff_alpha(
        value_counts=counts, level="nominal", n_resamples=2000, rng=np.random.default_rng(1)
    )
    per_unit = np.stack([coincidence_matrix(value_counts=row[None]) for row in counts])
    picks = np.random.default_rng(2).integers(0, counts.shape[0], size=(2000, counts.shape[0]))
    plain = alpha_from_coincidences(coincidences=per_unit[picks].sum(axis=1), level="nominal")
    plain_ci = np.quantile(plain, [0.025, 0.975])
    assert estimate.ci[0] < estimate.value < estimate.ci[1]
    assert estimate.ci[1] - estimate.ci[0] == pytest.approx(plain_ci[1] - plain_ci[0], rel=0.15)
    assert np.mean(estimate.ci) == pytest.approx(np.mean(plain_ci), abs=0.02)


def test_alpha_is_none_with_a_reason_when_undefined():
    rng = np.random.default_rng(0)
    nobody_overlaps = np.array([[1, 0], [0, 1]])
    result = krippendorff_alpha(value_counts=nobody_overlaps, level="nominal", n_resamples=10, rng=rng)
    assert result.value is None and "two or more" in result.reason
    everyone_agrees_on_one_value = np.array([[3, 0], [2, 0]])
    result = krippendorff_alpha(
        value_counts=everyone_agrees_on_one_value, level="ordinal", n_resamples=10, rng=rng
    )
    assert result.value is None and "undefined" in result.reason


def test_unit_value_counts_and_distinct_rows():
    counts = unit_value_counts(
        unit_index=np.array([0, 0, 2, 2, 2]), value_index=np.array([1, 1, 0, 1, 2]), n_units=3, n_values=3
    )
    assert counts.tolist() == [[0, 2, 0], [0, 0, 0], [1, 1, 1]]
    rows = np.random.default_rng(5).integers(0, 4, size=(500, 6))
    for data in (rows, rows * 10**4):  # the second takes the np.unique(axis=0) fallback
        patterns, frequency = count_distinct_rows(rows=data)
        expected_patterns, expected_frequency = np.unique(data, axis=0, return_counts=True)
        order = np.lexsort(patterns.T[::-1])
        assert patterns[order].tolist() == expected_patterns.tolist()
        assert frequency[order].tolist() == expected_frequency.tolist()


def test_distinct_rows_with_weights_count_as_the_rows_repeated():
    rng = np.random.default_rng(6)
    rows = rng.integers(0, 4, size=(300, 4))
    weights = rng.integers(0, 5, size=300)
    for data in (rows, rows * 10**5):  # packed keys, then the np.unique(axis=0) fallback
        patterns, frequency = count_distinct_rows(rows=data, weights=weights)
        repeated_patterns, repeated_frequency = count_distinct_rows(rows=np.repeat(data, weights, axis=0))
        kept = frequency > 0  # a row whose weights are all 0 is still a pattern, with frequency 0
        assert patterns[kept].tolist() == repeated_patterns.tolist()
        assert frequency[kept].tolist() == repeated_frequency.tolist()
        assert frequency.dtype == np.int64


@pytest.mark.parametrize(("hits", "total"), [(0, 1), (3, 10), (5, 10), (61, 100), (100, 100), (1, 2)])
def test_vectorised_binomial_p_value_equals_scipy_binomtest(hits, total):
    ours = binomial_two_sided_p(hits=np.array([hits]), total=np.array([total]))[0]
    assert ours == pytest.approx(binomtest(hits, total, 0.5).pvalue)
