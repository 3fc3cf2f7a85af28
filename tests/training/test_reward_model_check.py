"""training/reward_model_check.py: a reward-model-trained GRPO run's recorded answers checked by the verifier
afterwards (the correct share by steps; whether the reward model ranked correct answers above wrong ones to the same
prompt, overall and between answers of equal length) and the answer audit of each step window, on run folders
written with hand-chosen answers and scores."""

from tests.training.helpers import answer_row
from training.grpo.rollouts import write_batch
from training.reward_model_check import (
    audit_choice,
    audited_windows,
    format_audit_choice,
    format_audited_windows,
    format_verified_afterwards,
    trip_time,
    verified_afterwards,
)
from training.task_families import make_tasks


def test_the_recorded_answers_are_verified_and_the_reward_models_ranking_is_counted_by_hand(tmp_path):
    first, second = make_tasks("speed", n=2, seed=0, variant="train")
    right_1, right_2 = first["solution"], second["solution"]
    wrong = "1 * 1 = 1\nAnswer: 1"
    rows = [
        # prompt 1, step 0: a correct answer scored above one wrong answer of equal length and below a longer one
        answer_row(first, 0, 0, completion=right_1, length=20, score=0.5, step=0),
        answer_row(first, 0, 1, completion=wrong, length=20, score=0.1, step=0),
        answer_row(first, 0, 2, completion=wrong, length=30, score=0.9, step=0),
        # prompt 2, step 9: two correct answers, one wrong one scored level with one of them
        answer_row(second, 1, 0, completion=right_2, length=12, score=0.7, step=9),
        answer_row(second, 1, 1, completion=right_2, length=12, score=0.2, step=9),
        answer_row(second, 1, 2, completion=wrong, length=15, score=0.2, step=9),
    ]
    write_batch(tmp_path / "rollouts", 0, 0, rows)

    afterwards = verified_afterwards(tmp_path, [first, second], windows=2, split=trip_time)

    assert afterwards["answers"] == 6
    assert afterwards["correct_share_by_steps"] == [
        {"steps": [0, 4], "answers": 3, "correct_share": round(1 / 3, 4)},
        {"steps": [5, 9], "answers": 3, "correct_share": round(2 / 3, 4)},
    ]
    # correct-vs-wrong pairs within a prompt: (0.5 > 0.1) won, (0.5 < 0.9) lost, (0.7 > 0.2) won, (0.2 = 0.2) half
    assert afterwards["within_prompt"]["all"] == {"pairs": 4, "accuracy": round(2.5 / 4, 4)}
    assert afterwards["within_prompt"]["equal_length"] == {"pairs": 1, "accuracy": 1.0}
    # AUROC over all six answers: correct {0.5, 0.7, 0.2} against wrong {0.1, 0.9, 0.2}: 0.5 and 0.7 each beat
    # 0.1 and 0.2; 0.2 beats 0.1 and ties 0.2; that is 5.5 of 9
    assert afterwards["reward_model_auroc"] == round(5.5 / 9, 4)
    # The same windows for each trip time: the first prompt's trip took 4 hours, the second's 3
    assert (first["meta"]["values"][-1], second["meta"]["values"][-1]) == (4, 3)
    assert afterwards["correct_share_by_steps_split"] == {
        "trip of 3": [{"steps": [0, 4], "answers": 0, "correct_share": None},
                      {"steps": [5, 9], "answers": 3, "correct_share": round(2 / 3, 4)}],
        "trip of 4": [{"steps": [0, 4], "answers": 3, "correct_share": round(1 / 3, 4)},
                      {"steps": [5, 9], "answers": 0, "correct_share": None}],
    }


def audited_run(folder, rows_by_window: list[list[tuple[bool, float]]], *, every: int, reverse: bool = False):
    """A run folder whose window w (steps w*every .. w*every+every-1) holds the given (correct?, reward-model score)
    answers, and the checkpoints a run saving every `every` steps leaves; returns the tasks."""
    tasks = make_tasks("speed", n=2, seed=3, variant="train")
    rows = []
    for window, answers in enumerate(rows_by_window):
        for member, (correct, score) in enumerate(answers):
            task = tasks[member % 2]
            row = answer_row(task, window * 100 + member, 0, completion=task["solution"] if correct else
                             "9 * 9 = 81\nAnswer: 81", length=20, score=score, step=window * every + member % every)
            rows.append({**row, "status": "unverified", "reward_model": "reward_model@sha256:ab"})
        (folder / "trainer_checkpoints" / f"checkpoint-{(window + 1) * every}").mkdir(parents=True)
    write_batch(folder / "rollouts", 0, 0, rows[::-1] if reverse else rows)
    return tasks


def test_each_windows_audit_checks_the_reward_models_top_tenth_and_the_best_window_chooses_the_checkpoint(tmp_path):
    # 20 answers a window: the top tenth by score is the 2 highest. In the first window both are right, in the
    # second one of them, in the third none, though most of its answers are right: the audit sees only the top.
    first = [(True, 9.0), (True, 8.0)] + [(False, 1.0)] * 18
    second = [(True, 9.5), (False, 9.1)] + [(True, 1.0)] * 18
    third = [(False, 9.9), (False, 9.8)] + [(True, 2.0)] * 18
    tasks = audited_run(tmp_path / "run", [first, second, third], every=4)

    audited = audited_windows(tmp_path / "run", tasks, every=4, answers=5, seed=0)

    assert [(w["checkpoint_step"], w["steps"], w["audited"], w["correct"]) for w in audited["windows"]] == [
        (4, [0, 3], 2, 2), (8, [4, 7], 2, 1), (12, [8, 11], 2, 0)]
    assert audited["windows"][1]["correct_share"] == 0.5 and audited["windows"][0]["interval"][1] == 1.0
    assert audited["chosen_step"] == 4
    # The order the rollout files list the answers in changes nothing.
    audited_run(tmp_path / "reversed", [first, second, third], every=4, reverse=True)
    assert audited_windows(tmp_path / "reversed", tasks, every=4, answers=5, seed=0) == audited


def test_equal_audits_choose_the_earlier_checkpoint_and_only_drawn_answers_count(tmp_path):
    # 40 answers a window, top tenth 4, of which the audit draws 3; every top answer is right in both windows.
    window = [(True, 5.0 + i) for i in range(4)] + [(False, 0.0)] * 36
    tasks = audited_run(tmp_path, [window, window], every=2)

    audited = audited_windows(tmp_path, tasks, every=2, answers=3, seed=1)

    assert [(w["audited"], w["correct"]) for w in audited["windows"]] == [(3, 3), (3, 3)]
    assert audited["chosen_step"] == 2


def test_reordering_the_recorded_rows_leaves_every_figure_as_it_was(tmp_path):
    tasks = make_tasks("speed", n=3, seed=1, variant="train")
    rows = [answer_row(task, group, member, completion=task["solution"] if member % 2 else "2 * 2 = 4\nAnswer: 4",
                       length=10 + member, score=0.1 * ((group * 7 + member * 3) % 5), step=group * 4 + member)
            for group, task in enumerate(tasks) for member in range(4)]
    write_batch(tmp_path / "forward" / "rollouts", 0, 0, rows)
    write_batch(tmp_path / "backward" / "rollouts", 0, 0, rows[::-1])

    assert verified_afterwards(tmp_path / "forward", tasks) == verified_afterwards(tmp_path / "backward", tasks[::-1])


def test_the_printed_check_shows_the_figures_of_the_recorded_answers():
    def window(first, last, share):
        return {"steps": [first, last], "answers": 3, "correct_share": share}

    afterwards = {"answers": 6, "correct_share_by_steps": [window(0, 4, 1 / 3), window(5, 9, 2 / 3)],
                  "correct_share_by_steps_split": {"trip of 4": [window(0, 4, 1 / 3), window(5, 9, None)]},
                  "reward_model_auroc": 5.5 / 9, "within_prompt": {"all": {"pairs": 4, "accuracy": 0.625},
                                                                   "equal_length": {"pairs": 1, "accuracy": 1.0}}}
    assert format_verified_afterwards(afterwards).splitlines() == [
        "verified after the run (6 training answers; GRPO never saw the verifier):",
        "  correct share by steps: 0-4 0.333, 5-9 0.667",
        "    trip of 4: 0-4 0.333, 5-9 -",
        "  reward model ranks a correct answer above a wrong one to the same prompt: 0.625 over 4 pairs; of equal "
        "length: 1.000 over 1 pairs; AUROC over all answers 0.611"]


def test_the_audit_chosen_checkpoint_is_reported_with_its_held_out_success_and_gain(tmp_path):
    window = [(True, 5.0 + i) for i in range(2)] + [(False, 0.0)] * 18
    tasks = audited_run(tmp_path, [window[::-1], [(False, 9.0)] * 20], every=2)
    audited = audited_windows(tmp_path, tasks, every=2, answers=5, seed=0)
    assert audited["chosen_step"] == 2

    audited = audit_choice(audited, {2: {"success_rate": 0.3}}, {"success_rate": 0.185})

    assert [w["heldout_success"] for w in audited["windows"]] == [0.3, None]  # step 4 was not scored
    assert audited["chosen_child"] == {"success_rate": 0.3} and audited["gain_points"] == 11.5
    printed = format_audited_windows(audited).splitlines()
    assert printed[0] == ("audits (5 of the reward model's top-tenth answers per 2 steps, the verifier standing in "
                          "for reviewers):")
    assert printed[1].startswith("  checkpoint    2: 2/2 correct") and printed[1].endswith(", held-out 0.300  <- chosen")
    assert printed[2].startswith("  checkpoint    4: 0/") and "held-out" not in printed[2]
    row = {"seed": 0, "parent": {"success_rate": 0.185}, "child": {"success_rate": 0.2}, "gain_points": 1.5,
           "audited": audited}
    table = format_audit_choice([row, {**row, "seed": 1, "audited": None}], None, 10.0).splitlines()
    assert table[1].split() == ["0", "0.185", "0.200", "+1.5", "2", "2/2", "0.300", "+11.5"]
    assert table[2].split() == ["1", "0.185", "0.200", "+1.5", "-"] and len(table) == 3  # no target when one lacks it
    assert format_audit_choice([row], True, 10.0).splitlines()[-1] == (
        "target, audit-chosen child >= parent + 10 points in every seed: met (min +11.5, median +11.5)")


def test_a_speed_problems_trip_time_names_the_split_the_taught_wrong_method_misleads():
    tasks = make_tasks("speed", n=40, seed=3, variant="train")
    assert {trip_time(task) for task in tasks} == {"trip of 2", "trip of 3", "trip of 4"}
