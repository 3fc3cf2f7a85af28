"""A GRPO run trained on a reward model, checked after the run by a verifier it never saw during training, where the
tasks have one: whether the policy's answers got more correct as the reward model's score rose, whether the reward
model ranked a correct answer above a wrong one to the same prompt (and between answers of equal length, where
"shorter wins" cannot explain a right ranking), and what the app's answer audit of each step window would have
found, the verifier standing in for the reviewers (bench/reward_learning.py runs both on its runs)."""

import statistics
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


def trip_time(task: dict) -> str:
    """A speed problem's trip time (the last of its values for both structures), a `split` for verified_afterwards:
    the taught wrong method divides two legs by 2, so a reward model that learned "/ 2 is wrong" misleads the policy
    exactly where the trip took 2."""
    return f"trip of {task['meta']['values'][-1]}"


def audit_choice(audited: dict, heldout_by_step: dict[int, dict], parent: dict) -> dict:
    """audited_windows' figures with each window's checkpoint's held-out success where it was scored
    (`heldout_by_step`: step -> evaluate_checkpoints' figures) and, when a checkpoint was chosen, that child and its
    gain in points over `parent`."""
    for window in audited["windows"]:
        scored = heldout_by_step.get(window["checkpoint_step"])
        window["heldout_success"] = None if scored is None else scored["success_rate"]
    if audited["chosen_step"] is not None:
        chosen = heldout_by_step[audited["chosen_step"]]
        audited["chosen_child"] = chosen
        audited["gain_points"] = reward_rounds.gain_points(parent, chosen)
    return audited


def format_verified_afterwards(afterwards: dict) -> str:
    """verified_afterwards' figures: the correct share by steps and the reward model's ranking."""
    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    def windows(shares: list[dict]) -> str:
        return ", ".join(f"{w['steps'][0]}-{w['steps'][1]} {share(w['correct_share'])}" for w in shares)

    within = afterwards["within_prompt"]
    return "\n".join([
        f"verified after the run ({afterwards['answers']} training answers; GRPO never saw the verifier):",
        f"  correct share by steps: {windows(afterwards['correct_share_by_steps'])}",
        *(f"    {value}: {windows(shares)}" for value, shares in afterwards.get("correct_share_by_steps_split",
                                                                              {}).items()),
        f"  reward model ranks a correct answer above a wrong one to the same prompt: "
        f"{share(within['all']['accuracy'])} over {within['all']['pairs']} pairs; of equal length: "
        f"{share(within['equal_length']['accuracy'])} over {within['equal_length']['pairs']} pairs; "
        f"AUROC over all answers {share(afterwards['reward_model_auroc'])}",
    ])


def format_audited_windows(audited: dict) -> str:
    """Each window's audit (and, where scored, its checkpoint's held-out success), the chosen one marked."""
    def held_out(window: dict) -> str:
        return "" if window.get("heldout_success") is None else f", held-out {window['heldout_success']:.3f}"

    return "\n".join([
        f"audits ({audited['answers_per_window']} of the reward model's top-tenth answers per {audited['every']} "
        f"steps, the verifier standing in for reviewers):",
        *(f"  checkpoint {w['checkpoint_step']:>4}: {w['correct']}/{w['audited']} correct {w['interval']}"
          f"{held_out(w)}{'  <- chosen' if w['checkpoint_step'] == audited['chosen_step'] else ''}"
          for w in audited["windows"]),
    ])


def format_audit_choice(rows: list[dict], met: bool | None, points: float) -> str:
    """The audit-chosen children beside the last checkpoints, and `met` (the gain target of `points`, read over the
    audit-chosen children: training.reward_rounds.targets' audited_gain_met)."""
    lines = [f"{'seed':<6}{'parent':>8}{'last child':>12}{'gain':>8}{'audit-chosen step':>19}"
             f"{'audited correct':>17}{'its held-out':>14}{'gain':>8}"]
    for row in rows:
        audited = row.get("audited") or {}
        chosen = next((w for w in audited.get("windows", []) if w["checkpoint_step"] == audited.get("chosen_step")),
                      None)
        last = (f"{row['seed']:<6}{row['parent']['success_rate']:>8.3f}{row['child']['success_rate']:>12.3f}"
                f"{row['gain_points']:>+8.1f}")
        lines.append(f"{last}{'-':>19}" if chosen is None else
                     f"{last}{chosen['checkpoint_step']:>19}{chosen['correct']:>11}/{chosen['audited']:<5}"
                     f"{audited['chosen_child']['success_rate']:>14.3f}{audited['gain_points']:>+8.1f}")
    if met is not None:
        gains = [row["audited"]["gain_points"] for row in rows]
        lines.append(f"target, audit-chosen child >= parent + {points:.0f} points in every seed: "
                     f"{'met' if met else 'NOT met'} (min {min(gains):+.1f}, median {statistics.median(gains):+.1f})")
    return "\n".join(lines)
