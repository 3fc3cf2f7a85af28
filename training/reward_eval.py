"""`python -m training reward-eval`: a reward model on a snapshot's test split, beside a DPO child and the humans.

Three figures on the same test rows, as a table and as JSON:

- the reward model's accuracy (chosen scored above rejected) with a 95% Wilson interval, the accuracy when the
  chosen answer is the shorter or the longer one, and how much the reward follows answer length: the figures
  `python -m training reward` prints after training, from the same code (training.reward.score_test_split);
- with --dpo-checkpoint, the same figures for a DPO child's implicit reward
  r = beta * (log pi(answer | prompt) - log pi_ref(answer | prompt)), its log-probabilities taken as
  `python -m training dpo` takes them (training.dpo.pair_logps);
- the human ceiling: how often one reviewer agrees with the others (`human_ceiling`: AlpacaFarm's human
  agreement, each vote against the mode of the others), which no model trained on these votes can be expected to
  beat by much.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from types import SimpleNamespace

from training.errors import PairwiseInputError
from training.reward_model_scorer import DEFAULT_MAX_LENGTH  # RewardConfig's and DPOConfig's default
from training.run_folder import checkpoint_parent_record, checkpoint_run_record

REWARD_EVAL_FORMAT = "pairwise.reward_eval/1"
CEILING_MIN_JUDGMENTS = 2  # leaving one vote out must leave at least one other to agree with
CHOICES = ("a", "b", "tie", "both_bad")
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
DEFAULT_BATCH_SIZE = 8
CEILING_DEFINITION = ("human agreement as AlpacaFarm measures it (Dubois et al. 2023, 'AlpacaFarm: A Simulation "
                      "Framework for Methods that Learn from Human Feedback'; alpaca_eval's leave-one-out agreement): "
                      "each vote held out in turn against the mode of the pair's other votes, ties between modes "
                      "broken at random, taken here as the expectation over that coin")
CEILING_NOTES = [
    "each vote of a pair (a, b, tie or both_bad) is held out in turn and compared with the mode of the other votes; "
    "when k choices share the top count it agrees with probability 1/k (the expectation of a random tie break, so "
    "the figure needs no seed)",
    "agreement is averaged over a pair's votes, then over pairs; rows with fewer than 2 judgments are counted "
    "(pairs_too_few_judgments) and left out",
    "a 2-1 pair scores 1/3 (each majority voter meets a 1-1 tie: 1/2; the minority voter meets the majority: 0), "
    "a unanimous pair 1",
]
CEILING_INTERVAL = (f"percentile bootstrap over pairs, 95%, {BOOTSTRAP_RESAMPLES} resamples, "
                    f"numpy seed {BOOTSTRAP_SEED}")


# --- the human ceiling ----------------------------------------------------------------------------------


def pair_agreement(votes: dict[str, int]) -> float:
    """Expected share of a pair's votes that match the mode of the others, each held out in turn (CEILING_NOTES)."""
    counts = {choice: int(votes.get(choice, 0) or 0) for choice in CHOICES}
    total = sum(counts.values())
    if total < CEILING_MIN_JUDGMENTS:
        raise ValueError(f"a pair needs {CEILING_MIN_JUDGMENTS} or more votes to hold one out, got {total}")
    agreeing = 0.0
    for held_out, count in counts.items():
        if count:
            others = {**counts, held_out: count - 1}
            top = max(others.values())
            modes = [choice for choice, n in others.items() if n == top]
            if held_out in modes:
                agreeing += count / len(modes)  # every vote for this choice sees the same others
    return agreeing / total


def _judgments(meta: dict) -> int:
    votes = meta.get("votes") if isinstance(meta, dict) else None
    if not isinstance(votes, dict):
        return 0
    return sum(int(votes.get(choice, 0) or 0) for choice in CHOICES)


def human_ceiling(votes_per_pair: list[dict[str, int] | None], *, resamples: int = BOOTSTRAP_RESAMPLES,
                  seed: int = BOOTSTRAP_SEED) -> dict:
    """Leave-one-out agreement of reviewers (CEILING_DEFINITION) over pairs with 2 or more votes, with a bootstrap
    interval over pairs. A None (or a dict with fewer than 2 votes) is counted and left out."""
    import numpy as np

    shares, too_few, votes_left_out = [], 0, 0
    for votes in votes_per_pair:
        judgments = _judgments({"votes": votes})
        if judgments < CEILING_MIN_JUDGMENTS:
            too_few += 1
            continue
        shares.append(pair_agreement(votes))
        votes_left_out += judgments
    result = {
        "pairs": len(shares),
        "pairs_too_few_judgments": too_few,
        "votes_left_out": votes_left_out,
        "agreement": None,
        "interval": None,
        "interval_method": CEILING_INTERVAL,
        "definition": CEILING_DEFINITION,
        "notes": CEILING_NOTES,
    }
    if shares:
        values = np.asarray(shares, dtype=np.float64)
        rng = np.random.default_rng(seed)
        means = values[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)
        low, high = np.quantile(means, [0.025, 0.975])
        result["agreement"] = round(float(values.mean()), 4)
        result["interval"] = [round(float(low), 4), round(float(high), 4)]
    return result


# --- inputs ---------------------------------------------------------------------------------------------


def load_test_rows(snapshot: str) -> list[dict]:
    from training import snapshot as snapshot_format

    manifest = snapshot_format.verify(snapshot)  # a SnapshotError is the CLI's one line
    has_file = any(name.startswith("test.") for name in manifest["files"])
    if not has_file or not manifest.get("counts", {}).get("test", 1):
        raise PairwiseInputError(f"snapshot {snapshot} has no test split; export it with --test-ratio above 0")
    rows = list(snapshot_format.iter_rows(snapshot, "test", manifest=manifest))
    if not rows:
        raise PairwiseInputError(f"snapshot {snapshot} has no test split; export it with --test-ratio above 0")
    return rows


def dpo_settings(checkpoint: Path, *, reference: str | None, beta: float | None) -> tuple[Path, float, int | None]:
    """(reference folder, beta, max_length) for a DPO child: given ones first, else its run's records."""
    from training.run_folder import check_causal_lm_checkpoint

    record = checkpoint_run_record(checkpoint) or {}
    config = record.get("config") if record.get("kind") == "dpo" else None
    config = config if isinstance(config, dict) else {}
    if reference is None:
        parent = (checkpoint_parent_record(checkpoint) or {}).get("parent") or {}
        reference = parent.get("path")
        if not reference:
            raise PairwiseInputError(f"--dpo-checkpoint {checkpoint} has no parent.json naming its base; give the "
                                     "DPO run's base checkpoint with --dpo-reference")
    if beta is None:
        beta = config.get("beta")
        if not isinstance(beta, int | float) or isinstance(beta, bool):
            raise PairwiseInputError(f"--dpo-checkpoint {checkpoint}: no DPO run.json beside it tells its beta; "
                                     "give the beta it was trained with, e.g. --beta 0.1")
    if not beta > 0:
        raise PairwiseInputError(f"--beta must be above 0, got {beta}")
    reference_path = check_causal_lm_checkpoint(reference, key="--dpo-reference")
    max_length = config.get("max_length", DEFAULT_MAX_LENGTH)
    return reference_path, float(beta), max_length if isinstance(max_length, int) else None


# --- scoring --------------------------------------------------------------------------------------------


def score_reward_model(checkpoint: Path, rows: list[dict], *, batch_size: int) -> tuple[dict | None, int | None]:
    """training.reward's test-split figures for a saved classifier, with the max_length its run trained under."""
    from training.reward import score_test_split
    from training.reward_model_scorer import load_reward_model, trained_max_length

    settings = SimpleNamespace(max_length=trained_max_length(checkpoint), per_device_eval_batch_size=batch_size)
    model, tokenizer = load_reward_model(checkpoint)
    try:
        return score_test_split(model, tokenizer, rows, settings), settings.max_length
    finally:
        del model
        gc.collect()


def _logps(checkpoint: Path, tokenized: list[dict], *, batch_size: int, pad_id: int) -> list[tuple[float, float]]:
    from transformers import AutoModelForCausalLM

    from training.dpo import pair_logps

    model = AutoModelForCausalLM.from_pretrained(checkpoint, local_files_only=True)
    try:
        return pair_logps(model, tokenized, batch_size=batch_size, pad_id=pad_id)
    finally:
        del model
        gc.collect()


def score_dpo_child(checkpoint: Path, reference: Path, rows: list[dict], *, beta: float, max_length: int | None,
                    batch_size: int) -> dict:
    """The DPO child's implicit reward on the test rows, as reward_summary figures, plus dpo's own summary
    (preference accuracy, mean implicit-reward margin). Log-probabilities as `python -m training dpo` takes them."""
    from transformers import AutoTokenizer

    from training.dpo import preference_summary, tokenize_pair
    from training.reward import ScoredPair, answer_text, reward_summary

    tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenized = [tokenize_pair(tokenizer, row, max_length) for row in rows]
    policy = _logps(checkpoint, tokenized, batch_size=batch_size, pad_id=tokenizer.pad_token_id)
    ref = _logps(reference, tokenized, batch_size=batch_size, pad_id=tokenizer.pad_token_id)
    pairs = [ScoredPair(beta * (pc - rc), beta * (pr - rr), len(answer_text(row["chosen"])),
                        len(answer_text(row["rejected"])))
             for row, (pc, pr), (rc, rr) in zip(rows, policy, ref, strict=True)]
    summary = reward_summary(pairs, left_out=0)
    dpo = preference_summary(policy, ref, beta)
    summary.pop("left_out_over_max_length")
    return {**summary, "beta": beta, "max_length": max_length,
            "preference_accuracy": dpo["preference_accuracy"]}


def evaluate_rewards(*, reward_checkpoint: str, snapshot: str, dpo_checkpoint: str | None = None,
                     dpo_reference: str | None = None, beta: float | None = None,
                     batch_size: int = DEFAULT_BATCH_SIZE, log=None) -> dict:
    """The figures of the module docstring as one JSON-ready dict. Every input is checked before any model loads."""
    from training.run_folder import check_causal_lm_checkpoint, check_reward_model_checkpoint

    log = log or (lambda line: None)
    if batch_size < 1:
        raise PairwiseInputError(f"--batch-size must be at least 1, got {batch_size}")
    # A causal LM would be loaded with a new, untrained score head: refused.
    reward_path = check_reward_model_checkpoint(reward_checkpoint, key="--reward-checkpoint")
    dpo_path = reference = None
    if dpo_checkpoint is not None:
        dpo_path = check_causal_lm_checkpoint(dpo_checkpoint, key="--dpo-checkpoint")
        reference, beta, dpo_max_length = dpo_settings(dpo_path, reference=dpo_reference, beta=beta)
    elif dpo_reference is not None or beta is not None:
        raise PairwiseInputError("--dpo-reference and --beta go with --dpo-checkpoint; give the DPO child too, "
                                 "or leave them out")
    rows = load_test_rows(snapshot)

    log(f"{reward_path}: scoring {len(rows)} test pairs")
    reward, reward_max_length = score_reward_model(reward_path, rows, batch_size=batch_size)
    result = {
        "format": REWARD_EVAL_FORMAT,
        "snapshot": {"path": str(Path(snapshot).resolve()), "test_pairs": len(rows)},
        "accuracy": "share of test pairs whose chosen answer gets the higher reward; equal rewards count as wrong",
        "reward_model": {
            "checkpoint": str(reward_path), "max_length": reward_max_length, "test": reward,
            "note": None if reward else f"not scored: every test pair is longer than max_length "
                                        f"({reward_max_length} tokens)",
        },
        "dpo": None,
        "human_ceiling": human_ceiling([row["meta"].get("votes") if isinstance(row["meta"], dict) else None
                                        for row in rows]),
    }
    if dpo_path is not None:
        log(f"{dpo_path}: implicit reward against {reference} on {len(rows)} test pairs")
        result["dpo"] = {"checkpoint": str(dpo_path), "reference": str(reference),
                         "test": score_dpo_child(dpo_path, reference, rows, beta=beta, max_length=dpo_max_length,
                                                 batch_size=batch_size)}
    return result


# --- output ---------------------------------------------------------------------------------------------


def _figure(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


COLUMN = 30  # one model's figures: pairs, value, 95% interval


def _cell(block: dict | None) -> str:
    if block is None or block.get("accuracy") is None:
        return f"{'-':>11}".ljust(COLUMN)
    low, high = block["interval"]
    return f"{block['n']:>5}  {_figure(block['accuracy']):>6}  [{low:.3f}, {high:.3f}]".ljust(COLUMN)


def format_reward_eval_table(result: dict) -> str:
    reward = result["reward_model"]["test"]
    dpo = result["dpo"]["test"] if result["dpo"] else None
    ceiling = result["human_ceiling"]
    columns = [("reward model", reward)] + ([("DPO implicit reward", dpo)] if result["dpo"] else [])
    lines = [f"reward-eval: {result['snapshot']['test_pairs']} test pairs of {result['snapshot']['path']}",
             "accuracy: chosen scored above rejected; interval: 95% Wilson over pairs",
             "",
             (f"{'':34}" + "".join(f"  {name:<{COLUMN}}" for name, _ in columns)).rstrip(),
             (f"{'':34}" + "".join(f"  {'pairs   value  95% interval':<{COLUMN}}" for _ in columns)).rstrip()]
    for key, label in ((None, "accuracy"), ("chosen_shorter", "accuracy, chosen answer shorter"),
                       ("chosen_longer", "accuracy, chosen answer longer")):
        cells = [_cell(block if key is None or block is None else block[key]) for _, block in columns]
        lines.append((f"{label:34}" + "".join(f"  {cell}" for cell in cells)).rstrip())
    lines.append(f"{'mean margin (chosen - rejected)':34}" + "".join(
        f"  {_figure(block['mean_margin'] if block else None):>13}".ljust(COLUMN + 2) for _, block in columns).rstrip())
    lines.append(f"{'reward vs length (Pearson r)':34}" + "".join(
        f"  {_figure(block['length_correlation']['pearson'] if block else None):>13}".ljust(COLUMN + 2)
        for _, block in columns).rstrip())
    if reward is None:
        lines.append(result["reward_model"]["note"])
    elif reward["left_out_over_max_length"]:
        lines.append(f"reward model: {reward['left_out_over_max_length']} pairs over max_length left out")
    if dpo is not None:
        lines.append(f"DPO: beta {dpo['beta']:g}, reference {result['dpo']['reference']}; preference accuracy "
                     f"(log-likelihood) {_figure(dpo['preference_accuracy'])}")
    lines.append("")
    if ceiling["agreement"] is None:
        lines.append(f"human ceiling: -  (no test pair has {CEILING_MIN_JUDGMENTS} or more judgments; "
                     f"{ceiling['pairs_too_few_judgments']} pairs have fewer)")
    else:
        low, high = ceiling["interval"]
        lines.append(f"human ceiling (each vote against the mode of the others): {ceiling['agreement']:.3f} "
                     f"[{low:.3f}, {high:.3f}] over {ceiling['pairs']} pairs, bootstrap 95%; "
                     f"{ceiling['pairs_too_few_judgments']} pairs with fewer than {CEILING_MIN_JUDGMENTS} "
                     "judgments left out")
    return "\n".join(lines)


def reward_eval_main(args) -> int:
    """`python -m training reward-eval --reward-checkpoint R [--dpo-checkpoint D ...] --snapshot S [--out F]`."""
    from training.run_folder import write_json_atomic

    out = Path(args.out) if args.out else None
    if out is not None and (out.is_dir() or not out.parent.is_dir()):
        raise PairwiseInputError(f"--out {out}: give a file path in an existing folder, e.g. results/reward.json")
    result = evaluate_rewards(reward_checkpoint=args.reward_checkpoint, snapshot=args.snapshot,
                              dpo_checkpoint=args.dpo_checkpoint, dpo_reference=args.dpo_reference,
                              beta=args.beta, batch_size=args.batch_size,
                              log=lambda line: print(line, file=sys.stderr, flush=True))
    print(format_reward_eval_table(result))
    if out is not None:
        write_json_atomic(out, result)
        print(f"wrote {out}", file=sys.stderr)
    return 0
