"""The accelerate configs in deploy/ are ones accelerate itself can read, with the stage their name says."""

from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.mark.parametrize(("name", "distributed_type", "zero_stage"), [
    ("multi_gpu.yaml", "MULTI_GPU", None),
    ("zero2.yaml", "DEEPSPEED", 2),
    ("zero3.yaml", "DEEPSPEED", 3),
])
def test_accelerate_config_reads(name, distributed_type, zero_stage):
    from accelerate.commands.config.config_args import ClusterConfig

    config = ClusterConfig.from_yaml_file(str(DEPLOY / "accelerate" / name))
    assert str(config.distributed_type).endswith(distributed_type)
    if zero_stage is not None:
        assert config.deepspeed_config["zero_stage"] == zero_stage


@pytest.mark.parametrize("name", ["dpo.sbatch", "grpo.sbatch", "reward.sbatch"])
def test_slurm_templates_launch_the_training_cli(name):
    text = (DEPLOY / "slurm" / name).read_text()
    kind = name.split(".")[0]
    assert text.startswith("#!/bin/bash") and "#SBATCH" in text
    # The training step every trainer's template shares: accelerate on GPU nodes, one process on a CPU partition.
    assert f'exec deploy/slurm/train.sh {kind} "$CONFIG" "$ACCELERATE_CONFIG"' in text
    step = (DEPLOY / "slurm" / "train.sh").read_text()
    assert "-m accelerate.commands.launch" in step and "-m training '$KIND' --config '$CONFIG'" in step
    assert '"$PYTHON" -m training "$KIND" --config "$CONFIG"' in step
