"""`python -m training dpo --config FILE.yaml`: DPO on a verified snapshot, from a base checkpoint, into a run folder.

The recipe: read and check the config, the base checkpoint and the snapshot before anything is written
(bad input leaves no run folder), then TRL's DPOTrainer with the reference model = the base checkpoint,
then preference accuracy and implicit-reward margin on the snapshot's test split, base vs trained, and
the lineage (run.json, ledger.json, checkpoint/parent.json).

Multi-GPU: `accelerate launch --config_file deploy/accelerate/zero2.yaml -m training dpo --config F`.
"""

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from trl import DPOConfig

from training.config import PairwiseConfigMixin, key_error, load_config
from training.padding import right_padded
from training.trl_setup import (
    is_main_process,
    is_zero3,
    lora_config,
    model_dtype,
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

# TRL's DPO loss names (trl/trainer/dpo_config.py); TRL checks them only when a batch is scored.
LOSS_TYPES = ("sigmoid", "hinge", "ipo", "exo_pair", "nca_pair", "robust", "bco_pair", "sppo_hard", "aot",
              "aot_unpaired", "apo_zero", "apo_down", "discopop", "sft", "sigmoid_norm")


@dataclass
class DPORunConfig(PairwiseConfigMixin, DPOConfig):
    """Keys of a DPO config file: TRL's DPOConfig (every TrainingArguments key included) plus Pairwise's own."""

    pairwise_keys: ClassVar[tuple[str, ...]] = ("base_checkpoint", "snapshot", *PairwiseConfigMixin.pairwise_keys)
    required_keys: ClassVar[tuple[str, ...]] = ("base_checkpoint", "snapshot", "output_dir")

    base_checkpoint: str | None = field(default=None, metadata={
        "help": "Local Hugging Face causal-LM checkpoint to start from; also the DPO reference model."})
    snapshot: str | None = field(default=None, metadata={
        "help": "Snapshot folder (python manage.py export_snapshot)."})

    @classmethod
    def check_values(cls, values: dict, source: str) -> None:
        super().check_values(values, source)
        for loss in values["loss_type"] or []:
            if loss not in LOSS_TYPES:
                raise key_error(source, "loss_type", f"must be one of {', '.join(LOSS_TYPES)}, got {loss!r}")
        if not values["beta"] > 0:
            raise key_error(source, "beta", f"must be above 0, got {values['beta']}")


def load_dpo_config(path: str | Path) -> DPORunConfig:
    return load_config(path, DPORunConfig)


# --- scoring the test split --------------------------------------------------------------------------


def tokenize_pair(tokenizer, row: dict, max_length: int | None) -> dict:
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
            input_ids, attention = right_padded([ids for ids, _ in chunk], pad_id)
            answer = torch.zeros_like(input_ids, dtype=torch.bool)
            for row, (ids, prompt_len) in enumerate(chunk):
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


# Two tests decide whether a run changed anything (accuracy and margin), each at half of 5%, so that together they
# raise a false alarm at most 5% of the time (Bonferroni).
CHANGE_ALPHA = 0.05
CHANGE_TESTS = 2


def change_from_base(policy: list[tuple[float, float]], reference: list[tuple[float, float]]) -> dict:
    """Whether training changed the model's preferences on the test pairs by more than chance, pair by pair.

    Preference accuracy, paired: the pairs whose ranking changed (gained, lost), with McNemar's exact test on them
    (statsmodels) and a 95% Wald interval for the paired difference, shown. The log-likelihood margin (log
    p(chosen) - log p(rejected)), paired: its mean change with a t interval (training/paired.py, the one an
    evaluation's change uses) at 1 - 0.05/2. `real`: McNemar's p is under 0.05/2, or the margin's interval excludes
    no change (the two tests together at 5%). With few pairs or a short run neither holds, and the pages say the run
    was too short to show a change rather than show a difference that is noise."""
    import math

    from statsmodels.stats.contingency_tables import mcnemar

    from training.paired import mean_t_interval

    n = len(policy)
    each = CHANGE_ALPHA / CHANGE_TESTS
    before = [c > r for c, r in reference]
    after = [c > r for c, r in policy]
    gained = sum(a and not b for a, b in zip(after, before, strict=True))
    lost = sum(b and not a for a, b in zip(after, before, strict=True))
    difference = (gained - lost) / n
    spread = math.sqrt(max(gained + lost - (gained - lost) ** 2 / n, 0.0)) / n
    p_value = float(mcnemar([[0, lost], [gained, 0]], exact=True).pvalue) if gained + lost else 1.0
    deltas = [(pc - pr) - (rc - rr) for (pc, pr), (rc, rr) in zip(policy, reference, strict=True)]
    mean, low, high = mean_t_interval(deltas, 1 - each)
    margin_interval = [round(low, 6), round(high, 6)]
    return {"pairs": n, "alpha": CHANGE_ALPHA,
            "preference_accuracy": {"difference": round(difference, 4), "gained": gained, "lost": lost,
                                    "interval": [round(difference - 1.96 * spread, 4),
                                                 round(difference + 1.96 * spread, 4)],
                                    "p_value": round(p_value, 6)},
            "log_likelihood_margin": {"mean_change": round(mean, 6), "interval": margin_interval,
                                      "confidence": 1 - each},
            "real": n > 1 and (p_value < each or margin_interval[0] > 0 or margin_interval[1] < 0)}


def format_comparison(results: dict) -> str:
    base, trained = results["base"], results["trained"]
    lines = [
        f"test split: {base['pairs']} pairs                 base   trained",
        f"preference accuracy (log-likelihood)   {base['preference_accuracy']:>6.3f}   {trained['preference_accuracy']:>7.3f}",
        f"implicit-reward accuracy               {'-':>6}   {trained['reward_accuracy']:>7.3f}",
        f"mean implicit-reward margin            {base['reward_margin']:>6.3f}   {trained['reward_margin']:>7.3f}",
    ]
    if change := results.get("change"):
        accuracy, margin = change["preference_accuracy"], change["log_likelihood_margin"]
        lines.append(f"change from the base, paired: preference accuracy {accuracy['difference']:+.3f} "
                     f"(McNemar p {accuracy['p_value']:.3g}), log-likelihood margin {margin['mean_change']:+.3f} "
                     f"({margin['confidence']:.1%} {margin['interval'][0]:+.3f} to {margin['interval'][1]:+.3f}): "
                     + ("a change beyond chance" if change["real"] else
                        "within chance: the run was too short, or the test split too small, to show a change"))
    return "\n".join(lines)


# --- the run -------------------------------------------------------------------------------------------


def dpo_run_inputs(config: DPORunConfig):
    """Every refusal of a DPO run's inputs (snapshot_run_inputs, the base as a causal LM): the one check of the run
    and of `python -m training dpo --check`."""
    from training.run_folder import check_causal_lm_checkpoint

    return snapshot_run_inputs(config, check_base=check_causal_lm_checkpoint)


def run_dpo(config: DPORunConfig) -> dict:
    """Train; return the final run record. Raises PairwiseInputError for bad input before writing anything."""

    from training.run_folder import checkpoint_content_hash

    # 1. Everything a user can get wrong is checked before the run folder exists.
    inputs = dpo_run_inputs(config)
    run, resume_from, base_path = inputs.run, inputs.resume_from, inputs.base_path
    splits, manifest, tokenizer = inputs.splits, inputs.manifest, inputs.tokenizer

    is_main = is_main_process()
    base_hash = checkpoint_content_hash(base_path) if is_main else None  # only the main process records it
    fresh = resume_from is None
    started = time.perf_counter()

    # 2. The run folder: run.json is kept current so a watcher sees the status.
    if is_main:
        start_run_record(
            run, config, kind="dpo", base_path=base_path, base_hash=base_hash, resume_from=resume_from,
            snapshot=snapshot_record(config, manifest),
            tasks_hash=None,
            scorers={},  # DPO trains on human judgments; no scorer is involved
        )

    with trainer_setup(run, config, recipe="DPO", fresh=fresh, is_main=is_main):
        trainer = _build_trainer(config, run, splits, tokenizer, base_path)
        test_rows = list(splits["test"])
        tokenized = [tokenize_pair(tokenizer, row, config.max_length) for row in test_rows]
        pad_id = tokenizer.pad_token_id
        can_score = bool(tokenized) and not is_zero3(trainer)
        base_logps = None
        if can_score and is_main:
            if fresh:  # the policy is still the base checkpoint
                base_logps = pair_logps(trainer.model, tokenized, batch_size=config.per_device_eval_batch_size,
                                        pad_id=pad_id)
            else:
                base_logps = _base_logps_from_disk(base_path, tokenized, config, pad_id, trainer.args.device)

    with recorded_outcome(run, is_main=is_main):
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
                "change": change_from_base(trained_logps, base_logps),
            }
            for which in ("base", "trained"):
                run.append_metrics({"event": "test", "model": which, "step": trainer.state.global_step,
                                    **results[which]})
        save_checkpoint(trainer, config, run, tokenizer)
        trainer.accelerator.wait_for_everyone()
        if not is_main:
            return {}
        out_hash = record_lineage(run, kind="dpo", base_path=base_path, base_hash=base_hash,
                                  snapshot_id=manifest.get("snapshot_id"))
        wall_s = time.perf_counter() - started
        write_snapshot_run_ledger(run, trainer, config, base_path=base_path, base_hash=base_hash, manifest=manifest,
                                  out_hash=out_hash, train_pairs=len(splits["train"]), wall_s=wall_s)
        return record_completed(run, trainer, train_output, wall_s=wall_s, out_hash=out_hash,
                                results={"test": results} if results else {"test": None,
                                                                           "note": _score_note(tokenized)})


def _score_note(tokenized: list) -> str:
    if not tokenized:
        return "the snapshot's test split is empty"
    return "not scored under DeepSpeed ZeRO-3: its sharded weights are not gathered to score the test split"


def _base_logps_from_disk(base_path: Path, tokenized: list, config: DPORunConfig, pad_id: int, device):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_path, local_files_only=True, dtype=model_dtype(config))
    base.to(device)
    try:
        return pair_logps(base, tokenized, batch_size=config.per_device_eval_batch_size, pad_id=pad_id)
    finally:
        del base


def _build_trainer(config: DPORunConfig, run, splits, tokenizer, base_path: Path):
    from trl import DPOTrainer

    # The model goes in as a path: TRL loads the policy and, from the same path, the frozen reference.
    return DPOTrainer(
        model=str(base_path),
        args=trainer_arguments(config, run),
        train_dataset=splits["train"],
        processing_class=tokenizer,
        callbacks=run_callbacks(config, run),
        peft_config=lora_config(config),
    )


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

