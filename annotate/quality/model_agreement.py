"""A model reviewer measured against people: pure numpy over one row per judged pair.

A model reviewer is a reward model attached to a project (annotate/quality/model_reviewers.py). It scores
each answer alone, so its choice on a pair is the answer with the higher score (a tie when the scores are
within TIE_BELOW). Its figures, beside the people's and never mixed into them (docs/agreement.md, "A model
reviewer"):

- agreement with the human strict majority (annotate/review/consensus.py), over the scored pairs whose
  majority is a or b: the plain share of pairs where the model picked the majority's answer, with a Wilson
  interval, and Cohen's kappa over the categories a, b and tie with a percentile bootstrap interval over
  pairs. Like every agreement figure of the report, kappa counts each pair in both orientations (which
  answer is "a" is only the import file's order), so a model that agrees with people on every pair has
  kappa 1 whatever the file's order. Both are given on the pairs it never saw first, then on the pairs of its
  training snapshot's train split (the checkpoint's lineage names them), then on all: agreement on pairs a model
  was trained on measures memory, not judgment;
- order consistency: the share of scored pairs where its choice in the order reviewers were shown and in
  the swapped order is the same answer. Both choices come from the same two scores, so it is 1 by
  construction (ORDER_CONSISTENCY_NOTE): kept as the figure people and models are compared on, not a
  measurement of this model, and so given without an interval;
- left rate: the share of its a/b choices that went to the answer shown on the left in the order reviewers
  saw. With answers scored alone this follows the left/right coin of the assignments (LEFT_RATE_NOTE), not
  the model;
- the pairs left out, and why.

Under TOO_FEW_TO_JUDGE_UNDER pairs a figure is computed but marked too few to judge.
"""

from __future__ import annotations

import numpy as np

from annotate.quality.agreement import cohen_kappa_from_tables, percentile_ci, resampled_pattern_frequencies
from annotate.quality.reviewers import wilson_interval
from annotate.review.choices import WINNER_A, WINNER_B, WINNER_BOTH_BAD, WINNER_TIE
from annotate.review.consensus import NO_CONSENSUS, strict_majority

TIE_BELOW = 1e-6  # scores closer than this are a tie: float noise, not a preference
TOO_FEW_TO_JUDGE_UNDER = 10
KAPPA_RESAMPLES = 1000
# The model's choice, coded as the winners a, b, tie (annotate/review/choices.py); a <-> b is the swap.
MODEL_CATEGORIES = 3
MODEL_SWAP = np.array([WINNER_B, WINNER_A, WINNER_TIE])
# The order of a choice on the screen.
LEFT, RIGHT, TIE = "left", "right", "tie"
LEFT_OUT_REASONS = {
    "not_scored": "judged since the model last scored (score again to include them)",
    "over_max_length": "an answer is longer than the reward model's max_length: not scored, never cut",
    "no_votes": "no first-time judgment counts (only retests, or withdrawn)",
    "no_majority": "the people's votes have no strict majority",
    "tie_majority": "the people's majority says tie",
    "both_bad_majority": "the people's majority says both bad",
}


ORDER_CONSISTENCY_NOTE = ("1.000 by construction: a model that scores each answer alone cannot be swayed by "
                          "order")
LEFT_RATE_NOTE = ("share of pairs where the answer shown on the left scored higher; with answers scored alone this "
                  "follows the left/right coin, and is near 0.5 when the coin is fair")


def model_winner(score_a, score_b) -> np.ndarray:
    """(p,) winner codes a, b or tie of the answer with the higher score; within TIE_BELOW a tie."""
    difference = np.asarray(score_a, dtype=np.float64) - np.asarray(score_b, dtype=np.float64)
    return np.where(np.abs(difference) < TIE_BELOW, WINNER_TIE,
                    np.where(difference > 0, WINNER_A, WINNER_B)).astype(np.int8)


def screen_choice(*, left_score: float, right_score: float) -> str:
    """left, right or tie: the model's choice between two answers in the order they are shown."""
    difference = left_score - right_score
    return TIE if abs(difference) < TIE_BELOW else LEFT if difference > 0 else RIGHT


def winner_of_screen_choice(choice: np.ndarray, *, a_on_left: np.ndarray) -> np.ndarray:
    """(p,) winner codes of (p,) left/right/tie choices made with response a on the left where `a_on_left`."""
    choice, a_on_left = np.asarray(choice), np.asarray(a_on_left, dtype=bool)
    left_winner = np.where(a_on_left, WINNER_A, WINNER_B)
    right_winner = np.where(a_on_left, WINNER_B, WINNER_A)
    return np.where(choice == LEFT, left_winner, np.where(choice == RIGHT, right_winner, WINNER_TIE)).astype(np.int8)


def _rate(hits: int, total: int) -> dict:
    """hits / total with its Wilson interval; null without anything to count."""
    low, high = wilson_interval(hits=np.array([hits]), total=np.array([total]))
    return {
        "value": hits / total if total else None,
        "ci": [float(low[0]), float(high[0])] if total else None,
        "hits": int(hits),
        "n": int(total),
        "too_few_to_judge": total < TOO_FEW_TO_JUDGE_UNDER,
    }


def kappa_with_interval(*, human: np.ndarray, model: np.ndarray, n_resamples: int = KAPPA_RESAMPLES,
                        seed: int = 0, confidence: float = 0.95) -> dict:
    """Cohen's kappa of (n,) human and model winner codes (a, b, tie), each pair in both orientations, with a
    percentile bootstrap interval over pairs; null where chance agreement is 1 (one category throughout)."""
    human, model = np.asarray(human, dtype=np.int64), np.asarray(model, dtype=np.int64)
    # Each pair in a canonical orientation (the people's answer as a): reversing pairs gives the same resampling
    # units, so the same draws and the same interval for a seed.
    flip = human == WINNER_B
    human, model = np.where(flip, WINNER_A, human), np.where(flip, MODEL_SWAP[model], model)
    cells = human * MODEL_CATEGORIES + model
    frequency = np.bincount(cells, minlength=MODEL_CATEGORIES**2).astype(np.float64)

    def kappas(frequencies: np.ndarray) -> np.ndarray:
        tables = frequencies.reshape(-1, MODEL_CATEGORIES, MODEL_CATEGORIES)
        return cohen_kappa_from_tables(tables=tables + tables[:, MODEL_SWAP][:, :, MODEL_SWAP])

    value = float(kappas(frequency)[0]) if cells.size else float("nan")
    if not np.isfinite(value):
        return {"value": None, "ci": None}
    ci = None
    if n_resamples > 0:
        draws = resampled_pattern_frequencies(frequency=frequency, n_resamples=n_resamples,
                                              rng=np.random.default_rng(seed))
        ci = percentile_ci(kappas(draws), confidence)
    return {"value": value, "ci": None if ci is None else [ci[0], ci[1]]}


def model_reviewer_figures(*, votes: np.ndarray, scored: np.ndarray, winner_shown: np.ndarray,
                           winner_swapped: np.ndarray, chose_left: np.ndarray, over_max_length: np.ndarray | None = None,
                           seen: np.ndarray | None = None, n_resamples: int = KAPPA_RESAMPLES, seed: int = 0) -> dict:
    """The model reviewer's figures over the project's judged pairs, one row each: (p, 4) human votes (a, b, tie,
    both_bad), and (p,) whether the model scored the pair, its winner in the order reviewers were shown and in the
    swapped order, and whether it chose the answer shown on the left (False for a tie or an unscored pair); and
    whether its last scoring left the pair out for an answer over its max_length, and whether the pair is in the
    train split of the snapshot its checkpoint was trained on (`seen`; None: no pair is known to be).

    Agreement is given on the pairs it never saw first (`agreement_unseen`), then on its training pairs
    (`agreement_seen`), then on both (`agreement`): agreement on pairs a model was trained on measures memory,
    not judgment."""
    votes = np.asarray(votes, dtype=np.int64).reshape(-1, 4)
    scored = np.asarray(scored, dtype=bool)
    over_max_length = (np.zeros_like(scored) if over_max_length is None
                       else np.asarray(over_max_length, dtype=bool) & ~scored)
    winner_shown, winner_swapped = np.asarray(winner_shown), np.asarray(winner_swapped)
    # A pair judged only by retests (or whose first-time judgments were withdrawn) has no votes: it is left out
    # for that, not counted as a split.
    voted = votes.sum(axis=1) > 0
    human = np.full(votes.shape[0], NO_CONSENSUS, dtype=np.int8)
    human[voted] = strict_majority(votes[voted])[0]
    decisive_human = (human == WINNER_A) | (human == WINNER_B)
    counted = scored & decisive_human
    seen = None if seen is None else np.asarray(seen, dtype=bool)
    decisive_model = scored & (winner_shown != WINNER_TIE)
    left_out = {
        "not_scored": int((~scored & ~over_max_length).sum()),
        "over_max_length": int(over_max_length.sum()),
        "no_votes": int((scored & ~voted).sum()),
        "no_majority": int((scored & voted & (human == NO_CONSENSUS)).sum()),
        "tie_majority": int((scored & (human == WINNER_TIE)).sum()),
        "both_bad_majority": int((scored & (human == WINNER_BOTH_BAD)).sum()),
    }

    def agreement(among: np.ndarray) -> dict:
        among = counted & among
        kappa = kappa_with_interval(human=human[among], model=winner_shown[among], n_resamples=n_resamples, seed=seed)
        return {
            "n": int(among.sum()),
            "too_few_to_judge": int(among.sum()) < TOO_FEW_TO_JUDGE_UNDER,
            "share": _rate(int((winner_shown[among] == human[among]).sum()), int(among.sum())),
            "cohen_kappa": kappa,
            "model_ties": int((winner_shown[among] == WINNER_TIE).sum()),
        }

    consistent = int((winner_shown[scored] == winner_swapped[scored]).sum())
    return {
        "judged_pairs": int(votes.shape[0]),
        "scored_pairs": int(scored.sum()),
        "agreement_unseen": None if seen is None else agreement(~seen),
        "agreement_seen": None if seen is None else agreement(seen),
        "agreement": agreement(np.ones_like(scored)),
        # No interval: both choices come from the same two scores, so it is 1 by construction, not an estimate.
        "order_consistency": {
            "value": consistent / int(scored.sum()) if scored.any() else None, "hits": consistent,
            "n": int(scored.sum()), "by_construction": True, "note": ORDER_CONSISTENCY_NOTE},
        "left_rate": {
            **_rate(int(np.asarray(chose_left, dtype=bool)[decisive_model].sum()), int(decisive_model.sum())),
            "note": LEFT_RATE_NOTE},
        "left_out": left_out,
    }


def confident_disagreements(*, votes: np.ndarray, score_a: np.ndarray, score_b: np.ndarray,
                            threshold: float) -> np.ndarray:
    """(p,) whether the people's strict majority so far (at least 2 votes) is a or b and the model prefers the
    other answer by a score difference above `threshold`."""
    votes = np.asarray(votes, dtype=np.int64).reshape(-1, 4)
    if votes.shape[0] == 0:
        return np.zeros(0, dtype=bool)
    human = np.full(votes.shape[0], NO_CONSENSUS, dtype=np.int8)
    voted = votes.sum(axis=1) >= 2
    human[voted] = strict_majority(votes[voted])[0]
    model = model_winner(score_a, score_b)
    gap = np.abs(np.asarray(score_a, dtype=np.float64) - np.asarray(score_b, dtype=np.float64))
    opposite = ((human == WINNER_A) & (model == WINNER_B)) | ((human == WINNER_B) & (model == WINNER_A))
    return opposite & (gap > threshold)
