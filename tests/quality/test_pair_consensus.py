"""Consensus per pair: the export pipeline keeps or drops pairs on these numbers."""

import numpy as np
import pytest

from annotate.quality.consensus import consensus_summary, pair_consensus
from annotate.quality.table import JudgmentTable
from annotate.review.choices import WINNER_A, WINNER_B, WINNER_BOTH_BAD
from annotate.review.consensus import NO_CONSENSUS


def _votes(pair, *choices, retest=None):
    rows = [{"pair": pair, "reviewer": f"r{i}", "winner": choice} for i, choice in enumerate(choices)]
    if retest:
        rows.append({"pair": pair, "reviewer": "r0", "winner": retest, "is_retest": True})
    return rows


@pytest.fixture(scope="module")
def consensus():
    records = [
        *_votes(30, "a", "a", "b"),  # 2 of 3 for a
        *_votes(10, "a", "b"),  # split 1-1
        *_votes(20, "a", "b", "tie"),  # split 1-1-1
        *_votes(40, "b"),  # a single vote
        *_votes(50, "both_bad", "both_bad", "a", retest="a"),  # retest does not vote
        *_votes(60, "b", "b", "a", "a"),  # 2-2
    ]
    return pair_consensus(JudgmentTable.from_records(records))


def test_pairs_come_sorted_by_id_with_their_votes(consensus):
    assert consensus.pair.tolist() == [10, 20, 30, 40, 50, 60]
    assert consensus.votes.tolist() == [
        [1, 1, 0, 0],
        [1, 1, 1, 0],
        [2, 1, 0, 0],
        [0, 1, 0, 0],
        [1, 0, 0, 2],
        [2, 2, 0, 0],
    ]
    assert consensus.judgments.tolist() == [2, 3, 3, 1, 3, 4]


def test_strict_plurality_wins_and_a_shared_top_is_no_consensus(consensus):
    assert consensus.winner.tolist() == [
        NO_CONSENSUS,
        NO_CONSENSUS,
        WINNER_A,
        WINNER_B,
        WINNER_BOTH_BAD,
        NO_CONSENSUS,
    ]


def test_confidence_is_the_share_agreeing_with_the_top_choice(consensus):
    assert consensus.confidence == pytest.approx([1 / 2, 1 / 3, 2 / 3, 1.0, 2 / 3, 1 / 2])


def test_mean_signed_strength_is_positive_for_a(consensus):
    # default strength is 1: pair 30 has +1 +1 -1 over 3 votes
    assert consensus.mean_signed_strength[2] == pytest.approx(1 / 3)
    assert consensus.mean_signed_strength[3] == pytest.approx(-1.0)


def test_summary_counts(consensus):
    summary = consensus_summary(consensus=consensus)
    assert summary["pairs"] == 6
    assert summary["pairs_with_overlap"] == 5
    assert summary["no_consensus"] == 3
    # Counted by kind, never by "a"/"b": which answer is "a" is only the import file's order.
    assert summary["winner_counts"] == {"decisive": 2, "tie": 0, "both_bad": 1}
    assert summary["mean_confidence_with_overlap"] == pytest.approx(
        np.mean([1 / 2, 1 / 3, 2 / 3, 2 / 3, 1 / 2])
    )


def test_empty_table_gives_empty_consensus():
    consensus = pair_consensus(JudgmentTable.empty())
    assert len(consensus) == 0
    assert consensus.votes.shape == (0, 4)
    assert consensus_summary(consensus=consensus)["mean_confidence_with_overlap"] is None
