"""GRPO config files: TRL's own GRPOConfig keys under TRL's names, Pairwise's keys beside them, one line per mistake."""

import pytest

from training.cli import main
from training.config import ConfigError
from training.grpo.config import GRPORunConfig, load_grpo_config

REQUIRED = "base_checkpoint: ckpt\ntasks: tasks.jsonl\noutput_dir: run\nuse_cpu: true\n"


def write(tmp_path, text):
    path = tmp_path / "grpo.yaml"
    path.write_text(REQUIRED + text)
    return path


def test_trl_keys_are_read_under_trl_names_with_trl_defaults(tmp_path):
    config = load_grpo_config(write(tmp_path, (
        "num_generations: 4\nper_device_train_batch_size: 8\nloss_type: dr_grpo\nscale_rewards: batch\nbeta: 0.04\n"
        "epsilon: 0.3\ntemperature: 0.7\nmax_completion_length: 32\nlearning_rate: 5e-6\ntop_p: 0.9\n"
        "mask_truncated_completions: true\nnum_iterations: 2\n")))

    assert isinstance(config, GRPORunConfig)
    assert (config.num_generations, config.loss_type, config.scale_rewards) == (4, "dr_grpo", "batch")
    assert (config.beta, config.epsilon, config.temperature, config.top_p) == (0.04, 0.3, 0.7, 0.9)
    assert config.max_completion_length == 32 and config.learning_rate == 5e-6
    assert config.mask_truncated_completions is True and config.num_iterations == 2
    # TRL derives its own values as it would for `trl grpo`: one generation batch per optimizer step.
    assert config.generation_batch_size == 8 and config.steps_per_generation == 1
    # Keys not written keep TRL's defaults, except the few Pairwise changes (documented in --help-config).
    from trl import GRPOConfig

    assert config.epsilon_high == GRPOConfig.__dataclass_fields__["epsilon_high"].default
    assert config.bf16 is False and config.activation_checkpointing is False
    assert config.dynamic_sampling is False and config.difficulty_filter is False


def test_pairwise_keys_sit_beside_trl_keys(tmp_path):
    config = load_grpo_config(write(tmp_path, (
        "dynamic_sampling: true\ndynamic_sampling_max_rounds: 2\ndifficulty_filter: true\ndifficulty_samples: 4\n"
        "difficulty_min_pass_rate: 0.1\nmax_generated_tokens: 5000\n")))

    assert config.base_checkpoint == "ckpt" and config.tasks == "tasks.jsonl" and config.output_dir == "run"
    assert config.dynamic_sampling and config.dynamic_sampling_max_rounds == 2
    assert config.difficulty_filter and config.difficulty_samples == 4 and config.difficulty_min_pass_rate == 0.1
    assert config.max_generated_tokens == 5000


@pytest.mark.parametrize(("text", "message"), [
    ("num_generatons: 4\n", "unknown key 'num_generatons' (did you mean 'num_generations'?)"),
    ("scale_rewards: sometimes\n", "scale_rewards must be one of"),
    ("num_generations: four\n", "num_generations must be a whole number, got 'four'"),
    ("num_generations: 1\n", "num_generations must be at least 2"),
    ("temperature: 0\n", "temperature must be above 0"),
    ("difficulty_min_pass_rate: 0.8\ndifficulty_max_pass_rate: 0.5\n", "0 <= min < max <= 1"),
    ("dynamic_sampling: perhaps\n", "dynamic_sampling must be true or false"),
    ("use_vllm: true\nuse_cpu: true\n", "TRL's vLLM generation needs a CUDA GPU"),
    ("num_generations: 3\nper_device_train_batch_size: 8\n", "must be divisible by num_generations"),
    ("dtype: bfloat16\n", "write model_init_kwargs: {dtype: bfloat16} instead"),
])
def test_a_mistake_is_one_line_naming_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError) as caught:
        load_grpo_config(write(tmp_path, text))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_use_vllm_where_vllm_is_missing_or_there_is_no_gpu_is_one_line(tmp_path):
    import importlib.util

    import torch

    with pytest.raises(ConfigError) as caught:
        load_grpo_config(write(tmp_path, "use_vllm: true\n"))
    if not torch.cuda.is_available():  # this machine: the CPU rule comes first, whatever is installed
        assert "TRL's vLLM generation needs a CUDA GPU" in str(caught.value)
    else:
        assert importlib.util.find_spec("vllm") is None, "vllm and a GPU are here: the setting is valid"
        assert "vllm is not installed here" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_missing_required_key(tmp_path):
    path = tmp_path / "grpo.yaml"
    path.write_text("base_checkpoint: ckpt\noutput_dir: run\n")
    with pytest.raises(ConfigError, match="required key 'tasks' is missing"):
        load_grpo_config(path)


def test_help_config_lists_pairwise_and_trl_keys(capsys):
    assert main(["grpo", "--help-config"]) == 0
    out = capsys.readouterr().out
    for key in ("base_checkpoint", "tasks", "dynamic_sampling", "difficulty_filter", "num_generations", "loss_type",
                "scale_rewards", "beta", "epsilon", "temperature", "max_completion_length", "use_vllm", "vllm_mode"):
        assert f"  {key} = " in out, key
    assert out.index("dynamic_sampling") < out.index("num_generations")  # Pairwise's keys first


def test_every_pairwise_key_has_help():
    fields = GRPORunConfig.__dataclass_fields__
    for name in GRPORunConfig.pairwise_keys:
        assert fields[name].metadata.get("help"), name


def test_grpo_without_config_is_one_line(capsys):
    assert main(["grpo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--config FILE.yaml is required" in err[0]


def test_slurm_templates_launch_grpo_with_a_vllm_server_or_in_process():
    from pathlib import Path

    slurm = Path(__file__).resolve().parents[2] / "deploy" / "slurm"
    in_process = (slurm / "grpo.sbatch").read_text()
    assert in_process.startswith("#!/bin/bash") and 'deploy/slurm/train.sh grpo "$CONFIG"' in in_process
    step = (slurm / "train.sh").read_text()  # the training step every trainer's template shares
    assert "-m accelerate.commands.launch" in step and "-m training '$KIND' --config" in step
    server = (slurm / "grpo_vllm.sbatch").read_text()
    assert server.startswith("#!/bin/bash") and "#SBATCH --nodes=2" in server
    assert "trl vllm-serve --model" in server and "accelerate launch" in server
    assert "-m training grpo --config '$SERVER_CONFIG'" in server
    assert 'vllm_mode="server"' in server and "vllm_server_host=host" in server


def test_the_mode_key_chooses_in_process_staged_or_overlapped(tmp_path):
    assert load_grpo_config(write(tmp_path, "")).mode == "in_process"
    staged = load_grpo_config(write(tmp_path, "mode: staged\nmax_steps: 3\n"))
    assert (staged.mode, staged.max_staleness, staged.stage_launcher) == ("staged", 0, "forkserver")
    overlapped = load_grpo_config(write(tmp_path, "mode: overlapped\nmax_staleness: 2\nmax_steps: 3\n"))
    assert (overlapped.mode, overlapped.max_staleness) == ("overlapped", 2)


@pytest.mark.parametrize(("text", "message"), [
    ("mode: pipelined\n", "mode must be one of in_process, staged, overlapped, got 'pipelined'"),
    ("mode: staged\nmax_steps: 3\nmax_staleness: 1\n", "max_staleness is 1 but mode staged waits for each version"),
    ("mode: overlapped\nmax_steps: 3\n", "max_staleness must be at least 1 in mode overlapped"),
    ("mode: staged\n", "max_steps must be set in mode staged: it is the number of cycles"),
    ("mode: staged\nmax_steps: 3\ndynamic_sampling: true\n", "dynamic_sampling is True, but mode staged runs one "
                                                             "generation batch per optimizer step"),
    ("mode: overlapped\nmax_staleness: 1\nmax_steps: 3\nnum_iterations: 2\n", "num_iterations is 2, but mode overlapped"),
    ("mode: staged\nmax_steps: 3\nstage_launcher: docker\n",
     "stage_launcher must be one of forkserver, python, lanes, got 'docker'"),
    ("mode: staged\nmax_steps: 3\nstage_launcher: lanes\n", "stage_launcher is lanes, which keeps a model per lane "
                                                           "between versions; mode staged starts each stage afresh"),
])
def test_a_mode_the_cycle_cannot_run_is_one_line(tmp_path, text, message):
    with pytest.raises(ConfigError) as refused:
        load_grpo_config(write(tmp_path, text))
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_stage_of_a_folder_that_is_no_staged_run_is_one_line(tmp_path, capsys):
    assert main(["update", "--run", str(tmp_path), "--version", "v0000"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: {tmp_path} is not a staged GRPO run folder (no config.yaml); "
                                               "start one with python -m training cycle --config F")


@pytest.mark.parametrize(("text", "message"), [
    ("mode: staged\nmax_steps: 3\nprocesses: 2\nper_device_train_batch_size: 5\nnum_generations: 5\n",
     "per_device_train_batch_size is 5, which does not split into processes: 2 (mode staged's update shares one "
     "step's 5 answers among its processes); set it to a multiple of 2"),
    ("processes: 2\nper_device_train_batch_size: 3\nnum_generations: 4\n",
     "num_generations is 4, but with processes: 2 a generation batch holds 6 answers (per_device_train_batch_size 3 "
     "x processes 2 x 1 step), which are not whole groups of 4"),
    ("processes: 2\nper_device_train_batch_size: 4\nnum_generations: 4\ngeneration_batch_size: 12\n",
     "generation_batch_size is 12, which is not a multiple of the global batch 8"),
])
def test_a_batch_the_processes_cannot_share_is_refused_before_anything_runs(tmp_path, text, message):
    """TRL checks its generation batch only once the processes have started, and the staged update only after
    generating and scoring; the config check does it first, with the process count the launch will have."""
    with pytest.raises(ConfigError) as refused:
        load_grpo_config(write(tmp_path, text))
    assert message in str(refused.value) and "\n" not in str(refused.value)


def test_a_batch_that_splits_over_the_processes_is_accepted(tmp_path):
    staged = load_grpo_config(write(tmp_path, "mode: staged\nmax_steps: 3\nprocesses: 2\n"
                                              "per_device_train_batch_size: 8\nnum_generations: 4\n"))
    assert (staged.processes, staged.per_device_train_batch_size) == (2, 8)
    in_process = load_grpo_config(write(tmp_path, "processes: 2\nper_device_train_batch_size: 4\nnum_generations: 8\n"
                                                  "generation_batch_size: 16\n"))
    assert in_process.generation_batch_size == 16
