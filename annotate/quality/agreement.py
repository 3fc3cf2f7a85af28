"""Inter-rater agreement over pairs: percent agreement, Krippendorff's alpha, Fleiss' and Cohen's kappa.

Units are pairs, raters are reviewers, values are category indices. Everything is computed from
the per-pair value counts (n_units, n_values): one row per pair, one column per category, the
number of reviewers who chose it.

Orientation. Which answer of a pair is "a" is only the order of the import file, so a figure that
treats a and b as categories must not depend on it (docs/agreement.md). Every estimator here takes
an optional ``swap``: the permutation of the categories that exchanges a and b (for the report's
nominal coding (1, 0, 2, 3); for a signed scale its reversal). With it, each unit is counted in
both orientations: its value counts plus the same counts with a and b exchanged. Observed
disagreement is unchanged (a unit disagrees with itself exactly as much either way round); chance
agreement comes from symmetric marginals, so a project whose import lists the better answer first
is not scored as if reviewers agreed by chance. Without ``swap`` the estimators are the classical
ones, which the textbook tests check against published examples.

Alpha is computed from the coincidence matrix of the distinct unit patterns (below), for the point
estimate and the bootstrap alike. The ``krippendorff`` package gives the same value (the tests
check it, with and without orientation doubling), but it builds an (n_units, V, V) array: about a
gigabyte for the doubled ordinal data of a million judgments. Fleiss' kappa comes from
``statsmodels``; Cohen's kappa per reviewer pair is vectorised here because calling a library once
per reviewer pair would be slow, and the tests check it against statsmodels.

Bootstrap over pairs: a pair enters alpha only through its row of value counts, so resampling
pairs with replacement is the same as drawing, for each distinct row ("pattern"), how many times
it appears: a multinomial over patterns with the observed frequencies. That makes 1,000 resamples
of 300,000 pairs cost a few matrix products instead of 1,000 passes over the data. With ``swap``
a pattern is a pair in a canonical orientation carrying both orientations' coincidences, so the
resampling unit is still the pair, and reversing every pair gives the same patterns, the same
draws and the same interval.

Determinism: every figure is computed from patterns in sorted order, so neither the order of the
rows nor the pair ids can change a single bit of the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Level = Literal["nominal", "ordinal"]


@dataclass(frozen=True)
class Estimate:
    """A figure with an optional confidence interval; ``value`` is None with ``reason`` when undefined."""

    value: float | None
    ci: tuple[float, float] | None = None
    reason: str | None = None


@dataclass(frozen=True)
class RaterPairKappas:
    """Cohen's kappa for every pair of raters that share units; all arrays have shape (k,).

    ``rater_a < rater_b``; ``kappa`` is NaN where chance agreement is 1 (both raters used one and
    the same category throughout), which the report turns into null.
    """

    rater_a: np.ndarray
    rater_b: np.ndarray
    shared: np.ndarray
    observed_agreement: np.ndarray
    kappa: np.ndarray


def unit_value_counts(
    *, unit_index: np.ndarray, value_index: np.ndarray, n_units: int, n_values: int
) -> np.ndarray:
    """(n_units, n_values) int64 counts of each value per unit, from (n,) unit and value indices."""
    flat = np.bincount(
        unit_index.astype(np.int64) * n_values + value_index.astype(np.int64), minlength=n_units * n_values
    )
    return flat.reshape(n_units, n_values)


def count_distinct_rows(*, rows: np.ndarray, weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of a (N, V) non-negative integer array and how often each occurs: (G, V), (G,) int64.

    ``weights`` gives each row's own count (default 1 each). Rows are packed into one int64 key each when they
    fit (sorting 1-D keys is much faster than ``np.unique(axis=0)``, which dominated the report's run time);
    otherwise falls back to it.
    """
    rows = np.asarray(rows)
    if rows.shape[0] == 0:
        return rows.reshape(0, rows.shape[1]), np.zeros(0, dtype=np.int64)
    base = int(rows.max()) + 1
    if rows.min() < 0 or base ** rows.shape[1] >= 2**62:
        patterns, inverse = np.unique(rows, axis=0, return_inverse=True)
    else:
        _, first, inverse = np.unique(_packed_rows(rows, base), return_index=True, return_inverse=True)
        patterns = rows[first]
    frequency = np.bincount(inverse.ravel(), weights=weights, minlength=patterns.shape[0])
    return patterns, frequency.astype(np.int64, copy=False)


def _packed_rows(rows: np.ndarray, base: int) -> np.ndarray:
    """(N,) int64 keys sum(rows[:, j] * base**j), built a column at a time: no (N, V) int64 copy of the rows."""
    keys = np.zeros(rows.shape[0], dtype=np.int64)
    for column in range(rows.shape[1] - 1, -1, -1):
        keys *= base
        keys += rows[:, column]
    return keys


def reversed_scale(n_values: int) -> np.ndarray:
    """The swap of a signed scale coded 0..n-1 around its midpoint (b preferred <-> a preferred)."""
    return np.arange(n_values - 1, -1, -1)


def _pairable(value_counts: np.ndarray) -> np.ndarray:
    """(n_pairable, V) rows of units that at least two raters coded: only these carry agreement."""
    return value_counts[value_counts.sum(axis=1) >= 2]


def _canonical_orientation(rows: np.ndarray, swap: np.ndarray) -> np.ndarray:
    """Each (N, V) row or its swapped twin, whichever is lexicographically smaller: a pair and its
    reversal map to the same row."""
    rows = np.asarray(rows, dtype=np.int64)
    swapped = rows[:, swap]
    difference = swapped - rows
    differs = difference != 0
    first = differs.argmax(axis=1)
    smaller = differs.any(axis=1) & (difference[np.arange(rows.shape[0]), first] < 0)
    return np.where(smaller[:, None], swapped, rows)


def unit_patterns(*, value_counts: np.ndarray, swap: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of (N, V) value counts and their frequencies: (G, V) int64, (G,), in sorted order.

    With ``swap`` every row is first put in its canonical orientation, so that reversing any pair
    changes nothing here. The distinct rows are found first and only they are turned: an export's
    summary at a million judgments held about 50 MB of (N, V) copies when every row was.
    """
    patterns, frequency = count_distinct_rows(rows=np.asarray(value_counts))
    patterns = patterns.astype(np.int64, copy=False)
    if swap is None or patterns.shape[0] == 0:
        return patterns, frequency
    return count_distinct_rows(rows=_canonical_orientation(patterns, np.asarray(swap)), weights=frequency)


def _orientations(patterns: np.ndarray, swap: np.ndarray | None) -> list[np.ndarray]:
    """The patterns as counted: themselves, and with ``swap`` their swapped twins too."""
    return [patterns] if swap is None else [patterns, patterns[:, swap]]


def _per_unit_agreement(value_counts: np.ndarray) -> np.ndarray:
    """(N,) share of agreeing rater pairs per unit, for units with >= 2 values (Fleiss' P_i).

    Unchanged by any permutation of the categories, so orientation never enters it.
    """
    counts = value_counts.astype(np.float64)
    m = counts.sum(axis=1)
    return (counts * (counts - 1)).sum(axis=1) / (m * (m - 1))


def percent_agreement(*, value_counts: np.ndarray) -> float | None:
    """Mean over units with >= 2 values of the share of rater pairs that agree; (N, V) input.

    A share in [0, 1], not a percentage. None when no unit has two values. Independent of
    orientation (and of row order: it is summed over sorted patterns).
    """
    rows = _pairable(value_counts)
    if rows.shape[0] == 0:
        return None
    patterns, frequency = count_distinct_rows(rows=rows)
    return float(frequency.astype(np.float64) @ _per_unit_agreement(patterns) / frequency.sum())


def coincidence_matrix(*, value_counts: np.ndarray, swap: np.ndarray | None = None) -> np.ndarray:
    """Krippendorff's (V, V) coincidence matrix of (N, V) value counts (units with < 2 values add nothing).

    With ``swap`` each unit is counted in both orientations (the matrix of the doubled data).
    """
    rows = _pairable(value_counts)
    if rows.shape[0] == 0:
        return np.zeros((value_counts.shape[1], value_counts.shape[1]))
    patterns, frequency = unit_patterns(value_counts=rows, swap=swap)
    return np.tensordot(frequency.astype(np.float64), _pattern_coincidences(patterns, swap), axes=1)


def _pattern_coincidences(patterns: np.ndarray, swap: np.ndarray | None = None) -> np.ndarray:
    """(G, V, V) coincidences contributed by one unit of each (G, V) pattern (each with >= 2 values);
    with ``swap``, by the unit and its swapped twin together."""
    total = np.zeros((patterns.shape[0], patterns.shape[1], patterns.shape[1]))
    for oriented in _orientations(patterns, swap):
        counts = oriented.astype(np.float64)
        m = counts.sum(axis=1)
        outer = counts[:, :, None] * counts[:, None, :]
        outer -= counts[:, :, None] * np.eye(counts.shape[1])[None, :, :]
        total += outer / (m - 1)[:, None, None]
    return total


def alpha_from_coincidences(*, coincidences: np.ndarray, level: Level) -> np.ndarray:
    """Krippendorff's alpha of (..., V, V) coincidence matrices, vectorised over leading axes.

    Returns shape (...); NaN where expected disagreement is zero (only one value in use).
    Ordinal distances follow Krippendorff (2011): the squared count of values between c and k,
    with c and k counted half.
    """
    o = np.asarray(coincidences, dtype=np.float64)
    v = o.shape[-1]
    n_v = o.sum(axis=-1)
    n = n_v.sum(axis=-1)
    if level == "nominal":
        distance = np.broadcast_to(1.0 - np.eye(v), o.shape)
    elif level == "ordinal":
        cumulative = np.concatenate([np.zeros((*n_v.shape[:-1], 1)), np.cumsum(n_v, axis=-1)], axis=-1)
        low = np.minimum.outer(np.arange(v), np.arange(v))
        high = np.maximum.outer(np.arange(v), np.arange(v))
        between = cumulative[..., high + 1] - cumulative[..., low]
        distance = (between - (n_v[..., :, None] + n_v[..., None, :]) / 2.0) ** 2
    else:
        raise ValueError(f"level must be 'nominal' or 'ordinal', not {level!r}")
    observed = (o * distance).sum(axis=(-2, -1))
    expected = (n_v[..., :, None] * n_v[..., None, :] * distance).sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = 1.0 - (n - 1.0) * observed / expected
    return np.where(expected > 0, alpha, np.nan)


def percentile_ci(replicates: np.ndarray, confidence: float) -> tuple[float, float] | None:
    """Percentile interval of (B,) replicates, ignoring undefined ones; None if most are undefined."""
    finite = replicates[np.isfinite(replicates)]
    if finite.size < max(2, replicates.size // 2):
        return None
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(finite, [tail, 1.0 - tail])
    return float(low), float(high)


def resampled_pattern_frequencies(
    *, frequency: np.ndarray, n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """(B, G) pattern counts of B bootstrap resamples of the units (with replacement)."""
    total = int(frequency.sum())
    return rng.multinomial(total, frequency / total, size=n_resamples).astype(np.float64)


def krippendorff_alpha(
    *,
    value_counts: np.ndarray,
    level: Level,
    n_resamples: int,
    rng: np.random.Generator,
    confidence: float = 0.95,
    swap: np.ndarray | None = None,
) -> Estimate:
    """Krippendorff's alpha of (N, V) value counts, value order = column order, with a bootstrap CI.

    With ``swap`` each unit counts in both orientations (module docstring). The CI resamples units
    (pairs with >= 2 values) with replacement; ``n_resamples=0`` skips it.
    """
    rows = _pairable(value_counts)
    if rows.shape[0] == 0:
        return Estimate(None, None, "no pair has two or more judgments")
    patterns, frequency = unit_patterns(value_counts=rows, swap=swap)
    per_pattern = _pattern_coincidences(patterns, swap).reshape(patterns.shape[0], -1)
    v = rows.shape[1]
    coincidences = (frequency.astype(np.float64) @ per_pattern).reshape(v, v)
    if np.count_nonzero(coincidences.sum(axis=1)) < 2:
        reason = "every judgment on overlapping pairs has the same value, so alpha is undefined"
        return Estimate(None, None, reason)
    value = float(alpha_from_coincidences(coincidences=coincidences, level=level))
    if not np.isfinite(value):
        return Estimate(None, None, "alpha is undefined for these data")
    if n_resamples <= 0:
        return Estimate(value, None, None)
    resampled = resampled_pattern_frequencies(frequency=frequency, n_resamples=n_resamples, rng=rng)
    replicates = (resampled @ per_pattern).reshape(n_resamples, v, v)
    ci = percentile_ci(alpha_from_coincidences(coincidences=replicates, level=level), confidence)
    if ci is None:
        return Estimate(value, None, "bootstrap interval undefined: most resamples had one value only")
    return Estimate(value, ci, None)


def percent_agreement_with_ci(
    *,
    value_counts: np.ndarray,
    n_resamples: int,
    rng: np.random.Generator,
    confidence: float = 0.95,
    swap: np.ndarray | None = None,
) -> Estimate:
    """Percent agreement (a share) of (N, V) value counts with a bootstrap CI over units.

    The figure never depends on orientation; ``swap`` only makes the resampled patterns, and so
    the interval, the same for a pair and its reversal.
    """
    rows = _pairable(value_counts)
    if rows.shape[0] == 0:
        return Estimate(None, None, "no pair has two or more judgments")
    patterns, frequency = unit_patterns(value_counts=rows, swap=swap)
    per_pattern = _per_unit_agreement(patterns)
    value = float(frequency.astype(np.float64) @ per_pattern / frequency.sum())
    if n_resamples <= 0:
        return Estimate(value, None, None)
    resampled = resampled_pattern_frequencies(frequency=frequency, n_resamples=n_resamples, rng=rng)
    replicates = resampled @ per_pattern / frequency.sum()
    return Estimate(value, percentile_ci(replicates, confidence), None)


def fleiss_kappa_complete(
    *, value_counts: np.ndarray, raters_per_unit: int | None = None, swap: np.ndarray | None = None
) -> tuple[Estimate, int | None, int]:
    """Fleiss' kappa on the units that have exactly ``raters_per_unit`` values; (N, V) input.

    Fleiss' kappa needs the same number of ratings per unit. When ``raters_per_unit`` is None the
    most common count >= 2 is used (the project's overlap, in practice). With ``swap`` the kappa
    is that of the doubled table (each unit in both orientations). Returns (estimate, raters per
    unit used, units used); units are counted once, not twice.
    """
    m = value_counts.sum(axis=1)
    if raters_per_unit is None:
        counts = np.bincount(m[m >= 2]) if np.any(m >= 2) else np.zeros(0, dtype=np.int64)
        if counts.size == 0:
            return Estimate(None, None, "no pair has two or more judgments"), None, 0
        raters_per_unit = int(counts.argmax())
    rows = value_counts[m == raters_per_unit]
    if raters_per_unit < 2 or rows.shape[0] < 2:
        return (
            Estimate(None, None, f"fewer than 2 pairs have exactly {raters_per_unit} judgments"),
            raters_per_unit,
            int(rows.shape[0]),
        )
    patterns, frequency = unit_patterns(value_counts=rows, swap=swap)
    # Sorted patterns, repeated: the same table whatever the order of the pairs.
    table = np.concatenate([np.repeat(p, frequency, axis=0) for p in _orientations(patterns, swap)])
    shares = table.sum(axis=0) / table.sum()
    if np.isclose((shares**2).sum(), 1.0):
        return (
            Estimate(None, None, "every judgment on these pairs has the same value; kappa is undefined"),
            raters_per_unit,
            int(rows.shape[0]),
        )
    # Imported here: statsmodels takes over a second to import, and the exporter imports this module.
    from statsmodels.stats.inter_rater import fleiss_kappa

    return Estimate(float(fleiss_kappa(table, method="fleiss"))), raters_per_unit, int(rows.shape[0])


def cohen_kappa_from_tables(*, tables: np.ndarray) -> np.ndarray:
    """Cohen's (unweighted) kappa of (k, V, V) contingency tables -> (k,); NaN where chance agreement is 1."""
    tables = np.asarray(tables, dtype=np.float64)
    total = tables.sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        observed = np.trace(tables, axis1=-2, axis2=-1) / total
        chance = (tables.sum(axis=-1) * tables.sum(axis=-2)).sum(axis=-1) / total**2
        kappa = (observed - chance) / (1.0 - chance)
    return np.where((total > 0) & (chance < 1.0 - 1e-12), kappa, np.nan)


def cohen_kappa_by_rater_pair(
    *,
    unit_index: np.ndarray,
    rater_index: np.ndarray,
    value_index: np.ndarray,
    n_raters: int,
    n_values: int,
    min_shared: int,
    swap: np.ndarray | None = None,
) -> RaterPairKappas:
    """Cohen's kappa for each pair of raters with >= ``min_shared`` shared units; (n,) inputs.

    Every two ratings of the same unit by different raters are one co-rating; a rater who rated a
    unit twice contributes each of their ratings. With ``swap`` each contingency table is added
    to its twin with a and b exchanged on both axes (every shared unit in both orientations);
    ``shared`` and the observed agreement are unchanged by that. Cost is O(n log n) plus one pass
    per extra rater on the most-rated unit.
    """
    empty = np.zeros(0, dtype=np.int64)
    if unit_index.size < 2:
        return RaterPairKappas(empty, empty, empty, np.zeros(0), np.zeros(0))
    order = np.lexsort((rater_index, unit_index))
    unit, rater, value = unit_index[order], rater_index[order].astype(np.int64), value_index[order]
    first_parts, second_parts = [], []
    # Positions i whose unit equals that of i + offset; sorted by unit, so each set shrinks.
    candidates = np.arange(unit.size - 1)
    offset = 1
    while candidates.size:
        candidates = candidates[candidates + offset < unit.size]
        candidates = candidates[unit[candidates] == unit[candidates + offset]]
        first_parts.append(candidates)
        second_parts.append(candidates + offset)
        offset += 1
    first = np.concatenate(first_parts)
    second = np.concatenate(second_parts)
    distinct = rater[first] != rater[second]
    first, second = first[distinct], second[distinct]
    key = rater[first] * n_raters + rater[second]  # rater[first] < rater[second] by the sort
    keys, inverse = np.unique(key, return_inverse=True)
    tables = np.bincount(
        inverse * n_values * n_values + value[first].astype(np.int64) * n_values + value[second],
        minlength=keys.size * n_values * n_values,
    ).reshape(keys.size, n_values, n_values)
    shared = tables.sum(axis=(1, 2))
    keep = shared >= min_shared
    tables, keys, shared = tables[keep], keys[keep], shared[keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        observed = np.trace(tables, axis1=1, axis2=2) / shared
    if swap is not None:
        tables = tables + tables[:, swap][:, :, swap]
    return RaterPairKappas(
        rater_a=keys // n_raters,
        rater_b=keys % n_raters,
        shared=shared,
        observed_agreement=observed,
        kappa=cohen_kappa_from_tables(tables=tables),
    )
