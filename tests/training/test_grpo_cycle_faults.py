"""The staged GRPO cycle under overlap and faults, on the tiny checkpoint, on the CPU: answers one version old trained
with TRL's sampling correction, a killed cycle resumed, a killed generation process run again."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.training.helpers import COMPARED_BETA, records, rollout_rows, version_record
from tests.training.helpers import write_grpo_config as write_config
from training.run_folder import checkpoint_content_hash

from .conftest import REPO, run_training_cli

pytestmark = pytest.mark.slow


def test_overlapped_mode_trains_on_answers_one_version_old_with_the_sampling_correction(tmp_path, grpo_checkpoint,
                                                                                         speed_tasks):
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, name="run", mode="overlapped", max_staleness=1,
                          max_steps=3)
    result = run_training_cli("cycle", "--config", str(config))
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    # Batch 1 is generated as soon as batch 0 is scored, while the update of v0000 runs: by v0000, one behind.
    assert {r["policy_version"] for r in records(run, 1)} == {"v0000"}
    assert version_record(run, 2)["trained_on"]["max_lag"] == 1
    for batch in range(3):
        lag = version_record(run, batch + 1)["trained_on"]["max_lag"]
        assert 0 <= lag <= 1
    rows = rollout_rows(run)
    assert len(rows) == 24 and len({r["rollout_id"] for r in rows}) == 24
    assert {r["logprobs_source"] for r in rows if r["batch"] == 1} == {"recorded at generation (v0000, policy forward after generation)"}
    # TRL's truncated importance sampling ran on the stale batch (it logs the ratio), and only there.
    steps = {row["step"]: row for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
             if row.get("event") == "train" and "loss" in row}
    assert "sampling/importance_sampling_ratio/mean" in steps[2]
    assert "sampling/importance_sampling_ratio/mean" not in steps[1]
    # What the correction did is reported: in the metrics, and over the stale updates in the ledger.
    assert 0 <= steps[2]["sampling/importance_sampling_ratio/masked_share"] <= 1
    assert 0 < steps[2]["sampling/importance_sampling_ratio/effective_sample_size"] <= 1
    ledger = json.loads((run / "ledger.json").read_text())["cycle"]
    assert ledger["mode"] == "overlapped" and ledger["max_staleness"] == 1 and ledger["cycles"] == 3
    correction = ledger["stale_correction"]
    assert correction["updates"] == sum(version_record(run, n)["trained_on"]["max_lag"] > 0 for n in (1, 2, 3)) >= 1
    assert correction["ratio_min"] <= correction["ratio_mean"] <= correction["ratio_max"]
    assert 0 < correction["effective_sample_size_min"] <= 1


def _cycle_process(config: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, "-m", "training", "cycle", "--config", str(config)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_version(run: Path, number: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 600
    while not (run / "versions" / f"v{number:04d}" / "version.json").is_file():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)


def test_a_killed_cycle_resumes_from_its_last_version_and_uses_each_batch_once(tmp_path, grpo_checkpoint, speed_tasks,
                                                                              grpo_in_process_run):
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, name="run", mode="staged", beta=COMPARED_BETA)
    process = _cycle_process(config)
    run = tmp_path / "run"
    _wait_for_version(run, 1, process)
    os.killpg(process.pid, signal.SIGKILL)  # the cycle and its stage processes, wherever they were in cycle 1
    process.communicate()

    resumed = write_config(tmp_path, grpo_checkpoint, speed_tasks, name="run", mode="staged", beta=COMPARED_BETA,
                           resume_from_checkpoint=True)
    result = run_training_cli("cycle", "--config", str(resumed))
    assert result.returncode == 0, result.stderr
    # Resumed wherever it was killed, it ends where an uninterrupted run ends (staged equals in-process, bit for bit).
    assert checkpoint_content_hash(run / "checkpoint") == checkpoint_content_hash(grpo_in_process_run / "checkpoint")
    rows = rollout_rows(run)
    assert sorted(r["rollout_id"] for r in rows) == sorted(r["rollout_id"] for r in rollout_rows(grpo_in_process_run))
    assert [version_record(run, n)["trained_on"]["batch"] for n in (1, 2)] == [0, 1]
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "completed" and len(record["resumed"]) == 1


def test_a_killed_generation_process_is_run_again_and_loses_or_repeats_nothing(tmp_path, grpo_checkpoint,
                                                                              speed_tasks):
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, name="run", mode="overlapped", max_staleness=1,
                          stage_launcher="python")
    killed = []

    def kill_the_first_generation_of_batch_one():
        deadline = time.monotonic() + 600
        while not killed and time.monotonic() < deadline:
            for pid in os.listdir("/proc"):
                try:
                    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except (OSError, ValueError):
                    continue
                if b"generate" in command and b"--batch" in command and command[command.index(b"--batch") + 1] == b"1" \
                        and str(tmp_path).encode() in b" ".join(command):
                    time.sleep(1.0)  # let it get into its work
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(pid)
                    return
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_the_first_generation_of_batch_one, daemon=True)
    watcher.start()
    result = run_training_cli("cycle", "--config", str(config), timeout=900)
    watcher.join()
    assert result.returncode == 0, result.stderr
    assert killed, "the generation process of batch 1 was never seen"
    run = tmp_path / "run"
    ledger = json.loads((run / "ledger.json").read_text())["cycle"]
    assert ledger["stage_restarts"] >= 1
    assert len(records(run, 1)) == 8
    rows = rollout_rows(run)
    assert len(rows) == 16 and len({r["rollout_id"] for r in rows}) == 16
    assert [version_record(run, n)["trained_on"]["batch"] for n in (1, 2)] == [0, 1]


def _prepared_with_stale_batches(tmp_path, grpo_checkpoint, speed_tasks, **overrides) -> tuple[Path, Path]:
    """An overlapped run (max_staleness 1, 5 steps) prepared, with batches 0-2 generated and scored by v0000, as a
    crash leaves them; its resume config."""
    from training.grpo.stages import generate_stage, score_stage

    settings = {"name": "run", "mode": "overlapped", "max_staleness": 1, "max_steps": 5, "stage_launcher": "lanes",
                **overrides}
    result = run_training_cli("cycle", "--config", str(write_config(tmp_path, grpo_checkpoint, speed_tasks, **settings)),
                              "--prepare-only")
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    for batch in range(3):
        generate_stage(run, batch, 0)
        score_stage(run, batch)
    return run, write_config(tmp_path, grpo_checkpoint, speed_tasks, resume_from_checkpoint=True, **settings)


def _lane_pid(run: Path, lane: str, process: subprocess.Popen) -> int:
    deadline = time.monotonic() + 300
    while True:
        path = run / "run.json"
        record = json.loads(path.read_text()) if path.is_file() else {}  # written once the cycle has checked its inputs
        pid = record.get("cycle", {}).get("lanes", {}).get(lane)
        if pid:
            return pid
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)


def test_an_overlapped_resume_over_stale_batches_regenerates_them_and_finishes(tmp_path, grpo_checkpoint,
                                                                              speed_tasks):
    # Before, the update dropped batch 2 (v0000's, two behind v0002) after the generation lane had passed it, and both
    # waited for good: the update for batch 2, the lane for v0003.
    run, config = _prepared_with_stale_batches(tmp_path, grpo_checkpoint, speed_tasks, stage_timeout_s=240)
    process = _cycle_process(config)
    # A slow generator: the generation lane stopped for 3 s at its start; the update lane waits, nothing fails.
    generator = _lane_pid(run, "generate", process)
    os.kill(generator, signal.SIGSTOP)
    time.sleep(3)
    os.kill(generator, signal.SIGCONT)
    try:
        stdout, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, stderr
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "completed" and record["steps"] == 5
    assert [version_record(run, n)["trained_on"]["batch"] for n in range(1, 6)] == [0, 1, 2, 3, 4]
    assert all(version_record(run, n)["trained_on"]["max_lag"] <= 1 for n in range(1, 6))
    # Batch 2 was v0000's, two versions behind the v0002 that trains it: dropped, counted, generated again.
    assert {r["policy_version"] for r in records(run, 2)} != {"v0000"}
    ledger = json.loads((run / "ledger.json").read_text())["cycle"]
    assert ledger["records_dropped_stale"] == 8 and ledger["idle_s"]["update"] > 0


def test_a_wedged_cycle_fails_in_one_line_naming_what_it_waited_for(tmp_path, grpo_checkpoint, speed_tasks):
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, name="run", mode="overlapped", max_staleness=1,
                          max_steps=3, stage_launcher="lanes", stage_timeout_s=45)
    process = _cycle_process(config)
    run = tmp_path / "run"
    generator = _lane_pid(run, "generate", process)
    os.kill(generator, signal.SIGSTOP)  # a generation that never ends
    try:
        stdout, stderr = process.communicate(timeout=400)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(generator, signal.SIGKILL)
    assert process.returncode == 2
    line = stderr.strip().splitlines()[-1]  # after what the lane processes printed while they worked
    assert line.startswith(f"error: {run}: ") and "waited more than 45 s (stage_timeout_s) for stage generate --batch 0 --version 0 to finish" in line
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "failed" and "for stage generate --batch 0 --version 0 to finish" in record["error"]


def test_sigterm_leaves_run_json_saying_why_the_run_stopped(tmp_path, grpo_checkpoint, speed_tasks):
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, name="run", mode="staged")
    process = _cycle_process(config)
    run = tmp_path / "run"
    _wait_for_version(run, 1, process)
    process.terminate()  # the cycle alone, as a scheduler's or an operator's stop reaches it
    try:
        process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "interrupted"  # the app shows it as cancelled
    assert record["error"] == "stopped by SIGTERM; resume it with resume_from_checkpoint: true"
