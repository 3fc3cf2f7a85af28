"""The difficulty pre-pass: which tasks can a checkpoint still learn from?

A task whose k sampled answers are all right, or all wrong, gives GRPO groups with zero advantage: it
costs generation and teaches nothing. `pass_rates` samples k answers per task with the checkpoint (at
the temperature GRPO will sample at) and scores them with training.verifiers; `keep_in_band` keeps the
tasks whose pass rate lies strictly inside (min, max), default 0 < p < 1, with the pass rate written
into each kept row's `meta`. `python -m training grpo-filter` runs it from the command line; a GRPO
config's `difficulty_filter: true` runs it before training.

Tasks are sampled in task_id order, so the pass rates do not depend on the order of the task file.
"""

import gc
import sys
from pathlib import Path

from training.errors import PairwiseInputError
from training.verifiers.results import CORRECT, WRONG


def pass_rates(*, checkpoint: str | Path, tasks: list[dict], samples: int, temperature: float, top_p: float = 1.0,
               top_k: int = 0, max_new_tokens: int, seed: int, batch_size: int = 64,
               workers: int | None = None) -> dict[str, dict]:
    """task_id -> {"correct", "samples", "pass_rate", "errors"}; an answer the verifier could not score
    (error / timeout) counts as not correct and is reported in "errors"."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed

    from training.generation import generate_completions
    from training.verifiers.task_verifier import TaskVerifier

    ordered = sorted(tasks, key=lambda task: task["task_id"])
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, local_files_only=True)
    if torch.cuda.is_available():
        model.to("cuda")
    model.eval()
    try:
        set_seed(seed)
        texts = generate_completions(model, tokenizer, [task["prompt"] for task in ordered], samples=samples,
                                     temperature=temperature, top_p=top_p, top_k=top_k,
                                     max_new_tokens=max_new_tokens, batch_size=batch_size)
    finally:
        del model
        gc.collect()
    pairs = [(task, text) for task, task_texts in zip(ordered, texts, strict=True) for text in task_texts]
    with TaskVerifier(workers=workers) as verifier:
        results = verifier.verify_many(pairs)
    rates: dict[str, dict] = {}
    for index, task in enumerate(ordered):
        verdicts = results[index * samples : (index + 1) * samples]
        correct = sum(result.status == CORRECT for result in verdicts)
        rates[task["task_id"]] = {
            "correct": correct,
            "samples": samples,
            "pass_rate": round(correct / samples, 4),
            "errors": sum(result.status not in (CORRECT, WRONG) for result in verdicts),
        }
    return rates


def keep_in_band(tasks: list[dict], rates: dict[str, dict], *, min_pass_rate: float, max_pass_rate: float,
                 checkpoint_hash: str | None = None) -> list[dict]:
    """The tasks with min_pass_rate < pass rate < max_pass_rate, in their original order, each with
    meta.pass_rate, meta.pass_rate_samples (and meta.pass_rate_checkpoint when given)."""
    kept = []
    for task in tasks:
        rate = rates[task["task_id"]]
        if min_pass_rate < rate["pass_rate"] < max_pass_rate:
            meta = dict(task.get("meta") or {})
            meta.update(pass_rate=rate["pass_rate"], pass_rate_samples=rate["samples"])
            if checkpoint_hash is not None:
                meta["pass_rate_checkpoint"] = checkpoint_hash
            kept.append({**task, "meta": meta})
    return kept


def band_summary(rates: dict[str, dict], *, min_pass_rate: float, max_pass_rate: float) -> dict:
    values = [rate["pass_rate"] for rate in rates.values()]
    return {
        "tasks": len(values),
        "kept": sum(min_pass_rate < v < max_pass_rate for v in values),
        "too_hard": sum(v <= min_pass_rate for v in values),
        "too_easy": sum(v >= max_pass_rate for v in values),
        "mean_pass_rate": round(sum(values) / len(values), 4) if values else None,
        "band": [min_pass_rate, max_pass_rate],
    }


def format_band_summary(summary: dict, samples: int) -> str:
    low, high = summary["band"]
    return (f"{summary['tasks']} tasks, {samples} samples each: kept {summary['kept']} with {low:g} < pass rate "
            f"< {high:g}; dropped {summary['too_hard']} too hard (<= {low:g}) and {summary['too_easy']} too easy "
            f"(>= {high:g}); mean pass rate {summary['mean_pass_rate']}")


def grpo_filter_main(args) -> int:
    """`python -m training grpo-filter --checkpoint DIR --tasks F --out F [--samples K] [--min-pass-rate A]
    [--max-pass-rate B] [--temperature T] [--max-new-tokens N] [--seed S]`."""
    from training.run_folder import check_causal_lm_checkpoint, checkpoint_content_hash
    from training.tasks import load_tasks, write_tasks

    if args.samples < 1:
        raise PairwiseInputError(f"--samples must be at least 1, got {args.samples}")
    if not 0.0 <= args.min_pass_rate < args.max_pass_rate <= 1.0:
        raise PairwiseInputError(f"--min-pass-rate {args.min_pass_rate} and --max-pass-rate {args.max_pass_rate} "
                                 "must satisfy 0 <= min < max <= 1")
    if not args.temperature > 0:
        raise PairwiseInputError(f"--temperature must be above 0 (the pre-pass samples answers), got {args.temperature}")
    out = Path(args.out)
    if out.is_dir():
        raise PairwiseInputError(f"--out {out} is a folder; give a file path such as {out}/kept.jsonl")
    if not out.parent.exists():
        raise PairwiseInputError(f"--out {out}: folder {out.parent} does not exist; create it first")
    checkpoint = check_causal_lm_checkpoint(args.checkpoint, key="--checkpoint")
    tasks = load_tasks(args.tasks)  # a TaskFileError is the CLI's one line
    check_sandbox_for_code(tasks, args.tasks)
    rates = pass_rates(checkpoint=checkpoint, tasks=tasks, samples=args.samples, temperature=args.temperature,
                       max_new_tokens=args.max_new_tokens, seed=args.seed)
    kept = keep_in_band(tasks, rates, min_pass_rate=args.min_pass_rate, max_pass_rate=args.max_pass_rate,
                        checkpoint_hash=checkpoint_content_hash(checkpoint))
    summary = band_summary(rates, min_pass_rate=args.min_pass_rate, max_pass_rate=args.max_pass_rate)
    print(format_band_summary(summary, args.samples))
    if not kept:
        print(f"error: no task of {args.tasks} lies in the band; widen --min-pass-rate / --max-pass-rate or use "
              "tasks nearer the checkpoint's level", file=sys.stderr)
        return 2
    write_tasks(out, kept)
    print(f"wrote {len(kept)} tasks with their pass rates (meta.pass_rate) to {out}")
    return 0


def check_sandbox_for_code(tasks: list[dict], where) -> None:
    """Code tasks need the sandbox; say so before any sampling if it cannot run here."""
    if not any(task["kind"] == "code" for task in tasks):
        return
    from training.verifiers.sandbox import SandboxUnavailable
    from training.verifiers.task_verifier import TaskVerifier

    with TaskVerifier(workers=1) as verifier:
        try:
            verifier.start_sandbox()
        except SandboxUnavailable as error:
            raise PairwiseInputError(f"code tasks in {where} cannot be run safely here: {error}") from None
