"""The consensus rule: the majority choice of a pair's votes, or none.

The one definition of the rule, in the review app so that everything built on the votes reads it from
here: adaptive overlap decides with it how many reviewers a pair needs (overlap.py), adjudication which
pairs are split (adjudication.py), the agreement report (annotate/quality/consensus.py) and the export
pipeline which label a pair gets. Adjudication's queue reads it in SQL, as Pair.votes_split (a generated
column over the pair's vote counters, models.py); a test holds the two to the same answer for every count of
each choice up to 3 (tests/review/test_adjudication.py). Tie rules:
- Votes are the original judgments of the pair (retests left out, so nobody votes twice), over
  four choices: a, b, tie, both_bad.
- The winner is the choice with strictly more votes than any other. When two or more choices share
  the top count (1–1, 2–2, 1–1–1, ...) there is no consensus: winner is -1 (``NO_CONSENSUS``).
  No tie-breaking by strength, time or seniority: a split pair is a split pair.
Pure numpy, no Django.
"""

from __future__ import annotations

import numpy as np

from annotate.review.choices import WINNERS

NO_CONSENSUS = -1
N_CHOICES = len(WINNERS)
CONSENSUS_RULE = ("strict majority of a/b/tie/both_bad over the current judgments of original (non-retest) "
                  "assignments; a shared top count is no consensus; only an a or b majority makes a row")


def strict_majority(votes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The consensus of (p, 4) vote counts (a, b, tie, both_bad per pair, each pair >= 1 vote).

    Returns (winner, share), both (p,): winner int8, the code of the choice with strictly more votes
    than any other, or NO_CONSENSUS when two or more share the top count; share float64, the top
    count over the pair's votes.
    """
    votes = np.asarray(votes, dtype=np.int64).reshape(-1, N_CHOICES)
    if votes.shape[0] == 0:
        return np.zeros(0, dtype=np.int8), np.zeros(0, dtype=np.float64)
    top = votes.max(axis=1)
    split = (votes == top[:, None]).sum(axis=1) > 1
    winner = np.where(split, NO_CONSENSUS, votes.argmax(axis=1)).astype(np.int8)
    return winner, top / votes.sum(axis=1)
