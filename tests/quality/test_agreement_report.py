"""The agreement report as admins, the API and the dashboard see it."""

import json

import numpy as np
import pytest
from scipy.stats import binomtest

from annotate.quality.report import agreement_report
from annotate.quality.reviewers import FLAG_INCONSISTENT_RETEST, FLAG_LOW_AGREEMENT, FLAG_POSITION_BIAS
from annotate.quality.synthetic import ALWAYS_LEFT, RANDOM_CLICKER, SELF_CONTRADICTING, synthetic_project
from annotate.quality.table import ROW_COLUMNS, JudgmentTable

REPORT_KEYS = set(
    [
        "judgments",
        "pairs",
        "pairs_with_overlap",
        "percent_agreement",
        "krippendorff_alpha",
        "position_bias",
        "reviewers",
        "models",
        "notes",
    ]
)
REVIEWER_KEYS = {
    "username",
    "judgments",
    "agreement_with_others",
    "left_rate",
    "retest_consistency",
    "gold_accuracy",
    "flags",
}
MODEL_KEYS = {"model", "rating", "ci", "wins", "losses", "ties"}


def _nulls_have_notes(report: dict) -> list[str]:
    """Headline figures that are null without a note starting with their key."""
    figures = {
        "percent_agreement": report["percent_agreement"],
        "krippendorff_alpha.nominal": report["krippendorff_alpha"]["nominal"]["value"],
        "krippendorff_alpha.ordinal": report["krippendorff_alpha"]["ordinal"]["value"],
        "position_bias": report["position_bias"]["left_rate"],
        "fleiss_kappa": report["fleiss_kappa"]["value"],
        "retest": report["retest"]["consistency"],
        "gold": report["gold"]["accuracy"],
    }
    for field in ("agreement_with_others", "left_rate", "retest_consistency", "gold_accuracy"):
        if any(reviewer[field] is None for reviewer in report["reviewers"]):
            figures[f"reviewers[].{field}"] = None
    return [
        key
        for key, value in figures.items()
        if value is None and not any(n.startswith(key) for n in report["notes"])
    ]


@pytest.fixture(scope="module")
def project():
    return synthetic_project(n_pairs=3000, n_reviewers=16, seed=9)


@pytest.fixture(scope="module")
def report(project):
    return agreement_report(project.table, bootstrap=200, seed=1)


def test_empty_project_gives_nulls_with_reasons_and_valid_json():
    report = agreement_report(JudgmentTable.empty(criteria_keys=["correct"]))
    json.dumps(report, allow_nan=False)
    assert set(report) >= REPORT_KEYS
    assert report["judgments"] == 0 and report["pairs"] == 0 and report["pairs_with_overlap"] == 0
    assert report["percent_agreement"] is None
    assert report["krippendorff_alpha"]["nominal"] == {"value": None, "ci": None}
    assert report["reviewers"] == [] and report["models"] == []
    assert _nulls_have_notes(report) == []
    assert report["per_criterion"]["correct"]["krippendorff_alpha"]["nominal"]["value"] is None


def test_report_has_the_design_keys_and_valid_json(report):
    json.dumps(report, allow_nan=False)
    assert set(report) >= REPORT_KEYS
    assert all(set(reviewer) >= REVIEWER_KEYS for reviewer in report["reviewers"])
    assert all(set(model) >= MODEL_KEYS for model in report["models"])
    for level in ("nominal", "ordinal"):
        alpha = report["krippendorff_alpha"][level]
        assert alpha["ci"][0] <= alpha["value"] <= alpha["ci"][1]
    assert set(report["per_criterion"]) == {"complete", "correct"}


def test_report_flags_the_planted_reviewers(report):
    flags = {reviewer["username"]: reviewer["flags"] for reviewer in report["reviewers"]}
    assert FLAG_POSITION_BIAS in flags.pop(ALWAYS_LEFT)
    assert FLAG_LOW_AGREEMENT in flags.pop(RANDOM_CLICKER)
    assert FLAG_INCONSISTENT_RETEST in flags.pop(SELF_CONTRADICTING)
    assert all(not reviewer_flags for reviewer_flags in flags.values())


def test_leaderboard_is_sorted_with_the_strongest_model_first(project, report):
    ratings = [model["rating"] for model in report["models"]]
    assert ratings == sorted(ratings, reverse=True)
    strongest = project.table.model_names[int(project.model_strength.argmax())]
    assert report["models"][0]["model"] == strongest
    matrix = report["win_rate_matrix"]
    assert matrix["models"] == [model["model"] for model in report["models"]]
    top, bottom = 0, len(matrix["models"]) - 1
    assert matrix["win_rate"][top][bottom] > 0.5
    assert matrix["win_rate"][top][bottom] + matrix["win_rate"][bottom][top] == pytest.approx(1.0)
    assert matrix["win_rate"][top][top] is None  # a model never meets itself


def test_position_bias_overall_counts_left_clicks_among_side_choices():
    records = [{"pair": i, "reviewer": "ann", "winner": "a", "left_is_a": i < 8} for i in range(10)] + [
        {"pair": 100, "reviewer": "ann", "winner": "tie"}
    ]
    report = agreement_report(JudgmentTable.from_records(records), bootstrap=0)
    bias = report["position_bias"]
    assert bias["left_rate"] == pytest.approx(0.8)
    assert bias["decisive_judgments"] == 10
    assert bias["p_value"] == pytest.approx(binomtest(8, 10, 0.5).pvalue)
    assert bias["ci"][0] < 0.8 < bias["ci"][1]


def test_everyone_calling_every_pair_a_tie_leaves_alpha_undefined_with_a_reason():
    records = [{"pair": p, "reviewer": r, "winner": "tie"} for p in range(5) for r in ("ann", "bob")]
    report = agreement_report(JudgmentTable.from_records(records), bootstrap=50)
    assert report["percent_agreement"] == 1.0
    assert report["krippendorff_alpha"]["nominal"]["value"] is None
    assert any(note.startswith("krippendorff_alpha.nominal") for note in report["notes"])
    json.dumps(report, allow_nan=False)


def test_everyone_preferring_the_first_listed_answer_is_perfect_agreement_not_undefined():
    """Which answer is "a" is the import file's order: reviewers who all prefer the answer the file
    listed first agree perfectly on which answer is better, whatever the file's order was."""
    records = [{"pair": p, "reviewer": r, "winner": "a"} for p in range(5) for r in ("ann", "bob")]
    report = agreement_report(JudgmentTable.from_records(records), bootstrap=50)
    assert report["percent_agreement"] == 1.0
    assert report["krippendorff_alpha"]["nominal"]["value"] == pytest.approx(1.0)
    assert report["krippendorff_alpha"]["ordinal"]["value"] == pytest.approx(1.0)
    assert report["fleiss_kappa"]["value"] == pytest.approx(1.0)


def test_retests_do_not_change_agreement_consensus_or_ratings(project):
    table = project.table
    keep = ~table.is_retest
    without = JudgmentTable(
        **{name: getattr(table, name)[keep] for name in ROW_COLUMNS},
        criteria={key: values[keep] for key, values in table.criteria.items()},
        reviewer_names=table.reviewer_names,
        model_names=table.model_names,
    )
    with_retests = agreement_report(table, bootstrap=0)
    without_retests = agreement_report(without, bootstrap=0)
    for key in ("percent_agreement", "krippendorff_alpha", "fleiss_kappa", "consensus", "models"):
        if key == "models":
            assert [m["rating"] for m in with_retests[key]] == [m["rating"] for m in without_retests[key]]
        else:
            assert with_retests[key] == without_retests[key]
    assert with_retests["retest"]["retests"] > 0 and without_retests["retest"]["retests"] == 0


def test_same_seed_gives_the_same_report_and_zero_bootstrap_gives_no_intervals(project):
    small = agreement_report(project.table, bootstrap=30, seed=4)
    assert agreement_report(project.table, bootstrap=30, seed=4) == small
    none = agreement_report(project.table, bootstrap=0)
    assert none["krippendorff_alpha"]["nominal"]["ci"] is None
    assert any(note.startswith("ci: bootstrap=0") for note in none["notes"])
    assert all(model["ci"] is None for model in none["models"])


def test_agreement_over_time_covers_every_original_judgment(project, report):
    series = report["agreement_over_time"]["series"]
    assert report["agreement_over_time"]["bucket"] == "day"
    assert sum(point["judgments"] for point in series) == int((~project.table.is_retest).sum())
    starts = [point["start"] for point in series]
    assert starts == sorted(starts)


def test_cohen_kappa_pairs_feed_the_reviewer_matrix(report):
    cohen = report["cohen_kappa"]
    assert cohen["reviewer_pairs"] == len(cohen["pairs"]) > 0
    assert all(pair["shared"] >= cohen["min_shared_pairs"] for pair in cohen["pairs"])
    assert "pairs" not in report["per_criterion"]["correct"]["cohen_kappa"]


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("seed", range(40))
def test_small_random_projects_never_raise_and_never_emit_nan(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 25))
    winners = rng.integers(0, 4, n)
    records = [
        {
            "pair": int(rng.integers(0, 6)),
            "reviewer": f"r{int(rng.integers(0, 4))}",
            "winner": int(w),
            "strength": int(rng.integers(1, 4)) if w <= 1 else 0,
            "left_is_a": bool(rng.integers(0, 2)),
            "is_retest": bool(rng.random() < 0.2),
            "seconds": float(rng.uniform(1, 60)) if rng.random() < 0.8 else float("nan"),
            "created_at": float(rng.uniform(0, 10 * 86400)),
            "gold": ["a", "b", None][int(rng.integers(0, 3))],
            "model_a": f"m@{int(rng.integers(0, 3))}",
            "model_b": f"m@{int(rng.integers(0, 3))}",
            "criteria": {"correct": ["a", "b", "tie"][int(rng.integers(0, 3))]} if rng.random() < 0.7 else {},
        }
        for w in winners
    ]
    report = agreement_report(
        JudgmentTable.from_records(records), bootstrap=int(rng.integers(0, 40)), seed=seed
    )
    json.dumps(report, allow_nan=False)
    assert set(report) >= REPORT_KEYS
    assert _nulls_have_notes(report) == []
