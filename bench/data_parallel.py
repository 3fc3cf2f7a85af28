"""Where the time goes when `python -m training dpo` runs as two data-parallel processes on the same two cores.

Three runs of the same DPO training (the shipped tiny checkpoint, a synthetic snapshot, the same global batch and
seed), each a fresh `python -m training dpo` pinned to the same cores with taskset, interleaved round by round:

  one        one process, two threads, the whole global batch per step;
  two        `accelerate launch` with deploy/accelerate/cpu_ddp.yaml: two processes, one thread each, half the
             batch each, gradients averaged over gloo every step;
  half-solo  one process, one thread, half the batch: the work of one of the two processes without anyone to
             talk to;
  zero2, zero3  with --sharded: two processes as `two`, under deploy/accelerate/zero2.yaml and zero3.yaml with the
             CPU settings docs/deploy.md gives, in the sharded-training environment (scripts/install_deepspeed.sh).

Steps/s are the trainer's own (max_steps / train_runtime). The share of a two-process step spent communicating
(the gradient all-reduce, the logged metrics' gathers, and waiting for the slower process) is
1 - (half-solo's step time / two's step time): both do the same arithmetic per process on one thread, so what is
left is what the second process costs. It is an estimate from medians of separate runs on a machine that may be
shared, so it is printed with the spread of the rounds.

    python bench/data_parallel.py [--processes 1,2] [--rounds 3] [--steps 20] [--batch 8] [--cores 0,1] [--sharded]

Prints a table and writes bench/results/data_parallel.json.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and training

from bench.common import ROOT, machine, results_path, run_measured, utc_timestamp, write_results

RESULTS = results_path("data_parallel")
CHECKPOINT = ROOT / "annotate" / "runs" / "demo_files" / "tiny-sft"
CPU_DDP = ROOT / "deploy" / "accelerate" / "cpu_ddp.yaml"
DEEPSPEED_PYTHON = ROOT / ".venv-deepspeed" / "bin" / "python"
LABELS = {"one": "1 process x 2 threads", "two": "2 processes x 1 thread (gloo)",
          "half-solo": "1 process x 1 thread, half batch", "zero2": "2 processes x 1 thread, ZeRO-2",
          "zero3": "2 processes x 1 thread, ZeRO-3"}


def cpu_zero_config(folder: Path, stage: str, **deepspeed_overrides) -> Path:
    """deploy/accelerate/STAGE.yaml with the CPU settings docs/deploy.md tells a user to change, and nothing else
    but `deepspeed_overrides` (tests/training/test_deepspeed_zero.py runs the same files)."""
    import yaml

    config = yaml.safe_load((ROOT / "deploy" / "accelerate" / f"{stage}.yaml").read_text())
    config.update(mixed_precision="no", use_cpu=True, num_processes=2)
    config["deepspeed_config"].update(deepspeed_overrides)
    path = folder / f"cpu-{stage}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def config_file(folder: Path, snapshot: Path, *, name: str, steps: int, per_device: int, threads: int) -> Path:
    import yaml

    config = {"base_checkpoint": str(CHECKPOINT), "snapshot": str(snapshot), "output_dir": str(folder / name),
              "learning_rate": 1e-4, "max_steps": steps, "per_device_train_batch_size": per_device,
              "logging_steps": steps, "save_strategy": "no", "torch_threads": threads, "use_cpu": True,
              "report_to": ["none"], "seed": 0}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def train_runtime(run: Path) -> float:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return next(row["train_runtime"] for row in rows if "train_runtime" in row)


def one_run(folder: Path, snapshot: Path, *, variant: str, processes: int, steps: int, batch: int, cores: str,
            round_number: int) -> dict:
    threads = 2 if variant == "one" else 1
    per_device = batch if variant == "one" else batch // 2
    name = f"{variant}-{round_number}"
    config = config_file(folder, snapshot, name=name, steps=steps, per_device=per_device, threads=threads)
    training = ["-m", "training", "dpo", "--config", str(config)]
    if processes == 1:
        command = [sys.executable, *training]
    elif variant in ("zero2", "zero3"):
        command = [str(DEEPSPEED_PYTHON), "-m", "accelerate.commands.launch", "--config_file",
                   str(cpu_zero_config(folder, variant)), "--num_processes", str(processes), *training]
    else:
        command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_DDP),
                   "--num_processes", str(processes), *training]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    child = run_measured(["taskset", "-c", cores, *command], env=env, keep="both")
    if child.exit_code != 0:
        raise SystemExit(f"{variant} run {round_number} failed ({child.exit_code}): {child.output[-2000:]}")
    runtime = train_runtime(folder / name)
    return {"variant": variant, "round": round_number, "steps_per_s": round(steps / runtime, 3),
            "step_s": round(runtime / steps, 4), "wall_s": round(child.wall_s, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", default="1,2", help="process counts compared (1,2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8, help="global batch (pairs a step), even")
    parser.add_argument("--cores", default="0,1", help="the cores every run is pinned to (taskset -c)")
    parser.add_argument("--sharded", action="store_true", help="add two-process DeepSpeed ZeRO-2 and ZeRO-3 runs")
    args = parser.parse_args(argv)
    counts = [int(part) for part in args.processes.split(",")]
    if counts != [1, 2] or args.batch % 2 or args.rounds < 1 or args.steps < 1:
        raise SystemExit("compares --processes 1,2 only, with an even --batch and at least one round and step")
    if args.sharded and not DEEPSPEED_PYTHON.is_file():
        raise SystemExit(f"--sharded needs the sharded-training environment {DEEPSPEED_PYTHON}: run "
                         "scripts/install_deepspeed.sh")
    variants = [("one", 1), ("two", 2), ("half-solo", 1)] + ([("zero2", 2), ("zero3", 2)] if args.sharded else [])
    from training.tiny import write_tiny_snapshot

    with tempfile.TemporaryDirectory(prefix="data-parallel-") as temporary:
        folder = Path(temporary)
        snapshot = folder / "snapshot"
        write_tiny_snapshot(snapshot, train=max(args.batch * args.steps, 64), test=8, seed=0)
        rows = []
        for round_number in range(args.rounds):
            for variant, processes in variants:
                rows.append(one_run(folder, snapshot, variant=variant, processes=processes, steps=args.steps,
                                    batch=args.batch, cores=args.cores, round_number=round_number))
                print(json.dumps(rows[-1]), flush=True)

    def median(variant: str, key: str) -> float:
        return statistics.median(row[key] for row in rows if row["variant"] == variant)

    solos = [row for row in rows if row["variant"] == "half-solo"]

    def shares(variant: str) -> dict:
        """1 - the lone half's step time / the variant's, round by round."""
        each = [1 - solo["step_s"] / row["step_s"]
                for solo, row in zip(solos, [r for r in rows if r["variant"] == variant], strict=True)]
        return {"median": round(statistics.median(each), 3), "min": round(min(each), 3), "max": round(max(each), 3)}

    names = [variant for variant, _ in variants]
    summary = {variant: {"steps_per_s": median(variant, "steps_per_s"), "step_s": median(variant, "step_s"),
                         "wall_s": median(variant, "wall_s")} for variant in names}
    communication = shares("two")
    sharded = {variant: shares(variant) for variant in names if variant.startswith("zero")}
    print(f"\nDPO, global batch {args.batch}, {args.steps} steps, cores {args.cores}, median of {args.rounds} rounds")
    print(f"{'run':<36}{'steps/s':>9}{'s/step':>9}{'wall s':>9}")
    for variant in names:
        row = summary[variant]
        print(f"{LABELS[variant]:<36}{row['steps_per_s']:>9.2f}{row['step_s']:>9.3f}{row['wall_s']:>9.1f}")
    print(f"share of a two-process step spent communicating and waiting: {communication['median']:.0%} "
          f"(rounds {communication['min']:.0%} to {communication['max']:.0%})")
    for variant, share in sharded.items():
        print(f"  the same under {LABELS[variant].rsplit(', ', 1)[1]}: {share['median']:.0%} "
              f"(rounds {share['min']:.0%} to {share['max']:.0%})")
    shown = write_results(RESULTS, {"benchmark": "data_parallel", "at": utc_timestamp(), "machine": machine(),
                                    "settings": vars(args), "runs": rows, "summary": summary,
                                    "communication_share": communication, "sharded_communication_share": sharded})
    print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
