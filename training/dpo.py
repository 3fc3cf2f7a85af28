"""`python -m training dpo --config FILE.yaml`: DPO on a verified snapshot, from a base checkpoint, into a run folder.

The recipe: read and check the config, the base checkpoint and the snapshot before anything is written
(bad input leaves no run folder), then TRL's DPOTrainer with the reference model = the base checkpoint,
then preference accuracy and implicit-reward margin on the snapshot's test split, base vs trained, and
the lineage (run.json, ledger.json, checkpoint/parent.json).

Multi-GPU: `accelerate launch --config_file deploy/accelerate/zero2.yaml -m training dpo --config F`.
"""

import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from training.config import ConfigError, load_config
from training.errors import PairwiseInputError

# TRL's DPO loss names (trl/trainer/dpo_config.py).
LOSS_TYPES = ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
              "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")


@dataclass
class DPORunConfig:
    """Keys of a DPO config file. Names follow TRL's DPOConfig / ModelConfig where one exists."""

    base_checkpoint: str = field(metadata={"help": "Local Hugging Face causal-LM checkpoint to start from; "
                                                   "also the DPO reference model."})
    snapshot: str = field(metadata={"help": "Snapshot folder (python manage.py export_snapshot)."})
    output_dir: str = field(metadata={"help": "Run folder to create (run.json, metrics.jsonl, checkpoint/ ...)."})
    learning_rate: float = field(default=1e-6, metadata={"help": "Peak learning rate (AdamW)."})
    lr_scheduler_type: str = field(default="linear", metadata={
        "help": "Learning-rate schedule.", "choices": ("linear", "cosine", "constant", "constant_with_warmup")})
    warmup_steps: int = field(default=0, metadata={"help": "Linear warm-up steps."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    max_grad_norm: float = field(default=1.0, metadata={"help": "Gradient clipping norm."})
    num_train_epochs: float = field(default=1.0, metadata={"help": "Epochs over the train split (if max_steps < 0)."})
    max_steps: int = field(default=-1, metadata={"help": "Optimizer steps; -1 trains num_train_epochs."})
    per_device_train_batch_size: int = field(default=8, metadata={"help": "Preference pairs per device per step."})
    per_device_eval_batch_size: int = field(default=8, metadata={"help": "Pairs per batch when scoring the test split."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Batches accumulated per optimizer step."})
    beta: float = field(default=0.1, metadata={"help": "DPO beta: higher keeps the policy closer to the reference."})
    loss_type: list[str] = field(default_factory=lambda: ["sigmoid"], metadata={
        "help": "TRL DPO loss type(s).", "choices": LOSS_TYPES})
    label_smoothing: float = field(default=0.0, metadata={"help": "Label smoothing (robust / exo_pair losses)."})
    max_length: int | None = field(default=1024, metadata={"help": "Token limit of prompt + answer; null for none."})
    seed: int = field(default=42, metadata={"help": "Seed for initialisation, shuffling and dropout."})
    bf16: bool = field(default=False, metadata={"help": "bfloat16 mixed precision (GPU)."})
    fp16: bool = field(default=False, metadata={"help": "float16 mixed precision (GPU)."})
    dtype: str = field(default="float32", metadata={
        "help": "dtype the weights are loaded in.", "choices": ("float32", "bfloat16", "float16", "auto")})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "Recompute activations to save memory."})
    use_peft: bool = field(default=False, metadata={"help": "Train a LoRA adapter instead of all weights."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_target_modules: list[str] = field(default_factory=lambda: ["all-linear"], metadata={
        "help": "Modules LoRA adapts; 'all-linear' for every linear layer but the LM head."})
    logging_steps: int = field(default=10, metadata={"help": "Steps between metric rows."})
    save_steps: int = field(default=500, metadata={"help": "Steps between resumable trainer checkpoints."})
    save_total_limit: int | None = field(default=2, metadata={"help": "Trainer checkpoints kept; null keeps all."})
    resume_from_checkpoint: bool | str = field(default=False, metadata={
        "help": "true: resume from the last trainer checkpoint in output_dir; or a checkpoint path."})
    use_cpu: bool = field(default=False, metadata={"help": "Train on CPU even when a GPU is present."})
    torch_threads: int | None = field(default=None, metadata={"help": "CPU threads for torch; null leaves torch's default."})
    report_to: list[str] = field(default_factory=lambda: ["tensorboard"], metadata={
        "help": "Metric sinks besides metrics.jsonl.", "choices": ("tensorboard", "none")})


def _check_values(config: DPORunConfig, source: str) -> None:
    def bad(key: str, why: str) -> ConfigError:
        return ConfigError(f"{source}: {key} {why}")

    if not config.learning_rate > 0:
        raise bad("learning_rate", f"must be above 0, got {config.learning_rate}")
    if not config.beta > 0:
        raise bad("beta", f"must be above 0, got {config.beta}")
    if config.max_steps == 0 or config.max_steps < -1:
        raise bad("max_steps", f"must be -1 (use num_train_epochs) or at least 1, got {config.max_steps}")
    if config.max_steps == -1 and not config.num_train_epochs > 0:
        raise bad("num_train_epochs", f"must be above 0 when max_steps is -1, got {config.num_train_epochs}")
    for key in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps",
                "logging_steps", "save_steps", "lora_r"):
        if getattr(config, key) < 1:
            raise bad(key, f"must be at least 1, got {getattr(config, key)}")
    if config.max_length is not None and config.max_length < 2:
        raise bad("max_length", f"must be at least 2 or null, got {config.max_length}")
    if config.bf16 and config.fp16:
        raise bad("bf16", "and fp16 cannot both be true; choose one precision")
    if config.torch_threads is not None and config.torch_threads < 1:
        raise bad("torch_threads", f"must be at least 1 or null, got {config.torch_threads}")


def load_dpo_config(path: str | Path) -> DPORunConfig:
    config = load_config(path, DPORunConfig)
    _check_values(config, str(path))
    return config


# --- scoring the test split --------------------------------------------------------------------------


def _tokenize_pair(tokenizer, row: dict, max_length: int | None) -> dict:
    """Token ids of prompt+chosen and prompt+rejected with the number of prompt tokens, as TRL builds them."""
    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    if isinstance(row["prompt"], list):
        prompt_text = tokenizer.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
        texts = {k: tokenizer.apply_chat_template(row["prompt"] + row[k], tokenize=False) for k in ("chosen", "rejected")}
    else:
        prompt_text = row["prompt"]
        texts = {k: row["prompt"] + row[k] + (tokenizer.eos_token or "") for k in ("chosen", "rejected")}
    prompt_ids = encode(prompt_text)
    out = {}
    for key, text in texts.items():
        ids = encode(text)
        shared = 0
        while shared < min(len(ids), len(prompt_ids)) and ids[shared] == prompt_ids[shared]:
            shared += 1
        if max_length is not None:
            ids = ids[:max_length]
        out[key] = (ids, min(shared, len(ids)))
    return out


def completion_logps(model, sequences: list[tuple[list[int], int]], *, batch_size: int, pad_id: int) -> list[float]:
    """Sum of log p(token) over the answer tokens of each (ids, prompt_len) sequence.

    Shapes: input (B, T) right-padded; logits (B, T, V); per-token log-probs of the next token (B, T-1),
    masked to answer positions and summed to (B,).
    """
    import torch

    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    results: list[float] = []
    with torch.no_grad():
        for start in range(0, len(sequences), batch_size):
            chunk = sequences[start : start + batch_size]
            width = max(len(ids) for ids, _ in chunk)
            input_ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            attention = torch.zeros_like(input_ids)
            answer = torch.zeros_like(input_ids, dtype=torch.bool)
            for row, (ids, prompt_len) in enumerate(chunk):
                input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
                attention[row, : len(ids)] = 1
                answer[row, prompt_len : len(ids)] = True
            input_ids, attention, answer = input_ids.to(device), attention.to(device), answer.to(device)
            logits = model(input_ids=input_ids, attention_mask=attention).logits.float()
            logps = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
            results.extend((logps * answer[:, 1:]).sum(dim=1).tolist())
    model.train(was_training)
    return results


def pair_logps(model, tokenized: list[dict], *, batch_size: int, pad_id: int) -> list[tuple[float, float]]:
    """(log p(chosen), log p(rejected)) per pair."""
    flat = [pair[key] for pair in tokenized for key in ("chosen", "rejected")]
    scores = completion_logps(model, flat, batch_size=batch_size, pad_id=pad_id)
    return list(zip(scores[0::2], scores[1::2], strict=True))


def preference_summary(policy: list[tuple[float, float]], reference: list[tuple[float, float]], beta: float) -> dict:
    """Preference accuracy (the model's log-likelihood ranks chosen first) and the DPO implicit reward
    r = beta * (log pi - log pi_ref): its accuracy and mean chosen-minus-rejected margin."""
    n = len(policy)
    margins = [beta * ((pc - rc) - (pr - rr)) for (pc, pr), (rc, rr) in zip(policy, reference, strict=True)]
    return {
        "pairs": n,
        "preference_accuracy": round(sum(c > r for c, r in policy) / n, 4),
        "reward_accuracy": round(sum(m > 0 for m in margins) / n, 4),
        "reward_margin": round(sum(margins) / n, 6),
    }


def format_comparison(results: dict) -> str:
    base, trained = results["base"], results["trained"]
    lines = [
        f"test split: {base['pairs']} pairs                 base   trained",
        f"preference accuracy (log-likelihood)   {base['preference_accuracy']:>6.3f}   {trained['preference_accuracy']:>7.3f}",
        f"implicit-reward accuracy               {'-':>6}   {trained['reward_accuracy']:>7.3f}",
        f"mean implicit-reward margin            {base['reward_margin']:>6.3f}   {trained['reward_margin']:>7.3f}",
    ]
    return "\n".join(lines)


# --- the run -------------------------------------------------------------------------------------------


def _check_output_dir(config: DPORunConfig, run) -> str | None:
    """Refuse to mix two runs in one folder; return the trainer checkpoint to resume from, if any."""
    from transformers.trainer_utils import get_last_checkpoint

    resume = config.resume_from_checkpoint
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


class _MetricsJsonl:
    """A TrainerCallback (built lazily, transformers is heavy) appending every log row to metrics.jsonl."""

    @staticmethod
    def build(run):
        from transformers import TrainerCallback

        class MetricsJsonlCallback(TrainerCallback):
            def on_log(self, args, state, control, logs=None, **kwargs):
                if state.is_world_process_zero and logs:
                    row = {k: v for k, v in logs.items() if isinstance(v, int | float) and math.isfinite(v)}
                    run.append_metrics({"event": "train", "step": state.global_step,
                                        "epoch": round(state.epoch or 0.0, 4), **row})

        return MetricsJsonlCallback()


def run_dpo(config: DPORunConfig) -> dict:
    """Train; return the final run record. Raises PairwiseInputError for bad input before writing anything."""
    import torch

    from training import snapshot as snapshot_format
    from training.run_folder import (
        RUN_FORMAT,
        RunFolder,
        check_causal_lm_checkpoint,
        checkpoint_content_hash,
        hardware,
        library_versions,
        utc_now,
        write_parent_json,
    )

    # 1. Everything a user can get wrong is checked before the run folder exists.
    run = RunFolder(config.output_dir)
    resume_from = _check_output_dir(config, run)
    base_path = check_causal_lm_checkpoint(config.base_checkpoint)
    splits = snapshot_format.load(config.snapshot)  # verifies the version and every hash first
    manifest = snapshot_format.read_manifest(config.snapshot)
    if len(splits["train"]) == 0:
        raise PairwiseInputError(f"snapshot {config.snapshot} has no train rows; export it with looser filters")

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_path, local_files_only=True)
    if manifest.get("row_format", "conversational") == "conversational" and not tokenizer.chat_template:
        raise PairwiseInputError(f"base_checkpoint {base_path} has no chat template but snapshot {config.snapshot} "
                                 "is conversational; export with --format standard or use a chat checkpoint")
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)

    is_main = _is_main_process()
    base_hash = checkpoint_content_hash(base_path) if is_main else None  # only the main process records it
    fresh = resume_from is None
    started = time.perf_counter()

    # 2. The run folder: run.json is kept current so a watcher sees the status.
    if is_main:
        run.create()
        previous = run.read_record() if not fresh else None
        run.record = previous or {}
        run.update(
            format=RUN_FORMAT,
            run=run.path.name,
            kind="dpo",
            status="running",
            config=asdict(config),
            base_checkpoint={"path": str(base_path.resolve()), "content_hash": base_hash},
            snapshot={"path": str(Path(config.snapshot).resolve()), "snapshot_id": manifest.get("snapshot_id"),
                      "files": manifest["files"], "counts": manifest.get("counts")},
            tasks_hash=None,
            scorers={},  # DPO trains on human judgments; no scorer is involved
            code_version=snapshot_format.code_version(),
            libraries=library_versions(),
            hardware=hardware(),
            started_at=(previous or {}).get("started_at") or utc_now(),
            ended_at=None,
            error=None,
        )
        if not fresh:
            run.update(resumed=[*run.record.get("resumed", []), {"at": utc_now(), "from": str(resume_from)}])

    trainer = None
    try:
        try:
            trainer = _build_trainer(config, run, splits, tokenizer, base_path)
        except ValueError as error:
            if isinstance(error, PairwiseInputError):
                raise
            # TRL checks option combinations when the trainer is built; those are config mistakes.
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise PairwiseInputError(f"{config.output_dir}: DPO setup refused the config: {first_line}") from None
        test_rows = list(splits["test"])
        tokenized = [_tokenize_pair(tokenizer, row, config.max_length) for row in test_rows]
        pad_id = tokenizer.pad_token_id
        can_score = bool(tokenized) and not _is_zero3(trainer)
        base_logps = None
        if can_score and is_main:
            if fresh:  # the policy is still the base checkpoint
                base_logps = pair_logps(trainer.model, tokenized, batch_size=config.per_device_eval_batch_size,
                                        pad_id=pad_id)
            else:
                base_logps = _base_logps_from_disk(base_path, tokenized, config, pad_id, trainer.args.device)
    except BaseException:
        if fresh and is_main:
            shutil.rmtree(run.path, ignore_errors=True)  # nothing trained yet: leave no half-made run behind
        raise

    try:
        train_output = trainer.train(resume_from_checkpoint=resume_from)
        results = None
        if can_score and is_main:
            trained_logps = pair_logps(trainer.model, tokenized, batch_size=config.per_device_eval_batch_size,
                                       pad_id=pad_id)
            base_summary = preference_summary(base_logps, base_logps, config.beta)
            # Against itself the reference has an implicit reward of exactly 0: no ranking to score.
            base_summary["reward_accuracy"] = None
            results = {
                "base": base_summary,
                "trained": preference_summary(trained_logps, base_logps, config.beta),
            }
            for which in ("base", "trained"):
                run.append_metrics({"event": "test", "model": which, "step": trainer.state.global_step,
                                    **results[which]})
        _save_checkpoint(trainer, config, run, tokenizer)
        trainer.accelerator.wait_for_everyone()
        if not is_main:
            return {}
        out_hash = checkpoint_content_hash(run.checkpoint)
        write_parent_json(run.checkpoint, parent_path=str(base_path), parent_hash=base_hash, run=run.path.name,
                          kind="dpo", snapshot_id=manifest.get("snapshot_id"), content_hash=out_hash)
        wall_s = round(time.perf_counter() - started, 2)
        run.write_ledger({
            "inputs": [
                {"kind": "checkpoint", "path": str(base_path.resolve()), "content_hash": base_hash},
                {"kind": "snapshot", "snapshot_id": manifest.get("snapshot_id"), "files": manifest["files"]},
            ],
            "outputs": [{"kind": "checkpoint", "path": "checkpoint", "content_hash": out_hash}],
            "consumed": {
                "optimizer_steps": trainer.state.global_step,
                "epochs": round(trainer.state.epoch or 0.0, 4),
                "train_pairs": len(splits["train"]),
                "pairs_seen": trainer.state.global_step * config.per_device_train_batch_size
                * config.gradient_accumulation_steps * trainer.accelerator.num_processes,
                "wall_s": wall_s,
            },
        })
        run.update(
            status="completed",
            ended_at=utc_now(),
            wall_s=wall_s,
            steps=trainer.state.global_step,
            train_loss=round(train_output.training_loss, 6),
            results={"test": results} if results else {"test": None, "note": _score_note(tokenized)},
            output_checkpoint={"path": str(run.checkpoint.resolve()), "content_hash": out_hash},
        )
        return run.record
    except KeyboardInterrupt:
        if is_main:
            run.update(status="interrupted", ended_at=utc_now(), error="interrupted")
        raise
    except BaseException as error:
        if is_main:
            run.update(status="failed", ended_at=utc_now(), error=f"{type(error).__name__}: {error}")
        raise


def _score_note(tokenized: list) -> str:
    if not tokenized:
        return "the snapshot's test split is empty"
    return "not scored under DeepSpeed ZeRO-3: its sharded weights are not gathered to score the test split"


def _is_main_process() -> bool:
    # Read from the launcher's environment (accelerate / torchrun set RANK) rather than by creating
    # accelerate state early, which the trainer's own arguments must be the first to configure.
    return int(os.environ.get("RANK", "0")) == 0


def _is_zero3(trainer) -> bool:
    plugin = getattr(trainer.args, "deepspeed_plugin", None)
    return plugin is not None and getattr(plugin, "zero_stage", 0) == 3


def _base_logps_from_disk(base_path: Path, tokenized: list, config: DPORunConfig, pad_id: int, device):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_path, local_files_only=True, dtype=_torch_dtype(config))
    base.to(device)
    try:
        return pair_logps(base, tokenized, batch_size=config.per_device_eval_batch_size, pad_id=pad_id)
    finally:
        del base


def _torch_dtype(config: DPORunConfig):
    import torch

    return "auto" if config.dtype == "auto" else getattr(torch, config.dtype)


def _build_trainer(config: DPORunConfig, run, splits, tokenizer, base_path: Path):
    from trl import DPOConfig, DPOTrainer

    callbacks = [_MetricsJsonl.build(run)]
    if "tensorboard" in config.report_to and _is_main_process():
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        callbacks.append(TensorBoardCallback(tb_writer=SummaryWriter(log_dir=str(run.tensorboard))))
    args = DPOConfig(
        output_dir=str(run.trainer_checkpoints),
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler_type,
        warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        num_train_epochs=config.num_train_epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.per_device_train_batch_size,
        per_device_eval_batch_size=config.per_device_eval_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        beta=config.beta,
        loss_type=list(config.loss_type),
        label_smoothing=config.label_smoothing,
        max_length=config.max_length,
        seed=config.seed,
        bf16=config.bf16,
        fp16=config.fp16,
        activation_checkpointing=config.gradient_checkpointing,  # the current name of gradient_checkpointing
        model_init_kwargs={"dtype": config.dtype},
        logging_steps=config.logging_steps,
        logging_first_step=True,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        use_cpu=config.use_cpu,
        report_to=[],  # TensorBoard is attached above, writing into the run folder
        disable_tqdm=False,
        dataloader_num_workers=0,
    )
    peft_config = None
    if config.use_peft:
        from peft import LoraConfig

        targets = config.lora_target_modules
        peft_config = LoraConfig(
            r=config.lora_r,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=targets[0] if targets == ["all-linear"] else targets,
            task_type="CAUSAL_LM",
        )
    # The model goes in as a path: TRL loads the policy and, from the same path, the frozen reference.
    return DPOTrainer(
        model=str(base_path),
        args=args,
        train_dataset=splits["train"],
        processing_class=tokenizer,
        callbacks=callbacks,
        peft_config=peft_config,
    )


def _save_checkpoint(trainer, config: DPORunConfig, run, tokenizer) -> None:
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


def dpo_main(args) -> int:
    """`python -m training dpo --config FILE.yaml`."""
    config = load_dpo_config(args.config)
    record = run_dpo(config)
    if record:
        test = record.get("results", {}).get("test")
        if test:
            print(format_comparison(test))
        print(f"run {record['run']}: {record['status']} after {record['steps']} steps; checkpoint "
              f"{record['output_checkpoint']['path']} ({record['output_checkpoint']['content_hash'][:23]}...)")
    return 0

