"""What the DPO and GRPO recipes share around a TRL trainer: the trainer's own arguments, the run folder's
callbacks (metrics.jsonl, TensorBoard), LoRA, resuming, and saving the trained checkpoint.

The config object a user wrote is a subclass of TRL's config (training/config.py); the trainer gets a
shallow copy of it whose `output_dir` is the run folder's trainer_checkpoints/ (a copy, because building
the config again would re-run TRL's checks on values it has already resolved).
"""

import copy
import math
import os
from pathlib import Path

from training.errors import PairwiseInputError


def is_main_process() -> bool:
    # Read from the launcher's environment (accelerate / torchrun set RANK) rather than by creating
    # accelerate state early, which the trainer's own arguments must be the first to configure.
    return int(os.environ.get("RANK", "0")) == 0


def resume_setting(config) -> bool | str:
    """`resume_from_checkpoint` as written: false, true (the last checkpoint in the run folder) or a path."""
    value = config.resume_from_checkpoint
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "false", "no")):
        return False
    if isinstance(value, bool):
        return value
    return True if value.strip().lower() in ("true", "yes") else value


def check_output_dir(config, run) -> str | None:
    """Refuse to mix two runs in one folder; return the trainer checkpoint to resume from, if any."""
    from transformers.trainer_utils import get_last_checkpoint

    resume = resume_setting(config)
    if resume is False:
        if run.path.exists() and any(run.path.iterdir()):
            raise PairwiseInputError(f"output_dir {run.path} already exists and is not empty; choose a new "
                                     "output_dir, or set resume_from_checkpoint: true to continue that run")
        return None
    if isinstance(resume, str):
        if not Path(resume).is_dir():
            raise PairwiseInputError(f"resume_from_checkpoint {resume} is not a folder; give a trainer checkpoint "
                                     "folder or true for the last one in output_dir")
        return resume
    last = get_last_checkpoint(str(run.trainer_checkpoints)) if run.trainer_checkpoints.is_dir() else None
    if last is None:
        raise PairwiseInputError(f"resume_from_checkpoint is true but {run.trainer_checkpoints} holds no "
                                 "checkpoint; start a fresh run with resume_from_checkpoint: false")
    return last


def _report_to(config) -> list[str]:
    value = config.report_to
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    return [item for item in items if item not in ("none", "")]


def trainer_arguments(config, run):
    """The config as the trainer's arguments: checkpoints into the run folder, TensorBoard attached by
    run_callbacks instead (transformers would write it under output_dir), and TRL's dtype default
    (float32) unless model_init_kwargs says otherwise."""
    args = copy.copy(config)
    args.output_dir = str(run.trainer_checkpoints)
    args.report_to = [item for item in _report_to(config) if item != "tensorboard"]
    args.resume_from_checkpoint = None  # passed to train() explicitly
    return args


def run_callbacks(config, run) -> list:
    """metrics.jsonl (every logged row) and, if asked, TensorBoard in the run folder."""
    from transformers import TrainerCallback

    class MetricsJsonlCallback(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and logs:
                row = {k: v for k, v in logs.items() if isinstance(v, int | float) and math.isfinite(v)}
                run.append_metrics({"event": "train", "step": state.global_step,
                                    "epoch": round(state.epoch or 0.0, 4), **row})

    callbacks = [MetricsJsonlCallback()]
    if "tensorboard" in _report_to(config) and is_main_process():
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        callbacks.append(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(run.tensorboard))))
    return callbacks


def lora_config(config):
    """peft's LoraConfig from the use_peft / lora_* keys, or None."""
    if not config.use_peft:
        return None
    from peft import LoraConfig

    targets = config.lora_target_modules
    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets[0] if targets == ["all-linear"] else targets,
        task_type="CAUSAL_LM",
    )


def model_dtype(config):
    """The dtype TRL loads the policy in: model_init_kwargs' dtype, else float32 (TRL's default)."""
    import torch

    name = (config.model_init_kwargs or {}).get("dtype", "float32")
    if not isinstance(name, str):
        return name
    return "auto" if name == "auto" else getattr(torch, name)


def save_checkpoint(trainer, config, run, tokenizer) -> None:
    """checkpoint/: full weights that AutoModelForCausalLM loads; with LoRA also adapter/ (unmerged)."""
    if not config.use_peft:
        trainer.save_model(str(run.checkpoint))
        if trainer.accelerator.is_main_process:
            tokenizer.save_pretrained(run.checkpoint)
        return
    trainer.save_model(str(run.path / "adapter"))
    if trainer.accelerator.is_main_process:
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        merged.save_pretrained(run.checkpoint)
        tokenizer.save_pretrained(run.checkpoint)


def is_zero3(trainer) -> bool:
    plugin = getattr(trainer.args, "deepspeed_plugin", None)
    return plugin is not None and getattr(plugin, "zero_stage", 0) == 3
