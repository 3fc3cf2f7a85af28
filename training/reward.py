"""`python -m training reward --config FILE.yaml`: a reward model trained on a verified snapshot's pairs.

The recipe: read and check the config, the base checkpoint (it must load as a sequence classifier with one
output) and the snapshot before anything is written (bad input leaves no run folder), then TRL's
RewardTrainer on the snapshot's train split as it is (conversational or standard rows; with
`margin_from_strength`, TRL's `margin` column from each row's `meta.strength`), then the trained model's
scores on the test split (accuracy with a Wilson interval, mean margin, accuracy by which answer is
shorter, and how much the reward follows answer length), and the lineage (run.json, ledger.json,
checkpoint/parent.json).

A causal LM base gets a new, seeded score head (AutoModelForSequenceClassification, num_labels=1), so the
saved classifier never has the base's content hash: whether training changed any weight is decided by
comparing the model's parameters before and after training instead.

Multi-GPU: `accelerate launch --config_file deploy/accelerate/zero2.yaml -m training reward --config F`.
"""

import hashlib
import math
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from trl import RewardConfig

from training.config import PairwiseConfigMixin, key_error, load_config
from training.errors import PairwiseInputError
from training.reward_model_scorer import fits_max_length, over_max_length_line, sequence_ids, sequence_rewards
from training.trl_setup import (
    is_main_process,
    is_zero3,
    lora_config,
    record_completed,
    record_lineage,
    recorded_outcome,
    run_callbacks,
    save_checkpoint,
    snapshot_record,
    snapshot_run_inputs,
    start_run_record,
    trainer_arguments,
    trainer_setup,
    write_snapshot_run_ledger,
)

NO_TEST_SPLIT = "not scored: the snapshot has no test split"
# With a test split and no eval_strategy of the config's own, TRL's evaluation loop runs on it every tenth of
# training (a float eval_steps below 1 is a share of the total steps), so metrics.jsonl holds a test-accuracy curve.
EVAL_SHARE_OF_TRAINING = 0.1


@dataclass
class RewardRunConfig(PairwiseConfigMixin, RewardConfig):
    """Keys of a reward config file: TRL's RewardConfig (every TrainingArguments key included) plus Pairwise's own."""

    pairwise_keys: ClassVar[tuple[str, ...]] = (
        "base_checkpoint", "snapshot", "margin_from_strength", "margin_per_strength",
        *PairwiseConfigMixin.pairwise_keys)
    required_keys: ClassVar[tuple[str, ...]] = ("base_checkpoint", "snapshot", "output_dir")

    base_checkpoint: str | None = field(default=None, metadata={
        "help": "Local Hugging Face checkpoint to start from, loaded as a sequence classifier with one output "
                "(a causal LM gets a new score head)."})
    snapshot: str | None = field(default=None, metadata={
        "help": "Snapshot folder (python manage.py export_snapshot)."})
    margin_from_strength: bool = field(default=False, metadata={
        "help": "Ask a larger reward gap for stronger judgments: TRL's margin column, meta.strength times "
                "margin_per_strength for every train row (the snapshot must carry meta.strength)."})
    margin_per_strength: float = field(default=0.5, metadata={
        "help": "Margin per point of meta.strength when margin_from_strength is true (strength 2 -> margin 1.0)."})

    @classmethod
    def check_values(cls, values: dict, source: str) -> None:
        super().check_values(values, source)
        if values["margin_from_strength"] and not values["margin_per_strength"] > 0:
            raise key_error(source, "margin_per_strength", f"must be above 0, got {values['margin_per_strength']}")
        coefficient = values["center_rewards_coefficient"]
        if coefficient is not None and not coefficient >= 0:
            raise key_error(source, "center_rewards_coefficient", f"must be 0 or above, or null, got {coefficient}")


def load_reward_config(path: str | Path) -> RewardRunConfig:
    return load_config(path, RewardRunConfig)


# --- inputs ------------------------------------------------------------------------------------------------


def strength_margins(metas: Iterable[dict], *, snapshot: str, per_strength: float) -> list[float]:
    """TRL's margin for each train row: meta.strength x per_strength; one line naming the first row without one."""
    margins = []
    for number, meta in enumerate(metas, start=1):
        meta = meta if isinstance(meta, dict) else {}
        strength = meta.get("strength")
        if isinstance(strength, bool) or not isinstance(strength, int | float) or not math.isfinite(strength) \
                or strength < 0:
            if "strength" not in meta:
                found = f"its meta has no strength, only {', '.join(sorted(meta)) or 'nothing'}"
            elif strength is None:  # what an export writes when no counted vote for the chosen answer gave one
                found = "its meta.strength is null: no counted vote for its chosen answer gave a strength"
            else:
                found = f"its meta.strength is {strength!r}, not a number of 0 or more"
            raise PairwiseInputError(
                f"margin_from_strength is true but snapshot {snapshot} train row {number} has no judgment strength "
                f"({found}); export a snapshot whose rows carry meta.strength, or set margin_from_strength: false")
        margins.append(float(strength) * per_strength)
    return margins


def reward_run_inputs(config: RewardRunConfig):
    """Every refusal of a reward run's inputs: snapshot_run_inputs with the base as a sequence classifier and, with
    margin_from_strength, every train row's strength. The one check of the run and of `python -m training reward
    --check`; returns the inputs and the train split (with TRL's margin column when asked)."""
    from training.run_folder import check_sequence_classifier_checkpoint

    inputs = snapshot_run_inputs(config, check_base=check_sequence_classifier_checkpoint)
    train = inputs.splits["train"]
    if config.margin_from_strength:
        train = train.add_column("margin", strength_margins(train["meta"], snapshot=config.snapshot,
                                                            per_strength=config.margin_per_strength))
    return inputs, train


# --- scoring the test split --------------------------------------------------------------------------------


def answer_text(answer: str | list[dict]) -> str:
    """An answer's text: a standard row's string, or the contents of a conversational row's messages."""
    return answer if isinstance(answer, str) else "".join(message["content"] for message in answer)


@dataclass
class ScoredPair:
    chosen_reward: float
    rejected_reward: float
    chosen_chars: int
    rejected_chars: int

    @property
    def correct(self) -> bool:
        return self.chosen_reward > self.rejected_reward


def _accuracy(pairs: list[ScoredPair]) -> dict:
    """n, accuracy (None without pairs, never 0.0) and its 95% Wilson interval."""
    from training.evaluate import wilson_interval

    if not pairs:
        return {"n": 0, "accuracy": None, "interval": None}
    correct = sum(pair.correct for pair in pairs)
    low, high = wilson_interval(correct, len(pairs))
    return {"n": len(pairs), "accuracy": round(correct / len(pairs), 4), "interval": [round(low, 4), round(high, 4)]}


def reward_summary(pairs: list[ScoredPair], *, left_out: int) -> dict:
    """The test split's figures: accuracy (chosen scored above rejected, ties count as wrong) with a 95% Wilson
    interval, mean margin, accuracy when the chosen answer is the shorter or the longer one (equal lengths in
    neither), and the Pearson correlation of reward with answer length in characters over every scored answer."""
    rewards = [r for pair in pairs for r in (pair.chosen_reward, pair.rejected_reward)]
    lengths = [n for pair in pairs for n in (pair.chosen_chars, pair.rejected_chars)]
    try:
        correlation = round(statistics.correlation(rewards, lengths), 4)
    except statistics.StatisticsError:  # fewer than two answers, or every reward or every length the same
        correlation = None
    return {
        **_accuracy(pairs),
        "interval_method": "Wilson score interval, 95%, n = pairs",
        "mean_margin": round(statistics.fmean(p.chosen_reward - p.rejected_reward for p in pairs), 6),
        "chosen_shorter": _accuracy([p for p in pairs if p.chosen_chars < p.rejected_chars]),
        "chosen_longer": _accuracy([p for p in pairs if p.chosen_chars > p.rejected_chars]),
        "equal_length_pairs": sum(p.chosen_chars == p.rejected_chars for p in pairs),
        "length_correlation": {"pearson": correlation, "answers": len(rewards)},
        "left_out_over_max_length": left_out,
    }


def score_test_split(model, tokenizer, rows: list[dict], config: "RewardRunConfig") -> dict | None:
    """reward_summary of the test rows; None when no pair fits max_length (fits_max_length, the rule RewardTrainer's
    length filter applies to the train split)."""
    tokenized, kept = [], []
    for row in rows:
        ids = (sequence_ids(tokenizer, row, "chosen"), sequence_ids(tokenizer, row, "rejected"))
        if all(fits_max_length(sequence, config.max_length) for sequence in ids):
            tokenized.extend(ids)
            kept.append(row)
    if not kept:
        return None
    rewards = sequence_rewards(model, tokenized, batch_size=config.per_device_eval_batch_size,
                               pad_id=tokenizer.pad_token_id)
    pairs = [ScoredPair(chosen, rejected, len(answer_text(row["chosen"])), len(answer_text(row["rejected"])))
             for row, chosen, rejected in zip(kept, rewards[0::2], rewards[1::2], strict=True)]
    return reward_summary(pairs, left_out=len(rows) - len(kept))


def _figure(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _interval(block: dict) -> str:
    return "" if block["interval"] is None else f"[{block['interval'][0]:.3f}, {block['interval'][1]:.3f}]"


def format_reward_table(test: dict) -> str:
    lines = [f"test split: {test['n']} pairs scored"
             + (f" ({test['left_out_over_max_length']} over max_length left out)"
                if test["left_out_over_max_length"] else ""),
             f"{'':34} {'pairs':>5}  {'value':>6}  95% interval",
             f"{'accuracy (chosen above rejected)':34} {test['n']:>5}  {_figure(test['accuracy']):>6}  "
             f"{_interval(test)}"]
    for key, label in (("chosen_shorter", "accuracy, chosen answer shorter"),
                       ("chosen_longer", "accuracy, chosen answer longer")):
        block = test[key]
        lines.append(f"{label:34} {block['n']:>5}  {_figure(block['accuracy']):>6}  {_interval(block)}")
    lines.append(f"{'mean margin (chosen - rejected)':34} {test['n']:>5}  {_figure(test['mean_margin']):>6}")
    correlation = test["length_correlation"]
    lines.append(f"{'reward vs length (Pearson r)':34} {correlation['answers']:>5}  "
                 f"{_figure(correlation['pearson']):>6}  (answers, characters)")
    return "\n".join(lines)


# --- the run -----------------------------------------------------------------------------------------------


def parameters_digest(model) -> str:
    """sha256 over every tensor of the model's state dict (names and bytes): equal digests, equal weights."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        digest.update(name.encode() + b"\0" + data.numpy().tobytes())
    return digest.hexdigest()


def run_reward(config: RewardRunConfig) -> dict:
    """Train; return the final run record. Raises PairwiseInputError for bad input before writing anything."""

    from training.run_folder import checkpoint_content_hash

    # 1. Everything a user can get wrong is checked before the run folder exists.
    inputs, train = reward_run_inputs(config)
    run, resume_from, base_path = inputs.run, inputs.resume_from, inputs.base_path
    splits, manifest, tokenizer = inputs.splits, inputs.manifest, inputs.tokenizer


    is_main = is_main_process()
    base_hash = checkpoint_content_hash(base_path) if is_main else None
    fresh = resume_from is None
    started = time.perf_counter()

    # 2. The run folder: run.json is kept current so a watcher sees the status.
    if is_main:
        start_run_record(
            run, config, kind="reward", base_path=base_path, base_hash=base_hash, resume_from=resume_from,
            snapshot=snapshot_record(config, manifest),
            tasks_hash=None,
            scorers={},  # a reward model learns from human judgments; no scorer is involved
        )

    with trainer_setup(run, config, recipe="Reward", fresh=fresh, is_main=is_main):
        trainer = _build_trainer(config, run, train, tokenizer, base_path, test=splits["test"])
        train_left_out = len(train) - len(trainer.train_dataset)
        test_rows = list(splits["test"])
        can_score = bool(test_rows) and not is_zero3(trainer)
        # The weights training starts from: the base's body and the new head (or a LoRA adapter at its start).
        start_digest = parameters_digest(trainer.model) if is_main and not is_zero3(trainer) else None

    with recorded_outcome(run, is_main=is_main):
        train_output = trainer.train(resume_from_checkpoint=resume_from)
        results = None
        if can_score and is_main:
            results = score_test_split(trainer.model, tokenizer, test_rows, config)
            if results:
                run.append_metrics({"event": "test", "model": "trained", "step": trainer.state.global_step,
                                    "pairs": results["n"], "accuracy": results["accuracy"],
                                    "mean_margin": results["mean_margin"],
                                    "length_correlation": results["length_correlation"]["pearson"]})
        weights_changed = None
        if start_digest is not None:
            weights_changed = parameters_digest(trainer.model) != start_digest
        save_checkpoint(trainer, config, run, tokenizer)
        trainer.accelerator.wait_for_everyone()
        if not is_main:
            return {}
        out_hash = record_lineage(run, kind="reward", base_path=base_path, base_hash=base_hash,
                                  snapshot_id=manifest.get("snapshot_id"), weights_changed=weights_changed)
        wall_s = time.perf_counter() - started
        write_snapshot_run_ledger(run, trainer, config, base_path=base_path, base_hash=base_hash, manifest=manifest,
                                  out_hash=out_hash, train_pairs=len(splits["train"]), wall_s=wall_s)
        test = {"test": results} if results else {"test": None, "note": _score_note(test_rows, trainer, config)}
        # TRL's RewardTrainer dropped them by the same rule (fits_max_length): said, never silent.
        test["train_over_max_length"] = {"pairs": train_left_out, "of": len(train), "max_length": config.max_length}
        return record_completed(run, trainer, train_output, wall_s=wall_s, out_hash=out_hash,
                                weights_changed=weights_changed, results=test)


def _score_note(test_rows: list, trainer, config: RewardRunConfig) -> str:
    if not test_rows:
        return NO_TEST_SPLIT
    if is_zero3(trainer):
        return "not scored under DeepSpeed ZeRO-3: its sharded weights are not gathered to score the test split"
    return f"not scored: every test pair is longer than max_length ({config.max_length} tokens)"


def _build_trainer(config: RewardRunConfig, run, train, tokenizer, base_path: Path, *, test):
    from transformers.trainer_utils import IntervalStrategy
    from trl import RewardTrainer

    args = trainer_arguments(config, run)
    eval_dataset = test if len(test) else None
    if eval_dataset is not None and args.eval_strategy == IntervalStrategy.NO:
        args.eval_strategy, args.eval_steps = IntervalStrategy.STEPS, EVAL_SHARE_OF_TRAINING
    elif eval_dataset is None:
        args.eval_strategy = IntervalStrategy.NO  # nothing to evaluate on: asking would stop TRL
    # The model goes in as a path: TRL loads it as AutoModelForSequenceClassification with num_labels=1 (the
    # head seeded by `seed`) and sets its pad_token_id from the tokenizer.
    return RewardTrainer(
        model=str(base_path),
        args=args,
        train_dataset=train,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        callbacks=run_callbacks(config, run),
        peft_config=lora_config(config, task_type="SEQ_CLS"),
    )


def reward_main(args) -> int:
    """`python -m training reward --config FILE.yaml`."""
    config = load_reward_config(args.config)
    record = run_reward(config)
    if record:
        results = record.get("results", {})
        print(format_reward_table(results["test"]) if results.get("test") else results.get("note"))
        left_out = results.get("train_over_max_length") or {}
        if left_out.get("pairs"):
            print("train split: " + over_max_length_line(left_out["pairs"], left_out["of"], left_out["max_length"],
                                                         "pairs") + "; left out of training")
        print(f"run {record['run']}: {record['status']} after {record['steps']} steps; checkpoint "
              f"{record['output_checkpoint']['path']} ({record['output_checkpoint']['content_hash'][:23]}...)")
        if record.get("weights_changed") is False:
            print(f"weights unchanged: {record['weights_unchanged_reason']}")
    return 0
