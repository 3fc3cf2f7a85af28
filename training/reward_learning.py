"""Can people's preferences stand in for a verifier? The loop where the truth is known, one seed at a time: a
parent's own answers paired by a verifier standing in for the reviewers (training.preference_pairs), a reward model
(`python -m training reward`), GRPO on it alone (`python -m training grpo`: no verifier during training), and parent
and child scored on held-out problems; with audits, the answer audit of each step window chooses a checkpoint
(training.reward_model_check); with rounds, preferences are asked again of the policy so far
(training.reward_rounds). bench/reward_learning.py runs it and prints the tables; this module holds every rule."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from training import reward_rounds
from training.preference_pairs import (
    correct_share,
    sampled_preferences,
    write_preference_snapshot,
    write_preferences,
)
from training.reward_model_check import audit_choice, audited_windows, trip_time, verified_afterwards

# `python -m training COMMAND --config FILE` in a child process on `threads` threads: (wall seconds, CPU seconds).
RunTraining = Callable[[str, Path, int], tuple[float, float]]


@dataclass(frozen=True)
class LoopSettings:
    """What one seed's loop runs with. `grpo_recipe` is a GRPO config without the run's own paths (max_steps the
    whole run's steps, beta its KL coefficient); `reward_recipe` a reward config likewise."""
    grpo_recipe: dict
    reward_recipe: dict
    run_training: RunTraining
    train_tasks: int = 400
    threads: int = 1
    samples: int = 4
    pairing: str = "random"
    audit_every: int = 0
    audited_answers: int = 32
    heldout_every_checkpoint: bool = False
    rounds: int = 1
    kl_reference: str = "parent"


KL_REFERENCES = ("parent", "round-start")


def training_tasks(seed: int, count: int) -> list[dict]:
    """The verifiable training problems of `seed` (bench/grpo_learning.py's), which GRPO here gets as open tasks."""
    from training.task_families import make_tasks

    return make_tasks("speed", n=count, seed=seed, variant="train")


def checkpoint_at(run: Path, step: int) -> Path:
    """The checkpoint a run saved after `step` optimizer steps."""
    from training.run_folder import RunFolder

    return RunFolder(run).trainer_checkpoints / f"checkpoint-{step}"


def heldout_success(checkpoints: list[Path], tasks: list[dict], settings: LoopSettings, *, seed: int) -> dict:
    """evaluate_checkpoints' figures of `checkpoints` on the held-out `tasks`, sampled at the GRPO recipe's
    temperature."""
    import torch

    from training.evaluate import evaluate_checkpoints

    torch.set_num_threads(settings.threads)
    return evaluate_checkpoints(checkpoints=[str(c) for c in checkpoints], tasks=tasks, samples=settings.samples,
                                temperature=settings.grpo_recipe["temperature"],
                                max_new_tokens=settings.grpo_recipe["max_completion_length"], seed=seed)


def ask(policy: Path, settings: LoopSettings, *, seed: int, problem_seed: int | None = None) -> dict:
    """sampled_preferences of `policy` with the GRPO recipe's answer length."""
    return sampled_preferences(policy, seed=seed, threads=settings.threads, problem_seed=problem_seed,
                               max_new_tokens=settings.grpo_recipe["max_completion_length"])


def train_reward_model(run: Path, config: Path, settings: LoopSettings, *, base: Path, snapshot: Path, seed: int,
                       epochs: float | None = None) -> dict:
    """`python -m training reward` with the reward recipe (`epochs` in place of its epochs): {"test",
    "cpu_minutes", "wall_s"}."""
    import yaml

    recipe = settings.reward_recipe if epochs is None else {**settings.reward_recipe, "num_train_epochs": epochs}
    config.write_text(yaml.safe_dump({**recipe, "base_checkpoint": str(base), "snapshot": str(snapshot),
                                      "output_dir": str(run), "seed": seed, "torch_threads": settings.threads}))
    wall, cpu = settings.run_training("reward", config, settings.threads)
    return {"test": json.loads((run / "run.json").read_text())["results"]["test"], "cpu_minutes": round(cpu / 60, 2),
            "wall_s": round(wall, 1)}


def run_grpo_on_reward_model(run: Path, config: Path, settings: LoopSettings, *, base: Path, tasks: Path,
                             reward_model: Path, steps: int, seed: int, saving: dict | None = None,
                             kl_reference: Path | None = None) -> tuple[float, float]:
    """`python -m training grpo` with the GRPO recipe from `base` for `steps` steps, the reward model its only
    reward, its KL term (beta above 0) against `kl_reference` or else `base`: (wall seconds, CPU seconds)."""
    import yaml

    recipe = settings.grpo_recipe
    reference = {"reference_checkpoint": str(kl_reference)} if kl_reference and recipe["beta"] > 0 else {}
    config.write_text(yaml.safe_dump({**recipe, "max_steps": steps, "base_checkpoint": str(base),
                                      "tasks": str(tasks), "output_dir": str(run), "seed": seed,
                                      "torch_threads": settings.threads, "reward_model": str(reward_model),
                                      **reference, **(saving or {})}))
    return settings.run_training("grpo", config, settings.threads)


def reward_model_identity(run: Path) -> str:
    """The identity of the reward model a GRPO run recorded."""
    return json.loads((run / "run.json").read_text())["reward_model"]["identity"]


def one_seed(workdir: Path, seed: int, sft: Path, heldout: list[dict], settings: LoopSettings) -> dict:
    """The loop for one seed from the parent `sft` (rounds_of_one_seed with settings.rounds above 1): the results
    file's row."""
    from training.task_families import open_tasks
    from training.tasks import write_tasks

    # The verifiable training problems as open tasks: no verifier during training.
    tasks = workdir / f"train-open-{seed}.jsonl"
    verifiable = training_tasks(seed, settings.train_tasks)
    write_tasks(tasks, open_tasks(verifiable))
    if settings.rounds > 1:
        return rounds_of_one_seed(workdir, seed, sft, heldout, settings, tasks=tasks, verifiable=verifiable)

    snapshot = workdir / f"preferences-{seed}"
    counts = write_preferences(snapshot, ask(sft, settings, seed=seed), seed=seed, pairing=settings.pairing)
    reward_run = workdir / f"reward-{seed}"
    reward = train_reward_model(reward_run, workdir / f"reward-{seed}.yaml", settings, base=sft, snapshot=snapshot,
                                seed=seed)
    run = workdir / f"grpo-rm-{seed}"
    every = settings.audit_every
    saving = {"save_strategy": "steps", "save_steps": every, "save_only_model": True} if every else {}
    grpo_wall, grpo_cpu = run_grpo_on_reward_model(run, workdir / f"grpo-rm-{seed}.yaml", settings, base=sft,
                                                   tasks=tasks, reward_model=reward_run / "checkpoint",
                                                   steps=settings.grpo_recipe["max_steps"], seed=seed, saving=saving)
    audits = (audited_windows(run, verifiable, every=every, answers=settings.audited_answers, seed=seed)
              if every else None)
    steps = ([w["checkpoint_step"] for w in audits["windows"]] if settings.heldout_every_checkpoint
             else [audits["chosen_step"]] if audits and audits["chosen_step"] is not None else [])
    scored = [one["all"] for one in heldout_success([sft, run / "checkpoint", *(checkpoint_at(run, s) for s in steps)],
                                                    heldout, settings, seed=seed)["checkpoints"]]
    parent, child = scored[0], scored[1]
    if audits is not None:
        audits = audit_choice(audits, dict(zip(steps, scored[2:], strict=True)), parent)
    ledger = json.loads((run / "ledger.json").read_text())
    return {
        "seed": seed,
        "preferences": counts,
        "reward_model": {**reward, "identity": reward_model_identity(run)},
        "parent": parent,
        "child": child,
        "gain_points": reward_rounds.gain_points(parent, child),
        "grpo_cpu_minutes": round(grpo_cpu / 60, 2),
        "grpo_wall_s": round(grpo_wall, 1),
        "by_step": ledger["by_step"],
        "verified_afterwards": verified_afterwards(run, verifiable, split=trip_time),
        "audited": audits,
        "completion_length": ledger["completion_length"],
        "parent_recipe": json.loads((sft / "tiny_sft.json").read_text())["config"],
        "scorers": child["scorers"],
    }


def rounds_of_one_seed(workdir: Path, seed: int, sft: Path, heldout: list[dict], settings: LoopSettings, *,
                       tasks: Path, verifiable: list[dict]) -> dict:
    """Rounds of preferences, asked again as the policy changes, as a team asks its reviewers about the new model's
    answers. Round 1 is the single-round loop's first part: the parent's answers paired, a reward model, GRPO from
    the parent for the round's share of the steps. Each later round asks the policy the previous round left new
    held-in problems, pairs its correct and wrong answers the same way, adds them to every earlier round's pairs
    (each pair keeps its split), trains a new reward model from the parent on them all (its epochs scaled so that
    each round's reward model takes as many optimizer steps as the first's), and goes on with GRPO from the previous
    round's checkpoint on that reward model. Training still never sees the verifier; the child is the last round's
    checkpoint, and the round chosen (reward_rounds.chosen_round) is read off each checkpoint's answers to the next
    round's problems, the last checkpoint asked as a next round would ask it."""
    rows: list = []
    rounds, checkpoints, first_train = [], [], None
    for number, steps in enumerate(reward_rounds.round_steps(settings.grpo_recipe["max_steps"], settings.rounds),
                                   start=1):
        name = f"{seed}-round{number}"
        policy = checkpoints[-1] if checkpoints else sft
        sampled = ask(policy, settings, seed=seed, problem_seed=reward_rounds.round_problem_seed(seed, number))
        new_rows, counts = reward_rounds.round_pairs(rows, sampled, seed=seed, number=number,
                                                     pairing=settings.pairing)
        rows += new_rows
        snapshot = workdir / f"preferences-{name}"
        write_preference_snapshot(snapshot, rows, seed=seed, pairing=settings.pairing)
        train = sum(split == "train" for split, *_ in rows)
        if not train:
            raise SystemExit(f"seed {seed}, round {number}: no training pair yet (the policy wrote no prompt with both "
                             "a correct and a wrong answer beyond the test split); a reward model needs some: give "
                             "a stronger parent")
        first_train = first_train or train
        epochs = reward_rounds.round_epochs(settings.reward_recipe["num_train_epochs"], first_train, train)
        reward_run = workdir / f"reward-{name}"
        reward = train_reward_model(reward_run, workdir / f"reward-{name}.yaml", settings, base=sft,
                                    snapshot=snapshot, seed=seed, epochs=epochs)
        run = workdir / f"grpo-rm-{name}"
        grpo_wall, grpo_cpu = run_grpo_on_reward_model(
            run, workdir / f"grpo-rm-{name}.yaml", settings, base=policy, tasks=tasks,
            reward_model=reward_run / "checkpoint", steps=steps, seed=seed + 1000 * (number - 1),
            kl_reference=sft if settings.kl_reference == "parent" else None)
        ledger = json.loads((run / "ledger.json").read_text())
        rounds.append({
            "round": number, "policy": "parent" if number == 1 else f"round {number - 1}'s checkpoint",
            "steps": steps,
            "policy_correct_share": correct_share(sampled),
            "new_pairs": counts,
            "snapshot": {"train": train, "test": len(rows) - train},
            "reward_model": {**reward, "epochs": epochs, "identity": reward_model_identity(run)},
            "grpo_cpu_minutes": round(grpo_cpu / 60, 2), "grpo_wall_s": round(grpo_wall, 1),
            "by_step": ledger["by_step"], "completion_length": ledger["completion_length"],
            "verified_afterwards": verified_afterwards(run, verifiable, split=trip_time),
        })
        checkpoints.append(run / "checkpoint")
    last_asked = ask(checkpoints[-1], settings, seed=seed,
                     problem_seed=reward_rounds.round_problem_seed(seed, len(rounds) + 1))
    asked_shares = [one["policy_correct_share"] for one in rounds[1:]] + [correct_share(last_asked)]
    scored = [one["all"] for one in heldout_success([sft, *checkpoints], heldout, settings, seed=seed)["checkpoints"]]
    parent, child = scored[0], scored[-1]
    for one_round, after in zip(rounds, scored[1:], strict=True):
        one_round["heldout_after"] = after["success_rate"]
        one_round["heldout_interval"] = after["interval"]
    return {
        "seed": seed,
        "round_choice": reward_rounds.round_choice(asked_shares, parent, scored[1:]),
        "preferences": rounds[0]["new_pairs"],
        "reward_model": rounds[0]["reward_model"],
        "parent": parent,
        "child": child,
        "gain_points": reward_rounds.gain_points(parent, child),
        "grpo_cpu_minutes": round(sum(r["grpo_cpu_minutes"] for r in rounds), 2),
        "grpo_wall_s": round(sum(r["grpo_wall_s"] for r in rounds), 1),
        "rounds": rounds,
        "by_step": None,
        "verified_afterwards": None,
        "audited": None,
        "completion_length": rounds[-1]["completion_length"],
        "parent_recipe": json.loads((sft / "tiny_sft.json").read_text())["config"],
        "scorers": child["scorers"],
    }


def verifier_trained_children(verifier_results: dict, rows: list[dict], *, heldout: int, samples: int,
                              parent_recipe: dict) -> dict[int, float]:
    """seed -> held-out success of the verifier-trained child in `verifier_results` (bench/grpo_learning.py's
    results), for the seeds of `rows` whose parent is that run's: built with `parent_recipe`, scored on the same
    `heldout` problems with the same `samples`, with the same success. The same recipe and seed on another processor
    make another parent, and the held-out problems, samples and seed being the same, the same parent scores the
    same; a child of another parent is left out."""
    settings = verifier_results.get("settings", {})
    if settings.get("heldout") != heldout or settings.get("samples") != samples:
        return {}
    children = {}
    parents = {row["seed"]: row["parent"]["success_rate"] for row in rows}
    for row in verifier_results.get("runs", []):
        recipe = row.get("parent_recipe") or {}
        if (all(recipe.get(key) == value for key, value in parent_recipe.items())
                and parents.get(row["seed"]) == row["parent"]["success_rate"]):
            children[row["seed"]] = row["child"]["success_rate"]
    return children


def settings_that_differ(stored: dict, ours: dict) -> list[str]:
    """The settings (besides "seeds") in which a results file's `stored` settings differ from `ours`: seeds run
    with other settings cannot join its table. A file written before pairings had a name was paired at random,
    before audits was not audited, and before rounds asked for preferences once."""
    stored = {"pairing": "random", "audits": None, "rounds": 1,
              **{key: value for key, value in stored.items() if key != "seeds"}}
    ours = json.loads(json.dumps({key: value for key, value in ours.items() if key != "seeds"}))
    return sorted(key for key in {*stored, *ours} if stored.get(key) != ours.get(key))


def refused_settings(settings: LoopSettings) -> str | None:
    """Why the loop cannot run with `settings`, in one line naming bench/reward_learning.py's options, or None."""
    steps, rounds, every = settings.grpo_recipe["max_steps"], settings.rounds, settings.audit_every
    if rounds < 1 or rounds > steps:
        return f"--rounds {rounds}: give from 1 to the run's {steps} steps"
    if rounds > 1 and every:
        return ("--audit-every audits the windows of one GRPO run; with --rounds each round is a run of its own and "
                "each round's checkpoint is scored on the held-out problems: leave --audit-every out")
    if settings.grpo_recipe["beta"] < 0:
        return (f"--beta {settings.grpo_recipe['beta']} is negative; give 0 (no KL term) or a positive coefficient "
                "such as 0.04")
    if every < 0 or settings.audited_answers < 1:
        return "--audit-every must be 0 (no audits) or a number of steps, and --audited-answers at least 1"
    if settings.heldout_every_checkpoint and rounds > 1:
        return ("--heldout-every-checkpoint scores the checkpoints one run's audits save; with --rounds every round's "
                "checkpoint is scored on the held-out problems already: leave it out")
    if settings.heldout_every_checkpoint and not every:
        return ("--heldout-every-checkpoint scores the checkpoints the audits save; with --audit-every 0 none is "
                "saved: give --audit-every N, or leave --heldout-every-checkpoint out")
    if every > steps:
        return (f"--audit-every {every} is more than the run's {steps} steps; no checkpoint would be audited: give at "
                "most --steps, or 0 for no audits")
    return None


def format_seeds(rows: list[dict], verifier_children: dict[int, float]) -> str:
    """The benchmark's table: each seed's pairs, reward model, parent and child, beside the verifier-trained child
    of the same parent where there is one (verifier_trained_children)."""
    lines = [f"{'seed':<6}{'pairs tr/te':>12}{'RM acc':>8}{'RM 95% interval':>18}{'RM CPU-min':>12}{'r(len)':>8}"
             f"{'parent':>8}{'child':>8}{'gain':>8}{'verifier child':>16}{'behind it':>11}{'GRPO CPU-min':>14}"]
    for row in rows:
        test, verifier_child = row["reward_model"]["test"], verifier_children.get(row["seed"])
        behind = "-" if verifier_child is None else f"{100 * (verifier_child - row['child']['success_rate']):+.1f}"
        pearson = test["length_correlation"]["pearson"]
        lines.append(
            f"{row['seed']:<6}{row['preferences']['train']:>7}/{row['preferences']['test']:<4}"
            f"{test['accuracy']:>8.3f}{str(test['interval']):>18}{row['reward_model']['cpu_minutes']:>12.1f}"
            f"{pearson if pearson is not None else '-':>8}"
            f"{row['parent']['success_rate']:>8.3f}{row['child']['success_rate']:>8.3f}{row['gain_points']:>+8.1f}"
            f"{'-' if verifier_child is None else f'{verifier_child:.3f}':>16}{behind:>11}"
            f"{row['grpo_cpu_minutes']:>14.1f}")
    return "\n".join(lines)


def verified_again(workdir: Path, seeds: list[int], train_tasks: int) -> dict[int, dict]:
    """seed -> verified_afterwards of the single-round run one_seed recorded in `workdir` for it, computed again
    (after a change to that check); SystemExit in one line for a seed with no recorded run."""
    afterwards = {}
    for seed in seeds:
        run = workdir / f"grpo-rm-{seed}"
        if not (run / "rollouts").is_dir():
            raise SystemExit(f"--verify-again: no recorded run {run} for seed {seed}; run that seed first")
        afterwards[seed] = verified_afterwards(run, training_tasks(seed, train_tasks), split=trip_time)
    return afterwards
