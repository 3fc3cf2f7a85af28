"""Overhead of `python -m training dpo` over a minimal raw TRL DPOTrainer script.

Both train the same tiny checkpoint on the same synthetic snapshot with the same DPOConfig values, each in
its own process, interleaved (ours, raw, ours, raw, ...) so that drift in machine load hits both alike.
Reported per variant: training steps/s (max_steps / the trainer's own train_runtime), end-to-end wall
and CPU seconds of the process (ours also verifies the snapshot, hashes checkpoints and scores the test
split before and after), and peak RSS (from wait4). Target: steps/s overhead at most 5%.

    python bench/dpo_overhead.py [--rounds 3] [--steps 30] [--checkpoint DIR]

Prints a table and writes bench/results/dpo_overhead.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "dpo_overhead.json"

# The shared training values; the raw script gets them as DPOConfig arguments, ours as YAML keys.
COMMON = {
    "learning_rate": 1e-4,
    "per_device_train_batch_size": 4,
    "beta": 0.1,
    "max_length": 512,
    "logging_steps": 5,
    "save_steps": 10_000,  # only the end-of-training save, in both variants
    "seed": 0,
    "use_cpu": True,
}

RAW_SCRIPT = """
import json, sys, time
import torch
from datasets import Dataset
from transformers import AutoTokenizer
from trl import DPOConfig, DPOTrainer

checkpoint, snapshot, out, steps, threads, common = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), \\
    int(sys.argv[5]), json.loads(sys.argv[6])
torch.set_num_threads(threads)
rows = [json.loads(line) for line in open(f"{snapshot}/train.jsonl")]
train = Dataset.from_list([{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows])
args = DPOConfig(output_dir=out, max_steps=steps, activation_checkpointing=False, bf16=False, report_to=[],
                 model_init_kwargs={"dtype": "float32"}, **common)
trainer = DPOTrainer(model=checkpoint, args=args, train_dataset=train,
                     processing_class=AutoTokenizer.from_pretrained(checkpoint))
output = trainer.train()
trainer.save_model(out + "/final")
print("TRAIN_RUNTIME", output.metrics["train_runtime"])
"""


def run_child(command: list[str]) -> tuple[int, float, int, str, float]:
    """(exit code, wall seconds, peak RSS in bytes, stdout, CPU seconds) of one child process."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL, cwd=REPO, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        out.seek(0)
        stdout = out.read()
    return process.returncode, wall, usage.ru_maxrss * 1024, stdout, usage.ru_utime + usage.ru_stime


def run_ours(workdir: Path, checkpoint: Path, snapshot: Path, steps: int, threads: int, index: int) -> dict:
    import yaml

    run_dir = workdir / f"ours-{index}"
    config = workdir / f"ours-{index}.yaml"
    config.write_text(yaml.safe_dump({**COMMON, "base_checkpoint": str(checkpoint), "snapshot": str(snapshot),
                                      "output_dir": str(run_dir), "max_steps": steps, "torch_threads": threads}))
    code, wall, rss, _, cpu = run_child([sys.executable, "-m", "training", "dpo", "--config", str(config)])
    if code != 0:
        raise SystemExit(f"python -m training dpo failed (exit {code}); run it by hand with {config}")
    runtime = next(json.loads(line)["train_runtime"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                   if "train_runtime" in line)
    return {"variant": "python -m training dpo", "steps_per_s": steps / runtime, "wall_s": wall, "cpu_s": cpu,
            "peak_rss": rss}


def run_raw(workdir: Path, checkpoint: Path, snapshot: Path, steps: int, threads: int, index: int) -> dict:
    script = workdir / "raw_trl_dpo.py"
    script.write_text(RAW_SCRIPT)
    code, wall, rss, stdout, cpu = run_child([sys.executable, str(script), str(checkpoint), str(snapshot),
                                         str(workdir / f"raw-{index}"), str(steps), str(threads), json.dumps(COMMON)])
    if code != 0:
        raise SystemExit(f"the raw TRL script failed (exit {code}): python {script} ...")
    runtime = float(next(line.split()[1] for line in stdout.splitlines() if line.startswith("TRAIN_RUNTIME")))
    return {"variant": "raw TRL DPOTrainer", "steps_per_s": steps / runtime, "wall_s": wall, "cpu_s": cpu,
            "peak_rss": rss}


def summarise(rows: list[dict]) -> dict:
    return {
        "runs": len(rows),
        "steps_per_s_best": max(r["steps_per_s"] for r in rows),
        "steps_per_s_median": statistics.median(r["steps_per_s"] for r in rows),
        "wall_s_median": statistics.median(r["wall_s"] for r in rows),
        "cpu_s_median": statistics.median(r["cpu_s"] for r in rows),
        "peak_rss_mb_max": max(r["peak_rss"] for r in rows) / 2**20,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="pairs of interleaved runs")
    parser.add_argument("--steps", type=int, default=30, help="DPO steps per run")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads per run")
    parser.add_argument("--checkpoint", type=Path, default=None, help="base checkpoint (default: a fresh tiny one)")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from training.tiny import write_tiny_snapshot  # light: no torch in this process

    with tempfile.TemporaryDirectory(prefix="pairwise-bench-") as tmp:
        workdir = Path(tmp)
        checkpoint = args.checkpoint
        if checkpoint is None:
            # Built in a child process: Linux carries a parent's peak RSS into its children's ru_maxrss, so
            # this process must stay small for the children's peaks to be their own.
            checkpoint = workdir / "tiny"
            code, *_ = run_child([sys.executable, "-m", "training", "tiny-sft", "--out", str(checkpoint),
                                  "--steps", "20", "--eval-tasks", "2"])
            if code != 0:
                raise SystemExit("python -m training tiny-sft failed; run it by hand to see why")
        snapshot = workdir / "snapshot"
        write_tiny_snapshot(snapshot, train=max(64, args.steps * COMMON["per_device_train_batch_size"]), test=16)
        rows = []
        for index in range(args.rounds):
            for runner in (run_ours, run_raw):
                row = runner(workdir, checkpoint, snapshot, args.steps, args.threads, index)
                row["round"] = index
                rows.append(row)
                print(f"round {index}: {row['variant']:<24} {row['steps_per_s']:.3f} steps/s", flush=True)

    ours = summarise([r for r in rows if r["variant"].startswith("python")])
    raw = summarise([r for r in rows if r["variant"].startswith("raw")])
    # Other work on the machine only ever slows a run down, so the best run of each variant is the least
    # disturbed estimate of its speed; the median is shown beside it.
    overhead = 100 * (raw["steps_per_s_best"] - ours["steps_per_s_best"]) / raw["steps_per_s_best"]
    overhead_median = 100 * (raw["steps_per_s_median"] - ours["steps_per_s_median"]) / raw["steps_per_s_median"]
    rss_overhead = 100 * (ours["peak_rss_mb_max"] - raw["peak_rss_mb_max"]) / raw["peak_rss_mb_max"]

    print()
    print(f"{'variant':<24}{'steps/s best':>14}{'steps/s median':>16}{'wall s median':>15}{'CPU s median':>14}"
          f"{'peak RSS MB':>13}")
    for name, s in (("python -m training dpo", ours), ("raw TRL DPOTrainer", raw)):
        print(f"{name:<24}{s['steps_per_s_best']:>14.3f}{s['steps_per_s_median']:>16.3f}{s['wall_s_median']:>15.1f}"
              f"{s['cpu_s_median']:>14.1f}{s['peak_rss_mb_max']:>13.0f}")
    print(f"steps/s overhead: {overhead:+.1f}% on best runs, {overhead_median:+.1f}% on medians (target <= 5%); "
          f"peak RSS overhead: {rss_overhead:+.1f}%")
    print(f"{args.rounds} interleaved rounds, {args.steps} steps each, {args.threads} torch threads")

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "dpo_overhead",
        "settings": {"rounds": args.rounds, "steps": args.steps, "threads": args.threads, **COMMON},
        "ours": ours,
        "raw": raw,
        "steps_per_s_overhead_percent": round(overhead, 2),
        "steps_per_s_overhead_percent_median": round(overhead_median, 2),
        "peak_rss_overhead_percent": round(rss_overhead, 2),
        "target_overhead_percent": 5.0,
        "runs": rows,
    }, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
