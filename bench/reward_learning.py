"""Can people's preferences stand in for a verifier? Preferences -> reward model -> GRPO -> held-out verifier success.

The loop where the truth is known (training/reward_learning.py), on CPU from bench/grpo_learning.py's parents, beside
its verifier-trained children. Targets: the reward model within 10 CPU-minutes at test accuracy >= 85%; the child >=
parent + 10 held-out points in every seed. What each figure means: docs/benchmarks/reward_learning.md.

    python bench/reward_learning.py [--seeds 0 1 2] [--parents DIR] [--jobs 3] [--threads 1] [--steps N] [--workdir DIR]
                                    [--pairing random|length-balanced] [--beta B] [--audit-every N] [--audited-answers K]
                                    [--heldout-every-checkpoint] [--rounds R] [--kl-reference parent|round-start]
                                    [--results FILE] [--add-to-results] [--verify-again]

Prints a table and the ledger's per-step reward and length, and writes bench/results/reward_learning.json.
"""

import argparse
import contextlib
import json
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench and training

from bench import grpo_learning as grpo
from bench.common import machine, results_path, shown_path, write_results
from training import preference_pairs as pairs
from training import reward_learning as loop
from training import reward_model_check as check
from training.grpo.ledger import format_steps
from training.reward_rounds import format_rounds, format_targets, targets

RESULTS = results_path("reward_learning")
VERIFIER_RESULTS = results_path("grpo_learning")
TARGETS = {"accuracy": 0.85, "cpu_minutes": 10.0, "points": 10.0}
AUDIT_EVERY = 40            # steps between saved checkpoints, each audited on the answers of the steps before it
AUDITED_ANSWERS = 32        # answers audited per window (the app's audit batch size)
# The reward model's recipe (TRL's RewardConfig names): the parent's body with a new score head. On a 320-step
# parent's own 168 train pairs, 2 epochs reached 0.63 test accuracy and 8 epochs 0.79 (19 test pairs) in about
# 1 CPU-minute; 3e-4 did worse (0.68) than 1e-4.
REWARD_RECIPE = {"learning_rate": 1e-4, "lr_scheduler_type": "constant", "num_train_epochs": 8,
                 "per_device_train_batch_size": 16, "per_device_eval_batch_size": 32, "max_length": 256,
                 "logging_steps": 10, "save_strategy": "no", "use_cpu": True, "report_to": ["none"]}


def loop_settings(args) -> loop.LoopSettings:
    return loop.LoopSettings(
        grpo_recipe={**grpo.RECIPE, "max_steps": args.steps, "beta": args.beta}, reward_recipe=REWARD_RECIPE,
        run_training=grpo.run_training, train_tasks=grpo.TRAIN_TASKS, threads=args.threads, samples=args.samples,
        pairing=args.pairing, audit_every=args.audit_every, audited_answers=args.audited_answers,
        heldout_every_checkpoint=args.heldout_every_checkpoint, rounds=args.rounds, kl_reference=args.kl_reference)


def one_seed(workdir: Path, seed: int, args, heldout: list[dict]) -> dict:
    sft, _ = grpo.parent_checkpoint(workdir, seed, args)
    return loop.one_seed(workdir, seed, sft, heldout, loop_settings(args))


def results_settings(args) -> dict:
    """What a run's figures depend on besides its seeds (the results file's settings, less "seeds")."""
    return {"parents": "taken from --parents (built by tiny-sft)" if args.parents else "built here",
            "heldout": args.heldout, "samples": args.samples, "threads": args.threads,
            "preference_problems": pairs.PREFERENCE_PROBLEMS, "preference_samples": pairs.PREFERENCE_SAMPLES,
            "reward_recipe": REWARD_RECIPE, "grpo_recipe": {**grpo.RECIPE, "max_steps": args.steps, "beta": args.beta},
            "train_tasks": grpo.TRAIN_TASKS, "pairing": args.pairing, "rounds": args.rounds,
            **({"kl_reference": args.kl_reference} if args.rounds > 1 and args.beta > 0 else {}),
            "audits": {"every": args.audit_every, "answers": args.audited_answers} if args.audit_every else None}


def finished_seeds(args) -> list[dict]:
    """--add-to-results: the results file's rows for seeds this run does not make; refused in one line when the
    file was written with other settings (its figures would not be comparable)."""
    if not RESULTS.is_file():
        return []
    results = json.loads(RESULTS.read_text())
    if differs := loop.settings_that_differ(results.get("settings", {}), results_settings(args)):
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


def verifier_children(args, rows: list[dict]) -> dict[int, float]:
    return (loop.verifier_trained_children(json.loads(VERIFIER_RESULTS.read_text()), rows, heldout=args.heldout,
                                           samples=args.samples, parent_recipe=grpo.PARENT_RECIPE)
            if VERIFIER_RESULTS.is_file() else {})


def write_seeds(args, rows: list[dict]) -> tuple[str, list[dict]]:
    """The results file with the seeds finished so far ("complete" once every seed of this run is in); with
    --add-to-results, beside the file's other seeds when it is written (read under a lock). Returns the path shown
    and every row written."""
    with results_locked():
        others = finished_seeds(args) if args.add_to_results else []
        every = sorted([*others, *rows], key=lambda row: row["seed"])
        written = write_results(RESULTS, {
            "benchmark": "reward_learning", "complete": len(rows) == len(args.seeds), "machine": machine(),
            "settings": {"seeds": sorted({*args.seeds, *(row["seed"] for row in others)}), **results_settings(args)},
            "target": targets(every, **TARGETS), "verifier_trained_children": verifier_children(args, every),
            "runs": every})
    return written, every


def verify_again(args) -> int:
    """--verify-again: the after-the-run check of each seed's recorded GRPO answers, computed again from --workdir."""
    if args.rounds > 1:
        raise SystemExit("--verify-again checks single-round runs; a run of --rounds verifies each round as it ends")
    if args.workdir is None or not RESULTS.is_file():
        raise SystemExit("--verify-again needs --workdir (the folder of the runs) and the results file those runs wrote")
    afterwards = loop.verified_again(args.workdir, args.seeds, grpo.TRAIN_TASKS)
    for seed, figures in afterwards.items():
        print(f"seed {seed}:\n{check.format_verified_afterwards(figures)}")
    with results_locked():
        results = json.loads(RESULTS.read_text())
        rows = {row["seed"]: row for row in results.get("runs", [])}
        if missing := sorted(set(afterwards) - set(rows)):
            raise SystemExit(f"--verify-again: seeds {missing} have no row in {shown_path(RESULTS)}; run them first")
        for seed, figures in afterwards.items():
            rows[seed]["verified_afterwards"] = figures
        print(f"wrote {write_results(RESULTS, results)}")
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    option = parser.add_argument
    option("--seeds", type=int, nargs="+", default=[0, 1, 2])
    option("--heldout", type=int, default=100, help="held-out problems (default 100)")
    option("--samples", type=int, default=4, help="sampled answers per held-out problem (default 4)")
    option("--steps", type=int, default=grpo.RECIPE["max_steps"], help="GRPO steps (default: the recipe's)")
    option("--beta", type=float, default=grpo.RECIPE["beta"],
           help="TRL's KL coefficient (default: the recipe's 0.0; above 0 holds the policy near the parent)")
    option("--jobs", type=int, default=1, help="seeds run side by side (default 1)")
    option("--pairing", choices=pairs.PAIRINGS, default="random",
           help="how each prompt's correct and wrong answer are paired (length-balanced: closest in length, and as "
                "many pairs with the chosen answer shorter as longer)")
    option("--audit-every", type=int, default=None,
           help=f"save a checkpoint every N GRPO steps and audit each window's top-scored answers, the verifier "
                f"standing in for reviewers (default {AUDIT_EVERY}; 0: no audits; none with --rounds)")
    option("--rounds", type=int, default=1,
           help="ask for preferences this many times in all, each round on the policy so far, with a new reward "
                "model and the next share of the GRPO steps (default 1)")
    option("--kl-reference", choices=loop.KL_REFERENCES, default="parent",
           help="with --rounds and --beta above 0, what each round's KL term measures against: the SFT parent "
                "(default) or the checkpoint the round starts from")
    option("--audited-answers", type=int, default=AUDITED_ANSWERS,
           help=f"answers audited per window (default {AUDITED_ANSWERS})")
    option("--heldout-every-checkpoint", action="store_true",
           help="also score every audited checkpoint on the held-out problems (never used to choose)")
    option("--workdir", type=Path, default=None, help="keep the runs in this folder (default: a temporary one)")
    option("--add-to-results", action="store_true",
           help="keep the results file's other seeds (run with the same settings) and add these")
    option("--verify-again", action="store_true",
           help="run nothing: check the recorded answers of these seeds' runs in --workdir again and replace that "
                "part of their rows in the results file")
    option("--results", type=Path, default=RESULTS, help=f"the results file to write (default {shown_path(RESULTS)})")
    grpo.add_parent_options(parser)
    args = parser.parse_args()
    if args.audit_every is None:
        args.audit_every = AUDIT_EVERY if args.rounds == 1 else 0
    if refused := loop.refused_settings(loop_settings(args)):
        parser.error(refused)
    return args


def main() -> int:
    global RESULTS
    args = parse_args()
    RESULTS = args.results
    if args.verify_again:
        return verify_again(args)
    if args.add_to_results:
        finished_seeds(args)  # settings that differ from the file's are refused now, not after hours of work
    rows = []
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pairwise-reward-learning-") as tmp:
        workdir = args.workdir or Path(tmp)
        heldout = grpo.write_tasks(workdir / "heldout.jsonl", "speed", args.heldout, 1000, "heldout")
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for future in [pool.submit(one_seed, workdir, seed, args, heldout) for seed in args.seeds]:
                rows.append(row := future.result())
                print(f"seed {row['seed']}: reward model accuracy {row['reward_model']['test']['accuracy']:.3f}; "
                      f"held-out success {row['parent']['success_rate']:.3f} -> {row['child']['success_rate']:.3f} "
                      f"({row['gain_points']:+.1f} points)", flush=True)
                if len(rows) < len(args.seeds):  # a long run cut short keeps the seeds it finished
                    write_seeds(args, rows)

    written, rows = write_seeds(args, rows)  # with --add-to-results, the file's other seeds too
    children, met = verifier_children(args, rows), targets(rows, **TARGETS)
    print(f"\nheld-out speed: {args.heldout} problems, {args.samples} answers each at temperature "
          f"{grpo.RECIPE['temperature']}, scored by {', '.join(rows[0]['scorers'])}; GRPO saw only the reward model")
    print(loop.format_seeds(rows, children))
    print(format_targets(rows, met))
    if not children:
        print("verifier child: bench/results/grpo_learning.json holds no run on the same parents and held-out set")
    if any(row.get("audited") for row in rows):
        print(f"\n{check.format_audit_choice(rows, met['audited_gain_met'], TARGETS['points'])}")
    for row in rows:
        if row.get("rounds"):
            print(f"\n{format_rounds(row)}")
        for name, one in ([(f"seed {row['seed']}, round {r['round']}", r) for r in row["rounds"]] if row.get("rounds")
                          else [(f"\nseed {row['seed']}", row)]):
            print(f"{name}: reward, reward-model score, correct share (none: no verifier ran) and length by step")
            print("\n".join(format_steps(one["by_step"])[1:]))
            print(check.format_verified_afterwards(one["verified_afterwards"]))
        if row.get("audited"):
            print(check.format_audited_windows(row["audited"]))
    print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
