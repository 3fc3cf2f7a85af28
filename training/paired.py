"""Paired differences, one model against another on the same rows: the mean change with its t interval.

One helper for both places a child is read against its parent: a DPO run's log-likelihood margin on the test
pairs (training/dpo.py change_from_base) and an evaluation's success per task (training/evaluate.py
paired_change). Both then call a change real only when the interval excludes no change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def mean_t_interval(deltas: Sequence[float], confidence: float) -> tuple[float, float, float]:
    """(mean, low, high): the mean of paired differences and its two-sided t interval at `confidence` on n - 1
    degrees of freedom (scipy's t quantile), i.e. mean +- t * sd / sqrt(n).

    One difference, or differences all equal, give a zero-width interval at the mean (no spread to estimate).
    The sums are math.fsum (exactly rounded), so the order the differences come in changes no digit."""
    from scipy import stats

    n = len(deltas)
    if n == 0:
        raise ValueError("no paired differences")
    mean = math.fsum(deltas) / n
    sd = math.sqrt(math.fsum((d - mean) ** 2 for d in deltas) / (n - 1)) if n > 1 else 0.0
    half = float(stats.t.ppf(1 - (1 - confidence) / 2, n - 1)) * sd / math.sqrt(n) if n > 1 and sd > 0 else 0.0
    return mean, mean - half, mean + half
