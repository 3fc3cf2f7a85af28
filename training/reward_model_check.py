"""A GRPO run trained on a reward model, checked after the run by a verifier it never saw during training, where the
tasks have one: whether the policy's answers got more correct as the reward model's score rose, whether the reward
model ranked a correct answer above a wrong one to the same prompt (and between answers of equal length, where
"shorter wins" cannot explain a right ranking), and what the app's answer audit of each step window would have
found, the verifier standing in for the reviewers (bench/reward_learning.py runs both on its runs)."""

from pathlib import Path

from training import reward_rounds


def verified_afterwards(run: Path, tasks: list[dict], *, windows: int = 10, split=None) -> dict:
    """The GRPO run's recorded answers scored by the verifier after the run (training never saw it): the correct
    share by step window (and, with `split`, a function of the task, the same for each of its values), and how well
    the reward model's score ranked them where it was used. Within a prompt's group, every (correct, wrong) pair
    counts once (a tie half); pairs of equal token length are the length-matched test, where "shorter wins" cannot
    explain a right ranking. AUROC is over all answers, prompts mixed."""
    from scipy.stats import mannwhitneyu

    from training.grpo.rollouts import read_rollouts
    from training.verifiers.task_verifier import TaskVerifier

    rows = read_rollouts(run).select(["group_id", "task_id", "completion", "length", "reward_model_score",
                                      "policy_step"]).to_pylist()
    by_id = {task["task_id"]: task for task in tasks}
    with TaskVerifier(workers=1) as verifier:
        verdicts = verifier.verify_many([(by_id[row["task_id"]], row["completion"]) for row in rows])
    for row, verdict in zip(rows, verdicts, strict=True):
        row["correct"] = verdict.status == "correct"
    last_step = max(row["policy_step"] for row in rows)
    width = last_step // windows + 1

    def by_window(chosen: list[dict]) -> list[dict]:
        shares = []
        for first in range(0, last_step + 1, width):
            inside = [row["correct"] for row in chosen if first <= row["policy_step"] < first + width]
            shares.append({"steps": [first, min(first + width, last_step + 1) - 1], "answers": len(inside),
                           "correct_share": round(sum(inside) / len(inside), 4) if inside else None})
        return shares

    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group_id"], []).append(row)
    ranked = {"all": [0.0, 0], "equal_length": [0.0, 0]}
    for members in groups.values():
        for right in (m for m in members if m["correct"]):
            for wrong in (m for m in members if not m["correct"]):
                won = 1.0 if right["reward_model_score"] > wrong["reward_model_score"] else (
                    0.5 if right["reward_model_score"] == wrong["reward_model_score"] else 0.0)
                for key in ("all", "equal_length") if right["length"] == wrong["length"] else ("all",):
                    ranked[key][0] += won
                    ranked[key][1] += 1
    right_scores = [row["reward_model_score"] for row in rows if row["correct"]]
    wrong_scores = [row["reward_model_score"] for row in rows if not row["correct"]]
    auroc = (mannwhitneyu(right_scores, wrong_scores).statistic / (len(right_scores) * len(wrong_scores))
             if right_scores and wrong_scores else None)
    return {
        "answers": len(rows),
        "correct_share_by_steps": by_window(rows),
        "correct_share_by_steps_split": {} if split is None else {
            value: by_window([row for row in rows if split(by_id[row["task_id"]]) == value])
            for value in sorted({split(task) for task in by_id.values()})},
        "reward_model_auroc": None if auroc is None else round(float(auroc), 4),
        "within_prompt": {key: {"pairs": count, "accuracy": round(won / count, 4) if count else None}
                          for key, (won, count) in ranked.items()},
    }


def audited_windows(run: Path, tasks: list[dict], *, every: int, answers: int, seed: int) -> dict:
    """The app's answer audit (training.grpo.audit_sample: the reward model's top tenth, `answers` drawn by hash)
    on the recorded answers of each `every`-step window, the verifier standing in for the reviewers. The window of
    saved checkpoint s is the answers written at steps s-every to s-1: what an engineer had audited when the run
    reached s. {"windows": [{"checkpoint_step", "steps", "audited", "correct", "correct_share", "interval"}],
    "chosen_step": reward_rounds.chosen_checkpoint's}."""
    from training.evaluate import wilson_interval
    from training.grpo.audit_sample import audit_draw, rewarded_rows
    from training.grpo.rollouts import read_rollouts
    from training.run_folder import RunFolder
    from training.verifiers.task_verifier import TaskVerifier

    rows = read_rollouts(run).select(["rollout_id", "task_id", "completion", "reward", "status", "reward_model_score",
                                      "reward_model", "policy_step"]).to_pylist()
    saved = sorted(int(path.name.split("-")[1]) for path in RunFolder(run).trainer_checkpoints.glob("checkpoint-*"))
    drawn = {step: audit_draw(rewarded_rows([row for row in rows if step - every <= row["policy_step"] < step]),
                              answers, seed) for step in saved}
    by_id = {task["task_id"]: task for task in tasks}
    with TaskVerifier(workers=1) as verifier:
        verdicts = verifier.verify_many([(by_id[row["task_id"]], row["completion"])
                                         for step in saved for row in drawn[step]])
    windows, verdict_at = [], 0
    for step in saved:
        correct = sum(verdict.status == "correct" for verdict in verdicts[verdict_at:verdict_at + len(drawn[step])])
        verdict_at += len(drawn[step])
        audited = len(drawn[step])
        windows.append({"checkpoint_step": step, "steps": [step - every, step - 1], "audited": audited,
                        "correct": correct, "correct_share": round(correct / audited, 4) if audited else None,
                        "interval": [round(bound, 4) for bound in wilson_interval(correct, audited)] if audited
                        else None})
    return {"every": every, "answers_per_window": answers, "windows": windows,
            "chosen_step": reward_rounds.chosen_checkpoint({w["checkpoint_step"]: w["correct_share"] for w in windows})}
