"""Rounds of preferences: GRPO on a reward model that is trained again, round after round, on reviewers' verdicts
about the answers of the policy so far (bench/reward_learning.py --rounds runs them where the truth is known).

The rules a team applies to its own rounds: how the GRPO steps are shared between rounds, how many epochs each
round's reward model trains, which split a repeated prompt's new pair goes to, which round's checkpoint to keep
(using no held-out answer; chosen_checkpoint is its counterpart within one run, from answer audits), and whether a
reward-model target or a gain target was met over every round and seed.
"""

from collections.abc import Iterable, Sequence


def round_steps(steps: int, rounds: int) -> list[int]:
    """The GRPO budget split into `rounds` runs, the remainder to the last: 400 in 3 is 133, 133, 134."""
    return [steps // rounds] * (rounds - 1) + [steps - (steps // rounds) * (rounds - 1)]


def round_epochs(first_epochs: float, first_train_pairs: int, train_pairs: int) -> float:
    """The epochs of a round's reward model, trained on `train_pairs` (every round's pairs so far), so that it takes
    as many optimizer steps as round 1's took with `first_epochs` on `first_train_pairs`: each round then costs
    about the first reward model's CPU time, however many pairs the rounds have added."""
    return round(first_epochs * first_train_pairs / train_pairs, 3)


def keep_earlier_splits(earlier: Iterable[tuple[str, dict, str, str]],
                        new: Iterable[tuple[str, dict, str, str]]) -> tuple[list[tuple[str, dict, str, str]], int]:
    """A round's new (split, task, chosen, rejected) pairs, each whose prompt (task["prompt"]) an earlier round already
    paired moved to that prompt's earlier split: a snapshot splits by prompt text, so a test prompt stays test, and
    new problems repeat some earlier prompts. Returns the pairs and how many of them were asked before."""
    split_of = {task["prompt"]: split for split, task, _, _ in earlier}
    kept = [(split_of.get(task["prompt"], split), task, chosen, rejected) for split, task, chosen, rejected in new]
    return kept, sum(task["prompt"] in split_of for _, task, _, _ in kept)


def chosen_round(asked_shares: Sequence[float]) -> int:
    """The round (from 1) whose checkpoint answered the next round's new problems correctly most often, the earlier on
    a tie: the choice a team makes from its reviewers' verdicts on each round's answers, using no held-out answer.
    `asked_shares[k - 1]` is round k's checkpoint's correct share (the last checkpoint asked as a next round would)."""
    if not asked_shares:
        raise ValueError("no round to choose from: give each round's checkpoint's correct share")
    return max(range(len(asked_shares)), key=lambda index: (asked_shares[index], -index)) + 1


def chosen_checkpoint(audited_shares: dict[int, float | None]) -> int | None:
    """The saved checkpoint (its step) whose window's answer audit found the largest correct share, the earlier on a
    tie: what an engineer who audits one run as it goes keeps, using no held-out answer. `audited_shares` maps each
    checkpoint's step to the correct share of the answers audited in the steps before it (None: none audited). None
    when no window had an audited answer."""
    scored = [(share, -step) for step, share in audited_shares.items() if share is not None]
    return -max(scored)[1] if scored else None


def reward_met_by_round(seeds: Iterable[Sequence[dict]], *, accuracy: float, cpu_minutes: float) -> list[bool]:
    """For round 1, 2, ...: whether the reward model of that round met the target in every seed: test accuracy
    (chosen above rejected on the snapshot's test split) at least `accuracy`, trained within `cpu_minutes`. `seeds`
    holds, for each seed, its reward models in round order, each {"test": {"accuracy": ...}, "cpu_minutes": ...}; a
    round some seed lacks is read over the seeds that have it. The target as a whole is met when every round is."""
    by_round: dict[int, list[dict]] = {}
    for models in seeds:
        for number, model in enumerate(models, start=1):
            by_round.setdefault(number, []).append(model)
    return [all(model["test"]["accuracy"] >= accuracy and model["cpu_minutes"] <= cpu_minutes
                for model in by_round[number]) for number in sorted(by_round)]


def gain_met(gains: Iterable[float | None], *, points: float) -> bool | None:
    """Whether every seed's child gained at least `points` held-out points over its parent; None when some seed has
    no such child (a run of another kind, or one written before that child was chosen), so it is not judged."""
    gains = list(gains)
    return None if any(gain is None for gain in gains) else all(gain >= points for gain in gains)
