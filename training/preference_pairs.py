"""Preference pairs where the truth is known: a policy's own answers to verifiable problems, one correct and one
wrong answer to the same prompt (the verifier standing in for a careful reviewer), paired, split and written as a
snapshot as the app exports one. bench/reward_learning.py and bench/reward_pairing.py train reward models on them;
a team with verifiable tasks can make the same pairs from its own checkpoint."""

import random
from pathlib import Path

PAIRINGS = ("random", "length-balanced")
TEST_SHARE = 0.1
PREFERENCE_PROBLEMS = 800   # held-in problems the policy answers to make pairs
PREFERENCE_SAMPLES = 4

Pair = tuple[dict, str, str]              # (task, chosen, rejected)
SplitPair = tuple[str, dict, str, str]    # (split, task, chosen, rejected)


def sampled_preferences(policy: Path, *, seed: int, threads: int, max_new_tokens: int,
                        problem_seed: int | None = None, problems: int = PREFERENCE_PROBLEMS,
                        samples: int = PREFERENCE_SAMPLES) -> dict:
    """The policy's answers to `problems` held-in speed problems, `samples` each at temperature 1, judged by the
    verifier: {"problems", "distinct_prompts", "answers", "correct_answers", "candidates": [(task, correct answers,
    wrong answers)] for each distinct prompt with both kinds}. One sample serves every pairing of it
    (write_preferences). `problem_seed` (default 5000 + seed) draws the problems: a later round asks new ones."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from training.generation import generate_completions
    from training.task_families import make_tasks
    from training.verifiers.task_verifier import TaskVerifier

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    tasks = make_tasks("speed", n=problems, seed=5000 + seed if problem_seed is None else problem_seed,
                       variant="train")
    model = AutoModelForCausalLM.from_pretrained(policy)
    tokenizer = AutoTokenizer.from_pretrained(policy)
    answers = generate_completions(model, tokenizer, [t["prompt"] for t in tasks], samples=samples,
                                   temperature=1.0, max_new_tokens=max_new_tokens)
    with TaskVerifier(workers=1) as verifier:
        verdicts = verifier.verify_many([(task, answer) for task, sampled in zip(tasks, answers, strict=True)
                                         for answer in sampled])
    candidates, seen_prompts = [], set()
    for index, task in enumerate(tasks):
        if task["prompt"] in seen_prompts:  # a prompt drawn twice is one prompt, on one side of the split
            continue
        seen_prompts.add(task["prompt"])
        judged = list(zip(answers[index], verdicts[index * samples:(index + 1) * samples], strict=True))
        right = [answer for answer, verdict in judged if verdict.status == "correct"]
        wrong = [answer for answer, verdict in judged if verdict.status == "wrong"]
        if right and wrong:
            candidates.append((task, right, wrong))
    return {"problems": len(tasks), "distinct_prompts": len(seen_prompts), "answers": len(verdicts),
            "correct_answers": sum(verdict.status == "correct" for verdict in verdicts), "candidates": candidates}


def correct_share(sampled: dict) -> float:
    """The share of sampled_preferences' answers the verifier found correct."""
    return round(sampled["correct_answers"] / sampled["answers"], 4)


def preference_pairs(candidates: list[tuple[dict, list[str], list[str]]], rng: random.Random, *,
                     pairing: str) -> tuple[list[Pair], dict]:
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


def split_pairs(sampled: dict, *, rng: random.Random, pairing: str,
                test_share: float = TEST_SHARE) -> tuple[list[SplitPair], dict]:
    """sampled_preferences paired by `pairing` and split: ([(split, task, chosen, rejected)], counts). The first
    `test_share` of the shuffled pairs (at least one, when there is a pair) is the test split."""
    candidates = sampled["candidates"]
    pairs, lengths = preference_pairs(candidates, rng, pairing=pairing)
    test = min(len(pairs), max(1, round(test_share * len(pairs))))  # a later round may find no pair at all
    rows = [("test" if number < test else "train", task, chosen, rejected)
            for number, (task, chosen, rejected) in enumerate(pairs)]
    return rows, {"problems": sampled["problems"], "distinct_prompts": sampled["distinct_prompts"],
                  "pairs": len(pairs), "train": len(pairs) - test, "test": test,
                  "prompts_without_both": sampled["distinct_prompts"] - len(candidates), "pairing": pairing, **lengths}


def write_preference_snapshot(out: Path, rows: list[SplitPair], *, seed: int, pairing: str) -> None:
    """(split, task, chosen, rejected) rows as a snapshot, as the app exports one."""
    from training.snapshot import SnapshotWriter

    with SnapshotWriter(out, project="reward-learning", created_at="2026-01-01T00:00:00Z", criteria_version=1,
                        filters={"pairs": "parent's correct vs wrong answer", "pairing": pairing, "seed": seed}) as writer:
        for split, task, chosen, rejected in rows:
            writer.add_pair(split, prompt=[{"role": "user", "content": task["prompt"]}], chosen=chosen,
                            rejected=rejected, meta={"task_id": task["task_id"]})


def write_preferences(out: Path, sampled: dict, *, seed: int, pairing: str, test_share: float = TEST_SHARE) -> dict:
    """sampled_preferences paired by `pairing` (preference_pairs, drawn under `seed`) as a snapshot; returns counts."""
    rows, counts = split_pairs(sampled, rng=random.Random(seed), pairing=pairing, test_share=test_share)
    write_preference_snapshot(out, rows, seed=seed, pairing=pairing)
    return counts


def preference_snapshot(out: Path, policy: Path, *, seed: int, threads: int, max_new_tokens: int,
                        pairing: str = "random", test_share: float = TEST_SHARE) -> dict:
    """Pairs of the policy's own answers (one correct, one wrong, by the verifier) as a snapshot; returns counts.
    `test_share` 1.0 puts every pair in the test split (an evaluation set)."""
    sampled = sampled_preferences(policy, seed=seed, threads=threads, max_new_tokens=max_new_tokens)
    return write_preferences(out, sampled, seed=seed, pairing=pairing, test_share=test_share)
