"""Consensus per pair: the majority choice of its reviewers and how many agree with it.

Tie rules (the export pipeline filters on these):
- Votes are the original judgments of the pair (retests left out, so nobody votes twice), over
  four choices: a, b, tie, both_bad.
- The winner is the choice with strictly more votes than any other. When two or more choices share
  the top count (1–1, 2–2, 1–1–1, ...) there is no consensus: winner is -1 (``NO_CONSENSUS``).
  No tie-breaking by strength, time or seniority: a split pair is a split pair.
- ``confidence`` is the share of the pair's votes that went to the top choice (for a split pair,
  the share of one of the tied top choices), so 2 of 3 gives 0.667 and a single judgment gives
  1.0; filter on ``judgments`` too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from annotate.quality.table import WINNER_A, WINNER_B, JudgmentTable

NO_CONSENSUS = -1
N_CHOICES = 4


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
    top = votes.max(axis=1) if p else np.zeros(0, dtype=np.int64)
    split = (votes == top[:, None]).sum(axis=1) > 1
    winner = np.where(split, NO_CONSENSUS, votes.argmax(axis=1) if p else 0).astype(np.int8)
    signed = np.bincount(dense, weights=table.signed_strength[rows].astype(np.float64), minlength=p)
    with np.errstate(divide="ignore", invalid="ignore"):
        confidence = top / judgments
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
    """Counts for the report: pairs by winner, split pairs, mean confidence of overlapping pairs."""
    overlapping = consensus.judgments >= 2
    winner_names = ("a", "b", "tie", "both_bad")
    return {
        "pairs": len(consensus),
        "pairs_with_overlap": int(overlapping.sum()),
        "winner_counts": {
            name: int((consensus.winner == code).sum()) for code, name in enumerate(winner_names)
        },
        "no_consensus": int((consensus.winner == NO_CONSENSUS).sum()),
        "decisive_with_overlap": int(
            (overlapping & ((consensus.winner == WINNER_A) | (consensus.winner == WINNER_B))).sum()
        ),
        "mean_confidence_with_overlap": (
            float(consensus.confidence[overlapping].mean()) if overlapping.any() else None
        ),
        "unanimous_with_overlap": int((overlapping & (consensus.confidence == 1.0)).sum()),
    }
