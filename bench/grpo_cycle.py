"""One GRPO recipe run three ways: in-process, staged (generate, score, update as separate processes on policy
versions), and overlapped (the next batch generated during the update, max_staleness 1 and 2).

For each seed the parent and the recipe are bench/grpo_learning.py's (the same budget: its max_steps, or --steps);
each mode trains a child from the same parent on the same tasks, and each child is scored on the same held-out
problems. Shown per mode: held-out success with its 95% interval, the gain over the parent, wall time, CPU time (the
run and every stage process, each stage's own usage where the stage server forked it) and the ledger's split (generation, verification, switching, update, each
lane's idle time). Every mode gets the same two cores: in-process and staged run torch on two threads, the
overlapped lanes on one thread each.

Targets: staged inside in-process's held-out interval, with switching under 25% of its wall time; overlapped k=1 at
least 1.3x faster in wall time than in-process, with a held-out gain inside in-process's interval. Every target also
asks the run to beat the parent (held-out success above the parent's 95% interval): when in-process learns little,
its interval holds the untrained parent too, and a run that learned nothing would pass.

    python bench/grpo_cycle.py [--seeds 0 1 2] [--parents DIR] [--steps N] [--modes in_process staged overlapped-1]
                               [--out FILE]

Mode staged-vllm is the staged cycle generating with vLLM (generation_engine: vllm); its rows add the two engines'
log-probability difference per token. Prints a table and writes bench/results/grpo_cycle.json (or --out).
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and training

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

RESULTS = results_path("grpo_cycle")
MODES = {  # name -> the config keys that make it, and torch threads per process on the two cores
    "in_process": ({"mode": "in_process"}, 2),
    "staged": ({"mode": "staged"}, 2),
    # The staged cycle with vLLM's offline engine as the generate stage (the generation environment,
    # scripts/install_vllm.sh): each batch starts the engine on the version's folder, which the ledger counts as switching.
    "staged-vllm": ({"mode": "staged", "generation_engine": "vllm"}, 2),
    "overlapped-1": ({"mode": "overlapped", "max_staleness": 1}, 1),
    "overlapped-2": ({"mode": "overlapped", "max_staleness": 2}, 1),
    # The same overlap with long-lived lanes: the generation lane keeps its model, the update lane its trainer.
    "overlapped-1-lanes": ({"mode": "overlapped", "max_staleness": 1, "stage_launcher": "lanes"}, 1),
    "overlapped-2-lanes": ({"mode": "overlapped", "max_staleness": 2, "stage_launcher": "lanes"}, 1),
}
MAX_SWITCHING_SHARE = 0.25
MIN_OVERLAP_SPEEDUP = 1.3


def inside_and_learned(row: dict, in_process: dict, parent: dict) -> bool:
    """Whether a run's held-out success lies inside in-process's 95% interval and above the parent's: inside alone
    passes a run that learned nothing whenever the parent lies inside in-process's interval too."""
    low, high = in_process["interval"]
    return low <= row["success_rate"] <= high and row["success_rate"] > parent["interval"][1]


def ledger_split(run: Path) -> dict:
    """Seconds of generation, verification, switching and update, and each lane's idle time, from ledger.json."""
    ledger = json.loads((run / "ledger.json").read_text())
    if "cycle" in ledger:
        cycle = ledger["cycle"]
        return {"generation_s": cycle["generation_s"], "verification_s": cycle["verification_s"],
                "switching_s": cycle["switching_s"], "update_s": cycle["update_s"], "idle_s": cycle["idle_s"],
                "records_dropped_stale": cycle["records_dropped_stale"], "stage_restarts": cycle["stage_restarts"],
                "tokens_generated": cycle["tokens_generated"],
                "sampler_mismatch": cycle.get("sampler_mismatch")}
    time_s = ledger["time_s"]
    return {"generation_s": time_s["generation"], "verification_s": time_s["verification"],
            "switching_s": time_s["loading_switching"], "update_s": time_s["update"], "idle_s": {},
            "records_dropped_stale": 0, "stage_restarts": 0, "tokens_generated": ledger["tokens_generated"],
            "sampler_mismatch": None}


def quick_parent(workdir: Path, seed: int, args) -> Path:
    sft = workdir / f"sft-{seed}-{args.parent_steps}"
    subprocess.run([sys.executable, "-m", "training", "tiny-sft", "--out", str(sft), "--seed", str(seed),
                    "--eval-tasks", "2", f"--steps={args.parent_steps}", "--misconception-share=0.8"], check=True,
                   capture_output=True)
    return sft


def one_mode(workdir: Path, seed: int, sft: Path, tasks: Path, mode: str, args, heldout: list[dict]) -> dict:
    import yaml

    keys, threads = MODES[mode]
    run = workdir / f"{mode}-{seed}"
    config = workdir / f"{mode}-{seed}.yaml"
    config.write_text(yaml.safe_dump({**RECIPE, "max_steps": args.steps, "base_checkpoint": str(sft),
                                      "tasks": str(tasks), "output_dir": str(run), "seed": seed,
                                      "torch_threads": threads, **keys}))
    wall, cpu = run_training("grpo", config, threads)
    cycle = json.loads((run / "ledger.json").read_text()).get("cycle")
    if cycle is not None and cycle["stage_launcher"] in ("forkserver", "lanes"):
        # Stages and lanes forked from the stage server are not the run's children, so their CPU is not in the run's
        # own usage; each stage records its own.
        cpu += cycle["stage_cpu_s"]
    result = evaluate([run / "checkpoint"], heldout, samples=args.samples, temperature=RECIPE["temperature"],
                      seed=seed, threads=2)["checkpoints"][0]["all"]
    split = ledger_split(run)
    return {"mode": mode, "seed": seed, "wall_s": round(wall, 1), "cpu_minutes": round(cpu / 60, 2),
            "success_rate": result["success_rate"], "interval": result["interval"], **split,
            "switching_share": round(split["switching_s"] / wall, 3) if wall else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--family", default="speed", help="word-problem family (default speed)")
    parser.add_argument("--heldout", type=int, default=100, help="held-out problems (default 100)")
    parser.add_argument("--samples", type=int, default=4, help="sampled answers per held-out problem (default 4)")
    parser.add_argument("--steps", type=int, default=RECIPE["max_steps"], help="GRPO steps, the same in every mode")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    add_parent_options(parser)
    parser.add_argument("--parent-steps", type=int, default=None,
                        help="build a weaker parent of this many tiny-sft steps instead of the recipe's 5,000 (a quick "
                             "look at the timings; its held-out figures do not compare with bench/grpo_learning.py)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results file (default %(default)s)")
    args = parser.parse_args()
    if "in_process" not in args.modes:
        parser.error("--modes must include in_process: every target compares with it")

    rows = []
    with tempfile.TemporaryDirectory(prefix="pairwise-grpo-cycle-") as tmp:
        workdir = Path(tmp)
        heldout = write_tasks(workdir / "heldout.jsonl", args.family, args.heldout, 1000, "heldout")
        for seed in args.seeds:
            sft = quick_parent(workdir, seed, args) if args.parent_steps else parent_checkpoint(workdir, seed, args)[0]
            parent_result = evaluate([sft], heldout, samples=args.samples, temperature=RECIPE["temperature"], seed=seed,
                                     threads=2)["checkpoints"][0]["all"]
            parent = parent_result["success_rate"]
            tasks = workdir / f"train-{seed}.jsonl"
            write_tasks(tasks, args.family, TRAIN_TASKS, seed, "train")
            for mode in args.modes:
                row = one_mode(workdir, seed, sft, tasks, mode, args, heldout)
                row["parent_success_rate"] = parent
                row["parent_interval"] = parent_result["interval"]
                row["gain_points"] = round(100 * (row["success_rate"] - parent), 1)
                rows.append(row)
                print(f"seed {seed} {mode}: held-out {parent:.3f} -> {row['success_rate']:.3f}, {row['wall_s']:.0f} s "
                      f"wall, {row['cpu_minutes']:.1f} CPU-min", flush=True)

    print()
    print(f"{args.steps} GRPO steps per run, {args.heldout} held-out {args.family} problems x {args.samples} answers")
    print(f"{'seed':<5}{'mode':<20}{'held-out':>9}{'95% interval':>18}{'gain':>7}{'wall s':>8}{'x in-proc':>10}"
          f"{'CPU-min':>8}{'gen s':>7}{'verify s':>9}{'switch s':>9}{'switch %':>9}{'update s':>9}{'idle gen/upd s':>16}"
          f"{'stale':>6}")
    verdicts = []
    for seed in args.seeds:
        mine = {row["mode"]: row for row in rows if row["seed"] == seed}
        base = mine["in_process"]
        parent = {"success_rate": base["parent_success_rate"], "interval": base["parent_interval"]}
        for mode, row in mine.items():
            idle = row["idle_s"]
            idle_text = f"{idle.get('generation', 0):.0f}/{idle.get('update', 0):.0f}" if idle else "-"
            speedup = base["wall_s"] / row["wall_s"] if row["wall_s"] else 0.0
            row["speedup"] = round(speedup, 2)
            print(f"{seed:<5}{mode:<20}{row['success_rate']:>9.3f}{str(row['interval']):>18}{row['gain_points']:>+7.1f}"
                  f"{row['wall_s']:>8.0f}{speedup:>10.2f}{row['cpu_minutes']:>8.1f}{row['generation_s']:>7.0f}"
                  f"{row['verification_s']:>9.0f}{row['switching_s']:>9.0f}{100 * row['switching_share']:>8.0f}%"
                  f"{row['update_s']:>9.0f}{idle_text:>16}{row['records_dropped_stale']:>6}")
            inside = inside_and_learned(row, base, parent)
            if mode == "in_process":
                verdicts.append(("in_process above the parent's interval (it learned)", seed,
                                 row["success_rate"] > parent["interval"][1]))
            if mode == "staged":
                verdicts.append(("staged inside in-process interval and above the parent's, switching < 25%", seed,
                                 inside and row["switching_share"] < MAX_SWITCHING_SHARE))
            if mode in ("overlapped-1", "overlapped-1-lanes"):
                verdicts.append((f"{mode} >= 1.3x faster, inside in-process interval and above the parent's", seed,
                                 inside and speedup >= MIN_OVERLAP_SPEEDUP))
    for row in rows:
        if row["sampler_mismatch"]:
            mismatch = row["sampler_mismatch"]
            print(f"seed {row['seed']} {row['mode']}: vLLM against the training forward, per token: mean |difference| "
                  f"{mismatch['mean_abs']:.2e}, max {mismatch['max_abs']:.2e} over {mismatch['batches']} batches")
    for name, seed, met in verdicts:
        print(f"target, seed {seed}: {name}: {'met' if met else 'NOT met'}")
    shown = write_results(args.out, {
        "benchmark": "grpo_cycle", "machine": machine(),
        "settings": {"seeds": args.seeds, "steps": args.steps, "modes": args.modes, "heldout": args.heldout,
                     "samples": args.samples, "family": args.family,
                     "parents": (f"quick parents of {args.parent_steps} tiny-sft steps" if args.parent_steps else
                                 "taken from --parents (built by tiny-sft)" if args.parents else "built here"),
                     "recipe": {**RECIPE, "max_steps": args.steps}},
        "targets": [{"target": name, "seed": seed, "met": met} for name, seed, met in verdicts],
        "runs": rows,
    })
    print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
