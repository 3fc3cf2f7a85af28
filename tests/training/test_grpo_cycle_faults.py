"""The staged GRPO cycle under overlap and faults, on the tiny checkpoint, on the CPU: answers one version old trained
with TRL's sampling correction, a killed cycle resumed, a killed generation process run again."""

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
    assert {r["logprobs_source"] for r in rows if r["batch"] == 1} == {"recorded at generation (v0000)"}
    # TRL's truncated importance sampling ran on the stale batch (it logs the ratio), and only there.
    steps = {row["step"]: row for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
             if row.get("event") == "train" and "loss" in row}
    assert "sampling/importance_sampling_ratio/mean" in steps[2]
    assert "sampling/importance_sampling_ratio/mean" not in steps[1]
    ledger = json.loads((run / "ledger.json").read_text())["cycle"]
    assert ledger["mode"] == "overlapped" and ledger["max_staleness"] == 1 and ledger["cycles"] == 3


def _cycle_process(config: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, "-m", "training", "cycle", "--config", str(config)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def test_a_killed_cycle_resumes_from_its_last_version_and_uses_each_batch_once(tmp_path, grpo_checkpoint, speed_tasks,
                                                                              grpo_in_process_run):
    config = write_config(tmp_path, grpo_checkpoint, speed_tasks, name="run", mode="staged", beta=COMPARED_BETA)
    process = _cycle_process(config)
    run = tmp_path / "run"
    deadline = time.monotonic() + 600
    while not (run / "versions" / "v0001" / "version.json").is_file():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
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
