"""Bigger groups or more prompts? GRPO with groups of 4 and of 8 at the same generated-token budget.

Both arms start from the same tiny SFT checkpoint, train on the same task file with the same number of
completions per step (so groups of 4 see twice as many prompts per step), and stop once they have
generated the same number of completion tokens (`max_generated_tokens`). Each child is scored on the
same held-out problems as the parent; the figure that answers "should we pay for bigger groups?" is the
held-out gain per million generated tokens, beside the zero-variance share (groups that taught nothing).

    python bench/grpo_budget.py [--budget 200000] [--seeds 0] [--family speed] [--heldout 100]

Prints a table and writes bench/results/grpo_budget.json.
"""

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench and training

from bench.common import machine, results_path, write_results
from bench.grpo_learning import (
    RECIPE,
    TRAIN_TASKS,
    add_parent_options,
    evaluate,
    parent_checkpoint,
    run_training,
    write_tasks,
)

RESULTS = results_path("grpo_budget")
GROUP_SIZES = (4, 8)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=200_000, help="completion tokens per run (default 200000)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--family", default="speed")
    parser.add_argument("--heldout", type=int, default=100)
    parser.add_argument("--samples", type=int, default=4)
    add_parent_options(parser)
    args = parser.parse_args()

    import yaml

    rows = []
    with tempfile.TemporaryDirectory(prefix="pairwise-grpo-budget-") as tmp:
        workdir = Path(tmp)
        heldout = write_tasks(workdir / "heldout.jsonl", args.family, args.heldout, 1000, "heldout")
        for seed in args.seeds:
            sft, _ = parent_checkpoint(workdir, seed, args)
            tasks = workdir / f"train-{seed}.jsonl"
            write_tasks(tasks, args.family, TRAIN_TASKS, seed, "train")
            children = {}
            for size in GROUP_SIZES:
                run = workdir / f"grpo-{seed}-g{size}"
                config = workdir / f"grpo-{seed}-g{size}.yaml"
                config.write_text(yaml.safe_dump({
                    # Without dynamic sampling: the zero-variance share each group size leaves is the figure here.
                    **RECIPE, "dynamic_sampling": False,
                    "num_generations": size, "max_steps": 100_000, "max_generated_tokens": args.budget,
                    "base_checkpoint": str(sft), "tasks": str(tasks), "output_dir": str(run), "seed": seed,
                    "torch_threads": args.threads}))
                wall, cpu = run_training("grpo", config, args.threads)
                children[size] = (run, wall, cpu)
            result = evaluate([sft, *(children[size][0] / "checkpoint" for size in GROUP_SIZES)], heldout,
                              samples=args.samples, temperature=RECIPE["temperature"], seed=seed,
                              threads=args.threads)
            parent = result["checkpoints"][0]["all"]["success_rate"]
            for index, size in enumerate(GROUP_SIZES, start=1):
                run, wall, cpu = children[size]
                ledger = json.loads((run / "ledger.json").read_text())
                child = result["checkpoints"][index]["all"]["success_rate"]
                gain = 100 * (child - parent)
                rows.append({
                    "seed": seed, "group_size": size, "prompts_per_step": RECIPE["per_device_train_batch_size"] // size,
                    "parent": parent, "child": child, "gain_points": round(gain, 1),
                    "tokens_generated": ledger["tokens_generated"], "steps": ledger["optimizer_steps"],
                    "gain_points_per_million_tokens": round(gain / (ledger["tokens_generated"] / 1e6), 2),
                    "zero_variance_share": ledger["groups"]["zero_variance_share"],
                    "cpu_minutes": round(cpu / 60, 2), "wall_s": round(wall, 1),
                    "time_s": ledger["time_s"],
                })
                print(f"seed {seed}, groups of {size}: {parent:.3f} -> {child:.3f} in {ledger['optimizer_steps']} steps, "
                      f"{ledger['tokens_generated']} tokens", flush=True)

    print()
    print(f"same budget: {args.budget} completion tokens per run, {RECIPE['per_device_train_batch_size']} completions "
          f"per step; held-out {args.family}: {args.heldout} problems x {args.samples} answers at temperature "
          f"{RECIPE['temperature']}")
    print(f"{'seed':<6}{'group':>6}{'prompts/step':>14}{'steps':>7}{'tokens':>9}{'parent':>8}{'child':>8}{'gain':>7}"
          f"{'gain per 1M tok':>17}{'zero-var share':>16}{'CPU-min':>9}")
    for r in rows:
        print(f"{r['seed']:<6}{r['group_size']:>6}{r['prompts_per_step']:>14}{r['steps']:>7}{r['tokens_generated']:>9}"
              f"{r['parent']:>8.3f}{r['child']:>8.3f}{r['gain_points']:>+7.1f}{r['gain_points_per_million_tokens']:>17.1f}"
              f"{r['zero_variance_share']:>16.3f}{r['cpu_minutes']:>9.1f}")
    for size in GROUP_SIZES:
        gains = [r["gain_points_per_million_tokens"] for r in rows if r["group_size"] == size]
        print(f"groups of {size}: median held-out gain {statistics.median(gains):+.1f} points per million tokens")

    shown = write_results(RESULTS, {
        "benchmark": "grpo_budget",
        "machine": machine(),
        "settings": {"budget_tokens": args.budget, "seeds": args.seeds, "family": args.family, "heldout": args.heldout,
                     "samples": args.samples, "threads": args.threads, "recipe": RECIPE},
        "runs": rows,
    })
    print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
