"""Data-parallel training: `accelerate launch` with deploy/accelerate/cpu_ddp.yaml runs DPO and the reward model in two
processes (DDP over gloo on CPU) with the curves of the one-process run, one run folder and one checkpoint.

The two runs have the same global batch (4 pairs a step: one process with 4, or two with 2 each) and the same seed,
so they see the same pairs in the same steps: accelerate hands process k the k-th batch of 2 of the same shuffled
order whose batches of 4 the one process takes. What differs is only the order of float additions (each process
averages its own 2 pairs, then gloo averages the two gradients), about 1e-7 of a float32 value per step. Adam then
scales each update to about the learning rate whatever the gradient's size, so a parameter whose gradient is near 0
can move differently by up to the learning rate; over these few steps the losses then agree to about 1e-6. LOSS_TOLERANCE
(1e-4, absolute, on values near 0.69) leaves room for other processors' float rounding and still fails on a run that
saw other pairs or another global batch: one process with 2 pairs a step instead of 4 differs by 1.4e-2 at the
second step and 0.16 at the third (docs/deploy.md, "More than one process").
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.conftest import REPO
from tests.training.helpers import load_weights, records, write_snapshot_run_config

CPU_DDP = REPO / "deploy" / "accelerate" / "cpu_ddp.yaml"
LOSS_TOLERANCE = 1e-4
STEPS = 3
GLOBAL_BATCH = 4


def launch(kind: str, config: Path, processes: int, *, accelerate_config: Path = CPU_DDP,
           timeout: int = 300) -> subprocess.CompletedProcess:
    """`accelerate launch --config_file CONFIG --num_processes N -m training KIND --config F`, as docs/deploy.md
    says."""
    return launch_training(processes, kind, "--config", str(config), accelerate_config=accelerate_config,
                           timeout=timeout)


def launch_training(processes: int, *args: str, accelerate_config: Path = CPU_DDP, timeout: int = 300,
                    python: str = sys.executable) -> subprocess.CompletedProcess:
    """`accelerate launch --config_file CONFIG --num_processes N -m training ARGS`; one thread per process, so two
    processes use the two cores one process would."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [python, "-m", "accelerate.commands.launch", "--config_file", str(accelerate_config),
               "--num_processes", str(processes), "-m", "training", *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)


def train_curve(run: Path, key: str) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [row[key] for row in rows if row["event"] == "train" and key in row]


def run_pair(tmp_path, checkpoint, snapshot, kind: str, **overrides) -> tuple[Path, Path]:
    """The same run (STEPS steps, GLOBAL_BATCH pairs a step, seed 0) with one process and with two."""
    folders = []
    for processes in (1, 2):
        folder = tmp_path / f"{kind}-{processes}"
        folder.mkdir()
        config = write_snapshot_run_config(folder, checkpoint, snapshot, name=kind, max_steps=STEPS, seed=0,
                                           per_device_train_batch_size=GLOBAL_BATCH // processes, torch_threads=1,
                                           report_to=["none"], **overrides)
        result = launch(kind, config, processes)
        assert result.returncode == 0, result.stderr[-3000:]
        folders.append(folder / "run")
    return folders[0], folders[1]


def assert_same_curve(one: Path, two: Path, key: str) -> None:
    first, second = train_curve(one, key), train_curve(two, key)
    assert len(first) == len(second) == STEPS
    assert first == pytest.approx(second, abs=LOSS_TOLERANCE), f"{key}: one process {first}, two {second}"


def assert_one_run_of_two_processes(one: Path, two: Path) -> None:
    """run.json and ledger.json say how many processes trained; the two-process run wrote one record of each step
    and one checkpoint, which loads as the one-process run's does."""
    from transformers import AutoConfig

    for run, processes in ((one, 1), (two, 2)):
        record = json.loads((run / "run.json").read_text())
        assert record["status"] == "completed" and record["hardware"]["world_size"] == processes
        assert json.loads((run / "ledger.json").read_text())["consumed"]["world_size"] == processes
    steps = [json.loads(line)["step"] for line in (two / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["event"] == "train" and "loss" in json.loads(line)]
    assert steps == list(range(1, STEPS + 1))
    assert sorted(path.name for path in two.glob("checkpoint*")) == ["checkpoint"]
    AutoConfig.from_pretrained(two / "checkpoint", local_files_only=True)
    assert load_weights(two / "checkpoint").keys() == load_weights(one / "checkpoint").keys()


def test_two_process_dpo_matches_one_process(tmp_path, tiny_checkpoint, tiny_snapshot):
    one, two = run_pair(tmp_path, tiny_checkpoint, tiny_snapshot, "dpo")
    assert_same_curve(one, two, "loss")
    assert_same_curve(one, two, "rewards/margins")
    assert_one_run_of_two_processes(one, two)
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(two / "checkpoint", local_files_only=True)


def test_two_process_reward_matches_one_process(tmp_path, tiny_checkpoint, tiny_snapshot):
    one, two = run_pair(tmp_path, tiny_checkpoint, tiny_snapshot, "reward")
    assert_same_curve(one, two, "loss")
    assert_same_curve(one, two, "accuracy")
    assert_one_run_of_two_processes(one, two)


def test_an_fsdp_launch_on_cpu_is_refused_in_one_line(tmp_path, tiny_checkpoint, tiny_snapshot):
    """accelerate drops its FSDP plugin on CPU; the run would be plain DDP under a config that says sharded."""
    config = write_snapshot_run_config(tmp_path, tiny_checkpoint, tiny_snapshot, name="dpo", max_steps=STEPS,
                                       per_device_train_batch_size=2, report_to=["none"])
    result = launch("dpo", config, 2, accelerate_config=REPO / "deploy" / "accelerate" / "fsdp.yaml")
    assert result.returncode != 0
    first = (result.stdout + result.stderr).strip().splitlines()[0]
    assert first.startswith("error: an FSDP launch on CPU: accelerate ") and "would train this as plain DDP" in first
    assert not (tmp_path / "run").exists()


def test_two_process_grpo_records_every_rollout_once_with_the_process_that_generated_it(tmp_path, tiny_checkpoint,
                                                                                        speed_tasks):
    """Each process generates and scores the answers of its own prompts (its own verifier pool) and writes them in
    its own batch files: the run's rollouts are every answer of every step once, marked with its process. (The
    curves are not compared: each process samples its answers with its own random stream, so the answers, and the
    rewards, differ from the one-process run's after the first step.)"""
    import pandas as pd

    from tests.training.helpers import write_grpo_config

    config = write_grpo_config(tmp_path, tiny_checkpoint, speed_tasks, name="grpo", per_device_train_batch_size=4,
                               torch_threads=1)
    result = launch("grpo", config, 2)
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "grpo"
    rollouts = pd.concat([pd.read_parquet(path) for path in sorted((run / "rollouts").glob("*.parquet"))])
    assert len(rollouts) == 2 * 8  # two steps of 2 processes x 4 answers (one group of 4 per process)
    assert rollouts["rollout_id"].is_unique
    assert sorted(rollouts.groupby("process_index").size().to_dict().items()) == [(0, 8), (1, 8)]
    assert set(rollouts["task_id"]) <= {json.loads(line)["task_id"] for line in speed_tasks.read_text().splitlines()}
    assert json.loads((run / "run.json").read_text())["hardware"]["world_size"] == 2


def test_two_process_staged_update_trains_the_step_of_one_process(tmp_path, grpo_checkpoint, speed_tasks):
    """The staged cycle's update stage launched as two processes, on the batch one generate and one score stage
    wrote (2 groups of 4 answers, the step's global batch): each process feeds TRL the 4 records its own sampler's
    prompts ask for (process k the k-th 4, as accelerate deals out the step), so the step trains the answers the
    one-process update trains, with the same global batch. TRL gathers the 8 rewards before it takes each group's
    advantages, so both see the same advantages; what differs is the order of float additions (each process sums
    its own 4 answers' loss and gradient, then gloo averages the two), and the loss and the gradient's norm agree to
    about 1e-8 (measured: -0.0717762634 and -0.0717762485). LOSS_TOLERANCE holds them as it holds DPO's. The
    weights are not compared: Adam's first step moves every weight by about the learning rate whatever its gradient,
    so a weight whose gradient is near 0 moves differently (up to 1e-3 of the 5e-3 step here). One version, one
    record of the update, the world size in it and in the cycle's ledger; each process's rollouts once."""
    import shutil

    import pyarrow.parquet as pq

    from tests.training.conftest import run_training_cli
    from tests.training.helpers import write_grpo_config

    settings = {"mode": "staged", "max_steps": 1, "torch_threads": 1}
    config = write_grpo_config(tmp_path, grpo_checkpoint, speed_tasks, name="one", **settings)
    one = tmp_path / "one"
    for stage in (("cycle", "--config", str(config), "--prepare-only"), ("generate", "--run", str(one), "--batch", "0"),
                  ("score", "--run", str(one), "--batch", "0")):
        result = run_training_cli(*stage)
        assert result.returncode == 0, result.stderr[-3000:]
    two = tmp_path / "two"
    shutil.copytree(one, two)

    printed = {}
    for processes, run in ((1, one), (2, two)):
        result = launch_training(processes, "update", "--run", str(run), "--version", "0")
        assert result.returncode == 0, result.stderr[-3000:]
        printed[processes] = [json.loads(line) for line in result.stdout.splitlines()
                             if line.startswith("{\"")]  # the record; TRL prints its logs as Python dicts
    assert len(printed[2]) == 1, "the main process reports the update, once"
    for key in ("loss", "grad_norm"):
        first, second = train_curve(one, key), train_curve(two, key)
        assert len(first) == len(second) == 1
        assert first == pytest.approx(second, abs=LOSS_TOLERANCE), f"{key}: one process {first}, two {second}"

    update = json.loads((two / "batches" / "000000" / "update.json").read_text())
    assert update["world_size"] == 2 and update["made"] == "v0001" and update["loss"] == printed[2][0]["loss"]
    assert json.loads((one / "batches" / "000000" / "update.json").read_text())["world_size"] == 1
    assert sorted(path.name for path in (two / "versions").iterdir()) == ["v0000", "v0001"]
    assert {"rng_state_0.pth", "rng_state_1.pth", "optimizer.pt"} <= {p.name for p in (two / "versions" / "v0001").iterdir()}
    rollouts = {path.name: pq.read_table(path).to_pylist() for path in sorted((two / "rollouts").glob("*.parquet"))}
    assert {name: {row["process_index"] for row in rows} for name, rows in rollouts.items()} == {
        "batch-000000-rank0.parquet": {0}, "batch-000000-rank1.parquet": {1}}
    trained = sorted(row["rollout_id"] for rows in rollouts.values() for row in rows)
    assert trained == sorted(row["rollout_id"] for row in records(one, 0))

    # The cycle, resumed on the two-process run's folder, finds every version written and writes its ledger.
    resumed = run_training_cli("cycle", "--config", str(write_grpo_config(tmp_path, grpo_checkpoint, speed_tasks,
                                                                             name="two", **settings)), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ledger = json.loads((two / "ledger.json").read_text())["cycle"]
    assert [row["update_world_size"] for row in ledger["per_cycle"]] == [2]


def test_a_staged_batch_that_does_not_split_over_the_processes_is_one_line():
    from types import SimpleNamespace

    from training.errors import PairwiseInputError
    from training.grpo.stages import per_process_batch

    config, source = SimpleNamespace(per_device_train_batch_size=6), Path("RUN/batches/000000/scored.parquet")
    assert per_process_batch(config, [{}] * 6, 2, source=source) == {"per_device_train_batch_size": 3,
                                                                     "generation_batch_size": 6}
    with pytest.raises(PairwiseInputError) as refused:
        per_process_batch(config, [{}] * 6, 4, source=source)
    assert str(refused.value) == ("RUN/batches/000000/scored.parquet: the step's 6 answers (per_device_train_batch_size) "
                                  "do not split into 4 processes; launch the update with a process count that divides 6")
    with pytest.raises(PairwiseInputError, match="5 records, but a step of this run trains on 6"):
        per_process_batch(config, [{}] * 5, 2, source=source)


def test_a_staged_cycle_of_two_processes_starts_its_update_as_two(tmp_path, grpo_checkpoint, speed_tasks):
    """`processes: 2` in a staged config, run as a user runs it (`python -m training cycle --config F`, one
    process): the cycle generates and scores in one process each and starts the update with accelerate as two
    (the launcher and the tiny checkpoint as above), and its ledger and the version's update.json say so."""
    from tests.training.conftest import run_training_cli
    from tests.training.helpers import write_grpo_config

    config = write_grpo_config(tmp_path, grpo_checkpoint, speed_tasks, mode="staged", max_steps=1, torch_threads=1,
                               processes=2)
    result = run_training_cli("cycle", "--config", str(config))
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "grpo"
    ledger = json.loads((run / "ledger.json").read_text())["cycle"]
    assert [row["update_world_size"] for row in ledger["per_cycle"]] == [2]
    assert json.loads((run / "batches" / "000000" / "update.json").read_text())["world_size"] == 2
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    assert sorted(path.name for path in (run / "rollouts").glob("*.parquet")) == [
        "batch-000000-rank0.parquet", "batch-000000-rank1.parquet"]



def test_a_staged_cycle_started_under_a_launcher_is_one_line(tmp_path, grpo_checkpoint, speed_tasks):
    """The cycle is one process that launches its update: started as two processes, each refuses in one line before
    the run folder exists."""
    from tests.training.helpers import write_grpo_config

    config = write_grpo_config(tmp_path, grpo_checkpoint, speed_tasks, mode="staged", max_steps=1, processes=2)
    result = launch_training(2, "cycle", "--config", str(config))
    assert result.returncode != 0
    assert ("error: mode staged runs its cycle as one process and starts the update as processes: 2 itself; start it "
            "with `python -m training cycle --config FILE`, not under accelerate launch") in result.stderr
    assert not (tmp_path / "grpo").exists()
