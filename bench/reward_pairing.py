"""Does pairing by length teach a reward model correctness instead of length? Two reward models, one evaluation set.

From one parent (a tiny-sft checkpoint taught the classic wrong method on most speed problems, as
bench/grpo_learning.py's parents are), for each seed:

1. two preference snapshots from one sample of the parent's answers (training/preference_pairs.py's
   sampled_preferences, then write_preferences for each pairing):
   `random` pairs (a correct and a wrong answer drawn at random: the chosen one is mostly the shorter) and
   `length-balanced` pairs (closest in length, as many with the chosen answer shorter as longer);
2. a reward model on each (bench/reward_learning.py's REWARD_RECIPE, `python -m training reward`);
3. both reward models scored on one evaluation set of other problems, paired length-balanced, all of it test
   (`python -m training reward-eval`'s figures): accuracy with its 95% interval, and separately where the chosen
   answer is the shorter and the longer one. A model that learned "shorter wins" is right on the first and wrong
   on the second; one that learned correctness is right on both.

    python bench/reward_pairing.py --parent DIR [--seeds 0] [--threads 2] [--workdir DIR]

Build a parent with `python -m training tiny-sft --out DIR --misconception-share 0.8` (bench/grpo_learning.py's
parents use --steps 5000; fewer steps make a weaker parent that writes fewer correct answers to pair). Prints a table
and writes bench/results/reward_pairing.json.
"""

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench and training

from bench.common import machine, results_path, utc_timestamp, write_results
from bench.grpo_learning import RECIPE, run_training
from bench.reward_learning import REWARD_RECIPE
from training.preference_pairs import PAIRINGS, preference_snapshot, sampled_preferences, write_preferences

RESULTS = results_path("reward_pairing")
EVALUATION_SEED_OFFSET = 9000  # the evaluation set's problems: another stream than the training pairs'


def reward_model(workdir: Path, parent: Path, snapshot: Path, *, name: str, seed: int, threads: int) -> tuple[Path, float]:
    """A reward model trained on `snapshot` from `parent`: its checkpoint and the CPU minutes it took."""
    import yaml

    run = workdir / f"reward-{name}"
    config = workdir / f"reward-{name}.yaml"
    config.write_text(yaml.safe_dump({**REWARD_RECIPE, "base_checkpoint": str(parent), "snapshot": str(snapshot),
                                      "output_dir": str(run), "seed": seed, "torch_threads": threads}))
    _, cpu = run_training("reward", config, threads)
    return run / "checkpoint", cpu / 60


def one_seed(workdir: Path, parent: Path, seed: int, threads: int) -> dict:
    from training.reward_eval import evaluate_rewards

    evaluation = workdir / f"evaluation-{seed}"
    evaluation_counts = preference_snapshot(evaluation, parent, seed=EVALUATION_SEED_OFFSET + seed, threads=threads,
                                            pairing="length-balanced", test_share=1.0,
                                            max_new_tokens=RECIPE["max_completion_length"])
    row = {"seed": seed, "evaluation_set": evaluation_counts, "reward_models": {}}
    sampled = sampled_preferences(parent, seed=seed, threads=threads,  # both pairings pair the same answers
                                  max_new_tokens=RECIPE["max_completion_length"])
    for pairing in PAIRINGS:
        snapshot = workdir / f"preferences-{pairing}-{seed}"
        counts = write_preferences(snapshot, sampled, seed=seed, pairing=pairing)
        checkpoint, cpu_minutes = reward_model(workdir, parent, snapshot, name=f"{pairing}-{seed}", seed=seed,
                                               threads=threads)
        own = evaluate_rewards(reward_checkpoint=str(checkpoint), snapshot=str(snapshot))["reward_model"]["test"]
        held_out = evaluate_rewards(reward_checkpoint=str(checkpoint), snapshot=str(evaluation))["reward_model"]["test"]
        row["reward_models"][pairing] = {"preferences": counts, "cpu_minutes": round(cpu_minutes, 2),
                                         "own_test_split": own, "evaluation_set": held_out}
    return row


def figure(block: dict | None) -> str:
    if not block or block.get("accuracy") is None:
        return "-"
    low, high = block["interval"]
    return f"{block['accuracy']:.3f} [{low:.2f}, {high:.2f}] n={block['n']}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=Path, required=True, help="a tiny-sft checkpoint (see above)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the snapshots and reward models here")
    args = parser.parse_args()
    if not (args.parent / "config.json").is_file():
        print(f"error: --parent {args.parent} is not a checkpoint folder (no config.json); build one with python -m "
              f"training tiny-sft --out {args.parent} --misconception-share 0.8", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="pairwise-reward-pairing-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        rows = [one_seed(workdir, args.parent, seed, args.threads) for seed in args.seeds]
    print(f"{'seed':<5}{'pairing':<17}{'pairs tr/te':>12}{'chosen shorter':>16}  "
          f"{'evaluation set: all':<34}{'chosen shorter':<34}{'chosen longer':<34}{'r(len)':>7}")
    for row in rows:
        for pairing, block in row["reward_models"].items():
            prefs, held_out = block["preferences"], block["evaluation_set"]
            share = prefs["chosen_shorter"] / max(1, prefs["pairs"])
            print(f"{row['seed']:<5}{pairing:<17}{prefs['train']:>7}/{prefs['test']:<4}{share:>16.2f}  "
                  f"{figure(held_out):<34}{figure(held_out and held_out['chosen_shorter']):<34}"
                  f"{figure(held_out and held_out['chosen_longer']):<34}"
                  f"{held_out['length_correlation']['pearson'] if held_out else '-':>7}")
        counts = row["evaluation_set"]
        print(f"      evaluation set: {counts['pairs']} pairs ({counts['chosen_shorter']} chosen shorter, "
              f"{counts['chosen_longer']} longer, {counts['equal_length']} equal)")
    written = write_results(RESULTS, {"benchmark": "reward_pairing", "parent": str(args.parent),
                                      "reward_recipe": REWARD_RECIPE, "runs": rows, "machine": machine(),
                                      "created_at": utc_timestamp()})
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
