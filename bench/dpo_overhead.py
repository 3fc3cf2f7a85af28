"""Overhead of `python -m training dpo` and `python -m training grpo` over minimal raw TRL scripts.

For each trainer, ours and a raw TRL script train the same tiny checkpoint on the same data with the same
TRL config values, each in its own process, interleaved (ours, raw, ours, raw, ...) so that drift in
machine load hits both alike. DPO trains on a synthetic snapshot; GRPO on speed word problems, with the
same verifier reward function in both (training.verifiers.reward_function), so the difference is what
Pairwise adds around TRL: the config subclass, callbacks (metrics.jsonl, TensorBoard), and for GRPO the
rollout records, zero-variance counts and the ledger. Both variants are seeded alike, so they generate
the same completions.

Reported per variant: training steps/s (max_steps / the trainer's own train_runtime), end-to-end wall and
CPU seconds of the process (ours also verifies its inputs, hashes checkpoints and, for DPO, scores the
test split before and after), and peak RSS (from wait4). Target: steps/s overhead at most 5% on the
median of the interleaved rounds.

    python bench/dpo_overhead.py [--trainers dpo grpo] [--rounds 5] [--dpo-steps 30] [--grpo-steps 10] [--profile]

Prints a table per trainer and writes bench/results/dpo_overhead.json. With --profile, one more run of ours
per trainer goes under cProfile, and a second table says where the work Pairwise adds inside the training
loop goes (each of our seams' own time, without the TRL work it wraps), per step and as a share of the loop.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and training

from bench.common import ROOT, ChildRun, machine, results_path, run_measured, write_results

RESULTS = results_path("dpo_overhead")
TARGET_PERCENT = 5.0

# The shared training values; the raw scripts get them as TRL config arguments, ours as YAML keys.
COMMON = {
    "dpo": {
        "learning_rate": 1e-4,
        "per_device_train_batch_size": 4,
        "beta": 0.1,
        "max_length": 512,
        "logging_steps": 5,
        "save_steps": 10_000,  # only the end-of-training save, in both variants
        "seed": 0,
        "use_cpu": True,
    },
    "grpo": {
        "learning_rate": 1e-4,
        "num_generations": 4,
        "per_device_train_batch_size": 16,  # 4 prompts x 4 answers per step
        "max_completion_length": 48,
        "temperature": 1.0,
        "beta": 0.0,
        "logging_steps": 5,
        "save_steps": 10_000,
        "seed": 0,
        "use_cpu": True,
    },
}
GRPO_TASKS = 64

RAW_SCRIPTS = {
    "dpo": """
import json, sys
import torch
from datasets import Dataset
from transformers import AutoTokenizer
from trl import DPOConfig, DPOTrainer

checkpoint, data, out, steps, threads, common = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), \\
    int(sys.argv[5]), json.loads(sys.argv[6])
torch.set_num_threads(threads)
rows = [json.loads(line) for line in open(f"{data}/train.jsonl")]
train = Dataset.from_list([{k: r[k] for k in ("prompt", "chosen", "rejected")} for r in rows])
args = DPOConfig(output_dir=out, max_steps=steps, activation_checkpointing=False, bf16=False, report_to=[],
                 model_init_kwargs={"dtype": "float32"}, **common)
trainer = DPOTrainer(model=checkpoint, args=args, train_dataset=train,
                     processing_class=AutoTokenizer.from_pretrained(checkpoint))
output = trainer.train()
trainer.save_model(out + "/final")
print("TRAIN_RUNTIME", output.metrics["train_runtime"])
""",
    "grpo": """
import json, sys
import torch
from datasets import Dataset
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer
from training.tasks import load_tasks
from training.verifiers.reward_function import make_reward_function

checkpoint, data, out, steps, threads, common = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), \\
    int(sys.argv[5]), json.loads(sys.argv[6])
torch.set_num_threads(threads)
tasks = load_tasks(data)
train = Dataset.from_list([{"prompt": [{"role": "user", "content": t["prompt"]}], "task_id": t["task_id"]}
                           for t in tasks])
reward = make_reward_function(tasks, workers=1)
args = GRPOConfig(output_dir=out, max_steps=steps, activation_checkpointing=False, bf16=False, report_to=[],
                  model_init_kwargs={"dtype": "float32"}, **common)
trainer = GRPOTrainer(model=checkpoint, reward_funcs=[reward], args=args, train_dataset=train,
                      processing_class=AutoTokenizer.from_pretrained(checkpoint))
output = trainer.train()
trainer.save_model(out + "/final")
reward.close()
print("TRAIN_RUNTIME", output.metrics["train_runtime"])
""",
}


def run_child(command: list[str]) -> ChildRun:
    """One child process measured, its stdout kept."""
    return run_measured(command, env={**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false"},
                        keep="stdout")


def write_ours_config(trainer: str, workdir: Path, name: str, checkpoint: Path, data: Path, steps: int,
                      threads: int) -> tuple[Path, Path]:
    """(run folder, config file) of one run of `python -m training TRAINER` with the shared values."""
    import yaml

    run_dir, config = workdir / name, workdir / f"{name}.yaml"
    inputs = {"snapshot": str(data)} if trainer == "dpo" else {"tasks": str(data), "verifier_workers": 1}
    config.write_text(yaml.safe_dump({**COMMON[trainer], **inputs, "base_checkpoint": str(checkpoint),
                                      "output_dir": str(run_dir), "max_steps": steps, "torch_threads": threads}))
    return run_dir, config


def run_ours(trainer: str, workdir: Path, checkpoint: Path, data: Path, steps: int, threads: int, index: int) -> dict:
    run_dir, config = write_ours_config(trainer, workdir, f"ours-{trainer}-{index}", checkpoint, data, steps, threads)
    child = run_child([sys.executable, "-m", "training", trainer, "--config", str(config)])
    if child.exit_code != 0:
        raise SystemExit(f"python -m training {trainer} failed (exit {child.exit_code}); run it by hand with {config}")
    runtime = next(json.loads(line)["train_runtime"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                   if "train_runtime" in line)
    return {"variant": f"python -m training {trainer}", "steps_per_s": steps / runtime, "wall_s": child.wall_s,
            "cpu_s": child.cpu_s, "peak_rss": child.peak_rss_bytes}


def run_raw(trainer: str, workdir: Path, checkpoint: Path, data: Path, steps: int, threads: int, index: int) -> dict:
    script = workdir / f"raw_trl_{trainer}.py"
    script.write_text(RAW_SCRIPTS[trainer])
    child = run_child([sys.executable, str(script), str(checkpoint), str(data), str(workdir / f"raw-{trainer}-{index}"),
                       str(steps), str(threads), json.dumps(COMMON[trainer])])
    if child.exit_code != 0:
        raise SystemExit(f"the raw TRL {trainer} script failed (exit {child.exit_code}): python {script} ...")
    runtime = float(next(line.split()[1] for line in child.output.splitlines() if line.startswith("TRAIN_RUNTIME")))
    return {"variant": f"raw TRL {trainer.upper()}Trainer", "steps_per_s": steps / runtime, "wall_s": child.wall_s,
            "cpu_s": child.cpu_s, "peak_rss": child.peak_rss_bytes}


# The work Pairwise adds inside the training loop, as (label, our functions, the functions they call whose
# time is not ours: the TRL method an override wraps, or another row's function). A function is (file path
# suffix, name); a row with several functions adds them up (TensorBoard's callback methods share a file with
# other integrations, but only the attached ones are called). TRL wraps some of the methods we override in its
# profiling decorator: our override's direct callee is then the decorator's `wrapper`, which stands for the
# TRL method. The bench runs without dynamic sampling (COMMON), so each step runs one scored round.
_OURS = "training/grpo/trainer.py"
_TRL_GRPO = "trl/trainer/grpo_trainer.py"
_TRL_PROFILED = ("trl/extras/profiling.py", "wrapper")
_WRITE = (_OURS, "_write_if_complete")
_HASH = (_OURS, "_policy_weights_sha256")
CALLBACK_SEAMS = [
    ("metrics.jsonl callback", [("training/trl_setup.py", "on_log")], []),
    ("TensorBoard callback", [("transformers/integrations/integration_utils.py", name)
                              for name in ("on_train_begin", "on_log", "on_train_end")], []),
]
GRPO_SEAMS = [
    ("loop clock and token budget callback", [("training/grpo/run.py", name)
                                              for name in ("on_train_begin", "on_step_end", "on_train_end")], []),
    ("generation timer", [(_OURS, "_generate")], [(_TRL_GRPO, "_generate")]),
    ("reward components and verifier metrics", [("training/grpo/rewards.py", "__call__")],
     [("training/verifiers/reward_function.py", "__call__")]),
    ("group counts, zero-variance metrics", [(_OURS, "_generate_and_score_completions")],
     [(_OURS, "_scored_round"), (_TRL_GRPO, "_generate_and_score_completions")]),
    ("rollout rows (ids, rewards, advantages)", [(_OURS, "_scored_round")],
     [(_TRL_GRPO, "_generate_and_score_completions"), _HASH, _WRITE]),
    ("policy weights hash", [_HASH], []),
    ("log-prob capture in the update", [(_OURS, "compute_loss"), (_OURS, "_get_per_token_logps_and_entropies"),
                                        (_OURS, "_store_logps")],
     [_TRL_PROFILED, (_OURS, "_store_logps"), _WRITE]),
    ("rollout Parquet writes", [_WRITE], []),
]
TRAINING_LOOP = ("transformers/trainer.py", "_inner_training_loop")


def profile_ours(trainer: str, workdir: Path, checkpoint: Path, data: Path, steps: int, threads: int) -> dict:
    """One run of ours under cProfile: seconds of each added seam inside the training loop."""
    import pstats

    run_dir, config = write_ours_config(trainer, workdir, f"profile-{trainer}", checkpoint, data, steps, threads)
    profile = workdir / f"{trainer}.prof"
    code = run_child([sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "training", trainer,
                      "--config", str(config)]).exit_code
    # cProfile swallows the command's SystemExit, so its exit code says nothing: the run record does.
    from training.run_folder import RecordStatus

    record = run_dir / "run.json"
    status = json.loads(record.read_text()).get("status") if record.is_file() else None
    if code != 0 or status != RecordStatus.COMPLETED:
        raise SystemExit(f"python -m training {trainer} under cProfile did not complete (exit {code}, run status "
                         f"{status}); run it by hand with {config}")
    # {(file, line, name): (primitive calls, calls, own s, cumulative s, {caller: (calls, primitive, own s, cumulative s)})}
    stats = pstats.Stats(str(profile)).stats

    def keys(function: tuple[str, str]) -> list:
        suffix, name = function
        return [k for k in stats if k[2] == name and k[0].endswith(suffix)]

    def cumulative(functions) -> float:
        return sum(stats[k][3] for f in functions for k in keys(f))

    def called_from(caller_keys: list, callee: tuple[str, str]) -> float:
        """Seconds in `callee` when called directly from `caller_keys`."""
        return sum(stats[k][4][c][3] for k in keys(callee) for c in caller_keys if c in stats[k][4])

    loop = cumulative([TRAINING_LOOP])
    if loop <= 0:
        raise SystemExit(f"the cProfile of python -m training {trainer} has no training loop in it ({profile})")
    seams = CALLBACK_SEAMS + (GRPO_SEAMS if trainer == "grpo" else [])
    rows = []
    for label, functions, not_ours in seams:
        ours = [k for f in functions for k in keys(f)]
        seconds = sum(stats[k][3] for k in ours) - sum(called_from(ours, callee) for callee in not_ours)
        rows.append({"seam": label, "seconds": round(seconds, 4), "ms_per_step": round(1000 * seconds / steps, 2),
                     "loop_percent": round(100 * seconds / loop, 2)})
    return {"steps": steps, "loop_s": round(loop, 3), "seams": rows,
            "added_loop_percent": round(sum(r["loop_percent"] for r in rows), 2)}


def print_profile(trainer: str, profile: dict) -> None:
    print()
    print(f"{trainer}: work Pairwise adds inside the training loop (cProfile, one run of {profile['steps']} steps, "
          f"loop {profile['loop_s']:.1f} s)")
    print(f"{'seam':<42}{'ms/step':>10}{'% of loop':>11}")
    for row in profile["seams"]:
        print(f"{row['seam']:<42}{row['ms_per_step']:>10.2f}{row['loop_percent']:>11.2f}")
    print(f"{'all of it':<42}{sum(r['ms_per_step'] for r in profile['seams']):>10.2f}{profile['added_loop_percent']:>11.2f}")
    print("(cProfile slows Python-level code more than torch kernels, so these shares are upper bounds)")


def summarise(rows: list[dict]) -> dict:
    return {
        "runs": len(rows),
        "steps_per_s_best": max(r["steps_per_s"] for r in rows),
        "steps_per_s_median": statistics.median(r["steps_per_s"] for r in rows),
        "wall_s_median": statistics.median(r["wall_s"] for r in rows),
        "cpu_s_median": statistics.median(r["cpu_s"] for r in rows),
        "peak_rss_mb_max": max(r["peak_rss"] for r in rows) / 2**20,
    }


def compare(trainer: str, rows: list[dict]) -> dict:
    ours = summarise([r for r in rows if r["variant"].startswith("python")])
    raw = summarise([r for r in rows if r["variant"].startswith("raw")])
    # Per round, ours against the raw run next to it: machine load drifts slowly, so neighbours share it.
    paired = statistics.median(100 * (r["steps_per_s"] - o["steps_per_s"]) / r["steps_per_s"]
                               for o, r in zip(rows[0::2], rows[1::2], strict=True))
    return {
        "ours": ours,
        "raw": raw,
        "steps_per_s_overhead_percent_median": round(
            100 * (raw["steps_per_s_median"] - ours["steps_per_s_median"]) / raw["steps_per_s_median"], 2),
        "steps_per_s_overhead_percent_paired_median": round(paired, 2),
        "steps_per_s_overhead_percent_best": round(
            100 * (raw["steps_per_s_best"] - ours["steps_per_s_best"]) / raw["steps_per_s_best"], 2),
        "peak_rss_overhead_percent": round(100 * (ours["peak_rss_mb_max"] - raw["peak_rss_mb_max"])
                                           / raw["peak_rss_mb_max"], 2),
        "runs": rows,
    }


def print_table(trainer: str, result: dict, rounds: int, steps: int, threads: int) -> None:
    print()
    print(f"{'variant':<26}{'steps/s median':>16}{'steps/s best':>14}{'wall s median':>15}{'CPU s median':>14}"
          f"{'peak RSS MB':>13}")
    for name, s in ((f"python -m training {trainer}", result["ours"]), (f"raw TRL {trainer.upper()}Trainer", result["raw"])):
        print(f"{name:<26}{s['steps_per_s_median']:>16.3f}{s['steps_per_s_best']:>14.3f}{s['wall_s_median']:>15.1f}"
              f"{s['cpu_s_median']:>14.1f}{s['peak_rss_mb_max']:>13.0f}")
    met = result["steps_per_s_overhead_percent_median"] <= TARGET_PERCENT
    print(f"{trainer} steps/s overhead: {result['steps_per_s_overhead_percent_median']:+.1f}% on medians "
          f"(target <= {TARGET_PERCENT:.0f}%: {'met' if met else 'NOT met'}), "
          f"{result['steps_per_s_overhead_percent_paired_median']:+.1f}% median of paired rounds, "
          f"{result['steps_per_s_overhead_percent_best']:+.1f}% on best runs; peak RSS overhead "
          f"{result['peak_rss_overhead_percent']:+.1f}%")
    print(f"{rounds} interleaved rounds, {steps} steps each, {threads} torch threads")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainers", nargs="+", choices=("dpo", "grpo"), default=["dpo", "grpo"])
    parser.add_argument("--rounds", type=int, default=5, help="pairs of interleaved runs per trainer (default 5)")
    parser.add_argument("--dpo-steps", type=int, default=30, help="DPO steps per run (default 30)")
    parser.add_argument("--grpo-steps", type=int, default=10, help="GRPO steps per run (default 10)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads per run")
    parser.add_argument("--checkpoint", type=Path, default=None, help="base checkpoint (default: a fresh tiny one)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile one run of ours per trainer: where the added per-step work goes")
    args = parser.parse_args()

    from training.task_families import make_tasks  # light: no torch in this process
    from training.tasks import write_jsonl_atomically
    from training.tiny import write_tiny_snapshot

    results = {}
    with tempfile.TemporaryDirectory(prefix="pairwise-bench-") as tmp:
        workdir = Path(tmp)
        checkpoint = args.checkpoint
        if checkpoint is None:
            # Built in a child process: Linux carries a parent's peak RSS into its children's ru_maxrss, so
            # this process must stay small for the children's peaks to be their own.
            checkpoint = workdir / "tiny"
            built = run_child([sys.executable, "-m", "training", "tiny-sft", "--out", str(checkpoint),
                               "--steps", "60", "--eval-tasks", "2"])
            if built.exit_code != 0:
                raise SystemExit("python -m training tiny-sft failed; run it by hand to see why")
        data = {"dpo": workdir / "snapshot", "grpo": workdir / "speed.jsonl"}
        write_tiny_snapshot(data["dpo"], train=max(64, args.dpo_steps * COMMON["dpo"]["per_device_train_batch_size"]),
                            test=16)
        write_jsonl_atomically(data["grpo"], make_tasks("speed", n=GRPO_TASKS, seed=0))
        for trainer in args.trainers:
            steps = args.dpo_steps if trainer == "dpo" else args.grpo_steps
            rows = []
            for index in range(args.rounds):
                for runner in (run_ours, run_raw):
                    row = runner(trainer, workdir, checkpoint, data[trainer], steps, args.threads, index)
                    row["round"] = index
                    rows.append(row)
                    print(f"{trainer} round {index}: {row['variant']:<26} {row['steps_per_s']:.3f} steps/s", flush=True)
            results[trainer] = {"steps": steps, **compare(trainer, rows)}
            if args.profile:
                results[trainer]["profile"] = profile_ours(trainer, workdir, checkpoint, data[trainer], steps,
                                                           args.threads)

    for trainer in args.trainers:
        print_table(trainer, results[trainer], args.rounds, results[trainer]["steps"], args.threads)
        if "profile" in results[trainer]:
            print_profile(trainer, results[trainer]["profile"])

    shown = write_results(RESULTS, {
        "benchmark": "dpo_overhead",
        "settings": {"rounds": args.rounds, "threads": args.threads, "common": COMMON, "grpo_tasks": GRPO_TASKS},
        "target_overhead_percent": TARGET_PERCENT,
        "machine": machine(),
        **results,
    })
    print(f"wrote {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
