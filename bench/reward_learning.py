"""Can people's preferences stand in for a verifier? Preferences -> reward model -> GRPO -> held-out verifier success.

The whole loop on CPU where the truth is known. For each seed, from the parent of bench/grpo_learning.py (the
tiny SFT checkpoint taught a classic wrong method on four in five speed problems):

1. Preferences as reviewers produce them: the parent answers held-in speed problems (training variant), 4 samples
   each at temperature 1; for each distinct prompt where it wrote both a correct and an incorrect answer (the
   verifier stands in for a careful reviewer), one pair, the correct answer chosen. Prompts where it wrote only
   one kind are left out, so every pair compares two of the model's own answers, as reviewers see them. The pairs become a
   snapshot (conversational rows, 90% train / 10% test by problem), as the app exports. With --pairing
   length-balanced, each prompt's pair is its correct and wrong answers closest in length, and as many pairs have
   the chosen answer shorter as longer (preference_pairs): length no longer tells which answer was chosen.
2. A reward model: `python -m training reward` from the parent on that snapshot; its test accuracy (chosen above
   rejected) with a Wilson interval, and the share of its reward that follows length.
3. GRPO from the same parent with the reward model as its only reward: `python -m training grpo` with
   bench/grpo_learning.py's recipe on the same 400 training problems written as open tasks (no verifier exists
   during training; the verifier never runs).
4. Parent and child on the same 100 held-out speed problems (new numbers, new wording), scored by the verifier as
   bench/grpo_learning.py scores them, beside the verifier-trained child of bench/grpo_learning.py on the same
   parent (from bench/results/grpo_learning.json, when that run used the same parents).
5. With --audit-every N (default 40): the run saves a checkpoint every N steps, and the answer audit the app runs on
   a GRPO run (annotate/runs/audit.py: the reward model's top tenth, drawn by hash, judged alone) is run on the
   answers of each N-step window, the verifier standing in for the reviewers (as it does for the preferences). The
   checkpoint after the window whose audit found the most correct answers is the audit-chosen child: what an
   engineer who audits the run as it goes keeps, with no held-out verifier. It is scored on the held-out problems
   too; --heldout-every-checkpoint scores every saved checkpoint there, to show whether the audits point where the
   held-out success peaks (never used to choose).
6. With --rounds R (instead of audits): preferences are asked again, R times in all, on the answers of the policy so
   far, as a team asks its reviewers about the new model's answers (rounds_of_one_seed). Each round adds its pairs
   to the earlier ones, trains a new reward model from the parent on them all and runs the next 1/R of the GRPO
   steps from the last round's checkpoint on it; each round's checkpoint is scored on the held-out problems. With
   --beta above 0 each round's KL term measures against the SFT parent (--kl-reference round-start: against the
   checkpoint the round starts from). The last checkpoint is then asked as a next round would ask it, and the round
   whose checkpoint answered correctly most often is the round-chosen child, shown beside the last. The rounds'
   rules (the steps and epochs of each round, the splits, the round chosen, the targets read over every round) are
   training/reward_rounds.py's; the check of the recorded answers and the audits, training/reward_model_check.py's.

Targets: the reward model within 10 CPU-minutes at test accuracy >= 85%; the child >= parent + 10 held-out points
in every seed.

    python bench/reward_learning.py [--seeds 0 1 2] [--parents DIR] [--jobs 3] [--threads 1] [--steps N] [--workdir DIR]
                                    [--pairing random|length-balanced] [--beta B] [--audit-every N] [--audited-answers K]
                                    [--heldout-every-checkpoint] [--rounds R] [--kl-reference parent|round-start]
                                    [--results FILE] [--add-to-results]
                                    [--verify-again]

Prints a table and the ledger's per-step reward and length, and writes bench/results/reward_learning.json.
"""

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench and training

from bench.common import machine, results_path, shown_path, write_results
from bench.grpo_learning import (
    PARENT_RECIPE,
    RECIPE,
    TRAIN_TASKS,
    add_parent_options,
    evaluate,
    parent_checkpoint,
    run_training,
    write_tasks,
)
from training import reward_rounds
from training.reward_model_check import audited_windows, verified_afterwards

RESULTS = results_path("reward_learning")
VERIFIER_RESULTS = results_path("grpo_learning")
TARGET_GAIN_POINTS = 10.0
TARGET_REWARD_ACCURACY = 0.85
REWARD_CPU_MINUTES_LIMIT = 10.0
PREFERENCE_PROBLEMS = 800   # held-in problems the parent answers to make pairs
PREFERENCE_SAMPLES = 4
TEST_SHARE = 0.1
AUDIT_EVERY = 40            # steps between saved checkpoints, each audited on the answers of the steps before it
AUDITED_ANSWERS = 32        # answers audited per window (the app's audit batch size)
# The reward model's recipe (TRL's RewardConfig names): the parent's body with a new score head. On a 320-step
# parent's own 168 train pairs, 2 epochs reached 0.63 test accuracy and 8 epochs 0.79 (19 test pairs) in about
# 1 CPU-minute; 3e-4 did worse (0.68) than 1e-4.
REWARD_RECIPE = {
    "learning_rate": 1e-4,
    "lr_scheduler_type": "constant",
    "num_train_epochs": 8,
    "per_device_train_batch_size": 16,
    "per_device_eval_batch_size": 32,
    "max_length": 256,
    "logging_steps": 10,
    "save_strategy": "no",
    "use_cpu": True,
    "report_to": ["none"],
}


def preference_snapshot(out: Path, parent: Path, *, seed: int, threads: int, pairing: str = "random",
                        test_share: float = TEST_SHARE) -> dict:
    """Pairs of the parent's own answers (one correct, one wrong, by the verifier) as a snapshot; returns counts.
    `pairing`: see preference_pairs; `test_share` 1.0 puts every pair in the test split (an evaluation set)."""
    sampled = sampled_preferences(parent, seed=seed, threads=threads)
    return write_preferences(out, sampled, seed=seed, pairing=pairing, test_share=test_share)


def sampled_preferences(parent: Path, *, seed: int, threads: int, problem_seed: int | None = None) -> dict:
    """The parent's answers to PREFERENCE_PROBLEMS held-in speed problems, PREFERENCE_SAMPLES each, judged by the
    verifier: {"problems", "distinct_prompts", "answers", "correct_answers", "candidates": [(task, correct answers,
    wrong answers)] for each distinct prompt with both kinds}. One sample serves every pairing of it
    (write_preferences). `problem_seed` (default 5000 + seed) draws the problems: a later round of --rounds asks
    its policy new ones."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.generation import generate_completions
    from training.task_families import make_tasks
    from training.verifiers.task_verifier import TaskVerifier

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    problems = make_tasks("speed", n=PREFERENCE_PROBLEMS, seed=5000 + seed if problem_seed is None else problem_seed,
                          variant="train")
    model = AutoModelForCausalLM.from_pretrained(parent)
    tokenizer = AutoTokenizer.from_pretrained(parent)
    answers = generate_completions(model, tokenizer, [t["prompt"] for t in problems], samples=PREFERENCE_SAMPLES,
                                   temperature=1.0, max_new_tokens=RECIPE["max_completion_length"])
    with TaskVerifier(workers=1) as verifier:
        verdicts = verifier.verify_many([(task, answer) for task, sampled in zip(problems, answers, strict=True)
                                         for answer in sampled])
    candidates, seen_prompts = [], set()
    for index, task in enumerate(problems):
        if task["prompt"] in seen_prompts:  # a prompt drawn twice is one prompt, on one side of the split
            continue
        seen_prompts.add(task["prompt"])
        judged = list(zip(answers[index], verdicts[index * PREFERENCE_SAMPLES:(index + 1) * PREFERENCE_SAMPLES],
                          strict=True))
        right = [answer for answer, verdict in judged if verdict.status == "correct"]
        wrong = [answer for answer, verdict in judged if verdict.status == "wrong"]
        if right and wrong:
            candidates.append((task, right, wrong))
    return {"problems": len(problems), "distinct_prompts": len(seen_prompts), "answers": len(verdicts),
            "correct_answers": sum(verdict.status == "correct" for verdict in verdicts), "candidates": candidates}


def write_preferences(out: Path, sampled: dict, *, seed: int, pairing: str, test_share: float = TEST_SHARE) -> dict:
    """sampled_preferences paired by `pairing` (preference_pairs, drawn under `seed`) as a snapshot; returns counts."""
    rows, counts = split_pairs(sampled, rng=random.Random(seed), pairing=pairing, test_share=test_share)
    write_snapshot(out, rows, seed=seed, pairing=pairing)
    return counts


def split_pairs(sampled: dict, *, rng: random.Random, pairing: str,
                test_share: float = TEST_SHARE) -> tuple[list[tuple[str, dict, str, str]], dict]:
    """sampled_preferences paired by `pairing` and split: ([(split, task, chosen, rejected)], counts). The first
    `test_share` of the shuffled pairs (at least one) is the test split."""
    candidates = sampled["candidates"]
    pairs, lengths = preference_pairs(candidates, rng, pairing=pairing)
    test = min(len(pairs), max(1, round(test_share * len(pairs))))  # a later round may find no pair at all
    rows = [("test" if number < test else "train", task, chosen, rejected)
            for number, (task, chosen, rejected) in enumerate(pairs)]
    return rows, {"problems": sampled["problems"], "distinct_prompts": sampled["distinct_prompts"],
                  "pairs": len(pairs), "train": len(pairs) - test, "test": test,
                  "prompts_without_both": sampled["distinct_prompts"] - len(candidates), "pairing": pairing, **lengths}


def write_snapshot(out: Path, rows: list[tuple[str, dict, str, str]], *, seed: int, pairing: str) -> None:
    """(split, task, chosen, rejected) rows as a snapshot, as the app exports one."""
    from training.snapshot import SnapshotWriter

    with SnapshotWriter(out, project="reward-learning", created_at="2026-01-01T00:00:00Z", criteria_version=1,
                        filters={"pairs": "parent's correct vs wrong answer", "pairing": pairing, "seed": seed}) as writer:
        for split, task, chosen, rejected in rows:
            writer.add_pair(split, prompt=[{"role": "user", "content": task["prompt"]}], chosen=chosen,
                            rejected=rejected, meta={"task_id": task["task_id"]})


PAIRINGS = ("random", "length-balanced")
KL_REFERENCES = ("parent", "round-start")


def preference_pairs(candidates: list[tuple[dict, list[str], list[str]]], rng: random.Random, *,
                     pairing: str) -> tuple[list[tuple[dict, str, str]], dict]:
    """One (task, chosen, rejected) pair per candidate prompt (its correct and its wrong answers), shuffled, and how
    their lengths compare: {"chosen_shorter", "chosen_longer", "equal_length", "left_out_for_balance"}.

    "random": a correct and a wrong answer drawn at random. The taught wrong method writes longer numbers, so the
    chosen answer is then mostly the shorter one, and a reward model can score length instead of correctness.
    "length-balanced": each prompt's correct and wrong answers closest in length (ties drawn at random); then, of the
    side that is more common (chosen shorter, or chosen longer), the pairs furthest apart in length are left out
    until both sides are as many, so that length says nothing about which answer was chosen.
    """
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {', '.join(PAIRINGS)}, got {pairing!r}")
    pairs = []
    for task, right, wrong in candidates:
        if pairing == "random":
            pairs.append((task, rng.choice(right), rng.choice(wrong)))
            continue
        combos = [(abs(len(r) - len(w)), rng.random(), r, w) for r in right for w in wrong]
        _, _, chosen, rejected = min(combos)
        pairs.append((task, chosen, rejected))
    left_out = 0
    if pairing == "length-balanced":
        shorter = [p for p in pairs if len(p[1]) < len(p[2])]
        longer = [p for p in pairs if len(p[1]) > len(p[2])]
        more, fewer = (shorter, longer) if len(shorter) > len(longer) else (longer, shorter)
        more.sort(key=lambda p: (abs(len(p[1]) - len(p[2])), p[0]["task_id"]))
        dropped = {id(p) for p in more[len(fewer):]}
        left_out = len(dropped)
        pairs = [p for p in pairs if id(p) not in dropped]
    rng.shuffle(pairs)
    return pairs, {"chosen_shorter": sum(len(c) < len(r) for _, c, r in pairs),
                   "chosen_longer": sum(len(c) > len(r) for _, c, r in pairs),
                   "equal_length": sum(len(c) == len(r) for _, c, r in pairs), "left_out_for_balance": left_out}


def training_tasks(seed: int) -> list[dict]:
    """The verifiable training problems of `seed`: bench/grpo_learning.py's, which GRPO here gets as open tasks."""
    from training.task_families import make_tasks

    return make_tasks("speed", n=TRAIN_TASKS, seed=seed, variant="train")


def trip_time(task: dict) -> str:
    """A speed problem's trip time (the last of its values for both structures): the taught wrong method divides
    two legs by 2, so a reward model that learned "/ 2 is wrong" misleads the policy exactly where the trip took 2."""
    return f"trip of {task['meta']['values'][-1]}"


def checkpoint_at(run: Path, step: int) -> Path:
    """The checkpoint a run saved after `step` optimizer steps."""
    from training.run_folder import RunFolder

    return RunFolder(run).trainer_checkpoints / f"checkpoint-{step}"


def one_seed(workdir: Path, seed: int, args, heldout: list[dict]) -> dict:
    from training.task_families import open_tasks
    from training.tasks import write_tasks as write_task_file

    sft, _ = parent_checkpoint(workdir, seed, args)
    # The same training problems bench/grpo_learning.py trains on, as open tasks: no verifier during training.
    tasks = workdir / f"train-open-{seed}.jsonl"
    verifiable = training_tasks(seed)
    write_task_file(tasks, open_tasks(verifiable))
    if args.rounds > 1:
        return rounds_of_one_seed(workdir, seed, args, heldout, sft=sft, tasks=tasks, verifiable=verifiable)

    snapshot = workdir / f"preferences-{seed}"
    counts = preference_snapshot(snapshot, sft, seed=seed, threads=args.threads, pairing=args.pairing)
    reward_run = workdir / f"reward-{seed}"
    reward = train_reward_model(reward_run, workdir / f"reward-{seed}.yaml", base=sft, snapshot=snapshot, seed=seed,
                                threads=args.threads)
    run = workdir / f"grpo-rm-{seed}"
    saving = ({"save_strategy": "steps", "save_steps": args.audit_every, "save_only_model": True}
              if args.audit_every else {})
    grpo_wall, grpo_cpu = run_grpo_on_reward_model(run, workdir / f"grpo-rm-{seed}.yaml", args, base=sft, tasks=tasks,
                                                   reward_model=reward_run / "checkpoint", steps=args.steps,
                                                   seed=seed, saving=saving)
    child = run / "checkpoint"
    audits = (audited_windows(run, verifiable, every=args.audit_every, answers=args.audited_answers, seed=seed)
              if args.audit_every else None)
    steps = ([w["checkpoint_step"] for w in audits["windows"]] if args.heldout_every_checkpoint
             else [audits["chosen_step"]] if audits and audits["chosen_step"] is not None else [])
    sampled = evaluate([sft, child, *(checkpoint_at(run, step) for step in steps)], heldout, samples=args.samples,
                       temperature=RECIPE["temperature"], seed=seed, threads=args.threads)

    def success(index: int) -> dict:
        return sampled["checkpoints"][index]["all"]

    if audits is not None:
        heldout_by_step = {step: success(2 + index)["success_rate"] for index, step in enumerate(steps)}
        for window in audits["windows"]:
            window["heldout_success"] = heldout_by_step.get(window["checkpoint_step"])
        if audits["chosen_step"] is not None:
            chosen = success(2 + steps.index(audits["chosen_step"]))
            audits["chosen_child"] = chosen
            audits["gain_points"] = round(100 * (chosen["success_rate"] - success(0)["success_rate"]), 1)

    ledger = json.loads((run / "ledger.json").read_text())
    afterwards = verified_afterwards(run, verifiable, split=trip_time)
    return {
        "seed": seed,
        "preferences": counts,
        "reward_model": {**reward, "identity": json.loads((run / "run.json").read_text())["reward_model"]["identity"]},
        "parent": success(0),
        "child": success(1),
        "gain_points": round(100 * (success(1)["success_rate"] - success(0)["success_rate"]), 1),
        "grpo_cpu_minutes": round(grpo_cpu / 60, 2),
        "grpo_wall_s": round(grpo_wall, 1),
        "by_step": ledger["by_step"],
        "verified_afterwards": afterwards,
        "audited": audits,
        "completion_length": ledger["completion_length"],
        "parent_recipe": json.loads((sft / "tiny_sft.json").read_text())["config"],
        "scorers": sampled["checkpoints"][1]["all"]["scorers"],
    }


def train_reward_model(run: Path, config: Path, *, base: Path, snapshot: Path, seed: int, threads: int,
                       epochs: float | None = None) -> dict:
    """`python -m training reward` with REWARD_RECIPE (`epochs` in place of its epochs): {"test", "cpu_minutes",
    "wall_s"}."""
    import yaml

    recipe = REWARD_RECIPE if epochs is None else {**REWARD_RECIPE, "num_train_epochs": epochs}
    config.write_text(yaml.safe_dump({**recipe, "base_checkpoint": str(base), "snapshot": str(snapshot),
                                      "output_dir": str(run), "seed": seed, "torch_threads": threads}))
    wall, cpu = run_training("reward", config, threads)
    return {"test": json.loads((run / "run.json").read_text())["results"]["test"], "cpu_minutes": round(cpu / 60, 2),
            "wall_s": round(wall, 1)}


def run_grpo_on_reward_model(run: Path, config: Path, args, *, base: Path, tasks: Path, reward_model: Path,
                             steps: int, seed: int, saving: dict | None = None,
                             kl_reference: Path | None = None) -> tuple[float, float]:
    """`python -m training grpo` with the benchmark's recipe from `base`, the reward model its only reward, its KL
    term (--beta above 0) against `kl_reference` or else `base`: (wall seconds, CPU seconds)."""
    import yaml

    reference = {"reference_checkpoint": str(kl_reference)} if kl_reference and args.beta > 0 else {}
    config.write_text(yaml.safe_dump({**RECIPE, "max_steps": steps, "beta": args.beta, "base_checkpoint": str(base),
                                      "tasks": str(tasks), "output_dir": str(run), "seed": seed,
                                      "torch_threads": args.threads, "reward_model": str(reward_model),
                                      **reference, **(saving or {})}))
    return run_training("grpo", config, args.threads)


def correct_share(sampled: dict) -> float:
    """The share of sampled_preferences' answers the verifier found correct."""
    return round(sampled["correct_answers"] / sampled["answers"], 4)


def round_problem_seed(seed: int, number: int) -> int:
    """The seed of the held-in problems round `number` (from 1) asks for preferences: round 1 the single-round
    benchmark's (5000 + seed), each later round new problems."""
    return 5000 + seed + 1000 * (number - 1)


def round_pairs_rng(seed: int, number: int) -> random.Random:
    """How round `number` pairs and splits its answers: round 1 as the single-round benchmark does."""
    return random.Random(seed) if number == 1 else random.Random(f"{seed}:round{number}")


def round_pairs(earlier: list[tuple[str, dict, str, str]], sampled: dict, *, seed: int, number: int,
                pairing: str) -> tuple[list[tuple[str, dict, str, str]], dict]:
    """Round `number`'s pairs of `sampled`, split by the round's own coin, except that a prompt an earlier round
    already paired keeps that round's split (training.reward_rounds.keep_earlier_splits). Returns them and
    split_pairs' counts of them as they are split, with `asked_before`: how many of their prompts an earlier round
    paired."""
    new, counts = split_pairs(sampled, rng=round_pairs_rng(seed, number), pairing=pairing)
    new, counts["asked_before"] = reward_rounds.keep_earlier_splits(earlier, new)
    counts["train"] = sum(split == "train" for split, *_ in new)
    counts["test"] = len(new) - counts["train"]
    return new, counts


def rounds_of_one_seed(workdir: Path, seed: int, args, heldout: list[dict], *, sft: Path, tasks: Path,
                       verifiable: list[dict]) -> dict:
    """--rounds R: preferences are asked again as the policy changes, as a team asks its reviewers about the new
    model's answers. Round 1 is the single-round benchmark's first part: the parent's answers paired, a reward model,
    GRPO from the parent for the round's share of the steps. Each later round asks the policy the previous round
    left new held-in problems, pairs its correct and wrong answers the same way (the verifier standing in for the
    reviewers), adds them to every earlier round's pairs (each pair keeps its split), trains a new reward model from
    the parent on them all (its epochs scaled so that each round's reward model takes as many optimizer steps as
    the first's), and goes on with GRPO from the previous round's checkpoint on that reward model. The pairs where
    the policy's exploit of the last reward model lost to a correct answer are what teaches the next one. Training
    still never sees the verifier; the child is the last round's checkpoint."""
    rows: list[tuple[str, dict, str, str]] = []
    rounds, checkpoints, first_train = [], [], None
    for number, steps in enumerate(reward_rounds.round_steps(args.steps, args.rounds), start=1):
        name = f"{seed}-round{number}"
        policy = checkpoints[-1] if checkpoints else sft
        sampled = sampled_preferences(policy, seed=seed, threads=args.threads,
                                      problem_seed=round_problem_seed(seed, number))
        new_rows, counts = round_pairs(rows, sampled, seed=seed, number=number, pairing=args.pairing)
        rows += new_rows
        snapshot = workdir / f"preferences-{name}"
        write_snapshot(snapshot, rows, seed=seed, pairing=args.pairing)
        train = sum(split == "train" for split, *_ in rows)
        if not train:
            raise SystemExit(f"seed {seed}, round {number}: no training pair yet (the policy wrote no prompt with both "
                             "a correct and a wrong answer beyond the test split); a reward model needs some: give "
                             "a stronger parent")
        first_train = first_train or train
        epochs = reward_rounds.round_epochs(REWARD_RECIPE["num_train_epochs"], first_train, train)
        reward_run = workdir / f"reward-{name}"
        reward = train_reward_model(reward_run, workdir / f"reward-{name}.yaml", base=sft, snapshot=snapshot,
                                    seed=seed, threads=args.threads, epochs=epochs)
        run = workdir / f"grpo-rm-{name}"
        grpo_wall, grpo_cpu = run_grpo_on_reward_model(run, workdir / f"grpo-rm-{name}.yaml", args, base=policy,
                                                       tasks=tasks, reward_model=reward_run / "checkpoint",
                                                       steps=steps, seed=seed + 1000 * (number - 1),
                                                       kl_reference=sft if args.kl_reference == "parent" else None)
        ledger = json.loads((run / "ledger.json").read_text())
        rounds.append({
            "round": number, "policy": "parent" if number == 1 else f"round {number - 1}'s checkpoint",
            "steps": steps,
            "policy_correct_share": correct_share(sampled),
            "new_pairs": counts,
            "snapshot": {"train": train, "test": len(rows) - train},
            "reward_model": {**reward, "epochs": epochs,
                             "identity": json.loads((run / "run.json").read_text())["reward_model"]["identity"]},
            "grpo_cpu_minutes": round(grpo_cpu / 60, 2), "grpo_wall_s": round(grpo_wall, 1),
            "by_step": ledger["by_step"], "completion_length": ledger["completion_length"],
            "verified_afterwards": verified_afterwards(run, verifiable, split=trip_time),
        })
        checkpoints.append(run / "checkpoint")
    # The last checkpoint is asked as a next round would ask it, so that every round's checkpoint has the correct
    # share of its answers to new held-in problems, what reviewers of those answers would report.
    last_asked = sampled_preferences(checkpoints[-1], seed=seed, threads=args.threads,
                                     problem_seed=round_problem_seed(seed, len(rounds) + 1))
    asked_shares = [one["policy_correct_share"] for one in rounds[1:]] + [correct_share(last_asked)]
    sampled = evaluate([sft, *checkpoints], heldout, samples=args.samples, temperature=RECIPE["temperature"],
                       seed=seed, threads=args.threads)
    parent = sampled["checkpoints"][0]["all"]
    for index, one_round in enumerate(rounds, start=1):
        after = sampled["checkpoints"][index]["all"]
        one_round["heldout_after"] = after["success_rate"]
        one_round["heldout_interval"] = after["interval"]
    child = sampled["checkpoints"][-1]["all"]
    chosen = reward_rounds.chosen_round(asked_shares)
    chosen_child = sampled["checkpoints"][chosen]["all"]
    return {
        "seed": seed,
        "round_choice": {"asked_correct_shares": asked_shares, "chosen_round": chosen, "chosen_child": chosen_child,
                         "gain_points": round(100 * (chosen_child["success_rate"] - parent["success_rate"]), 1)},
        "preferences": rounds[0]["new_pairs"],
        "reward_model": rounds[0]["reward_model"],
        "parent": parent,
        "child": child,
        "gain_points": round(100 * (child["success_rate"] - parent["success_rate"]), 1),
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


def verifier_trained_children(args, rows: list[dict]) -> dict[int, float]:
    """seed -> held-out success of bench/grpo_learning.py's verifier-trained child, for the seeds of `rows` whose
    parent is that run's: built with the same recipe, scored on the same held-out problems, with the same success.
    The same recipe and seed on another processor make another parent, and the held-out problems, samples and seed
    being the same, the same parent scores the same; a child of another parent is left out."""
    if not VERIFIER_RESULTS.is_file():
        return {}
    results = json.loads(VERIFIER_RESULTS.read_text())
    settings = results.get("settings", {})
    if settings.get("heldout") != args.heldout or settings.get("samples") != args.samples:
        return {}
    children = {}
    parents = {row["seed"]: row["parent"]["success_rate"] for row in rows}
    for row in results.get("runs", []):
        recipe = row.get("parent_recipe") or {}
        if (all(recipe.get(key) == value for key, value in PARENT_RECIPE.items())
                and parents.get(row["seed"]) == row["parent"]["success_rate"]):
            children[row["seed"]] = row["child"]["success_rate"]
    return children


def main() -> int:
    global RESULTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--heldout", type=int, default=100, help="held-out problems (default 100)")
    parser.add_argument("--samples", type=int, default=4, help="sampled answers per held-out problem (default 4)")
    parser.add_argument("--steps", type=int, default=RECIPE["max_steps"], help="GRPO steps (default: the recipe's)")
    parser.add_argument("--beta", type=float, default=RECIPE["beta"],
                        help="TRL's KL coefficient against the parent (default: the recipe's 0.0; above 0 holds the "
                             "policy near the parent, at the cost of a reference model's forward pass)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run side by side (default 1)")
    parser.add_argument("--pairing", choices=PAIRINGS, default="random",
                        help="how each prompt's correct and wrong answer are paired (default random; length-balanced: "
                             "closest in length, and as many pairs with the chosen answer shorter as longer)")
    parser.add_argument("--audit-every", type=int, default=None,
                        help=f"save a checkpoint every N GRPO steps and audit each window's top-scored answers, the "
                             f"verifier standing in for reviewers (default {AUDIT_EVERY}; 0: no audits; none with "
                             "--rounds)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="ask for preferences again this many times in all, on the answers of the policy so far, "
                             "each round a new reward model and the next share of the GRPO steps (default 1: the "
                             "parent's answers only)")
    parser.add_argument("--kl-reference", choices=KL_REFERENCES, default="parent",
                        help="with --rounds and --beta above 0, what each round's KL term measures against: parent "
                             "(default: every round stays near the SFT parent) or round-start (the checkpoint the "
                             "round starts from, so the distance allowed adds up over the rounds)")
    parser.add_argument("--audited-answers", type=int, default=AUDITED_ANSWERS,
                        help=f"answers audited per window (default {AUDITED_ANSWERS})")
    parser.add_argument("--heldout-every-checkpoint", action="store_true",
                        help="also score every saved checkpoint on the held-out problems, to show where held-out "
                             "success peaks beside the audits (never used to choose)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the snapshots, reward models and GRPO runs in this folder (default: a temporary "
                             "one, removed at the end)")
    parser.add_argument("--add-to-results", action="store_true",
                        help="keep the other seeds of bench/results/reward_learning.json (run with the same settings) "
                             "and add these, so that seeds run at different times make one table")
    parser.add_argument("--verify-again", action="store_true",
                        help="run nothing: score the recorded answers of these seeds' GRPO runs in --workdir again "
                             "(after a change to that check) and replace that part of their rows in the results file")
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help=f"the results file to write (default {shown_path(RESULTS)}); another file keeps a "
                             "variant's figures (another --beta, say) apart from the benchmark's")
    add_parent_options(parser)
    args = parser.parse_args()
    RESULTS = args.results
    if args.rounds < 1 or args.rounds > args.steps:
        parser.error(f"--rounds {args.rounds}: give from 1 to the run's {args.steps} steps")
    if args.rounds > 1 and args.audit_every:
        parser.error("--audit-every audits the windows of one GRPO run; with --rounds each round is a run of its own "
                     "and each round's checkpoint is scored on the held-out problems: leave --audit-every out")
    if args.audit_every is None:
        args.audit_every = AUDIT_EVERY if args.rounds == 1 else 0
    if args.beta < 0:
        parser.error(f"--beta {args.beta} is negative; give 0 (no KL term) or a positive coefficient such as 0.04")
    if args.audit_every < 0 or args.audited_answers < 1:
        parser.error("--audit-every must be 0 (no audits) or a number of steps, and --audited-answers at least 1")
    if args.heldout_every_checkpoint and args.rounds > 1:
        parser.error("--heldout-every-checkpoint scores the checkpoints one run's audits save; with --rounds every "
                     "round's checkpoint is scored on the held-out problems already: leave it out")
    if args.heldout_every_checkpoint and not args.audit_every:
        parser.error("--heldout-every-checkpoint scores the checkpoints the audits save; with --audit-every 0 none "
                     "is saved: give --audit-every N, or leave --heldout-every-checkpoint out")
    if args.audit_every > args.steps:
        parser.error(f"--audit-every {args.audit_every} is more than the run's {args.steps} steps; no checkpoint "
                     "would be audited: give at most --steps, or 0 for no audits")
    if args.verify_again:
        return verify_again(args)
    if args.add_to_results:
        finished_seeds(args)  # settings that differ from the file's are refused now, not after hours of work

    from training.grpo.ledger import format_steps

    rows = []
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pairwise-reward-learning-") as tmp:
        workdir = args.workdir or Path(tmp)
        heldout = write_tasks(workdir / "heldout.jsonl", "speed", args.heldout, 1000, "heldout")
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for future in [pool.submit(one_seed, workdir, seed, args, heldout) for seed in args.seeds]:
                row = future.result()
                rows.append(row)
                print(f"seed {row['seed']}: reward model accuracy {row['reward_model']['test']['accuracy']:.3f}; "
                      f"held-out success {row['parent']['success_rate']:.3f} -> {row['child']['success_rate']:.3f} "
                      f"({row['gain_points']:+.1f} points)", flush=True)
                if len(rows) < len(args.seeds):  # a long run cut short keeps the seeds it finished
                    write_seeds(args, rows)

    written, rows = write_seeds(args, rows)  # with --add-to-results, the file's other seeds too
    verifier_children = verifier_trained_children(args, rows)
    print()
    print(f"held-out speed: {args.heldout} problems, {args.samples} answers each at temperature "
          f"{RECIPE['temperature']}, scored by {', '.join(rows[0]['scorers'])}; GRPO saw only the reward model")
    print(f"{'seed':<6}{'pairs tr/te':>12}{'RM acc':>8}{'RM 95% interval':>18}{'RM CPU-min':>12}{'r(len)':>8}"
          f"{'parent':>8}{'child':>8}{'gain':>8}{'verifier child':>16}{'behind it':>11}{'GRPO CPU-min':>14}")
    for row in rows:
        test, verifier_child = row["reward_model"]["test"], verifier_children.get(row["seed"])
        behind = "-" if verifier_child is None else f"{100 * (verifier_child - row['child']['success_rate']):+.1f}"
        print(f"{row['seed']:<6}{row['preferences']['train']:>7}/{row['preferences']['test']:<4}"
              f"{test['accuracy']:>8.3f}{str(test['interval']):>18}{row['reward_model']['cpu_minutes']:>12.1f}"
              f"{test['length_correlation']['pearson'] if test['length_correlation']['pearson'] is not None else '-':>8}"
              f"{row['parent']['success_rate']:>8.3f}{row['child']['success_rate']:>8.3f}{row['gain_points']:>+8.1f}"
              f"{'-' if verifier_child is None else f'{verifier_child:.3f}':>16}{behind:>11}"
              f"{row['grpo_cpu_minutes']:>14.1f}")
    reward_met, gain_met = targets_met(rows)
    print(f"target: reward model accuracy >= {TARGET_REWARD_ACCURACY:.2f} within {REWARD_CPU_MINUTES_LIMIT:.0f} "
          f"CPU-minutes, every round: {format_reward_met(rows)}; child >= parent + {TARGET_GAIN_POINTS:.0f} points in "
          f"every seed: {'met' if gain_met else 'NOT met'} (min {min(r['gain_points'] for r in rows):+.1f}, median "
          f"{statistics.median(r['gain_points'] for r in rows):+.1f})")
    if not verifier_children:
        print("verifier child: bench/results/grpo_learning.json holds no run on the same parents and held-out set")
    if any(row.get("audited") for row in rows):
        print(format_audit_choice(rows))
    for row in rows:
        if row.get("rounds"):
            print(f"\n{format_rounds(row)}")
            for one_round in row["rounds"]:
                print(f"seed {row['seed']}, round {one_round['round']}: reward, reward-model score, correct share "
                      "(none: no verifier ran) and length by step")
                print("\n".join(format_steps(one_round["by_step"])[1:]))
                print(format_verified_afterwards(one_round["verified_afterwards"]))
            continue
        print(f"\nseed {row['seed']}: reward, reward-model score, correct share (none: no verifier ran) and length by "
              "step")
        print("\n".join(format_steps(row["by_step"])[1:]))
        print(format_verified_afterwards(row["verified_afterwards"]))
        if row.get("audited"):
            print(format_audited_windows(row["audited"]))

    print(f"wrote {written}")
    return 0


def format_verified_afterwards(afterwards: dict) -> str:
    """The recorded training answers, verified after the run: correct share by steps and the reward model's ranking."""
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


def format_rounds(row: dict) -> str:
    """--rounds: what each round asked, the reward model it trained, and where the policy stood after it."""
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


def format_audit_choice(rows: list[dict]) -> str:
    """The audit-chosen children beside the last checkpoints: the table the +10-point target is read from twice."""
    lines = [f"\n{'seed':<6}{'parent':>8}{'last child':>12}{'gain':>8}{'audit-chosen step':>19}"
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
    met = chosen_gain_met(rows, "audited")
    gains = [(row.get("audited") or {}).get("gain_points") for row in rows]
    if met is not None:
        lines.append(f"target, audit-chosen child >= parent + {TARGET_GAIN_POINTS:.0f} points in every seed: "
                     f"{'met' if met else 'NOT met'} (min {min(gains):+.1f}, median {statistics.median(gains):+.1f})")
    return "\n".join(lines)


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


def verify_again(args) -> int:
    """--verify-again: the after-the-run check of each seed's recorded GRPO answers, computed again from --workdir."""
    if getattr(args, "rounds", 1) > 1:
        raise SystemExit("--verify-again checks single-round runs; a run of --rounds verifies each round as it ends")
    if args.workdir is None or not RESULTS.is_file():
        raise SystemExit("--verify-again needs --workdir (the folder of the runs) and the results file those runs wrote")
    afterwards = {}
    for seed in args.seeds:
        run = args.workdir / f"grpo-rm-{seed}"
        if not (run / "rollouts").is_dir():
            raise SystemExit(f"--verify-again: no recorded run {run} for seed {seed}; run that seed first")
        afterwards[seed] = verified_afterwards(run, training_tasks(seed), split=trip_time)
        print(f"seed {seed}:\n{format_verified_afterwards(afterwards[seed])}")
    with results_locked():
        results = json.loads(RESULTS.read_text())
        rows = {row["seed"]: row for row in results.get("runs", [])}
        if missing := sorted(set(afterwards) - set(rows)):
            raise SystemExit(f"--verify-again: seeds {missing} have no row in {shown_path(RESULTS)}; run them first")
        for seed, figures in afterwards.items():
            rows[seed]["verified_afterwards"] = figures
        print(f"wrote {write_results(RESULTS, results)}")
    return 0


def reward_models_by_round(row: dict) -> list[dict]:
    """Every reward model a seed trained, in order: one a round with --rounds (row["reward_model"] is round 1's),
    else its one."""
    return [one["reward_model"] for one in row["rounds"]] if row.get("rounds") else [row["reward_model"]]


def reward_met_by_round(rows: list[dict]) -> list[bool]:
    """The reward-model target (training.reward_rounds.reward_met_by_round) read over every round of every seed."""
    return reward_rounds.reward_met_by_round([reward_models_by_round(row) for row in rows],
                                             accuracy=TARGET_REWARD_ACCURACY, cpu_minutes=REWARD_CPU_MINUTES_LIMIT)


def targets_met(rows: list[dict]) -> tuple[bool, bool]:
    """(every reward model of every round at the target accuracy within the CPU limit, every child at the target
    gain)."""
    return all(reward_met_by_round(rows)), reward_rounds.gain_met((r["gain_points"] for r in rows),
                                                                   points=TARGET_GAIN_POINTS)


def format_reward_met(rows: list[dict]) -> str:
    """The reward-model target, as a whole and round by round when there are rounds."""
    by_round = reward_met_by_round(rows)
    text = "met" if all(by_round) else "NOT met"
    if len(by_round) > 1:
        text += " (" + ", ".join(f"round {number} {'met' if met else 'NOT met'}"
                                 for number, met in enumerate(by_round, start=1)) + ")"
    return text


def chosen_gain_met(rows: list[dict], choice: str) -> bool | None:
    """The gain target for the children chosen without held-out answers: `choice` "audited" (the audit-chosen
    checkpoint of one run) or "round_choice" (--rounds: training.reward_rounds.chosen_round's round)."""
    return reward_rounds.gain_met(((r.get(choice) or {}).get("gain_points") for r in rows), points=TARGET_GAIN_POINTS)


def results_settings(args) -> dict:
    """What a run's figures depend on besides its seeds (the results file's settings, less "seeds")."""
    return {"parents": "taken from --parents (built by tiny-sft)" if args.parents else "built here",
            "heldout": args.heldout, "samples": args.samples, "threads": args.threads,
            "preference_problems": PREFERENCE_PROBLEMS, "preference_samples": PREFERENCE_SAMPLES,
            "reward_recipe": REWARD_RECIPE, "grpo_recipe": {**RECIPE, "max_steps": args.steps, "beta": args.beta},
            "train_tasks": TRAIN_TASKS, "pairing": args.pairing, "rounds": args.rounds,
            **({"kl_reference": args.kl_reference} if args.rounds > 1 and args.beta > 0 else {}),
            "audits": {"every": args.audit_every, "answers": args.audited_answers} if args.audit_every else None}


def finished_seeds(args) -> list[dict]:
    """--add-to-results: the rows of the results file for seeds this run does not make, or SystemExit in one line
    when the file was written with other settings (its figures would not be comparable)."""
    if not RESULTS.is_file():
        return []
    results = json.loads(RESULTS.read_text())
    settings = {key: value for key, value in results.get("settings", {}).items() if key != "seeds"}
    settings.setdefault("pairing", "random")  # files written before pairings had a name paired at random
    settings.setdefault("audits", None)  # nor were their runs audited
    settings.setdefault("rounds", 1)  # nor asked for preferences more than once
    ours = json.loads(json.dumps(results_settings(args)))
    if settings != ours:
        differs = sorted(key for key in {*settings, *ours} if settings.get(key) != ours.get(key))
        raise SystemExit(f"--add-to-results: {shown_path(RESULTS)} was run with other settings ({', '.join(differs)}); "
                         "run those seeds again with these settings, or leave out --add-to-results")
    return [row for row in results.get("runs", []) if row["seed"] not in args.seeds]


@contextlib.contextmanager
def results_locked():
    """The results file to oneself while it is read and written again (runs of other seeds may write it too)."""
    import fcntl

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(RESULTS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def write_seeds(args, rows: list[dict]) -> tuple[str, list[dict]]:
    """bench/results/reward_learning.json with the seeds finished so far ("complete" once every seed of this run is
    in); with --add-to-results, beside the other seeds the file holds when it is written (read under a lock, so runs
    of different seeds side by side keep each other's). Returns the path shown and every row written."""
    with results_locked():
        others = finished_seeds(args) if args.add_to_results else []
        every = sorted([*others, *rows], key=lambda row: row["seed"])
        reward_met, gain_met = targets_met(every)
        written = write_results(RESULTS, {
            "benchmark": "reward_learning",
            "complete": len(rows) == len(args.seeds),
            "machine": machine(),
            "settings": {"seeds": sorted({*args.seeds, *(row["seed"] for row in others)}), **results_settings(args)},
            "target": {"reward_accuracy": TARGET_REWARD_ACCURACY, "reward_cpu_minutes": REWARD_CPU_MINUTES_LIMIT,
                       "gain_points": TARGET_GAIN_POINTS, "reward_met": reward_met,
                       "reward_met_by_round": reward_met_by_round(every), "gain_met": gain_met,
                       "audited_gain_met": chosen_gain_met(every, "audited"),
                       "chosen_round_gain_met": chosen_gain_met(every, "round_choice")},
            "verifier_trained_children": verifier_trained_children(args, every),
            "runs": every,
        })
    return written, every

if __name__ == "__main__":
    sys.exit(main())
