"""One DPO step, one reward-model step and one staged GRPO cycle with vLLM generation on the 0.5B configuration.

The checkpoint is `python -m training bpe-sft --size 0.5b --steps 0` (Qwen2.5-0.5B's shape, 494M parameters, random
weights: memory and time per step do not depend on what the weights learned). Each command is the real command line,
a child process of its own run one after the other, on CPU settings (use_cpu, float32, no activation checkpointing)
and small batches:

  dpo      `python -m training dpo --config F`: a snapshot of training.tiny's synthetic pairs (write_tiny_snapshot);
  reward   `python -m training reward --config F`: the same snapshot;
  cycle    `python -m training cycle --config F`: mode staged, generation_engine vllm, one cycle (generate with vLLM
           in the generation environment, score, update) on a `speed` task file (training.task_families).

Per command: wall seconds; seconds per optimizer step (DPO and reward: TRL's train_runtime in metrics.jsonl over the
steps run.json records, which leaves out loading, the test split's scoring and saving; the cycle: the ledger's update
seconds over its cycles, beside its generation, switching and vLLM engine-start seconds); and peak resident memory
two ways: the largest single process of the command's tree (wait4's ru_maxrss, which covers every descendant it
reaped) and the whole tree's memory summed (proportional set size: a page forked processes share counts once),
sampled every half second (what the machine must hold at once:
the generate stage keeps its trainer's model while vLLM's engine loads a second copy).

    python bench/large_model_steps.py [--checkpoint DIR] [--commands dpo,reward,cycle] [--batch 2] [--max-length 128]
        [--max-completion-length 16] [--threads 2] [--out FILE]

Prints a table and writes bench/results/large_model_steps.json (or --out).
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: bench.common and training

from bench.common import (
    ROOT,
    TreeMemory,
    load_average,
    machine,
    results_path,
    run_measured,
    shown_path,
    utc_timestamp,
    write_results,
)

RESULTS = results_path("large_model_steps")
COMMANDS = ("dpo", "reward", "cycle")
SAMPLE_EVERY_S = 0.5


def cpu_settings(args) -> dict:
    """What every command's config shares: one optimizer step on a CPU in float32, small batches, no reporting."""
    return {"max_steps": 1, "learning_rate": 1e-6, "logging_steps": 1, "seed": 0, "use_cpu": True, "bf16": False,
            "gradient_checkpointing": False, "torch_threads": args.threads, "report_to": ["none"],
            "per_device_train_batch_size": args.batch}


def write_inputs(workdir: Path, args) -> dict:
    """The snapshot and the task file, written by the project's own writers."""
    from training.task_families import make_tasks
    from training.tasks import write_tasks
    from training.tiny import write_tiny_snapshot

    snapshot, tasks = workdir / "snapshot", workdir / "speed.jsonl"
    write_tiny_snapshot(snapshot, train=2 * args.batch, test=args.batch, seed=0)
    write_tasks(tasks, make_tasks("speed", n=2 * args.batch, seed=3))
    return {"snapshot": snapshot, "tasks": tasks}


def write_config(workdir: Path, command: str, checkpoint: Path, inputs: dict, args) -> tuple[Path, Path]:
    """(config file, run folder) of `python -m training COMMAND`."""
    import yaml

    run = workdir / command
    config = {**cpu_settings(args), "base_checkpoint": str(checkpoint), "output_dir": str(run)}
    if command in ("dpo", "reward"):
        config.update(snapshot=str(inputs["snapshot"]), max_length=args.max_length,
                      per_device_eval_batch_size=args.batch)
    else:
        # One group of `batch` answers per step: the generate stage samples it with vLLM from the version's folder.
        config.update(tasks=str(inputs["tasks"]), mode="staged", generation_engine="vllm",
                      num_generations=args.batch, max_completion_length=args.max_completion_length,
                      save_strategy="no", verifier_workers=1)
    path = workdir / f"{command}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, run


def measured(command: list[str], args) -> tuple:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(args.threads),
           "TOKENIZERS_PARALLELISM": "false"}
    with TreeMemory(every_s=SAMPLE_EVERY_S) as tree:
        child = run_measured(command, env=env, keep="both")
    return child, tree


def train_seconds_per_step(run: Path) -> tuple[int | None, float | None]:
    """(optimizer steps, TRL's train_runtime / steps) of a DPO or reward run folder."""
    record = json.loads((run / "run.json").read_text())
    steps = record.get("steps")
    runtime = None
    for line in (run / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        if "train_runtime" in row:
            runtime = row["train_runtime"]
    return steps, (round(runtime / steps, 2) if runtime is not None and steps else None)


def cycle_split(run: Path) -> dict:
    """The staged cycle's ledger: update seconds per cycle, generation, switching and its parts, vLLM's own times."""
    ledger = json.loads((run / "ledger.json").read_text())["cycle"]
    generate = json.loads((run / "batches" / "000000" / "generate.json").read_text())
    cycles = ledger["cycles"] or 1
    return {"steps": ledger["cycles"], "s_per_step": round(ledger["update_s"] / cycles, 2),
            "generation_s": ledger["generation_s"], "verification_s": ledger["verification_s"],
            "switching_s": ledger["switching_s"], "switching_split_s": ledger["switching_split_s"],
            "update_s": ledger["update_s"], "ledger_wall_s": ledger["wall_s"], "vllm": generate.get("vllm"),
            "tokens_generated": ledger["tokens_generated"], "sampler_mismatch": ledger.get("sampler_mismatch"),
            "stage_cpu_s": ledger["stage_cpu_s"]}


def one_command(name: str, command: list[str], run: Path | None, args) -> dict:
    print(f"{name} ...", flush=True)
    child, tree = measured(command, args)
    # wait4 misses the staged cycle's stages: the stage server forks them, and they are not the command's to reap.
    row = {"command": name, "argv": " ".join(command[1:]), "exit_code": child.exit_code,
           "wall_s": round(child.wall_s, 1), "cpu_s": round(child.cpu_s, 1),
           "peak_process_gb": round(max(child.peak_rss_bytes, tree.largest) / 2**30, 2),
           "peak_tree_gb": round(tree.peak / 2**30, 2)}
    if child.exit_code != 0:
        errors = [line for line in child.output.strip().splitlines() if line.startswith("error")]
        row["error"] = (errors or child.output.strip().splitlines()[-1:] or ["(no output)"])[-1]
        return row
    if name in ("dpo", "reward"):
        row["steps"], row["s_per_step"] = train_seconds_per_step(run)
    elif name == "cycle":
        row.update(cycle_split(run))
        row["cpu_s"] = round(row["cpu_s"] + row.pop("stage_cpu_s"), 1)  # the forked stages' own usage, as recorded
    return row


def format_table(rows: list[dict]) -> str:
    lines = ["| command | wall s | CPU s | s per optimizer step | peak process GB | peak tree GB | notes |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        if "error" in row:
            notes = f"failed (exit {row['exit_code']}): {row['error']}"
        elif row["command"] == "cycle":
            vllm = row.get("vllm") or {}
            notes = (f"generation {row['generation_s']:.1f} s, switching {row['switching_s']:.1f} s (vLLM engine "
                     f"start {vllm.get('engine_start_s', 0):.1f} s, its process {vllm.get('process_s', 0):.1f} s), "
                     f"update {row['update_s']:.1f} s, {row['tokens_generated']} tokens")
        elif row["command"] in ("dpo", "reward"):
            notes = f"{row['steps']} step(s)"
        else:
            notes = ""
        per_step = row.get("s_per_step")
        lines.append(f"| {row['command']} | {row['wall_s']:.1f} | {row['cpu_s']:.0f} | "
                     f"{'' if per_step is None else f'{per_step:.1f}'} | "
                     f"{row['peak_process_gb']:.2f} | {row['peak_tree_gb']:.2f} | {notes} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, help="a bpe-sft 0.5b checkpoint (default: built, random weights)")
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"of {', '.join(COMMANDS)} (default all)")
    parser.add_argument("--batch", type=int, default=2, help="pairs (dpo, reward) or answers (cycle) a step")
    parser.add_argument("--max-length", type=int, default=128, help="dpo and reward max_length, in tokens")
    parser.add_argument("--max-completion-length", type=int, default=16, help="the cycle's answer length, in tokens")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of every command")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the results file (default %(default)s)")
    args = parser.parse_args(argv)
    commands = [name.strip() for name in args.commands.split(",") if name.strip()]
    for name in commands:
        if name not in COMMANDS:
            parser.error(f"unknown command {name!r} in --commands; choose from {', '.join(COMMANDS)}")
    if args.batch < 2:
        parser.error("--batch must be at least 2 (a GRPO group needs two answers)")
    if args.checkpoint is not None and not (args.checkpoint / "config.json").is_file():
        parser.error(f"--checkpoint {args.checkpoint} has no config.json; build one with python -m training "
                     "bpe-sft --size 0.5b --steps 0 --out DIR")

    rows, loads = [], {"before": load_average()}
    with tempfile.TemporaryDirectory(prefix="pairwise-large-steps-") as temporary:
        workdir = Path(temporary)
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = workdir / "bpe-0.5b"
            rows.append(one_command("bpe-sft", [sys.executable, "-m", "training", "bpe-sft", "--size", "0.5b",
                                                "--steps", "0", "--eval-tasks", "2", "--out", str(checkpoint)],
                                    None, args))
            if rows[-1]["exit_code"] != 0:
                print(format_table(rows))
                return 1
        inputs = write_inputs(workdir, args)
        for name in commands:
            config, run = write_config(workdir, name, checkpoint, inputs, args)
            rows.append(one_command(name, [sys.executable, "-m", "training", name, "--config", str(config)], run,
                                    args))
            rows[-1]["config"] = yaml.safe_load(config.read_text())
            loads[f"after_{name}"] = load_average()
    print(format_table(rows))
    settings = {key: getattr(args, key) for key in ("batch", "max_length", "max_completion_length", "threads")}
    shown = write_results(args.out, {"benchmark": "large_model_steps", "at": utc_timestamp(), "machine": machine(),
                                     "checkpoint": shown_path(args.checkpoint) if args.checkpoint else "built",
                                     "settings": settings, "load_average": loads, "rows": rows})
    print(f"wrote {shown}")
    return 0 if all(row["exit_code"] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
