"""Pairwise's agreement report: every quality figure of a project as one JSON-ready dict.

``agreement_report(table)`` returns the structure described in docs/agreement.md plus the extra
figures of the dashboard. It is built from named parts, in the order they appear below and run:
headline agreement, per criterion, position bias, reviewers, retests, gold, consensus, models,
over time, method. Rules that hold for any input, including an empty table:
- a figure that cannot be computed is None, and ``notes`` says why ("<key>: <reason>");
- no NaN or infinity anywhere: ``json.dumps(report, allow_nan=False)`` succeeds;
- no exception for small data;
- no figure depends on which answer of a pair the import listed first, on the order of the rows,
  or on the pair ids (docs/agreement.md, "Orientation").

How choices are coded (see also ``report["method"]``):
- nominal alpha, percent agreement, Fleiss' and Cohen's kappa use four categories of the
  un-swapped choice: a, b, tie, both_bad. both_bad is its own category: "neither answer is
  usable" is a different judgment from "both are equally good", and two reviewers who both say it
  agree. Each pair counts in both orientations (a and b exchanged), so chance agreement comes from
  symmetric marginals.
- ordinal alpha uses the signed strength -3..+3 (a preferred = positive, b = negative); tie and
  both_bad are 0, the midpoint: neither says which answer is better. Both orientations: the sign
  negated.
- per criterion: nominal a / b / tie; ordinal b < tie < a; both orientations likewise.
- retests are left out of agreement, consensus and ratings and used for retest consistency.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from annotate.quality import agreement as agreement_stats
from annotate.quality.consensus import consensus_summary, pair_consensus
from annotate.quality.ratings import bradley_terry_ratings
from annotate.quality.reviewers import (
    LeaveOneOutAgreement,
    RateWithInterval,
    RetestMatches,
    ReviewerFlagRules,
    ReviewerQuality,
    leave_one_out_agreement,
    match_retests,
    reviewer_quality,
    wilson_interval,
)
from annotate.quality.table import CRITERION_MISSING, JudgmentTable
from annotate.review.choices import CRITERION_SWAP, WINNER_B, WINNER_SWAP, WINNERS

N_NOMINAL = len(WINNERS)
N_ORDINAL = 7  # signed strength -3..+3
# The codings' a <-> b swaps (the permutation of category indices that reverses a pair).
NOMINAL_SWAP = np.array(WINNER_SWAP)
ORDINAL_SWAP = agreement_stats.reversed_scale(N_ORDINAL)
CRITERION_NOMINAL_SWAP = np.array(CRITERION_SWAP)
CRITERION_ORDINAL_SWAP = agreement_stats.reversed_scale(3)
CRITERION_ORDINAL_INDEX = np.array([2, 0, 1], dtype=np.int64)  # a -> 2, b -> 0, tie -> 1: b < tie < a

BUCKETS = (("hour", 3600.0), ("day", 86400.0), ("week", 7 * 86400.0), ("30 days", 30 * 86400.0))
_MAX_BUCKETS = 60
# Why a reviewer's figure is null, by the key it is null under.
REVIEWER_NULL_REASONS = {
    "agreement_with_others": "no judgment on a pair where the other reviewers have a unique majority",
    "left_rate": "no a/b choice (only ties or both_bad)",
    "retest_consistency": "no retest",
    "gold_accuracy": "no gold item judged",
    "median_seconds": "no judgment with a recorded time",
}
ORIENTATION = (
    "which answer of a pair is 'a' is only the import file's order, so every agreement figure counts "
    "each pair in both orientations (a and b exchanged; for the ordinal scale the sign negated): "
    "observed disagreement is unchanged and chance agreement comes from symmetric marginals"
)


# --- small helpers -----------------------------------------------------------------------------------


class _Notes:
    """Collects "<key>: <reason>" lines, once each, in the order they arise."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def add(self, key: str, reason: str) -> None:
        line = f"{key}: {reason}"
        if line not in self.lines:
            self.lines.append(line)


def _number(value: Any) -> float | None:
    """A finite Python float or None."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _interval(low: Any, high: Any) -> list[float] | None:
    low, high = _number(low), _number(high)
    return None if low is None or high is None else [low, high]


def _estimate(estimate: agreement_stats.Estimate, key: str, notes: _Notes, *, want_ci: bool) -> dict:
    if estimate.value is None:
        notes.add(key, estimate.reason or "cannot be computed")
    elif want_ci and estimate.ci is None:
        notes.add(f"{key}.ci", estimate.reason or "no bootstrap resamples were requested")
    return {
        "value": _number(estimate.value),
        "ci": None if estimate.ci is None else _interval(*estimate.ci),
    }


def _overall_rate(hits: int, total: int, confidence: float) -> tuple[float | None, list[float] | None]:
    """hits / total with its Wilson interval, or (None, None) when there is nothing to count."""
    if not total:
        return None, None
    low, high = wilson_interval(hits=np.array([hits]), total=np.array([total]), confidence=confidence)
    return _number(hits / total), _interval(low[0], high[0])


def _rate_or_none(rate: RateWithInterval, i: int) -> tuple[float | None, list[float] | None]:
    if rate.total[i] == 0:
        return None, None
    return _number(rate.rate[i]), _interval(rate.ci_low[i], rate.ci_high[i])


@dataclass(frozen=True)
class _Settings:
    """What every part of the report shares: the table, its original rows and the report's options."""

    table: JudgmentTable
    original: np.ndarray  # row numbers of the original (non-retest) judgments
    notes: _Notes
    bootstrap: int
    seed: int
    confidence: float
    overlap: int | None
    min_shared_pairs: int


@dataclass(frozen=True)
class _Coding:
    """One way of reading judgments as categories: which rows, their unit and rater, their values."""

    rows: np.ndarray
    nominal: np.ndarray
    ordinal: np.ndarray
    n_nominal: int
    n_ordinal: int
    nominal_swap: np.ndarray
    ordinal_swap: np.ndarray


# --- the parts, in report order --------------------------------------------------------------------


def _agreement_block(
    settings: _Settings, coding: _Coding, *, key: str, rngs: list[np.random.Generator], list_reviewer_pairs: bool
) -> dict:
    """Percent agreement, alpha (nominal, ordinal), Fleiss' and Cohen's kappa for one coding.

    Every estimator gets the coding's a <-> b swap, so each pair counts in both orientations.
    """
    table, notes, bootstrap = settings.table, settings.notes, settings.bootstrap
    unit_index = table.pair_index[coding.rows]
    n_units = table.pair_ids.size
    nominal = agreement_stats.unit_value_counts(
        unit_index=unit_index, value_index=coding.nominal, n_units=n_units, n_values=coding.n_nominal
    )
    ordinal = agreement_stats.unit_value_counts(
        unit_index=unit_index, value_index=coding.ordinal, n_units=n_units, n_values=coding.n_ordinal
    )
    prefix = f"{key}." if key else ""
    percent = agreement_stats.percent_agreement_with_ci(
        value_counts=nominal, n_resamples=bootstrap, rng=rngs[0], confidence=settings.confidence,
        swap=coding.nominal_swap,
    )
    if percent.value is None:
        notes.add(f"{prefix}percent_agreement", percent.reason or "cannot be computed")
    alphas = {
        level: _estimate(
            agreement_stats.krippendorff_alpha(
                value_counts=counts, level=level, n_resamples=bootstrap, rng=rng,
                confidence=settings.confidence, swap=swap,
            ),
            f"{prefix}krippendorff_alpha.{level}",
            notes,
            want_ci=bootstrap > 0,
        )
        for level, counts, swap, rng in (
            ("nominal", nominal, coding.nominal_swap, rngs[1]),
            ("ordinal", ordinal, coding.ordinal_swap, rngs[2]),
        )
    }
    fleiss, raters, units = agreement_stats.fleiss_kappa_complete(
        value_counts=nominal, raters_per_unit=settings.overlap, swap=coding.nominal_swap
    )
    if fleiss.value is None:
        notes.add(f"{prefix}fleiss_kappa", fleiss.reason or "cannot be computed")
    return {
        "pairs_with_overlap": int((nominal.sum(axis=1) >= 2).sum()),
        "percent_agreement": _number(percent.value),
        "percent_agreement_ci": None if percent.ci is None else _interval(*percent.ci),
        "krippendorff_alpha": alphas,
        "fleiss_kappa": {"value": _number(fleiss.value), "judgments_per_pair": raters, "pairs": units},
        "cohen_kappa": _cohen_kappa(settings, coding, prefix=prefix, list_reviewer_pairs=list_reviewer_pairs),
    }


def _cohen_kappa(settings: _Settings, coding: _Coding, *, prefix: str, list_reviewer_pairs: bool) -> dict:
    """Cohen's kappa of every reviewer pair sharing enough pairs, and their median."""
    table, notes, min_shared = settings.table, settings.notes, settings.min_shared_pairs
    kappas = agreement_stats.cohen_kappa_by_rater_pair(
        unit_index=table.pair_index[coding.rows],
        rater_index=table.reviewer[coding.rows],
        value_index=coding.nominal,
        n_raters=max(len(table.reviewer_names), 1),
        n_values=coding.n_nominal,
        min_shared=min_shared,
        swap=coding.nominal_swap,
    )
    defined = np.isfinite(kappas.kappa)
    if kappas.kappa.size == 0:
        notes.add(f"{prefix}cohen_kappa", f"no two reviewers share {min_shared} or more pairs")
    elif not defined.all():
        notes.add(
            f"{prefix}cohen_kappa.pairs[].kappa",
            f"null for {int((~defined).sum())} reviewer pairs whose shared judgments all fall in one category",
        )
    cohen = {
        "min_shared_pairs": min_shared,
        "reviewer_pairs": int(kappas.kappa.size),
        "median": _number(np.median(kappas.kappa[defined])) if defined.any() else None,
    }
    if list_reviewer_pairs:
        names = table.reviewer_names
        cohen["pairs"] = [
            {
                "reviewer_a": names[a],
                "reviewer_b": names[b],
                "shared": shared,
                "observed_agreement": _number(observed),
                "kappa": _number(kappa),
            }
            for a, b, shared, observed, kappa in zip(
                kappas.rater_a.tolist(),
                kappas.rater_b.tolist(),
                kappas.shared.tolist(),
                kappas.observed_agreement.tolist(),
                kappas.kappa.tolist(),
                strict=True,
            )
        ]
    return cohen


def headline_agreement(settings: _Settings, rngs: list[np.random.Generator]) -> dict:
    """Agreement on the overall choice (a, b, tie, both_bad; and the signed strength)."""
    table, original = settings.table, settings.original
    coding = _Coding(
        rows=original,
        nominal=table.winner[original],
        ordinal=table.signed_strength[original].astype(np.int64) + 3,
        n_nominal=N_NOMINAL,
        n_ordinal=N_ORDINAL,
        nominal_swap=NOMINAL_SWAP,
        ordinal_swap=ORDINAL_SWAP,
    )
    # The overall list of reviewer pairs feeds the matrix chart.
    return _agreement_block(settings, coding, key="", rngs=rngs, list_reviewer_pairs=True)


def per_criterion_agreement(settings: _Settings) -> dict:
    """The same block per criterion, over the judgments that answered it (a, b, tie)."""
    table, original = settings.table, settings.original
    blocks = {}
    for index, (criterion, values) in enumerate(sorted(table.criteria.items())):
        rows = original[values[original] != CRITERION_MISSING]
        coded = values[rows].astype(np.int64)
        rngs = [np.random.default_rng(s) for s in np.random.SeedSequence([settings.seed, 1 + index]).spawn(3)]
        coding = _Coding(
            rows=rows,
            nominal=coded,
            ordinal=CRITERION_ORDINAL_INDEX[coded],
            n_nominal=3,
            n_ordinal=3,
            nominal_swap=CRITERION_NOMINAL_SWAP,
            ordinal_swap=CRITERION_ORDINAL_SWAP,
        )
        # No reviewer-pair list per criterion: it keeps the JSON small.
        block = _agreement_block(
            settings, coding, key=f"per_criterion.{criterion}", rngs=rngs, list_reviewer_pairs=False
        )
        blocks[criterion] = {"judgments": int(rows.size), **block}
    return blocks


def position_bias(settings: _Settings) -> dict:
    """Share of a/b choices that went to the left answer, over every click (retests are separate
    clicks with their own order). Left and right are what the reviewer saw, so orientation never enters."""
    table = settings.table
    decisive = table.winner <= WINNER_B
    n_decisive = int(decisive.sum())
    n_left = int((decisive & table.clicked_left).sum())
    if not n_decisive:
        settings.notes.add("position_bias", "no judgment chose a side (all ties or both_bad, or none at all)")
        return {"left_rate": None, "ci": None, "p_value": None, "left": 0, "decisive_judgments": 0}
    left_rate, left_ci = _overall_rate(n_left, n_decisive, settings.confidence)
    # Imported here: SciPy's statistics take a second to import, and every process starts the apps.
    from scipy.stats import binomtest

    return {
        "left_rate": left_rate,
        "ci": left_ci,
        "p_value": _number(binomtest(n_left, n_decisive, 0.5).pvalue),
        "left": n_left,
        "decisive_judgments": n_decisive,
    }


@dataclass(frozen=True)
class _ReviewerWork:
    """What the reviewer figures computed and later parts reuse."""

    loo: LeaveOneOutAgreement
    retests: RetestMatches
    quality: ReviewerQuality


def reviewers_part(settings: _Settings, flag_rules: ReviewerFlagRules | None) -> tuple[list[dict], _ReviewerWork]:
    """One entry per reviewer of the project: their rates with intervals, speed and flags."""
    table = settings.table
    loo = leave_one_out_agreement(table=table)
    retests = match_retests(table=table)
    quality = reviewer_quality(table=table, rules=flag_rules, loo=loo, retests=retests)
    reviewers = []
    missing = dict.fromkeys(REVIEWER_NULL_REASONS, 0)
    for i, username in enumerate(table.reviewer_names):
        agreement_value, agreement_ci = _rate_or_none(quality.agreement, i)
        left_value, left_ci = _rate_or_none(quality.left, i)
        retest_value, retest_ci = _rate_or_none(quality.retest, i)
        gold_value, gold_ci = _rate_or_none(quality.gold, i)
        entry = {
            "username": username,
            "judgments": int(quality.judgments[i]),
            "agreement_with_others": agreement_value,
            "agreement_ci": agreement_ci,
            "agreement_judgments": int(quality.agreement.total[i]),
            "left_rate": left_value,
            "left_ci": left_ci,
            "left_p_value": _number(quality.left_p_value[i]),
            "left_p_adjusted": _number(quality.left_p_adjusted[i]),
            "decisive_judgments": int(quality.left.total[i]),
            "retest_consistency": retest_value,
            "retest_ci": retest_ci,
            "retests": int(quality.retest.total[i]),
            "gold_accuracy": gold_value,
            "gold_ci": gold_ci,
            "gold_judgments": int(quality.gold.total[i]),
            "median_seconds": _number(quality.median_seconds[i]),
            "flags": list(quality.flags[i]),
        }
        for key in missing:
            missing[key] += entry[key] is None
        reviewers.append(entry)
    for key, count in missing.items():
        if count:
            settings.notes.add(
                f"reviewers[].{key}", f"null for {count} reviewer(s): {REVIEWER_NULL_REASONS[key]}"
            )
    return reviewers, _ReviewerWork(loo=loo, retests=retests, quality=quality)


def retest_part(settings: _Settings, retests: RetestMatches) -> dict:
    """How often a retest repeats the original choice, over all reviewers."""
    matched = retests.retest_rows.size
    if retests.unmatched:
        settings.notes.add("retest", f"{retests.unmatched} retest(s) have no original judgment and are ignored")
    rate, ci = _overall_rate(int(retests.consistent.sum()), matched, settings.confidence)
    if not matched:
        settings.notes.add("retest.consistency", "no retest judgments")
    return {
        "retests": matched,
        "consistency": rate,
        "ci": ci,
        "swapped_order_share": _number(retests.swapped.mean()) if matched else None,
    }


def gold_part(settings: _Settings, quality: ReviewerQuality) -> dict:
    """How often gold items got their known answer, over all reviewers."""
    total, hits = int(quality.gold.total.sum()), int(quality.gold.hits.sum())
    rate, ci = _overall_rate(hits, total, settings.confidence)
    if not total:
        settings.notes.add("gold.accuracy", "no gold item judged")
    return {"judgments": total, "accuracy": rate, "ci": ci}


def consensus_part(settings: _Settings) -> dict:
    """Pairs by their majority choice (decisive, tie, both_bad, none) and how confident it is."""
    consensus = consensus_summary(consensus=pair_consensus(settings.table))
    if consensus["mean_confidence_with_overlap"] is None:
        settings.notes.add("consensus.mean_confidence_with_overlap", "no pair has two or more judgments")
    return consensus


def models_part(
    settings: _Settings, rng: np.random.Generator, prior_precision: float
) -> tuple[list[dict], dict]:
    """Bradley–Terry leaderboard of the source models and their win-rate matrix, strongest first."""
    table, notes = settings.table, settings.notes
    ratings = bradley_terry_ratings(
        table=table,
        n_resamples=settings.bootstrap,
        rng=rng,
        prior_precision=prior_precision,
        confidence=settings.confidence,
    )
    order = np.argsort(-ratings.rating, kind="stable").tolist()
    models = [
        {
            "model": table.model_names[ratings.model[i]],
            "rating": _number(ratings.rating[i]),
            "ci": _interval(ratings.ci_low[i], ratings.ci_high[i]),
            "wins": int(ratings.wins[i]),
            "losses": int(ratings.losses[i]),
            "ties": int(ratings.ties[i]),
            "both_bad": int(ratings.both_bad[i]),
            "comparisons": int(ratings.wins[i] + ratings.losses[i] + ratings.ties[i]),
        }
        for i in order
    ]
    if not models:
        notes.add("models", "no judgment compares answers from two different models")
    elif len(models) < 2:
        notes.add("models", "only one model")
    elif settings.bootstrap > 0 and any(model["ci"] is None for model in models):
        notes.add("models[].ci", "bootstrap interval undefined")
    if ratings.components > 1:
        notes.add(
            "models",
            f"the models fall into {ratings.components} groups never compared with each other; "
            "ratings are comparable only within a group",
        )
    with np.errstate(divide="ignore", invalid="ignore"):
        win_rate = ratings.score / ratings.comparisons
    win_rate_matrix = {
        "models": [table.model_names[ratings.model[i]] for i in order],
        "win_rate": [[_number(win_rate[i, j]) for j in order] for i in order],
        "comparisons": [[_number(ratings.comparisons[i, j]) for j in order] for i in order],
    }
    return models, win_rate_matrix


def over_time_part(settings: _Settings, loo: LeaveOneOutAgreement) -> dict:
    """Agreement with others and left rate per time bucket (hour/day/week/30 days, <= 60 buckets)."""
    table = settings.table
    if len(table) == 0:
        return {"bucket": None, "series": []}
    start, end = float(table.created_at.min()), float(table.created_at.max())
    name, width = BUCKETS[-1]
    for candidate, seconds in BUCKETS:
        if (end - start) / seconds < _MAX_BUCKETS:
            name, width = candidate, seconds
            break
    origin = math.floor(start / width) * width
    bucket = np.floor((table.created_at - origin) / width).astype(np.int64)
    n = int(bucket.max()) + 1
    loo_bucket = bucket[loo.rows]
    counted_n = np.bincount(loo_bucket[loo.counted], minlength=n)
    agreed_n = np.bincount(loo_bucket[loo.agrees], minlength=n)
    originals = np.bincount(loo_bucket, minlength=n)
    decisive = table.winner <= WINNER_B
    decisive_n = np.bincount(bucket[decisive], minlength=n)
    left_n = np.bincount(bucket[decisive & table.clicked_left], minlength=n)
    series = [
        {
            "start": dt.datetime.fromtimestamp(origin + i * width, tz=dt.UTC).isoformat(),
            "judgments": int(originals[i]),
            "agreement_with_others": _number(agreed_n[i] / counted_n[i]) if counted_n[i] else None,
            "left_rate": _number(left_n[i] / decisive_n[i]) if decisive_n[i] else None,
        }
        for i in np.flatnonzero(np.bincount(bucket, minlength=n)).tolist()
    ]
    if any(point["agreement_with_others"] is None for point in series):
        settings.notes.add(
            "agreement_over_time.series[].agreement_with_others",
            "null in buckets with no judgment on a pair whose other reviewers have a unique majority",
        )
    return {"bucket": name, "series": series}


def coverage_part(settings: _Settings, max_k: int) -> dict:
    """How much was judged: pairs by number of judgments, judgments per reviewer, speed, retests, gold."""
    table = settings.table
    per_pair = np.bincount(table.pair_index[settings.original], minlength=table.pair_ids.size)
    per_pair = per_pair[per_pair > 0]
    at_least = {
        str(k): int((per_pair >= k).sum()) for k in range(1, min(int(per_pair.max(initial=0)), max_k) + 1)
    }
    per_reviewer = np.bincount(table.reviewer, minlength=len(table.reviewer_names))
    active = per_reviewer[per_reviewer > 0]
    seconds = table.seconds[np.isfinite(table.seconds)]
    return {
        "pairs_with_at_least": at_least,
        "reviewers_with_judgments": int(active.size),
        "judgments_per_reviewer": (
            {"min": int(active.min()), "median": float(np.median(active)), "max": int(active.max())}
            if active.size
            else None
        ),
        "median_seconds": _number(np.median(seconds)) if seconds.size else None,
        "retest_judgments": int(table.is_retest.sum()),
        "gold_judgments": int(((table.gold >= 0) & ~table.is_retest).sum()),
    }


def method_part(settings: _Settings) -> dict:
    """How the figures were computed, in words, for whoever reads the JSON."""
    return {
        "bootstrap_resamples": settings.bootstrap,
        "seed": settings.seed,
        "confidence": settings.confidence,
        "ci": "percentile bootstrap over pairs (alpha, percent agreement, ratings); Wilson (rates)",
        "percent_agreement": "share in [0, 1] of agreeing reviewer pairs per pair, averaged over pairs",
        "orientation": ORIENTATION,
        "nominal_categories": list(WINNERS),
        "ordinal_scale": "signed strength -3..+3, a preferred positive; tie and both_bad are 0",
        "criterion_categories": ["a", "b", "tie"],
        "rating_scale": "Bradley-Terry logits, mean 0; P(i over j) = 1 / (1 + exp(r_j - r_i)); ties half",
        "retests": "left out of agreement, consensus and ratings; used for retest consistency",
    }


# --- the report ------------------------------------------------------------------------------------


def agreement_report(
    table: JudgmentTable,
    *,
    bootstrap: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    overlap: int | None = None,
    min_shared_pairs: int = 20,
    flag_rules: ReviewerFlagRules | None = None,
    prior_precision: float = 0.1,
    max_coverage_k: int = 10,
) -> dict:
    """The agreement report of one project's current judgments (see the module docstring).

    bootstrap         resamples of pairs for every CI (0 = no CIs)
    seed              makes the CIs reproducible; each figure draws from its own stream
    overlap           judgments per pair that count as complete overlap for Fleiss' kappa
                      (None = the most common count >= 2)
    min_shared_pairs  a reviewer pair needs this many shared pairs for Cohen's kappa
    flag_rules        thresholds of the reviewer flags
    prior_precision   weak Gaussian prior on Bradley–Terry ratings (logits)
    """
    settings = _Settings(
        table=table,
        original=np.flatnonzero(~table.is_retest),
        notes=_Notes(),
        bootstrap=bootstrap,
        seed=seed,
        confidence=confidence,
        overlap=overlap,
        min_shared_pairs=min_shared_pairs,
    )
    if bootstrap <= 0:
        settings.notes.add("ci", "bootstrap=0: no resamples were requested, so every bootstrap interval is null")
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(8)]

    # Each part adds its notes as it runs, so the notes come in this order.
    overall = headline_agreement(settings, streams[0:3])
    per_criterion = per_criterion_agreement(settings)
    bias = position_bias(settings)
    reviewers, work = reviewers_part(settings, flag_rules)
    retest = retest_part(settings, work.retests)
    gold = gold_part(settings, work.quality)
    consensus = consensus_part(settings)
    models, win_rate_matrix = models_part(settings, streams[3], prior_precision)
    over_time = over_time_part(settings, work.loo)

    report = {
        "judgments": len(table),
        "pairs": int(table.pair_ids.size),
        "pairs_with_overlap": overall["pairs_with_overlap"],
        "percent_agreement": overall["percent_agreement"],
        "percent_agreement_ci": overall["percent_agreement_ci"],
        "krippendorff_alpha": overall["krippendorff_alpha"],
        "position_bias": bias,
        "reviewers": reviewers,
        "models": models,
        "notes": settings.notes.lines,
        "coverage": coverage_part(settings, max_coverage_k),
        "fleiss_kappa": overall["fleiss_kappa"],
        "cohen_kappa": overall["cohen_kappa"],
        "per_criterion": per_criterion,
        "retest": retest,
        "gold": gold,
        "consensus": consensus,
        "win_rate_matrix": win_rate_matrix,
        "agreement_over_time": over_time,
        "flag_thresholds": {
            "agreement_reference": _number(work.quality.agreement_reference),
            "too_fast_below_seconds": _number(work.quality.too_fast_below),
        },
        "method": method_part(settings),
    }
    safe = _json_safe(report, "", settings.notes)
    safe["notes"] = list(settings.notes.lines)  # again: sanitising may have added one
    return safe


def _json_safe(value: Any, path: str, notes: _Notes) -> Any:
    """Plain Python types only; a non-finite float becomes None with a note (it should never occur)."""
    if isinstance(value, dict):
        return {
            str(key): _json_safe(item, f"{path}.{key}" if path else str(key), notes)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_json_safe(item, f"{path}[]", notes) for item in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        if not math.isfinite(float(value)):
            notes.add(path, "not a finite number")
            return None
        return float(value)
    return value
