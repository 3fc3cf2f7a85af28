"""training/reward_rounds.py: the rules of rounds of preferences, on hand-computed cases, and the stored results of
bench/reward_learning.py --rounds read again with them."""

import itertools
import json
from pathlib import Path

import pytest

from training.reward_rounds import (
    chosen_checkpoint,
    chosen_round,
    format_rounds,
    format_targets,
    gain_met,
    keep_earlier_splits,
    reward_met_by_round,
    round_choice,
    round_epochs,
    round_pairs,
    round_problem_seed,
    round_steps,
    targets,
)
from training.task_families import make_tasks

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"
ROUNDS_RESULTS = [RESULTS / name for name in ("reward_learning_rounds.json", "reward_learning_rounds_kl_parent.json")]
AUDITED_RESULTS = [RESULTS / name for name in ("reward_learning.json", "reward_learning_beta.json")]


def model(accuracy: float, cpu_minutes: float = 2.0) -> dict:
    return {"test": {"accuracy": accuracy}, "cpu_minutes": cpu_minutes}


def test_the_step_budget_is_shared_between_rounds_the_remainder_to_the_last():
    assert round_steps(400, 1) == [400]
    assert round_steps(400, 3) == [133, 133, 134]
    assert round_steps(400, 4) == [100, 100, 100, 100]
    assert round_steps(401, 4) == [100, 100, 100, 101]


def test_a_later_rounds_reward_model_trains_as_many_steps_as_the_first():
    # 8 epochs over 300 pairs is 2,400 pair-passes; over 600 pairs that is 4 epochs, over 900 about 2.667.
    assert round_epochs(8, 300, 300) == 8.0
    assert round_epochs(8, 300, 600) == 4.0
    assert round_epochs(8, 300, 900) == 2.667


def pair(split: str, prompt: str, chosen: str = "right", rejected: str = "wrong") -> tuple[str, dict, str, str]:
    return split, {"prompt": prompt, "task_id": prompt}, chosen, rejected


def test_a_prompt_paired_before_keeps_its_earlier_split_and_a_new_one_keeps_the_rounds_own():
    earlier = [pair("train", "a"), pair("test", "b"), pair("train", "c")]
    new = [pair("train", "b", "right 2"), pair("test", "c", "right 2"), pair("test", "d"), pair("train", "e")]

    kept, asked_before = keep_earlier_splits(earlier, new)

    # b was test in round 1, c train: their new pairs follow; d and e were never asked, so the round's coin stands
    assert [(split, task["prompt"], chosen) for split, task, chosen, _ in kept] == [
        ("test", "b", "right 2"), ("train", "c", "right 2"), ("test", "d", "right"), ("train", "e", "right")]
    assert asked_before == 2
    # The order the earlier pairs are listed in changes nothing.
    assert keep_earlier_splits(earlier[::-1], new) == (kept, asked_before)
    assert keep_earlier_splits([], new) == (new, 0)


def test_the_round_kept_is_the_one_whose_answers_were_correct_most_often_the_earlier_on_a_tie():
    # round k's checkpoint's correct share on the next round's new problems; held-out success is not among them.
    assert chosen_round([0.696, 0.568, 0.595, 0.605]) == 1
    assert chosen_round([0.671, 0.813, 0.798, 0.737]) == 2
    assert chosen_round([0.5, 0.6, 0.6, 0.4]) == 2
    assert chosen_round([0.3, 0.3, 0.3]) == 1
    assert chosen_round([0.3]) == 1
    with pytest.raises(ValueError, match="no round to choose from"):
        chosen_round([])


def test_the_audited_checkpoint_kept_is_the_one_whose_audit_found_the_largest_correct_share_the_earlier_on_a_tie():
    assert chosen_checkpoint({40: 0.75, 80: 0.9, 120: 0.5}) == 80
    assert chosen_checkpoint({40: 0.9, 80: 0.9, 120: 0.5}) == 40
    assert chosen_checkpoint({40: None, 80: 0.25, 120: 0.25}) == 80  # a window with no audited answer is not read
    assert chosen_checkpoint({40: None, 80: None}) is None and chosen_checkpoint({}) is None
    # The order the windows are listed in changes nothing.
    shares = {40: 0.5, 80: 0.875, 120: 0.875, 160: None}
    for order in itertools.permutations(shares.items()):
        assert chosen_checkpoint(dict(order)) == 80


def test_the_reward_model_target_is_read_in_every_round_not_round_one_alone():
    seeds = [[model(1.0), model(0.93), model(0.90), model(0.77)],
             [model(0.97), model(0.88), model(0.84), model(0.79)],
             [model(0.95), model(0.96), model(0.93), model(0.85)]]
    # round 3: 0.84 < 0.85 in the second seed; round 4: 0.77 and 0.79; 0.85 itself is at the target
    for order in itertools.permutations(seeds):
        assert reward_met_by_round(order, accuracy=0.85, cpu_minutes=10.0) == [True, True, False, False]
    # The CPU limit counts as much as the accuracy; a round only one seed reached is read over that seed.
    assert reward_met_by_round([[model(0.9)], [model(0.9, cpu_minutes=11.0)]], accuracy=0.85,
                               cpu_minutes=10.0) == [False]
    assert reward_met_by_round([[model(0.9)], [model(0.9), model(0.86)]], accuracy=0.85,
                               cpu_minutes=10.0) == [True, True]


def test_the_gain_target_holds_only_when_every_seed_gained_enough_and_is_not_judged_when_one_has_no_child():
    assert gain_met([26.0, 11.8, 13.8, 11.8], points=10.0) is True
    assert gain_met([26.0, 11.8, 7.8, 11.8], points=10.0) is False
    assert gain_met([10.0], points=10.0) is True
    assert gain_met([26.0, None], points=10.0) is None


@pytest.mark.parametrize("results", ROUNDS_RESULTS, ids=lambda path: path.name)
def test_the_stored_rounds_results_are_what_the_rules_give_from_their_rows(results):
    stored = json.loads(results.read_text())
    target, runs = stored["target"], stored["runs"]
    models = [[one["reward_model"] for one in run["rounds"]] for run in runs]

    by_round = reward_met_by_round(models, accuracy=target["reward_accuracy"], cpu_minutes=target["reward_cpu_minutes"])

    assert by_round == target["reward_met_by_round"] == [True, True, False, False]
    assert all(by_round) is target["reward_met"] is False
    assert gain_met((run["gain_points"] for run in runs), points=target["gain_points"]) is target["gain_met"] is False
    epochs = stored["settings"]["reward_recipe"]["num_train_epochs"]
    for run in runs:
        assert [one["steps"] for one in run["rounds"]] == round_steps(stored["settings"]["grpo_recipe"]["max_steps"],
                                                                      len(run["rounds"]))
        first_train = run["rounds"][0]["snapshot"]["train"]
        assert [one["reward_model"]["epochs"] for one in run["rounds"]] == [
            round_epochs(epochs, first_train, one["snapshot"]["train"]) for one in run["rounds"]]
        if "round_choice" in run:
            choice = run["round_choice"]
            assert chosen_round(choice["asked_correct_shares"]) == choice["chosen_round"]
    if "chosen_round_gain_met" in target:
        assert gain_met((run["round_choice"]["gain_points"] for run in runs),
                        points=target["gain_points"]) is target["chosen_round_gain_met"] is True


@pytest.mark.parametrize("results", AUDITED_RESULTS, ids=lambda path: path.name)
def test_the_stored_audited_runs_kept_the_checkpoint_the_rule_gives_from_their_windows(results):
    stored = json.loads(results.read_text())
    target, runs = stored["target"], stored["runs"]
    for run in runs:
        audited = run["audited"]
        shares = {window["checkpoint_step"]: window["correct_share"] for window in audited["windows"]}
        assert chosen_checkpoint(shares) == audited["chosen_step"]
    assert gain_met((run["audited"]["gain_points"] for run in runs), points=target["gain_points"]) is \
        target["audited_gain_met"] is False
    models = [[run["reward_model"]] for run in runs]
    assert reward_met_by_round(models, accuracy=target["reward_accuracy"],
                               cpu_minutes=target["reward_cpu_minutes"]) == target["reward_met_by_round"] == [True]


def test_every_round_asks_new_problems_and_round_one_the_single_round_benchmarks():
    seeds = {round_problem_seed(seed, number) for seed in range(3) for number in range(1, 5)}
    assert len(seeds) == 12 and round_problem_seed(2, 1) == 5002


def asked(tasks: list[dict]) -> dict:
    """A round's sampled answers: each task's prompt with one correct and one wrong answer."""
    return {"problems": len(tasks), "distinct_prompts": len(tasks),
            "candidates": [(task, [task["solution"]], ["60 / 4 = 15\nAnswer: 15 km/h"]) for task in tasks]}


def test_a_later_round_asked_a_prompt_again_puts_its_pair_in_that_prompts_earlier_split():
    # Speed problems are drawn from a small space, so a later round's new draw repeats some of round 1's prompts;
    # the snapshot splits by prompt text and refused the whole round when such a pair fell on the other side.
    rows, first = round_pairs([], asked(make_tasks("speed", n=8, seed=1, variant="train")), seed=3, number=1,
                              pairing="random")
    assert (first["train"], first["test"], first["asked_before"]) == (7, 1, 0)
    split_of = {task["prompt"]: split for split, task, _, _ in rows}
    later = asked([task for _, task, _, _ in rows] + make_tasks("speed", n=4, seed=9, variant="train"))
    for number in range(2, 6):  # whichever way a round's own coin splits them
        new_rows, counts = round_pairs(rows, later, seed=3, number=number, pairing="random")
        assert counts["asked_before"] == 8
        assert all(split == split_of[task["prompt"]] for split, task, _, _ in new_rows if task["prompt"] in split_of)
        # The round's counts are of its pairs as they will be stored, after the earlier splits were kept.
        assert counts["train"] == sum(split == "train" for split, *_ in new_rows)
        assert counts["train"] + counts["test"] == 12


def test_the_round_chosen_is_reported_with_its_held_out_success_and_gain_over_the_parent():
    heldout = [{"success_rate": value} for value in (0.405, 0.445, 0.450, 0.4625)]
    choice = round_choice([0.671, 0.813, 0.798, 0.737], {"success_rate": 0.185}, heldout)
    assert choice == {"asked_correct_shares": [0.671, 0.813, 0.798, 0.737], "chosen_round": 2,
                      "chosen_child": {"success_rate": 0.445}, "gain_points": 26.0}


def rounds_row(seed: int, *accuracies: float, gain: float = 12.0) -> dict:
    rounds = [{"round": number, "reward_model": model(accuracy)} for number, accuracy in enumerate(accuracies, 1)]
    return {"seed": seed, "reward_model": rounds[0]["reward_model"], "rounds": rounds, "gain_points": gain}


def test_the_printed_reward_model_target_reads_every_round_and_the_one_model_of_a_single_run():
    """With rounds, row["reward_model"] is round 1's; the later rounds' models must be the ones read."""
    rows = [rounds_row(0, 1.0, 0.93, 0.90, 0.77), rounds_row(1, 0.97, 0.88, 0.84, 0.79, gain=7.8)]
    met = targets(rows, accuracy=0.85, cpu_minutes=10.0, points=10.0)
    assert (met["reward_met"], met["reward_met_by_round"], met["gain_met"]) == (False, [True, True, False, False],
                                                                                False)
    assert met["audited_gain_met"] is None and met["chosen_round_gain_met"] is None  # no such child: not judged
    assert format_targets(rows, met) == (
        "target: reward model accuracy >= 0.85 within 10 CPU-minutes, every round: NOT met (round 1 met, round 2 met, "
        "round 3 NOT met, round 4 NOT met); child >= parent + 10 points in every seed: NOT met (min +7.8, median +9.9)")
    single = [{"reward_model": model(0.9), "gain_points": 12.0}]
    assert format_targets(single, targets(single, accuracy=0.85, cpu_minutes=10.0, points=10.0)).startswith(
        "target: reward model accuracy >= 0.85 within 10 CPU-minutes, every round: met; child >= parent + 10 points "
        "in every seed: met (min +12.0")


@pytest.mark.parametrize("results", ROUNDS_RESULTS + AUDITED_RESULTS, ids=lambda path: path.name)
def test_the_stored_targets_are_what_the_rules_give_from_the_stored_rows(results):
    stored = json.loads(results.read_text())
    met = targets(stored["runs"], accuracy=stored["target"]["reward_accuracy"],
                  cpu_minutes=stored["target"]["reward_cpu_minutes"], points=stored["target"]["gain_points"])
    assert {key: met[key] for key in stored["target"]} == stored["target"]


def test_the_rounds_table_shows_each_rounds_reward_model_and_held_out_success_then_the_round_chosen():
    def one(number: int, heldout: float, equal_length: float | None) -> dict:
        return {"round": number, "policy": "parent" if number == 1 else f"round {number - 1}'s checkpoint",
                "policy_correct_share": 0.25 * number, "new_pairs": {"train": 90, "test": 10},
                "snapshot": {"train": 90 * number, "test": 10 * number},
                "reward_model": {"test": {"accuracy": 0.9}, "cpu_minutes": 1.4}, "steps": 200,
                "grpo_cpu_minutes": 4.0, "heldout_after": heldout,
                "verified_afterwards": {"within_prompt": {"equal_length": {"pairs": 3, "accuracy": equal_length}}}}

    row = {"seed": 1, "parent": {"success_rate": 0.138}, "rounds": [one(1, 0.2, 0.5), one(2, 0.31, None)]}
    printed = format_rounds(row).splitlines()
    assert printed[0] == "seed 1: rounds of preferences (parent 0.138)"
    assert printed[2].split()[:2] == ["1", "parent"] and printed[2].split()[-1] == "0.200"
    assert "round 1's checkpoint" in printed[3] and printed[3].split()[-1] == "0.310"
    assert "( 20)" in printed[3] and " - " in printed[3]  # round 2's reward model tested on both rounds' test pairs
    assert len(printed) == 4  # results written before the last checkpoint was asked: no choice line
    row["round_choice"] = round_choice([0.5, 0.75], row["parent"], [{"success_rate": 0.2}, {"success_rate": 0.31}])
    assert format_rounds(row).splitlines()[-1] == (
        "chosen by its answers' correct share to the next round's problems (0.500 / 0.750; no held-out answer used): "
        "round 2, held-out 0.310 (+17.2 points)")
