"""Consensus per pair: the majority choice of its reviewers and how many agree with it.

The rule itself (`strict_majority`, its tie rules and NO_CONSENSUS) is defined once, in
annotate/review/consensus.py; the agreement report applies it here to every pair of a JudgmentTable.
``confidence`` is the share of the pair's votes that went to the top choice (for a split pair, the
share of one of the tied top choices), so 2 of 3 gives 0.667 and a single judgment gives 1.0; filter
on ``judgments`` too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from annotate.quality.table import JudgmentTable
from annotate.review.choices import WINNER_A, WINNER_B, WINNER_BOTH_BAD, WINNER_TIE
from annotate.review.consensus import N_CHOICES, NO_CONSENSUS, strict_majority


@dataclass(frozen=True)
class PairConsensus:
    """One row per pair with at least one original judgment, sorted by pair id; shapes (p,) / (p, 4).

    pair                  int64   pair id
    votes                 int32   (p, 4) votes for a, b, tie, both_bad
    judgments             int32   votes.sum(axis=1)
    winner                int8    0 a, 1 b, 2 tie, 3 both_bad, -1 no consensus (split top)
    confidence            float64 share of votes for the top choice, in (0, 1]
    mean_signed_strength  float64 mean of +strength (a won), -strength (b won), 0 (tie/both_bad)
    """

    pair: np.ndarray
    votes: np.ndarray
    judgments: np.ndarray
    winner: np.ndarray
    confidence: np.ndarray
    mean_signed_strength: np.ndarray

    def __len__(self) -> int:
        return int(self.pair.shape[0])


def pair_consensus(table: JudgmentTable) -> PairConsensus:
    """Majority winner, confidence and vote counts of every pair with original judgments."""
    rows = np.flatnonzero(~table.is_retest)
    present, dense = np.unique(table.pair_index[rows], return_inverse=True)
    p = present.size
    votes = np.bincount(
        dense * N_CHOICES + table.winner[rows].astype(np.int64), minlength=p * N_CHOICES
    ).reshape(p, N_CHOICES)
    judgments = votes.sum(axis=1)
    winner, confidence = strict_majority(votes)
    signed = np.bincount(dense, weights=table.signed_strength[rows].astype(np.float64), minlength=p)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_signed = signed / judgments
    return PairConsensus(
        pair=table.pair_ids[present],
        votes=votes.astype(np.int32),
        judgments=judgments.astype(np.int32),
        winner=winner,
        confidence=confidence.astype(np.float64),
        mean_signed_strength=mean_signed,
    )


def consensus_summary(*, consensus: PairConsensus) -> dict:
    """Counts for the report: pairs by kind of winner, split pairs, mean confidence of overlapping pairs.

    Winners are counted as "decisive" (one answer won), "tie" or "both_bad", never as "a" or "b":
    which answer is "a" is only the import file's order, so a count of "a" wins across pairs says
    how the file was sorted, not what reviewers found (docs/agreement.md).
    """
    overlapping = consensus.judgments >= 2
    decisive = (consensus.winner == WINNER_A) | (consensus.winner == WINNER_B)
    return {
        "pairs": len(consensus),
        "pairs_with_overlap": int(overlapping.sum()),
        "winner_counts": {
            "decisive": int(decisive.sum()),
            "tie": int((consensus.winner == WINNER_TIE).sum()),
            "both_bad": int((consensus.winner == WINNER_BOTH_BAD).sum()),
        },
        "no_consensus": int((consensus.winner == NO_CONSENSUS).sum()),
        "decisive_with_overlap": int((overlapping & decisive).sum()),
        "mean_confidence_with_overlap": (
            float(consensus.confidence[overlapping].mean()) if overlapping.any() else None
        ),
        "unanimous_with_overlap": int((overlapping & (consensus.confidence == 1.0)).sum()),
    }
