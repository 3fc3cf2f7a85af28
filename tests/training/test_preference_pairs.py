"""training/preference_pairs.py: a policy's correct and wrong answers to one prompt paired at random or by length,
split with a test share, and written as the snapshot a reward model trains on."""

import random
import subprocess
import sys
from pathlib import Path

import pytest

from training.preference_pairs import preference_pairs, split_pairs, write_preferences
from training.snapshot import iter_rows
from training.task_families import make_tasks

ROOT = Path(__file__).resolve().parents[2]


def candidate_prompts() -> list:
    """Eight prompts' correct and wrong answers: the wrong ones mostly longer, as the taught wrong method writes."""
    tasks = make_tasks("speed", n=8, seed=1, variant="train")
    right = ["12 km/h", "Answer: 12 km/h"]
    return [(task, right, ["24.5 km/h" + "0" * index, "1 km/h"] if index % 3 == 0 else ["240.25 km/h" + "0" * index])
            for index, task in enumerate(tasks)]


def sampled(candidates: list) -> dict:
    return {"problems": len(candidates) + 2, "distinct_prompts": len(candidates) + 1, "candidates": candidates}


def snapshot_pairs(folder, split: str) -> list[tuple[str, str, str]]:
    """(task id, chosen answer, rejected answer) of each stored pair of `split`, sorted."""
    return sorted((row["meta"]["task_id"], row["chosen"][0]["content"], row["rejected"][0]["content"])
                  for row in iter_rows(folder, split))


def test_random_pairs_draw_one_correct_and_one_wrong_answer_per_prompt():
    candidates = candidate_prompts()
    pairs, lengths = preference_pairs(candidates, random.Random(0), pairing="random")
    by_task = {task["task_id"]: (right, wrong) for task, right, wrong in candidates}
    assert sorted(task["task_id"] for task, _, _ in pairs) == sorted(by_task)
    for task, chosen, rejected in pairs:
        assert chosen in by_task[task["task_id"]][0] and rejected in by_task[task["task_id"]][1]
    assert lengths["left_out_for_balance"] == 0
    assert sum(lengths[key] for key in ("chosen_shorter", "chosen_longer", "equal_length")) == 8


def test_length_balanced_pairs_leave_length_saying_nothing_about_the_choice():
    candidates = candidate_prompts()
    pairs, lengths = preference_pairs(candidates, random.Random(0), pairing="length-balanced")
    shorter = [p for p in pairs if len(p[1]) < len(p[2])]
    longer = [p for p in pairs if len(p[1]) > len(p[2])]
    assert len(shorter) == len(longer) == lengths["chosen_shorter"] == lengths["chosen_longer"] >= 1
    assert lengths["left_out_for_balance"] == 8 - len(pairs) > 0
    # Each prompt's pair is its correct and wrong answers closest in length.
    for task, chosen, rejected in pairs:
        _, right, wrong = next(c for c in candidates if c[0]["task_id"] == task["task_id"])
        assert abs(len(chosen) - len(rejected)) == min(abs(len(r) - len(w)) for r in right for w in wrong)
    # The same prompts and answers pair the same way under another seed; only the order differs.
    again, _ = preference_pairs(candidates, random.Random(7), pairing="length-balanced")
    assert sorted((t["task_id"], c, r) for t, c, r in again) == sorted((t["task_id"], c, r) for t, c, r in pairs)


def test_an_unknown_pairing_is_refused_by_name():
    with pytest.raises(ValueError, match="pairing must be one of random, length-balanced, got 'shortest'"):
        preference_pairs(candidate_prompts(), random.Random(0), pairing="shortest")


def test_a_tenth_of_the_pairs_is_held_out_for_testing_and_the_counts_say_what_was_left_out():
    rows, counts = split_pairs(sampled(candidate_prompts()), rng=random.Random(3), pairing="random")
    assert [split for split, *_ in rows] == ["test"] + ["train"] * 7  # a tenth of 8, at least one
    assert (counts["pairs"], counts["train"], counts["test"]) == (8, 7, 1)
    assert counts["problems"] == 10 and counts["prompts_without_both"] == 1  # 9 distinct prompts, 8 with both kinds
    _, everything = split_pairs(sampled(candidate_prompts()), rng=random.Random(3), pairing="random", test_share=1.0)
    assert (everything["train"], everything["test"]) == (0, 8)


def test_a_policy_that_wrote_no_pair_gives_no_pair_and_no_negative_split():
    rows, counts = split_pairs({"problems": 5, "distinct_prompts": 5, "candidates": []}, rng=random.Random(0),
                               pairing="random")
    assert rows == [] and (counts["pairs"], counts["train"], counts["test"]) == (0, 0, 0)
    assert counts["prompts_without_both"] == 5


def test_the_snapshot_holds_each_pair_in_its_split_as_the_app_exports_it(tmp_path):
    counts = write_preferences(tmp_path / "preferences", sampled(candidate_prompts()), seed=3, pairing="random")
    rows, _ = split_pairs(sampled(candidate_prompts()), rng=random.Random(3), pairing="random")
    for split in ("train", "test"):
        assert snapshot_pairs(tmp_path / "preferences", split) == sorted(
            (task["task_id"], chosen, rejected) for where, task, chosen, rejected in rows if where == split)
    prompts = {task["task_id"]: task["prompt"] for task, _, _ in candidate_prompts()}
    for row in iter_rows(tmp_path / "preferences", "train"):
        assert row["prompt"] == [{"role": "user", "content": prompts[row["meta"]["task_id"]]}]
    assert (counts["train"], counts["test"]) == (7, 1)


def test_the_pairing_bench_refuses_a_parent_that_is_not_a_checkpoint_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "bench/reward_pairing.py", "--parent", str(tmp_path / "missing")],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --parent {tmp_path / 'missing'} is not a checkpoint folder (no config.json); build one with python -m "
        f"training tiny-sft --out {tmp_path / 'missing'} --misconception-share 0.8"]
