"""No figure of the report depends on which answer of a pair the import file listed first.

Which answer is "a" is only the import order. The report counts each pair in both orientations
(docs/agreement.md), so reversing any pair, reordering the rows or renumbering the pairs changes
nothing, and its alpha and kappas equal the libraries' on the judgments written both ways round.
"""

import random
import uuid
from array import array
from datetime import timedelta

import krippendorff
import numpy as np
import pytest
from django.utils import timezone
from statsmodels.stats.inter_rater import cohens_kappa, fleiss_kappa

from annotate.exports.pipeline import agreement_summary
from annotate.quality.agreement import krippendorff_alpha, unit_value_counts
from annotate.quality.report import agreement_report
from annotate.quality.synthetic import synthetic_project
from annotate.quality.table import CRITERION_MISSING, NO_GOLD, ROW_COLUMNS, JudgmentTable
from annotate.review.assignments import assignment_next
from annotate.review.choices import WINNER_A, WINNER_B
from annotate.review.judgments import judgment_submit
from annotate.review.models import Assignment
from tests.conftest import import_rows

A_B_EXCHANGED = np.array([1, 0, 2, 3])  # a, b, tie, both_bad -> b, a, tie, both_bad


def reversed_pairs(table: JudgmentTable, reverse_pair) -> JudgmentTable:
    """The same judgments with response a and b exchanged on the pairs where ``reverse_pair(ids)``
    is true: winner, gold, criteria and models swapped, the order on screen (left_is_a) negated."""
    rows = reverse_pair(table.pair)
    swap_ab = np.array([1, 0, 2, 3], dtype=np.int8)

    def ab(values: np.ndarray) -> np.ndarray:
        swapped = np.where(values == 0, 1, np.where(values == 1, 0, values))
        return np.where(rows, swapped, values)

    return JudgmentTable(
        **{name: getattr(table, name) for name in ROW_COLUMNS}
        | {
            "winner": np.where(rows, swap_ab[table.winner], table.winner),
            "left_is_a": np.where(rows, ~table.left_is_a, table.left_is_a),
            "gold": np.where(rows & (table.gold != NO_GOLD), ab(table.gold), table.gold),
            "model_a": np.where(rows, table.model_b, table.model_a),
            "model_b": np.where(rows, table.model_a, table.model_b),
        },
        criteria={
            key: np.where(values == CRITERION_MISSING, values, ab(values)) for key, values in table.criteria.items()
        },
        reviewer_names=table.reviewer_names,
        model_names=table.model_names,
    )


def shuffled_and_renumbered(table: JudgmentTable, seed: int) -> JudgmentTable:
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(table))
    new_ids = rng.permutation(table.pair_ids.size) * 7 + 50_000  # another set of ids, in another order
    renumbered = new_ids[table.pair_index]
    return JudgmentTable(
        **{name: getattr(table, name)[order] for name in ROW_COLUMNS} | {"pair": renumbered[order]},
        criteria={key: values[order] for key, values in table.criteria.items()},
        reviewer_names=table.reviewer_names,
        model_names=table.model_names,
    )


@pytest.fixture(scope="module")
def best_first():
    """A realistic project whose import lists the stronger model's answer first on every pair."""
    return synthetic_project(n_pairs=1500, n_reviewers=12, better_first=True, seed=5)


@pytest.fixture(scope="module")
def report(best_first):
    return agreement_report(best_first.table, bootstrap=200, seed=3)


def test_the_planted_import_puts_most_decisive_choices_on_a(best_first):
    table = best_first.table
    decisive = table.winner[table.winner <= WINNER_B]
    assert (decisive == WINNER_A).mean() > 0.6  # what made orientation-blind alpha collapse


def test_reversing_every_pair_leaves_every_key_of_the_report_unchanged(best_first, report):
    flipped = reversed_pairs(best_first.table, lambda pair: np.ones(pair.shape, dtype=bool))
    assert (flipped.winner == WINNER_A).sum() == (best_first.table.winner == WINNER_B).sum()
    assert agreement_report(flipped, bootstrap=200, seed=3) == report  # intervals included, same seed


def test_reversing_an_arbitrary_half_of_the_pairs_leaves_the_report_unchanged(best_first, report):
    half = reversed_pairs(best_first.table, lambda pair: (pair * 2654435761) % 7 < 3)
    assert agreement_report(half, bootstrap=200, seed=3) == report


def test_row_order_and_pair_ids_leave_the_report_unchanged(best_first, report):
    assert agreement_report(shuffled_and_renumbered(best_first.table, seed=1), bootstrap=200, seed=3) == report


def _original(table: JudgmentTable) -> np.ndarray:
    return np.flatnonzero(~table.is_retest)


def _doubled_reliability(table: JudgmentTable, values: np.ndarray, swapped: np.ndarray) -> np.ndarray:
    """(reviewers, 2 * pairs) reliability data: each pair once as judged, once reversed; NaN = not judged."""
    rows = _original(table)
    data = np.full((len(table.reviewer_names), 2 * table.pair_ids.size), np.nan)
    data[table.reviewer[rows], table.pair_index[rows]] = values[rows]
    data[table.reviewer[rows], table.pair_ids.size + table.pair_index[rows]] = swapped[rows]
    return data


def test_alpha_equals_the_krippendorff_package_on_the_judgments_in_both_orientations(best_first, report):
    table = best_first.table
    nominal = _doubled_reliability(table, table.winner.astype(float), A_B_EXCHANGED[table.winner].astype(float))
    signed = table.signed_strength.astype(float)
    ordinal = _doubled_reliability(table, signed, -signed)
    assert report["krippendorff_alpha"]["nominal"]["value"] == pytest.approx(
        krippendorff.alpha(reliability_data=nominal, value_domain=[0, 1, 2, 3], level_of_measurement="nominal"),
        abs=1e-9,
    )
    assert report["krippendorff_alpha"]["ordinal"]["value"] == pytest.approx(
        krippendorff.alpha(reliability_data=ordinal, value_domain=list(range(-3, 4)), level_of_measurement="ordinal"),
        abs=1e-9,
    )
    # The same judgments read one way round only (the old figure) are scored lower.
    one_way = krippendorff.alpha(reliability_data=nominal[:, : table.pair_ids.size], value_domain=[0, 1, 2, 3],
                                 level_of_measurement="nominal")
    assert report["krippendorff_alpha"]["nominal"]["value"] - one_way > 0.02


def test_per_criterion_alpha_equals_the_package_in_both_orientations(best_first, report):
    table = best_first.table
    values = table.criteria["correct"].astype(float)
    values[values == CRITERION_MISSING] = np.nan
    swapped = np.array([1.0, 0.0, 2.0, np.nan])[table.criteria["correct"]]  # -1 (missing) indexes the NaN
    data = _doubled_reliability(table, values, swapped)
    block = report["per_criterion"]["correct"]
    assert block["krippendorff_alpha"]["nominal"]["value"] == pytest.approx(
        krippendorff.alpha(reliability_data=data, value_domain=[0, 1, 2], level_of_measurement="nominal"), abs=1e-9
    )
    # ordinal b < tie < a: b = -1, tie = 0, a = +1, negated when reversed
    signed = np.array([1.0, -1.0, 0.0, np.nan])[table.criteria["correct"]]
    data = _doubled_reliability(table, signed, -signed)
    assert block["krippendorff_alpha"]["ordinal"]["value"] == pytest.approx(
        krippendorff.alpha(reliability_data=data, value_domain=[-1, 0, 1], level_of_measurement="ordinal"), abs=1e-9
    )


def test_fleiss_kappa_equals_statsmodels_on_the_doubled_table(best_first, report):
    table = best_first.table
    rows = _original(table)
    counts = unit_value_counts(unit_index=table.pair_index[rows], value_index=table.winner[rows],
                               n_units=table.pair_ids.size, n_values=4)
    complete = counts[counts.sum(axis=1) == 3]
    doubled = np.vstack([complete, complete[:, A_B_EXCHANGED]])
    assert report["fleiss_kappa"]["pairs"] == complete.shape[0]
    assert report["fleiss_kappa"]["value"] == pytest.approx(fleiss_kappa(doubled, method="fleiss"), abs=1e-12)
    assert abs(fleiss_kappa(complete, method="fleiss") - report["fleiss_kappa"]["value"]) > 0.01


def test_cohen_kappa_of_each_reviewer_pair_is_the_kappa_of_its_doubled_table(best_first, report):
    table = best_first.table
    rows = _original(table)
    choice = {(int(table.reviewer[i]), int(table.pair_index[i])): int(table.winner[i]) for i in rows}
    names = table.reviewer_names
    checked = 0
    for entry in report["cohen_kappa"]["pairs"][:12]:
        first, second = names.index(entry["reviewer_a"]), names.index(entry["reviewer_b"])
        shared = [p for (r, p) in choice if r == first and (second, p) in choice]
        contingency = np.zeros((4, 4))
        for p in shared:
            x, y = choice[(first, p)], choice[(second, p)]
            contingency[x, y] += 1  # as judged
            contingency[A_B_EXCHANGED[x], A_B_EXCHANGED[y]] += 1  # and reversed
        assert entry["shared"] == len(shared)
        assert entry["observed_agreement"] == pytest.approx(np.trace(contingency) / contingency.sum())
        assert entry["kappa"] == pytest.approx(cohens_kappa(contingency, return_results=False), abs=1e-12)
        checked += 1
    assert checked > 0


def test_the_export_manifest_uses_the_same_estimator_as_the_report(best_first, report):
    table = best_first.table
    rows = _original(table)
    counts = unit_value_counts(unit_index=table.pair_index[rows], value_index=table.winner[rows],
                               n_units=table.pair_ids.size, n_values=4)
    summary = agreement_summary(votes=array("i", counts.astype(np.int32).ravel().tolist()), flagged=None)
    assert summary["krippendorff_alpha"]["nominal"]["value"] == pytest.approx(
        report["krippendorff_alpha"]["nominal"]["value"], abs=1e-12
    )
    reversed_votes = array("i", counts[:, A_B_EXCHANGED].astype(np.int32).ravel().tolist())
    assert agreement_summary(votes=reversed_votes, flagged=None) == summary


def test_the_classical_estimator_is_unchanged_without_a_swap():
    """The report's doubling is a choice of data, not a change of estimator: without ``swap`` alpha
    is the classical one (the textbook tests check it against published examples)."""
    counts = np.array([[3, 0, 0, 0], [2, 1, 0, 0], [3, 0, 0, 0], [0, 3, 0, 0], [1, 1, 1, 0]])
    classical = krippendorff_alpha(value_counts=counts, level="nominal", n_resamples=0, rng=np.random.default_rng(0))
    assert classical.value == pytest.approx(krippendorff.alpha(value_counts=counts, level_of_measurement="nominal"))
    doubled = krippendorff_alpha(value_counts=counts, level="nominal", n_resamples=0, rng=np.random.default_rng(0),
                                 swap=A_B_EXCHANGED)
    both_ways = np.vstack([counts, counts[:, A_B_EXCHANGED]])
    assert doubled.value == pytest.approx(krippendorff.alpha(value_counts=both_ways, level_of_measurement="nominal"))


# --- a planted project in the database, through the real import and judgment services -------------

CAREFUL = ("ann", "bob", "cat")


def _best_first_items(count: int) -> list[dict]:
    """Every prompt lists the strong model's answer first, so it becomes response a of its pair."""
    return [
        {
            "prompt_id": f"best-{i:03d}",
            "prompt": f"How many minutes are in {i + 2} hours?",
            "responses": [
                {"text": f"{(i + 2) * 60} minutes: {i + 2} hours times 60.", "model": "strong", "model_version": "2"},
                {"text": f"About {(i + 2) * 50} minutes.", "model": "weak", "model_version": "1"},
            ],
        }
        for i in range(count)
    ]


def _judge(project, reviewer, seed: int) -> None:
    """Careful reviewers pick the strong answer 95% of the time; "noisy" picks anything."""
    rng, clock = random.Random(seed), timezone.now()
    while (assignment := assignment_next(project=project, reviewer=reviewer, now=clock)) is not None:
        clock += timedelta(seconds=30)
        strong_on_left = (assignment.pair.response_a.model == "strong") == assignment.a_on_left
        draw = rng.random()
        if reviewer.username in CAREFUL:
            picks_strong = draw < 0.95
            choice = ("left" if strong_on_left == picks_strong else "right") if draw < 0.97 else "tie"
        else:
            choice = rng.choice(["left", "right", "tie"])
        judgment_submit(
            assignment_id=assignment.pk, reviewer=reviewer, choice=choice,
            strength=rng.choice([1, 2, 3]), criteria={"correct": choice, "complete": "tie"},
            rationale="The chosen answer does the arithmetic.", client_key=uuid.uuid4(), now=clock,
        )


@pytest.mark.django_db
def test_a_best_first_import_reports_the_alpha_of_its_judgments_in_both_orientations(
    make_project, make_user, client_for
):
    project = make_project(slug="best-first", overlap=4, retest_rate=0)
    import_rows(project, _best_first_items(30))
    for seed, name in enumerate((*CAREFUL, "noisy")):
        _judge(project, make_user(name), seed)
    judged = list(
        Assignment.objects.filter(project=project, is_retest=False, current_judgment__isnull=False).values_list(
            "pair_id", "reviewer__username", "current_judgment__winner", "current_judgment__strength"
        )
    )
    assert len(judged) == 120
    pairs = sorted({pair for pair, *_ in judged})
    reviewers = sorted({name for _, name, *_ in judged})
    code = {"a": 0, "b": 1, "tie": 2, "both_bad": 3}
    nominal = np.full((len(reviewers), 2 * len(pairs)), np.nan)
    ordinal = np.full((len(reviewers), 2 * len(pairs)), np.nan)
    for pair, name, winner, strength in judged:
        r, p = reviewers.index(name), pairs.index(pair)
        signed = {"a": strength, "b": -(strength or 0)}.get(winner, 0)
        nominal[r, p], nominal[r, len(pairs) + p] = code[winner], A_B_EXCHANGED[code[winner]]
        ordinal[r, p], ordinal[r, len(pairs) + p] = signed, -signed

    report = client_for(make_user("ada", "admin")).get("/api/v1/projects/best-first/agreement").json()
    expected_nominal = krippendorff.alpha(reliability_data=nominal, value_domain=[0, 1, 2, 3],
                                          level_of_measurement="nominal")
    expected_ordinal = krippendorff.alpha(reliability_data=ordinal, value_domain=list(range(-3, 4)),
                                          level_of_measurement="ordinal")
    assert report["krippendorff_alpha"]["nominal"]["value"] == pytest.approx(expected_nominal, abs=0.02)
    assert report["krippendorff_alpha"]["ordinal"]["value"] == pytest.approx(expected_ordinal, abs=0.02)
    # Read one way round (the import's), the same judgments look like chance: the bug this fixes.
    one_way = krippendorff.alpha(reliability_data=nominal[:, : len(pairs)], value_domain=[0, 1, 2, 3],
                                 level_of_measurement="nominal")
    assert one_way < 0.1 and expected_nominal - one_way > 0.3
