"""`python -m training sample`: answers from two or more checkpoints to the same prompts, written as a review
import file (docs/formats.md, "Import"), so reviewers compare the checkpoints blind.

Each prompt gets one answer per checkpoint (or `--samples` each); the checkpoint's name is the response's
`model` and its content hash the `model_version`, which reviewers never see. Every checkpoint samples from
the same seed, so the order of --checkpoint changes nothing. `--engine vllm` samples with vLLM's offline engine in
the generation environment, as `eval --engine vllm` does.
"""

from __future__ import annotations

from pathlib import Path

from training.errors import PairwiseInputError

MAX_PROMPT_ID = 200


def read_prompts(path: str | Path) -> list[dict]:
    """Prompts from JSONL: `prompt_id` (or a task file's `task_id`) and `prompt` (text or chat messages)."""
    from training.tasks import TaskFileError, read_jsonl_lines

    prompts, seen, errors = [], set(), []
    try:
        rows = list(read_jsonl_lines(Path(path), errors))
    except TaskFileError as error:
        raise PairwiseInputError(f"prompts file {error.listing}") from None
    for line_no, row in rows:
        prompt_id = row.get("prompt_id", row.get("task_id")) if isinstance(row, dict) else None
        if not isinstance(prompt_id, str) or not prompt_id or len(prompt_id) > MAX_PROMPT_ID:
            errors.append(f"line {line_no}: needs a prompt_id (or task_id) of 1-{MAX_PROMPT_ID} characters")
        elif prompt_id in seen:
            errors.append(f"line {line_no}: prompt_id {prompt_id!r} is given twice")
        elif not isinstance(row.get("prompt"), str | list) or not row["prompt"]:
            errors.append(f"line {line_no}: needs a prompt (text or chat messages)")
        else:
            seen.add(prompt_id)
            prompts.append({"prompt_id": prompt_id, "prompt": row["prompt"], "tags": row.get("tags") or []})
    if errors:
        raise PairwiseInputError(f"prompts file {path}: {errors[0]}" + (
            f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
    if not prompts:
        raise PairwiseInputError(f"prompts file {path} holds no prompt")
    return sorted(prompts, key=lambda p: p["prompt_id"])


def parse_checkpoints(values: list[str]) -> list[tuple[str, str]]:
    """`NAME=PATH` or `PATH` (named after its folder); at least two, names distinct."""
    named = []
    for value in values:
        name, _, path = value.partition("=") if "=" in value else (Path(value.rstrip("/")).name, "", value)
        named.append((name, path))
    names = [name for name, _ in named]
    if len(named) < 2:
        raise PairwiseInputError("give at least two --checkpoint to compare")
    if len(set(names)) != len(names):
        raise PairwiseInputError(f"--checkpoint names must differ, got {', '.join(names)}; write NAME=PATH")
    return named


def sample_main(args) -> int:
    from training.evaluate import generate_attempts
    from training.run_folder import check_causal_lm_checkpoint, checkpoint_content_hash
    from training.tasks import write_jsonl_atomically
    from training.vllm_generation import check_engine

    engine = getattr(args, "engine", "transformers")
    check_engine(engine, where="--engine")
    checkpoints = parse_checkpoints(args.checkpoint)
    for _, path in checkpoints:
        check_causal_lm_checkpoint(path, key="--checkpoint")
    prompts = read_prompts(args.prompts)
    out = Path(args.out)
    if out.exists():
        raise PairwiseInputError(f"--out {out} exists already; choose a new file")
    answers: dict[str, list[dict]] = {p["prompt_id"]: [] for p in prompts}
    for name, path in checkpoints:
        version = checkpoint_content_hash(path)
        for attempt in generate_attempts(path, prompts, samples=args.samples, temperature=args.temperature,
                                         max_new_tokens=args.max_new_tokens, seed=args.seed, engine=engine):
            if attempt.text.strip():
                answers[attempt.task["prompt_id"]].append({"text": attempt.text, "model": name,
                                                           "model_version": version})
        print(f"sampled {len(prompts)} prompts x {args.samples} from {name}{' by vLLM' * (engine == 'vllm')}",
              flush=True)
    rows = [{"prompt_id": prompt["prompt_id"], "prompt": prompt["prompt"], "tags": prompt["tags"],
             "responses": answers[prompt["prompt_id"]]} for prompt in prompts
            if len({r["text"] for r in answers[prompt["prompt_id"]]}) >= 2]  # identical answers compare nothing
    if not rows:
        raise PairwiseInputError(f"every checkpoint gave the same answers to all {len(prompts)} prompts, so there is "
                                 "nothing to compare; use more prompts, more or longer answers (--samples, "
                                 "--max-new-tokens), or checkpoints that differ more")
    write_jsonl_atomically(out, rows)
    written = len(rows)
    print(f"wrote {written} of {len(prompts)} prompts with differing answers to {out}")
    return 0
