"""Rounds of preferences: GRPO on a reward model that is trained again, round after round, on reviewers' verdicts
about the answers of the policy so far (bench/reward_learning.py --rounds runs them where the truth is known).

The rules a team applies to its own rounds: how the GRPO steps are shared between rounds, how many epochs each
round's reward model trains, which split a repeated prompt's new pair goes to, which round's checkpoint to keep
(using no held-out answer; chosen_checkpoint is its counterpart within one run, from answer audits), and whether a
reward-model target or a gain target was met over every round and seed.
"""

import random
import statistics
from collections.abc import Iterable, Sequence

from training.preference_pairs import SplitPair, split_pairs


def round_steps(steps: int, rounds: int) -> list[int]:
    """The GRPO budget split into `rounds` runs, the remainder to the last: 400 in 3 is 133, 133, 134."""
    return [steps // rounds] * (rounds - 1) + [steps - (steps // rounds) * (rounds - 1)]


def round_epochs(first_epochs: float, first_train_pairs: int, train_pairs: int) -> float:
    """The epochs of a round's reward model, trained on `train_pairs` (every round's pairs so far), so that it takes
    as many optimizer steps as round 1's took with `first_epochs` on `first_train_pairs`: each round then costs
    about the first reward model's CPU time, however many pairs the rounds have added."""
    return round(first_epochs * first_train_pairs / train_pairs, 3)


def keep_earlier_splits(earlier: Iterable[SplitPair], new: Iterable[SplitPair]) -> tuple[list[SplitPair], int]:
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


def round_problem_seed(seed: int, number: int) -> int:
    """The seed of the held-in problems round `number` (from 1) asks for preferences: round 1 the single-round
    benchmark's (5000 + seed), each later round new problems."""
    return 5000 + seed + 1000 * (number - 1)


def round_pairs_rng(seed: int, number: int) -> random.Random:
    """How round `number` pairs and splits its answers: round 1 as the single-round benchmark does."""
    return random.Random(seed) if number == 1 else random.Random(f"{seed}:round{number}")


def round_pairs(earlier: list[SplitPair], sampled: dict, *, seed: int, number: int,
                pairing: str) -> tuple[list[SplitPair], dict]:
    """Round `number`'s pairs of `sampled` (training.preference_pairs.sampled_preferences), split by the round's own
    coin, except that a prompt an earlier round already paired keeps that round's split (keep_earlier_splits).
    Returns them and split_pairs' counts of them as they are split, with `asked_before`: how many of their prompts an
    earlier round paired."""
    new, counts = split_pairs(sampled, rng=round_pairs_rng(seed, number), pairing=pairing)
    new, counts["asked_before"] = keep_earlier_splits(earlier, new)
    counts["train"] = sum(split == "train" for split, *_ in new)
    counts["test"] = len(new) - counts["train"]
    return new, counts


def gain_points(parent: dict, child: dict) -> float:
    """A child's held-out gain over its parent in points (success rates as evaluate_checkpoints reports them)."""
    return round(100 * (child["success_rate"] - parent["success_rate"]), 1)


def round_choice(asked_shares: Sequence[float], parent: dict, checkpoints: Sequence[dict]) -> dict:
    """The round-chosen child (chosen_round) with its held-out success and gain: `checkpoints[k - 1]` is round k's
    checkpoint's held-out success, `parent` the parent's."""
    chosen = chosen_round(asked_shares)
    child = checkpoints[chosen - 1]
    return {"asked_correct_shares": list(asked_shares), "chosen_round": chosen, "chosen_child": child,
            "gain_points": gain_points(parent, child)}


def reward_models_by_round(row: dict) -> list[dict]:
    """Every reward model a seed's row trained, in order: one a round with rounds (row["reward_model"] is round 1's),
    else its one."""
    return [one["reward_model"] for one in row["rounds"]] if row.get("rounds") else [row["reward_model"]]


def targets(rows: Sequence[dict], *, accuracy: float, cpu_minutes: float, points: float) -> dict:
    """The targets read over every seed's row (and every round of it): the reward model at `accuracy` within
    `cpu_minutes` in every round, and the gain of `points` by the last child, the audit-chosen child and the
    round-chosen child (None where some seed has no such child)."""
    by_round = reward_met_by_round([reward_models_by_round(row) for row in rows], accuracy=accuracy,
                                   cpu_minutes=cpu_minutes)

    def chosen(choice: str) -> bool | None:
        return gain_met(((row.get(choice) or {}).get("gain_points") for row in rows), points=points)

    return {"reward_accuracy": accuracy, "reward_cpu_minutes": cpu_minutes, "gain_points": points,
            "reward_met": all(by_round), "reward_met_by_round": by_round,
            "gain_met": gain_met((row["gain_points"] for row in rows), points=points),
            "audited_gain_met": chosen("audited"), "chosen_round_gain_met": chosen("round_choice")}


def format_targets(rows: Sequence[dict], met: dict) -> str:
    """The line the benchmark's targets are read from: `met` is targets(rows, ...)."""
    reward = "met" if met["reward_met"] else "NOT met"
    if len(met["reward_met_by_round"]) > 1:
        reward += " (" + ", ".join(f"round {number} {'met' if one else 'NOT met'}"
                                   for number, one in enumerate(met["reward_met_by_round"], start=1)) + ")"
    gains = [row["gain_points"] for row in rows]
    return (f"target: reward model accuracy >= {met['reward_accuracy']:.2f} within {met['reward_cpu_minutes']:.0f} "
            f"CPU-minutes, every round: {reward}; child >= parent + {met['gain_points']:.0f} points in every seed: "
            f"{'met' if met['gain_met'] else 'NOT met'} (min {min(gains):+.1f}, median {statistics.median(gains):+.1f})")


def format_rounds(row: dict) -> str:
    """A seed's rounds: what each round asked, the reward model it trained, and where the policy stood after it."""
    lines = [f"{'round':<7}{'policy asked':>22}{'its answers correct':>21}{'new pairs tr/te':>17}"
             f"{'RM acc (test pairs)':>21}{'RM equal-length':>17}{'RM CPU-min':>12}{'steps':>7}{'GRPO CPU-min':>14}"
             f"{'held-out after':>16}"]
    for one in row["rounds"]:
        equal_length = one["verified_afterwards"]["within_prompt"]["equal_length"]["accuracy"]
        lines.append(
            f"{one['round']:<7}{one['policy']:>22}{one['policy_correct_share']:>21.3f}"
            f"{one['new_pairs']['train']:>11}/{one['new_pairs']['test']:<5}"
            f"{one['reward_model']['test']['accuracy']:>12.3f} ({one['snapshot']['test']:>3})"
            f"{'-' if equal_length is None else f'{equal_length:.3f}':>17}"
            f"{one['reward_model']['cpu_minutes']:>12.1f}{one['steps']:>7}{one['grpo_cpu_minutes']:>14.1f}"
            f"{one['heldout_after']:>16.3f}")
    choice = row.get("round_choice")
    if choice:  # results written before the last checkpoint was asked have none
        shares = " / ".join(f"{share:.3f}" for share in choice["asked_correct_shares"])
        lines.append(f"chosen by its answers' correct share to the next round's problems ({shares}; no held-out "
                     f"answer used): round {choice['chosen_round']}, held-out {choice['chosen_child']['success_rate']:.3f} "
                     f"({choice['gain_points']:+.1f} points)")
    return "\n".join([f"seed {row['seed']}: rounds of preferences (parent {row['parent']['success_rate']:.3f})",
                      *lines])
