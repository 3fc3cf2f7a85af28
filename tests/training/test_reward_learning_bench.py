"""bench/reward_learning.py itself: its options refused in one line, its preference pairs and rounds' snapshots, its
tables printed from the library's figures (training/reward_rounds.py, training/reward_model_check.py, tested on their
own), and seeds run at different times joined in one results file."""

import argparse
import json
import random

import pytest

import bench.reward_learning as bench
from tests.training.test_reward_model_check import answer_row
from training.grpo.rollouts import write_batch
from training.reward_rounds import chosen_round
from training.task_families import make_tasks


def test_the_printed_checks_show_the_figures_of_the_recorded_answers_and_of_each_audit():
    def window(first, last, share):
        return {"steps": [first, last], "answers": 3, "correct_share": share}

    afterwards = {"answers": 6, "correct_share_by_steps": [window(0, 4, 1 / 3), window(5, 9, 2 / 3)],
                  "correct_share_by_steps_split": {"trip of 4": [window(0, 4, 1 / 3), window(5, 9, None)]},
                  "reward_model_auroc": 5.5 / 9, "within_prompt": {"all": {"pairs": 4, "accuracy": 0.625},
                                                                   "equal_length": {"pairs": 1, "accuracy": 1.0}}}
    printed = bench.format_verified_afterwards(afterwards)
    assert "    trip of 4: 0-4 0.333, 5-9 -" in printed
    assert "0-4 0.333, 5-9 0.667" in printed
    assert "0.625 over 4 pairs; of equal length: 1.000 over 1 pairs; AUROC over all answers 0.611" in printed
    audited = {"every": 4, "answers_per_window": 5, "chosen_step": 4, "windows": [
        {"checkpoint_step": step, "audited": 2, "correct": correct, "interval": [0.0, 1.0]}
        for step, correct in ((4, 2), (8, 1))]}
    printed = bench.format_audited_windows(audited)
    assert "checkpoint    4: 2/2 correct" in printed and printed.count("<- chosen") == 1


def test_scoring_every_checkpoint_without_audits_is_refused_before_any_work(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["reward_learning.py", "--audit-every", "0", "--heldout-every-checkpoint"])
    with pytest.raises(SystemExit) as refused:
        bench.main()
    assert refused.value.code == 2
    assert "--heldout-every-checkpoint scores the checkpoints the audits save" in capsys.readouterr().err.splitlines()[-1]


def test_seeds_run_at_different_times_land_in_one_results_file_and_other_settings_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "reward_learning.json")
    monkeypatch.setattr(bench, "verifier_trained_children", lambda args, rows: {})

    def settings(seeds, **changes):
        return argparse.Namespace(**{"seeds": seeds, "parents": None, "heldout": 100, "samples": 4, "threads": 1,
                                     "steps": 400, "add_to_results": True, "pairing": "random", "beta": 0.0,
                                     "audit_every": 40, "audited_answers": 32, "rounds": 1, **changes})

    def row(seed, gain):
        return {"seed": seed, "gain_points": gain, "reward_model": {"test": {"accuracy": 0.9}, "cpu_minutes": 2.0}}

    bench.write_seeds(settings([0], add_to_results=False), [row(0, 3.0)])
    # Seeds 1 and 2 run side by side; each writes beside what the file holds when it writes.
    bench.write_seeds(settings([2]), [row(2, 12.0)])
    _, every = bench.write_seeds(settings([1]), [row(1, 11.0)])
    written = json.loads(bench.RESULTS.read_text())
    assert [r["seed"] for r in every] == [r["seed"] for r in written["runs"]] == [0, 1, 2]
    assert written["settings"]["seeds"] == [0, 1, 2] and written["target"]["gain_met"] is False  # seed 0: +3
    # Rerunning a seed replaces its row rather than adding a second one.
    bench.write_seeds(settings([0]), [row(0, 10.5)])
    written = json.loads(bench.RESULTS.read_text())
    assert [r["gain_points"] for r in written["runs"]] == [10.5, 11.0, 12.0] and written["target"]["gain_met"]

    with pytest.raises(SystemExit, match=r"was run with other settings \(heldout\)"):
        bench.finished_seeds(settings([1], heldout=50))
    with pytest.raises(SystemExit, match=r"was run with other settings \(pairing\)"):
        bench.finished_seeds(settings([1], pairing="length-balanced"))
    with pytest.raises(SystemExit, match=r"was run with other settings \(audits\)"):
        bench.finished_seeds(settings([1], audit_every=20))
    with pytest.raises(SystemExit, match=r"was run with other settings \(audits, rounds\)"):
        bench.finished_seeds(settings([1], audit_every=0, rounds=4))
    # A file written before pairings were named was paired at random, before audits was not audited, and before
    # rounds asked for preferences once: its seeds join a random, unaudited, single-round run's.
    old_file = json.loads(bench.RESULTS.read_text())
    del old_file["settings"]["pairing"], old_file["settings"]["audits"], old_file["settings"]["rounds"]
    bench.RESULTS.write_text(json.dumps(old_file))
    assert [r["seed"] for r in bench.finished_seeds(settings([1], audit_every=0))] == [0, 2]


def candidate_prompts() -> list:
    """Eight prompts' correct and wrong answers: the wrong ones mostly longer, as the taught wrong method writes."""
    tasks = make_tasks("speed", n=8, seed=1, variant="train")
    right = ["12 km/h", "Answer: 12 km/h"]
    return [(task, right, ["24.5 km/h" + "0" * index, "1 km/h"] if index % 3 == 0 else ["240.25 km/h" + "0" * index])
            for index, task in enumerate(tasks)]


def test_random_pairs_draw_one_correct_and_one_wrong_answer_per_prompt():
    candidates = candidate_prompts()
    pairs, lengths = bench.preference_pairs(candidates, random.Random(0), pairing="random")
    by_task = {task["task_id"]: (right, wrong) for task, right, wrong in candidates}
    assert sorted(task["task_id"] for task, _, _ in pairs) == sorted(by_task)
    for task, chosen, rejected in pairs:
        assert chosen in by_task[task["task_id"]][0] and rejected in by_task[task["task_id"]][1]
    assert lengths["left_out_for_balance"] == 0 and sum(lengths[k] for k in
                                                        ("chosen_shorter", "chosen_longer", "equal_length")) == 8


def test_length_balanced_pairs_leave_length_saying_nothing_about_the_choice():
    candidates = candidate_prompts()
    pairs, lengths = bench.preference_pairs(candidates, random.Random(0), pairing="length-balanced")
    shorter = [p for p in pairs if len(p[1]) < len(p[2])]
    longer = [p for p in pairs if len(p[1]) > len(p[2])]
    assert len(shorter) == len(longer) == lengths["chosen_shorter"] == lengths["chosen_longer"] >= 1
    assert lengths["left_out_for_balance"] == 8 - len(pairs) > 0
    # Each prompt's pair is its correct and wrong answers closest in length.
    for task, chosen, rejected in pairs:
        _, right, wrong = next(c for c in candidates if c[0]["task_id"] == task["task_id"])
        assert abs(len(chosen) - len(rejected)) == min(abs(len(r) - len(w)) for r in right for w in wrong)
    # The same prompts and answers pair the same way under another seed; only the order differs.
    again, _ = bench.preference_pairs(candidates, random.Random(7), pairing="length-balanced")
    assert sorted((t["task_id"], c, r) for t, c, r in again) == sorted((t["task_id"], c, r) for t, c, r in pairs)
    with pytest.raises(ValueError, match="pairing must be one of random, length-balanced"):
        bench.preference_pairs(candidates, random.Random(0), pairing="shortest")


def test_verify_again_replaces_only_the_check_of_recorded_answers_in_the_results(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "reward_learning.json")
    tasks = make_tasks("speed", n=bench.TRAIN_TASKS, seed=3, variant="train")[:2]
    rows = [answer_row(task, group, member, completion=task["solution"] if member else "1 * 1 = 1\nAnswer: 1",
                       length=12, score=float(member), step=group)
            for group, task in enumerate(tasks) for member in range(2)]
    write_batch(tmp_path / "runs" / "grpo-rm-3" / "rollouts", 0, 0, rows)
    bench.RESULTS.write_text(json.dumps({"runs": [{"seed": 3, "gain_points": 1.0, "verified_afterwards": {}}]}))
    args = argparse.Namespace(seeds=[3], workdir=tmp_path / "runs")

    assert bench.verify_again(args) == 0

    row = json.loads(bench.RESULTS.read_text())["runs"][0]
    assert row["gain_points"] == 1.0  # the rest of the row is as the run wrote it
    assert row["verified_afterwards"]["within_prompt"]["equal_length"] == {"pairs": 2, "accuracy": 1.0}
    split = row["verified_afterwards"]["correct_share_by_steps_split"]
    assert set(split) == {"trip of 2", "trip of 3", "trip of 4"}  # the trip times of the benchmark's training tasks
    assert {value: sum(w["answers"] for w in windows) for value, windows in split.items()} == {
        value: 2 * sum(bench.trip_time(t) == value for t in tasks) for value in split}
    assert "seed 3:" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="no recorded run .*grpo-rm-4 for seed 4; run that seed first"):
        bench.verify_again(argparse.Namespace(seeds=[4], workdir=tmp_path / "runs"))


def test_the_pairing_bench_refuses_a_parent_that_is_not_a_checkpoint_in_one_line(tmp_path):
    import subprocess
    import sys

    from bench.common import ROOT

    result = subprocess.run([sys.executable, "bench/reward_pairing.py", "--parent", str(tmp_path / "missing")],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: --parent {tmp_path / 'missing'} is not a checkpoint folder (no config.json); build one with python -m "
        f"training tiny-sft --out {tmp_path / 'missing'} --misconception-share 0.8"]


def snapshot_pairs(folder, split: str) -> list[tuple[str, str, str]]:
    from training.snapshot import iter_rows

    return sorted((row["meta"]["task_id"], json.dumps(row["chosen"]), json.dumps(row["rejected"]))
                  for row in iter_rows(folder, split))


def test_round_one_of_many_pairs_as_the_single_round_benchmark_and_later_rounds_keep_each_pairs_split(tmp_path):
    first = {"problems": 8, "distinct_prompts": 8, "candidates": candidate_prompts()}
    later_tasks = make_tasks("speed", n=12, seed=9, variant="train")
    later = {"problems": 12, "distinct_prompts": 12,
             "candidates": [(task, [task["solution"]], ["60 / 4 = 15\nAnswer: 15 km/h"]) for task in later_tasks]}
    bench.write_preferences(tmp_path / "single", first, seed=3, pairing="random")

    rows, counts = bench.split_pairs(first, rng=bench.round_pairs_rng(3, 1), pairing="random")
    bench.write_snapshot(tmp_path / "round1", rows, seed=3, pairing="random")
    assert snapshot_pairs(tmp_path / "round1", "train") == snapshot_pairs(tmp_path / "single", "train")
    assert snapshot_pairs(tmp_path / "round1", "test") == snapshot_pairs(tmp_path / "single", "test")
    assert (counts["train"], counts["test"]) == (7, 1)

    new_rows, new_counts = bench.split_pairs(later, rng=bench.round_pairs_rng(3, 2), pairing="random")
    bench.write_snapshot(tmp_path / "round2", rows + new_rows, seed=3, pairing="random")
    # Round 2's reward model trains on every pair so far; a pair held out for testing in round 1 stays held out.
    assert set(snapshot_pairs(tmp_path / "round1", "test")) < set(snapshot_pairs(tmp_path / "round2", "test"))
    assert set(snapshot_pairs(tmp_path / "round1", "train")) < set(snapshot_pairs(tmp_path / "round2", "train"))
    assert len(snapshot_pairs(tmp_path / "round2", "test")) == 1 + new_counts["test"] == 2
    assert len(snapshot_pairs(tmp_path / "round2", "train")) == 7 + 11


def test_a_later_round_asked_a_prompt_again_puts_its_pair_in_that_prompts_earlier_split(tmp_path):
    # Speed problems are drawn from a small space, so a later round's new draw repeats some of round 1's prompts;
    # the snapshot splits by prompt text and refused the whole round when such a pair fell on the other side.
    rows, _ = bench.round_pairs([], {"problems": 8, "distinct_prompts": 8, "candidates": candidate_prompts()},
                                seed=3, number=1, pairing="random")
    split_of = {task["prompt"]: split for split, task, _, _ in rows}
    wrong = ["60 / 4 = 15\nAnswer: 15 km/h"]
    tasks = [task for _, task, _, _ in rows] + make_tasks("speed", n=4, seed=9, variant="train")
    later = {"problems": 12, "distinct_prompts": 12, "candidates": [(task, [task["solution"]], wrong) for task in tasks]}
    for number in range(2, 6):  # whichever way a round's own coin splits them
        new_rows, counts = bench.round_pairs(rows, later, seed=3, number=number, pairing="random")
        assert counts["asked_before"] == 8
        assert all(split == split_of[task["prompt"]] for split, task, _, _ in new_rows if task["prompt"] in split_of)
        bench.write_snapshot(tmp_path / f"round{number}", rows + new_rows, seed=3, pairing="random")
        # The round's counts are of its pairs as stored, after the earlier splits were kept.
        assert len(snapshot_pairs(tmp_path / f"round{number}", "train")) == 7 + counts["train"]
        assert len(snapshot_pairs(tmp_path / f"round{number}", "test")) == 1 + counts["test"]
        assert counts["train"] + counts["test"] == 12


def test_the_verifier_trained_child_is_shown_only_beside_a_run_from_the_same_parent(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "VERIFIER_RESULTS", tmp_path / "grpo_learning.json")
    recipe = dict(bench.PARENT_RECIPE)
    bench.VERIFIER_RESULTS.write_text(json.dumps({"settings": {"heldout": 100, "samples": 4}, "runs": [
        {"seed": seed, "parent_recipe": recipe, "parent": {"success_rate": parent}, "child": {"success_rate": child}}
        for seed, parent, child in [(0, 0.1525, 0.41), (1, 0.1375, 0.2975), (2, 0.1625, 0.3825)]]}))
    args = argparse.Namespace(heldout=100, samples=4)

    def ours(*parents):
        return [{"seed": seed, "parent": {"success_rate": parent}} for seed, parent in enumerate(parents)]

    assert bench.verifier_trained_children(args, ours(0.1525, 0.1375, 0.1625)) == {0: 0.41, 1: 0.2975, 2: 0.3825}
    # The same recipe rebuilt on another processor: another parent, whose held-out success differs.
    assert bench.verifier_trained_children(args, ours(0.185, 0.1375, 0.125)) == {1: 0.2975}
    assert bench.verifier_trained_children(argparse.Namespace(heldout=50, samples=4), ours(0.1525)) == {}


def test_a_round_whose_policy_wrote_no_pair_adds_nothing_and_counts_no_negative_split():
    rows, counts = bench.split_pairs({"problems": 5, "distinct_prompts": 5, "candidates": []},
                                     rng=bench.round_pairs_rng(0, 2), pairing="random")
    assert rows == [] and (counts["pairs"], counts["train"], counts["test"]) == (0, 0, 0)
    assert counts["prompts_without_both"] == 5


def test_every_round_asks_new_problems_and_round_one_the_single_round_benchmarks():
    seeds = {bench.round_problem_seed(seed, number) for seed in range(3) for number in range(1, 5)}
    assert len(seeds) == 12 and bench.round_problem_seed(2, 1) == 5002


@pytest.mark.parametrize("argv, message", [
    (["--rounds", "2", "--audit-every", "40"], "--audit-every audits the windows of one GRPO run"),
    (["--rounds", "0"], "--rounds 0: give from 1 to the run's 400 steps"),
    (["--rounds", "5", "--steps", "4"], "--rounds 5: give from 1 to the run's 4 steps"),
    (["--rounds", "2", "--heldout-every-checkpoint"], "with --rounds every round's checkpoint is scored"),
])
def test_rounds_that_cannot_run_are_refused_in_one_line_before_any_work(monkeypatch, capsys, argv, message):
    monkeypatch.setattr("sys.argv", ["reward_learning.py", *argv])
    with pytest.raises(SystemExit) as refused:
        bench.main()
    assert refused.value.code == 2
    assert message in capsys.readouterr().err.splitlines()[-1]


def test_the_rounds_table_shows_each_rounds_reward_model_and_held_out_success():
    def one(number: int, heldout: float, equal_length: float | None) -> dict:
        return {"round": number, "policy": "parent" if number == 1 else f"round {number - 1}'s checkpoint",
                "policy_correct_share": 0.25 * number, "new_pairs": {"train": 90, "test": 10},
                "snapshot": {"train": 90 * number, "test": 10 * number},
                "reward_model": {"test": {"accuracy": 0.9}, "cpu_minutes": 1.4}, "steps": 200,
                "grpo_cpu_minutes": 4.0, "heldout_after": heldout,
                "verified_afterwards": {"within_prompt": {"equal_length": {"pairs": 3, "accuracy": equal_length}}}}

    printed = bench.format_rounds({"seed": 1, "parent": {"success_rate": 0.138},
                                   "rounds": [one(1, 0.2, 0.5), one(2, 0.31, None)]}).splitlines()
    assert printed[0] == "seed 1: rounds of preferences (parent 0.138)"
    assert printed[2].split()[:2] == ["1", "parent"] and printed[2].split()[-1] == "0.200"
    assert "round 1's checkpoint" in printed[3] and printed[3].split()[-1] == "0.310"
    assert "( 20)" in printed[3] and " - " in printed[3]  # round 2's reward model tested on both rounds' test pairs
    assert len(printed) == 4  # results written before the last checkpoint was asked: no choice line


def test_the_rounds_table_ends_with_the_round_chosen_and_its_held_out_gain():
    choice = {"asked_correct_shares": [0.671, 0.813, 0.798, 0.737], "chosen_round": 2,
              "chosen_child": {"success_rate": 0.445}, "gain_points": 26.0}
    row = {"seed": 0, "parent": {"success_rate": 0.185}, "rounds": [], "round_choice": choice}
    assert bench.format_rounds(row).splitlines()[-1] == (
        "chosen by its answers' correct share to the next round's problems (0.671 / 0.813 / 0.798 / 0.737; no held-out "
        "answer used): round 2, held-out 0.445 (+26.0 points)")


def test_rounds_ask_the_last_checkpoint_too_and_keep_the_round_its_answers_chose(tmp_path, monkeypatch):
    # Every costly step stands in with a fixed figure; what runs for real is how the rounds join them.
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "tiny_sft.json").write_text(json.dumps({"config": {"seed": 0}}))
    correct_share = {"parent": 0.34, "round1": 0.67, "round2": 0.81, "round3": 0.80, "round4": 0.74}
    asked = []

    def sampled_preferences(policy, *, seed, threads, problem_seed):
        name = "parent" if policy == sft else policy.parent.name.rsplit("-", 1)[-1]  # grpo-rm-0-roundK/checkpoint
        asked.append((name, problem_seed))
        share = correct_share[name]
        tasks = make_tasks("speed", n=8, seed=problem_seed, variant="train")
        return {"problems": 8, "distinct_prompts": 8, "answers": 1000, "correct_answers": round(share * 1000),
                "candidates": [(task, [f"right {i}"], [f"wrong {i}"]) for i, task in enumerate(tasks)]}

    def run_grpo(run, config, args, **kwargs):
        (run / "checkpoint").mkdir(parents=True)
        (run / "ledger.json").write_text(json.dumps({"by_step": [], "completion_length": {}}))
        (run / "run.json").write_text(json.dumps({"reward_model": {"identity": "sha256:rm"}}))
        return 1.0, 60.0

    heldout_of = [0.185, 0.405, 0.445, 0.450, 0.463]  # parent, then rounds 1-4: the last is not the best
    monkeypatch.setattr(bench, "sampled_preferences", sampled_preferences)
    monkeypatch.setattr(bench, "train_reward_model", lambda *a, **k: {"test": {"accuracy": 0.9}, "cpu_minutes": 1.0,
                                                                       "wall_s": 60.0})
    monkeypatch.setattr(bench, "run_grpo_on_reward_model", run_grpo)
    monkeypatch.setattr(bench, "verified_afterwards", lambda *a, **k: {})
    monkeypatch.setattr(bench, "evaluate", lambda checkpoints, *a, **k: {"checkpoints": [
        {"all": {"success_rate": value, "interval": [0, 1], "scorers": ["speed@1"]}} for value in heldout_of]})
    args = argparse.Namespace(steps=400, rounds=4, threads=1, pairing="random", beta=0.04, kl_reference="parent",
                              samples=4)
    row = bench.rounds_of_one_seed(tmp_path, 0, args, [], sft=sft, tasks=tmp_path / "tasks.jsonl", verifiable=[])

    assert asked == [("parent", 5000), ("round1", 6000), ("round2", 7000), ("round3", 8000), ("round4", 9000)]
    choice = row["round_choice"]
    assert choice["asked_correct_shares"] == [0.67, 0.81, 0.80, 0.74]  # rounds 2-4 asked rounds 1-3, then the last
    assert choice["chosen_round"] == chosen_round(choice["asked_correct_shares"]) == 2
    assert choice["chosen_child"]["success_rate"] == 0.445
    assert choice["gain_points"] == 26.0 and row["gain_points"] == 27.8  # the last round's child is still reported
    assert [one["reward_model"]["epochs"] for one in row["rounds"]] == [8.0, 4.0, 2.667, 2.0]  # 7 new train pairs a round


def test_the_printed_reward_model_target_reads_every_round_of_a_rounds_row_and_the_one_model_of_a_single_run():
    """With --rounds, row["reward_model"] is round 1's; the later rounds' models must be the ones read."""

    def model(accuracy, cpu_minutes=2.0):
        return {"test": {"accuracy": accuracy}, "cpu_minutes": cpu_minutes}

    def seed(*accuracies):
        rounds = [{"round": number, "reward_model": model(accuracy)}
                  for number, accuracy in enumerate(accuracies, start=1)]
        return {"reward_model": rounds[0]["reward_model"], "rounds": rounds, "gain_points": 12.0}

    rows = [seed(1.0, 0.93, 0.90, 0.77), seed(0.97, 0.88, 0.84, 0.79)]
    assert bench.targets_met(rows) == (False, True)
    assert bench.format_reward_met(rows) == "NOT met (round 1 met, round 2 met, round 3 NOT met, round 4 NOT met)"
    single = [{"reward_model": model(0.9), "gain_points": 12.0}, {"reward_model": model(0.9, 11.0), "gain_points": 9.0}]
    assert bench.format_reward_met(single[:1]) == "met" and bench.targets_met(single) == (False, False)
