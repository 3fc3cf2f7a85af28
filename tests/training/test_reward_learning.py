"""training/reward_learning.py: the loop where the truth is known. Settings it cannot run are refused in one line
(through bench/reward_learning.py too), seeds of another run join a results table only when its settings match,
the verifier-trained child is shown only beside the same parent, and a recorded run's check is computed again."""

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.training.helpers import answer_row
from training.grpo.rollouts import write_batch
from training.reward_learning import (
    LoopSettings,
    refused_settings,
    settings_that_differ,
    training_tasks,
    verified_again,
    verifier_trained_children,
)
from training.reward_model_check import trip_time

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = LoopSettings(grpo_recipe={"max_steps": 400, "beta": 0.0, "temperature": 1.0, "max_completion_length": 64},
                        reward_recipe={"num_train_epochs": 8}, run_training=lambda *args: (0.0, 0.0),
                        audit_every=40)


@pytest.mark.parametrize("changes, message", [
    ({"rounds": 2}, "--audit-every audits the windows of one GRPO run"),
    ({"rounds": 0}, "--rounds 0: give from 1 to the run's 400 steps"),
    ({"rounds": 5, "audit_every": 0, "grpo_recipe": {**SETTINGS.grpo_recipe, "max_steps": 4}},
     "--rounds 5: give from 1 to the run's 4 steps"),
    ({"rounds": 2, "audit_every": 0, "heldout_every_checkpoint": True},
     "with --rounds every round's checkpoint is scored"),
    ({"audit_every": 0, "heldout_every_checkpoint": True},
     "--heldout-every-checkpoint scores the checkpoints the audits save"),
    ({"audit_every": 401}, "--audit-every 401 is more than the run's 400 steps"),
    ({"grpo_recipe": {**SETTINGS.grpo_recipe, "beta": -0.1}}, "--beta -0.1 is negative"),
    ({"audited_answers": 0}, "--audited-answers at least 1"),
])
def test_settings_the_loop_cannot_run_are_refused_in_one_line(changes, message):
    assert message in refused_settings(replace(SETTINGS, **changes))
    assert refused_settings(SETTINGS) is None
    assert refused_settings(replace(SETTINGS, rounds=4, audit_every=0, grpo_recipe={**SETTINGS.grpo_recipe,
                                                                                   "beta": 0.04})) is None


def test_the_benchmark_refuses_them_before_any_work_with_one_line_and_exit_2():
    result = subprocess.run([sys.executable, "bench/reward_learning.py", "--audit-every", "0",
                             "--heldout-every-checkpoint"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "reward_learning.py: error: --heldout-every-checkpoint scores the checkpoints the audits save; with "
        "--audit-every 0 none is saved: give --audit-every N, or leave --heldout-every-checkpoint out")
    assert "Traceback" not in result.stderr


def test_seeds_join_a_results_table_only_when_it_was_run_with_the_same_settings():
    ours = {"seeds": [1], "heldout": 100, "pairing": "random", "audits": {"every": 40, "answers": 32}, "rounds": 1}
    assert settings_that_differ({**ours, "seeds": [0, 2]}, ours) == []  # the seeds themselves may differ
    assert settings_that_differ({**ours, "heldout": 50}, ours) == ["heldout"]
    assert settings_that_differ({**ours, "pairing": "length-balanced"}, ours) == ["pairing"]
    assert settings_that_differ({**ours, "audits": None, "rounds": 4}, ours) == ["audits", "rounds"]
    # A file written before pairings were named was paired at random, before audits was not audited, and before
    # rounds asked for preferences once: its seeds join a random, unaudited, single-round run's.
    old_file = {"seeds": [0, 2], "heldout": 100}
    assert settings_that_differ(old_file, {**ours, "audits": None}) == []
    # Settings as read back from JSON (lists, not tuples) are the same settings.
    assert settings_that_differ({**ours, "recipe": {"report_to": ["none"]}}, {**ours, "recipe": {"report_to": ("none",)}}) == []


def test_the_verifier_trained_child_is_shown_only_beside_a_run_from_the_same_parent():
    recipe = {"steps": 5000, "misconception_share": 0.8}
    verifier = {"settings": {"heldout": 100, "samples": 4}, "runs": [
        {"seed": seed, "parent_recipe": recipe, "parent": {"success_rate": parent}, "child": {"success_rate": child}}
        for seed, parent, child in [(0, 0.1525, 0.41), (1, 0.1375, 0.2975), (2, 0.1625, 0.3825)]]}

    def ours(*parents):
        return [{"seed": seed, "parent": {"success_rate": parent}} for seed, parent in enumerate(parents)]

    def children(rows, heldout=100, parent_recipe=recipe):
        return verifier_trained_children(verifier, rows, heldout=heldout, samples=4, parent_recipe=parent_recipe)

    assert children(ours(0.1525, 0.1375, 0.1625)) == {0: 0.41, 1: 0.2975, 2: 0.3825}
    # The same recipe rebuilt on another processor: another parent, whose held-out success differs.
    assert children(ours(0.185, 0.1375, 0.125)) == {1: 0.2975}
    assert children(ours(0.1525), heldout=50) == {}  # other held-out problems
    assert children(ours(0.1525), parent_recipe={**recipe, "steps": 320}) == {}  # another parent recipe


def test_a_recorded_runs_check_is_computed_again_and_a_seed_without_a_run_is_refused_in_one_line(tmp_path):
    tasks = training_tasks(3, 400)[:2]
    rows = [answer_row(task, group, member, completion=task["solution"] if member else "1 * 1 = 1\nAnswer: 1",
                       length=12, score=float(member), step=group)
            for group, task in enumerate(tasks) for member in range(2)]
    write_batch(tmp_path / "grpo-rm-3" / "rollouts", 0, 0, rows)

    again = verified_again(tmp_path, [3], 400)

    assert list(again) == [3]
    assert again[3]["answers"] == 4 and again[3]["within_prompt"]["equal_length"] == {"pairs": 2, "accuracy": 1.0}
    split = again[3]["correct_share_by_steps_split"]
    assert set(split) == {"trip of 2", "trip of 3", "trip of 4"}  # the trip times of the benchmark's training tasks
    assert {value: sum(w["answers"] for w in windows) for value, windows in split.items()} == {
        value: 2 * sum(trip_time(t) == value for t in tasks) for value in split}
    with pytest.raises(SystemExit, match="no recorded run .*grpo-rm-4 for seed 4; run that seed first"):
        verified_again(tmp_path, [4], 400)
