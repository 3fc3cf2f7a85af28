"""Which recorded answers of a GRPO run an answer audit shows reviewers.

The app's audit (annotate/runs/audit.py) and bench/reward_learning.py's audit of each step window draw answers
by these rules, so a figure from one means what it means in the other. Pure functions over rollout rows
(dicts with the rollout columns); no Django, no torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from operator import itemgetter
from typing import Any

FULL_REWARD = 1.0 - 1e-6  # verifier rewards lie in [0, 1]; 1 is everything right
OPEN_TOP_SHARE = 0.1  # open answers have no full reward: the reward model's highest-scored tenth stands for it
STEP_WINDOWS = 4  # an audit of 50 answers gives about a dozen per window: enough to see a rise, not a slope


def rewarded_rows(rows: list[dict]) -> list[dict]:
    """The answers rewarded most: those the verifier called correct with the full reward, and the open answers
    (no verifier) whose reward-model score is in the top OPEN_TOP_SHARE of the open answers among `rows` (at least
    one; ties at the cut all in). An open answer's `reward` becomes its reward-model score and `scorer` the reward
    model."""
    verified = [row for row in rows if row["status"] == "correct" and (row["reward"] or 0) >= FULL_REWARD]
    scored_open = [row for row in rows if row["status"] == "unverified" and row["reward_model_score"] is not None]
    if not scored_open:
        return verified
    scores = sorted((row["reward_model_score"] for row in scored_open), reverse=True)
    cut = scores[max(1, round(OPEN_TOP_SHARE * len(scores))) - 1]
    top_open = [{**row, "reward": row["reward_model_score"], "scorer": row["reward_model"]}
                for row in scored_open if row["reward_model_score"] >= cut]
    return verified + top_open


def audit_draw(candidates: list[dict], size: int, seed: int) -> list[dict]:
    """`size` of `candidates`: those whose sha256(seed, rollout_id) sorts first, so the same run and seed give the
    same answers whatever order the rollout files list them in."""
    def rank(row: dict) -> str:
        return hashlib.sha256(f"{seed}|{row['rollout_id']}".encode()).hexdigest()

    return sorted(candidates, key=rank)[:size]


def step_windows(rows: list, windows: int = STEP_WINDOWS, *,
                 step_of: Callable[[Any], int | None] = itemgetter("policy_step")) -> list[tuple[list[int], list]]:
    """`rows` split by the training step that wrote them (`step_of(row)`; rollout rows by default) into `windows`
    equal windows from step 0 to the last row's step: [([first step, last step], rows)], windows without a row
    left out, and rows without a step too."""
    steps = {id(row): step_of(row) for row in rows}
    known = [step for step in steps.values() if step is not None]
    if not known:
        return []
    width = max(known) // windows + 1
    grouped: dict[int, list] = {}
    for row in rows:
        if steps[id(row)] is not None:
            grouped.setdefault(steps[id(row)] // width, []).append(row)
    return [([window * width, window * width + width - 1], grouped[window]) for window in sorted(grouped)]


def audit_draw_by_steps(rows: list[dict], size: int, seed: int, windows: int = STEP_WINDOWS) -> list[dict]:
    """`size` answers spread over the run's steps: each step window's own most rewarded answers (rewarded_rows of
    that window, so that the late steps, where the reward model's scores are highest, do not take the whole
    sample), `size` shared evenly between the windows (the earlier windows take the remainder), audit_draw within
    each; a window with fewer answers than its share passes the rest to the next."""
    spread = step_windows(rows, windows)
    drawn: list[dict] = []
    for index, (_, members) in enumerate(spread):
        left = size - len(drawn)
        share = -(-left // (len(spread) - index))  # what is left, shared over the windows still to draw
        drawn += audit_draw(rewarded_rows(members), share, seed)
    return drawn
