"""A model reviewer's figures against people (annotate/quality/model_agreement.py), checked on a worked example."""

import warnings

import numpy as np
import pytest
from statsmodels.stats.inter_rater import cohens_kappa
from statsmodels.stats.proportion import proportion_confint

from annotate.quality.model_agreement import (
    confident_disagreements,
    model_reviewer_figures,
    model_winner,
    winner_of_screen_choice,
)
from annotate.review.choices import WINNER_A, WINNER_B, WINNER_TIE
from annotate.review.overlap import reviewers_with_one_more
from annotate.runs.model_reviewer_scoring import ScoringFailed, finite_scores

# Twelve judged pairs: votes a, b, tie, both_bad; the model's scores of a and b.
VOTES = np.array([
    [3, 0, 0, 0], [2, 1, 0, 0], [2, 0, 0, 0], [3, 0, 0, 0], [1, 0, 0, 0], [2, 1, 0, 0],  # people: a
    [0, 2, 0, 0], [1, 2, 0, 0], [0, 3, 0, 0], [0, 2, 0, 0],  # people: b
    [1, 1, 0, 0],  # split: no majority
    [0, 0, 2, 0],  # people: tie
])
SCORE_A = np.array([1.0, 0.5, 2.0, 0.3, 0.9, -1.0, -0.5, 0.0, -2.0, 1.5, 0.2, 0.1])
SCORE_B = np.array([0.0, 0.1, 1.0, 0.3, 0.2, 0.5, 0.5, 1.0, 0.0, -0.5, 0.1, 0.4])
# The model picks a, a, a, tie, a, b | b, b, b, a | a | b: agrees on pairs 1-3, 5, 7-9 of the ten with a or b majority.
A_ON_LEFT = np.array([True, False, True, True, False, True, False, True, True, False, True, False])
# Its choices on the screen, worked by hand from its winners and A_ON_LEFT: in the order reviewers were shown,
# and with left and right exchanged (scored alone, each answer keeps its score, so the other side wins).
SHOWN = np.array(["left", "right", "left", "tie", "right", "right", "left", "right", "right", "right", "left", "left"])
SWAPPED = np.array(["right", "left", "right", "tie", "left", "left", "right", "left", "left", "left", "right",
                    "right"])


def figures(votes=VOTES, score_a=SCORE_A, score_b=SCORE_B, a_on_left=A_ON_LEFT, scored=None, **extra):
    # Reversing a pair (a <-> b, and a_on_left with it) leaves what is on the screen as it was: SHOWN and SWAPPED.
    assert (winner_of_screen_choice(SHOWN, a_on_left=a_on_left) == model_winner(score_a, score_b)).all()
    return model_reviewer_figures(
        votes=votes, scored=np.ones(len(votes), dtype=bool) if scored is None else scored,
        winner_shown=winner_of_screen_choice(SHOWN, a_on_left=a_on_left),
        winner_swapped=winner_of_screen_choice(SWAPPED, a_on_left=~a_on_left), chose_left=SHOWN == "left", seed=0,
        **extra)


def test_agreement_with_the_majority_matches_the_hand_worked_example():
    result = figures()
    agreement = result["agreement"]
    assert agreement["n"] == 10 and agreement["model_ties"] == 1 and not agreement["too_few_to_judge"]
    assert agreement["share"]["value"] == pytest.approx(0.7)
    assert agreement["share"]["ci"] == pytest.approx(list(proportion_confint(7, 10, alpha=0.05, method="wilson")))
    # Both orientations, by hand: people a 10 / b 10; model a 9, b 9, tie 2; observed 14 of 20;
    # chance (10*9 + 10*9) / 400 = 0.45; kappa = (0.7 - 0.45) / 0.55 = 5/11.
    assert agreement["cohen_kappa"]["value"] == pytest.approx(5 / 11)
    doubled = np.array([[7, 2, 1], [2, 7, 1], [0, 0, 0]])
    assert agreement["cohen_kappa"]["value"] == pytest.approx(cohens_kappa(doubled).kappa)
    low, high = agreement["cohen_kappa"]["ci"]
    assert -1 <= low < 5 / 11 < high <= 1
    assert result["left_out"] == {"not_scored": 0, "over_max_length": 0, "no_votes": 0, "no_majority": 1,
                                  "tie_majority": 1, "both_bad_majority": 0}
    # Without a lineage, pairs it saw in training cannot be told apart: no split figures, never a guess.
    assert result["agreement_unseen"] is None and result["agreement_seen"] is None


def test_order_consistency_is_one_by_construction_and_left_rate_counts_left_choices():
    result = figures()
    # Both orders name the same answer on every pair, and the figure says it is so by construction.
    assert result["order_consistency"]["value"] == 1.0 and result["order_consistency"]["n"] == 12
    assert result["order_consistency"]["by_construction"]
    assert result["order_consistency"]["note"].startswith("1.000 by construction")
    assert "ci" not in result["order_consistency"]  # not an estimate: no interval
    # 11 a/b choices (pair 4 is a tie); the one shown on the left won on pairs 1, 3, 7, 11 and 12 (SHOWN).
    assert result["left_rate"]["n"] == 11 and result["left_rate"]["hits"] == 5
    assert result["left_rate"]["value"] == pytest.approx(5 / 11)
    assert "left/right coin" in result["left_rate"]["note"]


def test_a_model_that_changes_its_choice_with_the_order_is_measured_as_such():
    winner = model_winner(SCORE_A, SCORE_B)
    swapped = np.where(winner == WINNER_A, WINNER_B, np.where(winner == WINNER_B, WINNER_A, WINNER_TIE))
    result = model_reviewer_figures(votes=VOTES, scored=np.ones(12, dtype=bool), winner_shown=winner,
                                    winner_swapped=swapped, chose_left=np.zeros(12, dtype=bool))
    assert result["order_consistency"]["hits"] == 1  # only the tie stays the same


def test_reversing_pairs_changes_no_figure():
    reverse = np.array([True, False] * 6)
    votes = VOTES.copy()
    votes[reverse] = votes[reverse][:, [1, 0, 2, 3]]
    score_a, score_b = np.where(reverse, SCORE_B, SCORE_A), np.where(reverse, SCORE_A, SCORE_B)
    a_on_left = np.where(reverse, ~A_ON_LEFT, A_ON_LEFT)
    assert figures(votes, score_a, score_b, a_on_left) == figures()


def test_unscored_pairs_are_left_out_and_few_pairs_are_too_few_to_judge():
    scored = np.array([True] * 5 + [False] * 7)
    result = figures(scored=scored)
    assert result["left_out"]["not_scored"] == 7
    assert result["agreement"]["n"] == 5 and result["agreement"]["too_few_to_judge"]
    assert result["agreement"]["share"]["too_few_to_judge"]


def test_pairs_over_max_length_are_left_out_for_that_not_as_judged_since():
    scored = np.array([True] * 9 + [False] * 3)
    over = np.array([False] * 9 + [True, True, False])
    result = figures(scored=scored, over_max_length=over)
    assert result["left_out"]["over_max_length"] == 2 and result["left_out"]["not_scored"] == 1
    assert result["agreement"]["n"] == 9  # pairs 1-9 all have a majority for a or b


def test_agreement_on_pairs_it_never_saw_is_apart_from_its_training_pairs():
    # Its training pairs: 1-3 and 7 (it agrees on 1, 2, 3 and 7); it never saw 4-6 and 8-12, of which 5, 6, 8, 9, 10
    # have a majority for a or b: it agrees on 5, 8 and 9. Together 7 of 10, as before.
    seen = np.zeros(12, dtype=bool)
    seen[[0, 1, 2, 6]] = True
    result = figures(seen=seen)
    assert list(result).index("agreement_unseen") < list(result).index("agreement_seen")
    assert (result["agreement_seen"]["n"], result["agreement_seen"]["share"]["hits"]) == (4, 4)
    assert (result["agreement_unseen"]["n"], result["agreement_unseen"]["share"]["hits"]) == (6, 3)
    assert result["agreement_unseen"]["model_ties"] == 1  # pair 4
    assert (result["agreement"]["n"], result["agreement"]["share"]["hits"]) == (10, 7)


def test_a_pair_without_first_time_votes_is_left_out_for_that_not_as_a_split():
    votes = VOTES.copy()
    votes[10] = 0  # the split pair, judged now only by a retest: no vote counts
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 share on the way
        result = figures(votes)
    assert result["left_out"] == {"not_scored": 0, "over_max_length": 0, "no_votes": 1, "no_majority": 0,
                                  "tie_majority": 1, "both_bad_majority": 0}
    assert result["agreement"]["n"] == 10 and result["agreement"]["share"]["hits"] == 7


def test_scores_that_are_not_finite_numbers_fail_the_scoring_in_one_line():
    assert finite_scores([{"id": "1", "score": 0.5}, {"id": "2", "score": -3}]) == {"1": 0.5, "2": -3.0}
    for broken in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ScoringFailed) as failed:
            finite_scores([{"id": "1", "score": 0.5}, {"id": "7", "score": broken}])
        assert "1 of 2 answers" in str(failed.value) and "response 7" in str(failed.value)
        assert "not a finite number" in str(failed.value) and "\n" not in str(failed.value)


def test_confident_disagreements_need_two_votes_the_other_side_and_a_gap_above_the_threshold():
    votes = np.array([[2, 0, 0, 0], [2, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [0, 3, 0, 0], [2, 0, 0, 0]])
    score_a = np.array([0.0, 0.0, 0.0, 0.0, 2.0, 0.0])
    score_b = np.array([2.0, 0.5, 2.0, 2.0, 0.0, 0.0])
    assert confident_disagreements(votes=votes, score_a=score_a, score_b=score_b, threshold=1.0).tolist() == [
        True, False, False, False, True, False]
    assert confident_disagreements(votes=votes, score_a=score_a, score_b=score_b, threshold=0.25).tolist() == [
        True, True, False, False, True, False]


def test_one_more_reviewer_only_for_a_pair_that_has_what_it_needs_and_room_below_the_maximum():
    # closed at 2; open (needs 3, has 2); closed at the maximum; closed with a gold check past what it needed
    needed = reviewers_with_one_more(assigned=[2, 2, 4, 3], needed=[2, 3, 4, 2], max_overlap=4)
    assert needed.tolist() == [3, 3, 4, 4]
