"""What the DPO, GRPO and reward recipes share around a TRL trainer: the trainer's own arguments, the run folder's
callbacks (metrics.jsonl, TensorBoard), LoRA, resuming, and saving the trained checkpoint.

The config object a user wrote is a subclass of TRL's config (training/config.py); the trainer gets a
shallow copy of it whose `output_dir` is the run folder's trainer_checkpoints/ (a copy, because building
the config again would re-run TRL's checks on values it has already resolved).
"""

import copy
import math
import os
import shutil
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from training.errors import PairwiseInputError

# transformers 5 renamed is_gradient_checkpointing; TRL still reads the old name while it trains, whatever the
# config says, and the warning in the middle of a run's log says nothing its user can act on.
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)


def is_main_process() -> bool:
    # Read from the launcher's environment (accelerate / torchrun set RANK) rather than by creating
    # accelerate state early, which the trainer's own arguments must be the first to configure.
    return int(os.environ.get("RANK", "0")) == 0


def world_size() -> int:
    """How many processes train together (1 without a launcher), read the same way as is_main_process."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def wait_for_all_processes() -> None:
    """A barrier across the launched processes; nothing with one process. Used before the main process creates the
    run folder, so that no process finds it already made by another and refuses it as a second run's."""
    import torch.distributed as dist

    if world_size() > 1 and dist.is_available() and dist.is_initialized():
        dist.barrier()


def check_launched(config, kind: str) -> None:
    """A config asking for more processes than were started would train alone on a smaller global batch than it
    says; refuse it in one line that gives the command. (Under a launcher its count is the launcher's.)"""
    processes = getattr(config, "processes", 1)
    if processes > 1 and world_size() == 1:
        raise PairwiseInputError(
            f"processes is {processes} but this command runs as one process; start it with `accelerate launch "
            f"--config_file deploy/accelerate/cpu_ddp.yaml --num_processes {processes} -m training {kind} --config "
            "FILE` (the app's local backend does), or set processes: 1")
    check_not_fsdp_on_cpu(config)


def check_not_fsdp_on_cpu(config) -> None:
    if os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" and config.use_cpu:
        import accelerate

        # accelerate keeps its FSDP plugin only for GPU-like devices: on CPU the processes would run as plain DDP,
        # every one holding every weight, under a config that says sharded.
        raise PairwiseInputError(
            f"an FSDP launch on CPU: accelerate {accelerate.__version__} shards with FSDP on GPUs only and would "
            "train this as plain DDP; launch with deploy/accelerate/cpu_ddp.yaml on CPU, or FSDP on GPUs")


def quiet_other_processes() -> None:
    """Progress bars from the main process only: every process loads, tokenizes and saves the same things, and N
    copies of each bar in one log say nothing more than one."""
    if is_main_process():
        return
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()


def resume_setting(config) -> bool | str:
    """`resume_from_checkpoint` as written: false, true (the last checkpoint in the run folder) or a path."""
    return resume_value(config.resume_from_checkpoint)


def resume_value(value) -> bool | str:
    """A `resume_from_checkpoint` value (None, a bool or text) read as false, true or a path."""
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
    run_callbacks instead (transformers would write it under output_dir)."""
    args = copy.copy(config)
    args.output_dir = str(run.trainer_checkpoints)
    args.report_to = [item for item in _report_to(config) if item != "tensorboard"]
    args.resume_from_checkpoint = None  # passed to train() explicitly
    if args.ddp_find_unused_parameters is None:
        # Text models use every trainable parameter in each forward pass; transformers' default (look for unused
        # ones when activation checkpointing is off) costs a second pass over the autograd graph per step and warns
        # about it in every process.
        args.ddp_find_unused_parameters = False
    if args.dataloader_pin_memory:
        import torch

        # Pinned memory only speeds copies to an accelerator; without one torch warns on every dataloader.
        args.dataloader_pin_memory = torch.accelerator.is_available()
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


def lora_config(config, *, task_type: str = "CAUSAL_LM"):
    """peft's LoraConfig from the use_peft / lora_* keys, or None. With task_type SEQ_CLS peft also trains and
    saves the classifier's score head."""
    if not config.use_peft:
        return None
    from peft import LoraConfig

    targets = config.lora_target_modules
    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets[0] if targets == ["all-linear"] else targets,
        task_type=task_type,
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


# --- the run record around a trainer ------------------------------------------------------------------------


def start_run_record(run, config, *, kind: str, base_path: Path, base_hash: str | None, resume_from: str | None,
                     launches_its_processes: bool = False, **fields) -> dict | None:
    """Create the run folder and write run.json as running (main process only). A resumed run keeps its
    record and start time and notes the resume. `fields` are the recipe's own (snapshot, tasks, ...).
    `launches_its_processes`: the command runs as one process and starts its `processes` itself (the staged GRPO
    cycle's update), so it is not refused for running as one. Returns the record the run had before, if it is
    resumed."""
    from training.config import config_record
    from training.run_folder import RUN_FORMAT, RecordStatus, hardware, library_versions, utc_now
    from training.snapshot import code_version

    if launches_its_processes:
        check_not_fsdp_on_cpu(config)
    else:
        check_launched(config, kind)
    run.create()
    previous = run.read_record() if resume_from is not None else None
    run.record = previous or {}
    run.update(
        format=RUN_FORMAT,
        run=run.path.name,
        kind=kind,
        status=RecordStatus.RUNNING,
        config=config_record(config),
        base_checkpoint={"path": str(base_path.resolve()), "content_hash": base_hash},
        code_version=code_version(),
        libraries=library_versions(),
        hardware=hardware(),
        started_at=(previous or {}).get("started_at") or utc_now(),
        ended_at=None,
        error=None,
        **fields,
    )
    if resume_from is not None:
        run.update(resumed=[*run.record.get("resumed", []), {"at": utc_now(), "from": str(resume_from)}])
    return previous


@dataclass
class SnapshotRunInputs:
    """What a trainer on a snapshot (DPO, reward) has checked before its run folder exists."""

    run: object  # training.run_folder.RunFolder
    resume_from: str | None
    base_path: Path
    splits: dict  # "train", "test": datasets.Dataset
    manifest: dict
    tokenizer: object


def snapshot_run_inputs(config, *, check_base) -> SnapshotRunInputs:
    """Everything a user can get wrong in a snapshot run, checked before anything is written: the output folder
    (or the run to resume), the base checkpoint (`check_base`: as a causal LM, or as a classifier), the snapshot's
    version and hashes, a train split with rows, and a chat template when the rows are conversational. Also sets
    torch_threads."""
    import torch
    from transformers import AutoTokenizer

    from training import snapshot as snapshot_format
    from training.generation import check_chat_template
    from training.run_folder import RunFolder

    quiet_other_processes()
    check_not_fsdp_on_cpu(config)  # in every process, so that none is left waiting for one that stopped
    run = RunFolder(config.output_dir)
    resume_from = check_output_dir(config, run)
    base_path = check_base(config.base_checkpoint)
    splits = snapshot_format.load(config.snapshot)  # verifies the version and every hash first
    manifest = snapshot_format.read_manifest(config.snapshot)
    if len(splits["train"]) == 0:
        raise PairwiseInputError(f"snapshot {config.snapshot} has no train rows; export it with looser filters")
    tokenizer = AutoTokenizer.from_pretrained(base_path, local_files_only=True)
    check_chat_template(tokenizer, f"base_checkpoint {base_path}")
    if manifest.get("row_format", "conversational") == "conversational" and not tokenizer.chat_template:
        raise PairwiseInputError(f"base_checkpoint {base_path} has no chat template but snapshot {config.snapshot} "
                                 "is conversational; export with --format standard or use a chat checkpoint")
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    wait_for_all_processes()  # every process has checked the output folder before the main one creates it
    return SnapshotRunInputs(run, resume_from, base_path, splits, manifest, tokenizer)


def write_snapshot_run_ledger(run, trainer, config, *, base_path: Path, base_hash: str, manifest: dict,
                              out_hash: str, train_pairs: int, wall_s: float) -> None:
    """ledger.json of a trainer on a snapshot: its inputs, its checkpoint, and what it consumed."""
    run.write_ledger({
        "inputs": [
            {"kind": "checkpoint", "path": str(base_path.resolve()), "content_hash": base_hash},
            {"kind": "snapshot", "snapshot_id": manifest.get("snapshot_id"), "files": manifest["files"]},
        ],
        "outputs": [{"kind": "checkpoint", "path": "checkpoint", "content_hash": out_hash}],
        "consumed": {
            "optimizer_steps": trainer.state.global_step,
            "epochs": round(trainer.state.epoch or 0.0, 4),
            "train_pairs": train_pairs,
            "pairs_seen": trainer.state.global_step * config.per_device_train_batch_size
            * config.gradient_accumulation_steps * trainer.accelerator.num_processes,
            "world_size": trainer.accelerator.num_processes,
            "wall_s": round(wall_s, 2),
        },
    })


def snapshot_record(config, manifest: dict) -> dict:
    """The snapshot as run.json records it."""
    return {"path": str(Path(config.snapshot).resolve()), "snapshot_id": manifest.get("snapshot_id"),
            "files": manifest["files"], "counts": manifest.get("counts")}


@contextmanager
def trainer_setup(run, config, *, recipe: str, fresh: bool, is_main: bool):
    """Around building the trainer: a ValueError from TRL's own option checks is a config mistake (one line),
    and on any failure a fresh run folder is removed, since nothing was trained yet."""
    try:
        try:
            yield
        except ValueError as error:
            if isinstance(error, PairwiseInputError):
                raise
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise PairwiseInputError(f"{config.output_dir}: {recipe} setup refused the config: {first_line}") from None
    except BaseException:
        if fresh and is_main:
            shutil.rmtree(run.path, ignore_errors=True)
        raise


@contextmanager
def recorded_outcome(run, *, is_main: bool):
    """An interrupted or failed run says so in run.json (status and error) before the error goes on."""
    from training.run_folder import RecordStatus, utc_now

    try:
        yield
    except KeyboardInterrupt:
        if is_main:
            run.update(status=RecordStatus.INTERRUPTED, ended_at=utc_now(), error="interrupted")
        raise
    except BaseException as error:
        refused = deepspeed_refusal(error)
        if is_main:
            run.update(status=RecordStatus.FAILED, ended_at=utc_now(),
                       error=refused or f"{type(error).__name__}: {error}")
        if refused:
            raise PairwiseInputError(refused) from None
        raise


def deepspeed_refusal(error: BaseException) -> str | None:
    """DeepSpeed's own message, on one line, when its config parser refused the launch's DeepSpeed settings (it reads
    them only when the trainer prepares the model, so this is the first place the refusal can be seen)."""
    if type(error).__name__ != "ValidationError" or "DeepSpeed" not in str(error):
        return None
    lines = [line.strip() for line in str(error).splitlines()
             if line.strip() and not line.strip().startswith("For further information")]
    return "DeepSpeed refused the accelerate config's DeepSpeed settings: " + "; ".join(lines)


def record_lineage(run, *, kind: str, base_path: Path, base_hash: str, snapshot_id: str | None,
                   weights_changed: bool | None = None, reward_model: dict | None = None) -> str:
    """checkpoint/parent.json for the trained checkpoint; returns the checkpoint's content hash."""
    from training.run_folder import checkpoint_content_hash, write_parent_json

    out_hash = checkpoint_content_hash(run.checkpoint)
    write_parent_json(run.checkpoint, parent_path=str(base_path), parent_hash=base_hash, run=run.path.name,
                      kind=kind, snapshot_id=snapshot_id, content_hash=out_hash, weights_changed=weights_changed,
                      reward_model=reward_model)
    return out_hash


def record_completed(run, trainer, train_output, *, wall_s: float, out_hash: str,
                     weights_changed: bool | None = None, **fields) -> dict:
    """run.json's final state after a finished run, saying whether the weights changed (from the content hashes
    unless `weights_changed` is given); returns the record."""
    from training.run_folder import RecordStatus, utc_now, weights_outcome

    final = dict(
        status=RecordStatus.COMPLETED,
        ended_at=utc_now(),
        wall_s=round(wall_s, 2),
        steps=trainer.state.global_step,
        train_loss=round(train_output.training_loss, 6),
        output_checkpoint={"path": str(run.checkpoint.resolve()), "content_hash": out_hash},
        **fields,
    )
    run.update(**final, **weights_outcome({**run.record, **final}, run.read_metrics(), changed=weights_changed))
    return run.record
