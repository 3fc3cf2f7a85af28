"""Per-reviewer quality: the faults an admin needs to see are flagged, careful reviewers are not."""

import numpy as np
import pytest

from annotate.quality.reviewers import (
    FLAG_FAILING_GOLD,
    FLAG_INCONSISTENT_RETEST,
    FLAG_LOW_AGREEMENT,
    FLAG_POSITION_BIAS,
    FLAG_TOO_FAST,
    leave_one_out_agreement,
    match_retests,
    reviewer_quality,
)
from annotate.quality.synthetic import ALWAYS_LEFT, RANDOM_CLICKER, SELF_CONTRADICTING, synthetic_project
from annotate.quality.table import JudgmentTable


@pytest.fixture(scope="module")
def project():
    return synthetic_project(n_pairs=4000, n_reviewers=20, seed=5)


@pytest.fixture(scope="module")
def quality(project):
    return reviewer_quality(table=project.table)


def _flags(project, quality, name):
    return quality.flags[project.table.reviewer_names.index(name)]


def test_always_left_reviewer_is_flagged_for_position_bias(project, quality):
    index = project.table.reviewer_names.index(ALWAYS_LEFT)
    assert quality.left.rate[index] == 1.0
    assert FLAG_POSITION_BIAS in _flags(project, quality, ALWAYS_LEFT)


def test_random_clicker_is_flagged_for_low_agreement(project, quality):
    assert FLAG_LOW_AGREEMENT in _flags(project, quality, RANDOM_CLICKER)
    assert FLAG_TOO_FAST in _flags(project, quality, RANDOM_CLICKER)


def test_self_contradicting_reviewer_has_low_retest_consistency(project, quality):
    index = project.table.reviewer_names.index(SELF_CONTRADICTING)
    others = [i for i, name in enumerate(project.table.reviewer_names) if name != SELF_CONTRADICTING]
    assert quality.retest.rate[index] < 0.2 < np.nanmin(quality.retest.rate[others[2:]])
    assert _flags(project, quality, SELF_CONTRADICTING) == [FLAG_INCONSISTENT_RETEST]


def test_careful_reviewers_get_no_flag(project, quality):
    planted = set(project.planted.values())
    flagged = {
        project.table.reviewer_names[i]: flags
        for i, flags in enumerate(quality.flags)
        if flags and i not in planted
    }
    assert flagged == {}


def _judgment(pair, reviewer, winner, **extra):
    return {"pair": pair, "reviewer": reviewer, "winner": winner, **extra}


def test_leave_one_out_majority_counts_only_a_unique_majority_of_the_others():
    table = JudgmentTable.from_records(
        [
            # pair 1: ann a, bob a, cy b -> ann and bob each see {a, b} (no majority); cy sees a, a.
            _judgment(1, "ann", "a"),
            _judgment(1, "bob", "a"),
            _judgment(1, "cy", "b"),
            # pair 2: ann tie, bob tie, cy tie -> everybody agrees with the others.
            _judgment(2, "ann", "tie"),
            _judgment(2, "bob", "tie"),
            _judgment(2, "cy", "tie"),
            # pair 3: ann alone -> nobody to compare with.
            _judgment(3, "ann", "b"),
        ]
    )
    loo = leave_one_out_agreement(table=table)
    assert loo.counted.tolist() == [False, False, True, True, True, True, False]
    assert loo.agrees.tolist() == [False, False, False, True, True, True, False]
    quality = reviewer_quality(table=table)
    assert quality.agreement.total.tolist() == [1, 1, 2]
    assert quality.agreement.rate.tolist() == [1.0, 1.0, 0.5]


def test_retest_consistency_compares_the_unswapped_choice_with_the_earliest_original():
    records = [
        _judgment(1, "ann", "a", left_is_a=True, created_at=1.0),
        _judgment(1, "ann", "a", left_is_a=False, is_retest=True, created_at=5.0),  # same choice
        _judgment(2, "ann", "b", left_is_a=True, created_at=2.0),
        _judgment(2, "ann", "a", left_is_a=False, is_retest=True, created_at=6.0),  # flipped
        _judgment(3, "bob", "tie", created_at=3.0),
        _judgment(4, "bob", "a", is_retest=True, created_at=7.0),  # no original: unmatched
    ]
    table = JudgmentTable.from_records(records)
    matches = match_retests(table=table)
    assert matches.retest_rows.tolist() == [1, 3]
    assert matches.original_rows.tolist() == [0, 2]
    assert matches.consistent.tolist() == [True, False]
    assert matches.swapped.tolist() == [True, True]
    assert matches.unmatched == 1
    quality = reviewer_quality(table=table)
    assert quality.retest.rate[0] == 0.5
    assert np.isnan(quality.retest.rate[1])


def test_left_rate_counts_clicks_on_the_screen_not_unswapped_choices():
    # "a" shown on the right and chosen is a right click; ties are not a side.
    table = JudgmentTable.from_records(
        [
            _judgment(1, "ann", "a", left_is_a=True),
            _judgment(2, "ann", "a", left_is_a=False),
            _judgment(3, "ann", "b", left_is_a=False),
            _judgment(4, "ann", "tie", left_is_a=True),
        ]
    )
    quality = reviewer_quality(table=table)
    assert quality.left.hits.tolist() == [2]
    assert quality.left.total.tolist() == [3]


def test_gold_accuracy_and_failing_gold_flag():
    # Sides alternate so that nobody looks position-biased.
    records = [_judgment(i, "ann", "a", gold="a", left_is_a=i % 2 == 0) for i in range(10)]
    records += [
        _judgment(100 + i, "bob", "b" if i < 8 else "tie", gold="a", left_is_a=i % 2 == 0) for i in range(10)
    ]
    quality = reviewer_quality(table=JudgmentTable.from_records(records))
    assert quality.gold.rate.tolist() == [1.0, 0.0]
    assert quality.flags == [[], [FLAG_FAILING_GOLD]]


def test_few_gold_items_are_not_enough_evidence_to_flag():
    records = [_judgment(i, "bob", "b", gold="a") for i in range(2)]
    quality = reviewer_quality(table=JudgmentTable.from_records(records))
    assert quality.gold.rate.tolist() == [0.0]
    assert quality.flags == [[]]


def test_median_seconds_and_too_fast():
    records = []
    for reviewer, seconds in (("ann", 40.0), ("bob", 45.0), ("cy", 50.0), ("dee", 2.0)):
        records += [_judgment(i, reviewer, "a", seconds=seconds + i % 2) for i in range(12)]
    quality = reviewer_quality(table=JudgmentTable.from_records(records))
    assert quality.median_seconds.tolist() == [40.5, 45.5, 50.5, 2.5]
    assert [FLAG_TOO_FAST in flags for flags in quality.flags] == [False, False, False, True]
