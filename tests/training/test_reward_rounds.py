"""training/reward_rounds.py: the rules of rounds of preferences, on hand-computed cases, and the stored results of
bench/reward_learning.py --rounds read again with them."""

import itertools
import json
from pathlib import Path

import pytest

from training.reward_rounds import (
    chosen_checkpoint,
    chosen_round,
    gain_met,
    keep_earlier_splits,
    reward_met_by_round,
    round_epochs,
    round_steps,
)

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
