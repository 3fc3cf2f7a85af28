"""Sharded training: DeepSpeed ZeRO-2 and ZeRO-3 through accelerate, from deploy/accelerate/zero2.yaml and zero3.yaml
with the CPU settings docs/deploy.md gives (mixed_precision 'no', use_cpu true, two processes), run DPO to the curve
of the one-process run; a DeepSpeed setting DeepSpeed refuses ends the run with DeepSpeed's own message in one line.

They run in the sharded-training environment (scripts/install_deepspeed.sh: .venv with DeepSpeed on top), which the
test command installs; a test fails (never skips) when it is missing. DeepSpeed picks its CPU accelerator and
communicates over gloo; it compiles its shared-memory op with the system compiler the first time, once per machine.
The tolerance and why the curves agree: tests/training/test_data_parallel.py."""

import json
from pathlib import Path

import pytest

from bench.data_parallel import cpu_zero_config
from tests.training.conftest import REPO
from tests.training.helpers import load_weights, write_snapshot_run_config
from tests.training.test_data_parallel import GLOBAL_BATCH, STEPS, assert_same_curve, launch_training

pytestmark = pytest.mark.slow

DEEPSPEED_PYTHON = REPO / ".venv-deepspeed" / "bin" / "python"


@pytest.fixture(scope="module")
def deepspeed_python() -> str:
    if not DEEPSPEED_PYTHON.is_file():
        pytest.fail("these tests need the sharded-training environment: run scripts/install_deepspeed.sh")
    return str(DEEPSPEED_PYTHON)


def dpo_run(folder: Path, checkpoint: Path, snapshot: Path, processes: int, *, accelerate_config: Path | None = None,
            python: str | None = None):
    folder.mkdir()
    config = write_snapshot_run_config(folder, checkpoint, snapshot, name="dpo", max_steps=STEPS, seed=0,
                                       per_device_train_batch_size=GLOBAL_BATCH // processes, torch_threads=1,
                                       report_to=["none"])
    options = {"accelerate_config": accelerate_config} if accelerate_config else {}
    result = launch_training(processes, "dpo", "--config", str(config), timeout=600, **options,
                             **({"python": python} if python else {}))
    return folder / "run", result


@pytest.fixture(scope="module")
def one_process_dpo(tmp_path_factory, tiny_checkpoint, tiny_snapshot) -> Path:
    run, result = dpo_run(tmp_path_factory.mktemp("dpo-one") / "one", tiny_checkpoint, tiny_snapshot, 1)
    assert result.returncode == 0, result.stderr[-3000:]
    return run


@pytest.mark.parametrize("shipped", ["zero2", "zero3"])
def test_two_process_zero_dpo_matches_one_process(tmp_path, deepspeed_python, one_process_dpo, tiny_checkpoint,
                                                  tiny_snapshot, shipped):
    from transformers import AutoModelForCausalLM

    config = cpu_zero_config(tmp_path, shipped)
    run, result = dpo_run(tmp_path / "zero", tiny_checkpoint, tiny_snapshot, 2, accelerate_config=config,
                          python=deepspeed_python)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Setting accelerator to CPU" in result.stdout + result.stderr  # DeepSpeed's, not plain DDP
    assert_same_curve(one_process_dpo, run, "loss")
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "completed" and record["hardware"]["world_size"] == 2
    # ZeRO-3 shards the weights; the checkpoint is gathered when saved and loads as a one-process run's does.
    assert sorted(path.name for path in run.glob("checkpoint*")) == ["checkpoint"]
    sharded, one = load_weights(run / "checkpoint"), load_weights(one_process_dpo / "checkpoint")
    # DeepSpeed's gathered state dict holds the tied output layer a second time (the same values); it loads tied.
    assert sharded.keys() - {"lm_head.weight"} == one.keys()
    if "lm_head.weight" in sharded:
        assert sharded["lm_head.weight"].equal(sharded["model.embed_tokens.weight"])
    AutoModelForCausalLM.from_pretrained(run / "checkpoint", local_files_only=True)
    if shipped == "zero3":  # its sharded weights are not gathered to score the test split: said, not skipped
        assert record["results"]["test"] is None and "ZeRO-3" in record["results"]["note"]
    else:
        assert record["results"]["test"] is not None


def test_a_deepspeed_setting_deepspeed_refuses_is_its_own_message_on_one_line(tmp_path, deepspeed_python,
                                                                             tiny_checkpoint, tiny_snapshot):
    config = cpu_zero_config(tmp_path, "zero2", zero_stage=7)
    run, result = dpo_run(tmp_path / "bad", tiny_checkpoint, tiny_snapshot, 2, accelerate_config=config,
                          python=deepspeed_python)
    assert result.returncode != 0
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error: ")]
    assert errors and errors[0].startswith("error: DeepSpeed refused the accelerate config's DeepSpeed settings: ")
    assert "DeepSpeedZeroConfig" in errors[0] and "stage" in errors[0]
    # The training processes print no traceback; the one the output may hold is the launcher's own report that a
    # process failed (torch elastic's ChildFailedError), which every accelerate launch prints for a failed process.
    output = result.stdout + result.stderr
    assert output.count("Traceback") <= 1 and "File \"" + str(REPO / "training") not in output, output[-4000:]
    # DeepSpeed reads its settings only when the trainer prepares the model: the run folder exists by then, and
    # run.json records the same line as failed.
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "failed" and record["error"] in errors[0]
