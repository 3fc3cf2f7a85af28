"""A model reviewer's figures against people (annotate/quality/model_agreement.py), checked on a worked example."""

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


def figures(votes=VOTES, score_a=SCORE_A, score_b=SCORE_B, a_on_left=A_ON_LEFT, scored=None):
    winner = model_winner(score_a, score_b)
    left, right = np.where(a_on_left, score_a, score_b), np.where(a_on_left, score_b, score_a)
    shown = np.where(np.abs(left - right) < 1e-6, "tie", np.where(left > right, "left", "right"))
    swapped = np.where(shown == "left", "right", np.where(shown == "right", "left", "tie"))
    assert (winner_of_screen_choice(shown, a_on_left=a_on_left) == winner).all()
    return model_reviewer_figures(
        votes=votes, scored=np.ones(len(votes), dtype=bool) if scored is None else scored,
        winner_shown=winner_of_screen_choice(shown, a_on_left=a_on_left),
        winner_swapped=winner_of_screen_choice(swapped, a_on_left=~a_on_left), chose_left=shown == "left", seed=0)


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
    assert result["left_out"] == {"not_scored": 0, "no_majority": 1, "tie_majority": 1, "both_bad_majority": 0}


def test_order_consistency_and_left_rate_are_counted_from_the_choices():
    result = figures()
    # Scored alone, an answer keeps its score in either order: every pair gets the same answer both ways.
    assert result["order_consistency"]["value"] == 1.0 and result["order_consistency"]["n"] == 12
    # 11 a/b choices (pair 4 is a tie); shown on the left: pairs 1, 3, 6 (b, a on the right), 10 (a on the right),
    # 12 (b on the left) -> by hand from A_ON_LEFT and the model's winners.
    winner = model_winner(SCORE_A, SCORE_B)
    decisive = winner != WINNER_TIE
    chose_left = ((winner == WINNER_A) & A_ON_LEFT) | ((winner == WINNER_B) & ~A_ON_LEFT)
    assert result["left_rate"]["n"] == 11
    assert result["left_rate"]["hits"] == int(chose_left[decisive].sum())


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
