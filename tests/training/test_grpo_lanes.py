"""The overlapped cycle with long-lived lanes (stage_launcher: lanes), on the tiny checkpoint, on the CPU: the
versions and records the lanes write are the ones fresh stage processes write from the same inputs, and a killed lane
is started again without losing, repeating or training twice on anything."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.training.helpers import COMPARED_BETA, records, rollout_rows, version_record
from tests.training.helpers import write_grpo_config as write_config
from training.grpo.stages import generate_stage, update_stage

from .conftest import REPO, run_training_cli

pytestmark = pytest.mark.slow

STEPS = 3


def lanes_config(tmp_path, grpo_checkpoint, speed_tasks):
    return write_config(tmp_path, grpo_checkpoint, speed_tasks, name="run", mode="overlapped", max_staleness=1,
                        stage_launcher="lanes", max_steps=STEPS, beta=COMPARED_BETA)


def test_lanes_write_what_fresh_stages_write_from_the_same_inputs(tmp_path, grpo_checkpoint, speed_tasks):
    result = run_training_cli("cycle", "--config", str(lanes_config(tmp_path, grpo_checkpoint, speed_tasks)))
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    ledger = json.loads((run / "ledger.json").read_text())["cycle"]
    assert (ledger["stage_launcher"], ledger["cycles"], ledger["stage_restarts"]) == ("lanes", STEPS, 0)
    # The generation lane loaded a newer version's weights into its model at least once (batch 2 comes from v0001 or
    # v0002; batch 0 from v0000).
    made_by = [records(run, batch)[0]["policy_version"] for batch in range(STEPS)]
    assert made_by[0] == "v0000" and made_by[2] != "v0000"

    # A fresh generate process, given the same batch and version, writes the same answers as the lane did; a fresh
    # update process, from the same version and records, writes the same next version, bit for bit.
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    for name in ("generated.parquet", "generate.json"):
        (copy / "batches" / "000002" / name).unlink()
    for number in range(2, STEPS + 1):
        shutil.rmtree(copy / "versions" / f"v{number:04d}")
    generate_stage(copy, 2, int(made_by[2].removeprefix("v")))
    kept = ("rollout_id", "prompt_token_ids", "completion_token_ids", "logprobs", "policy_version",
            "policy_weights_sha256", "sampling_seed")
    fresh, lane = records(copy, 2, "generated.parquet"), records(run, 2, "generated.parquet")
    assert [{key: row[key] for key in kept} for row in fresh] == [{key: row[key] for key in kept} for row in lane]
    update_stage(copy, 1)
    assert version_record(copy, 2)["content_hash"] == version_record(run, 2)["content_hash"]
    assert version_record(run, 2)["content_hash"] != version_record(run, 1)["content_hash"]


def _cycle_process(config: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen([sys.executable, "-m", "training", "cycle", "--config", str(config)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _lane_pid(run: Path, lane: str) -> int | None:
    try:
        return json.loads((run / "run.json").read_text())["cycle"]["lanes"][lane]
    except (OSError, ValueError, KeyError):
        return None


def test_killed_lanes_are_started_again_and_nothing_is_lost_or_trained_twice(tmp_path, grpo_checkpoint, speed_tasks):
    """The generation lane is killed once batch 0 is written, the update lane once it has written v0001: each is
    started again (run.json names each lane's process, so an operator can follow or stop it) and the run ends as an
    uninterrupted one would, every batch generated once and trained on once."""
    process = _cycle_process(lanes_config(tmp_path, grpo_checkpoint, speed_tasks))
    run = tmp_path / "run"
    deadline = time.monotonic() + 600
    killed = {}
    for lane, after in (("generate", "batches/000000/generated.parquet"), ("update", "versions/v0001/version.json")):
        while not (run / after).is_file() or _lane_pid(run, lane) is None:
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        killed[lane] = _lane_pid(run, lane)
        os.kill(killed[lane], signal.SIGKILL)
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-3000:]

    ledger = json.loads((run / "ledger.json").read_text())["cycle"]
    assert ledger["stage_restarts"] >= 2 and ledger["cycles"] == STEPS
    rows = rollout_rows(run)
    assert len(rows) == 8 * STEPS and len({r["rollout_id"] for r in rows}) == 8 * STEPS
    assert [version_record(run, n)["trained_on"]["batch"] for n in range(1, STEPS + 1)] == list(range(STEPS))
    for batch in range(STEPS):
        assert len(records(run, batch)) == 8
        lag = version_record(run, batch + 1)["trained_on"]["max_lag"]
        assert 0 <= lag <= 1
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    assert not (run / "versions" / ".update-lane").exists()
