"""`python -m training eval`: several checkpoints side by side on one task file, per task family.

For each checkpoint and family: success rate with a 95% Wilson interval, mean completion length,
format violations, verifier errors, timeouts, a few of the worst failures with their text, and the
scorer (name@version) that produced the figures; as a table (`format_eval_table`) and as JSON.

Completions come from transformers' `generate` through `training.generation.generate_completions` (batched,
on the CPU), or with `--engine vllm` from vLLM's offline engine in the generation environment
(`generate_completions_vllm`), from any local Hugging Face causal-LM checkpoint: a prompt goes through the checkpoint's
chat template as one user message (chat-message prompts as they are), or as plain text when it has
none. They are scored by `training.verifiers` (TaskVerifier) unless another scorer is given.

Each checkpoint after the first is also read against the first, task by task (`paired_change`): the change
in success rate with a 95% paired t interval over tasks, and whether that interval excludes no change. The
JSON keeps each checkpoint's per-task counts (`per_task`), so the app can pair a child with its parent
whatever order they were given in.

No figure depends on an arbitrary choice: tasks are generated in task_id order whatever order the
file lists them in, and each checkpoint samples from the same seed, so shuffling the task file or
reordering --checkpoint changes nothing (but which checkpoint the others are read against).
"""

from __future__ import annotations

import gc
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from training.errors import PairwiseInputError

EVAL_FORMAT = "pairwise.eval/1"
CONFIDENCE = 0.95
WORST_FAILURES = 3
SHOWN_CHARS = 400  # prompt and completion text kept per worst failure
INTERVAL_METHOD = (
    "Wilson score interval, 95%, with n = tasks: a task's samples are not independent draws, so counting "
    "each sample would overstate certainty (the per-task share has variance at most p(1-p), so this is "
    "conservative; with one sample per task it is the usual Wilson interval)"
)
SUCCESS_DEFINITION = "mean over tasks of the share of a task's scored samples that the verifier calls correct"
CHANGE_CONFIDENCE = 0.95
CHANGE_METHOD = (
    "paired over tasks: per task, the later checkpoint's share of scored samples judged correct minus the first's, "
    "over the tasks both scored; the mean of those differences with a 95% t interval over tasks (no resampling, "
    "so no seed); a change is real when the interval excludes 0"
)


@dataclass
class Attempt:
    """One completion of one task by one checkpoint, and its verdict once scored."""

    checkpoint: str
    task: dict
    sample: int
    text: str
    tokens: int
    result: object = None  # VerificationResult


def task_family(task: dict) -> str:
    """`meta.family` when the row names it (rows from `tasks make` do), else the task_id's leading word
    ("speed-heldout-0003" -> "speed", "HumanEval/12" -> "HumanEval")."""
    meta = task.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("family"), str) and meta["family"].strip():
        return meta["family"].strip()
    match = re.match(r"[A-Za-z_]+", task["task_id"])
    return match.group(0) if match else task["kind"]


def wilson_interval(successes: float, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """(low, high) of the Wilson score interval; statsmodels computes it. `successes` may be fractional
    (a sum of per-task shares)."""
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return 0.0, 1.0
    low, high = proportion_confint(successes, n, alpha=1 - confidence, method="wilson")
    return max(0.0, float(low)), min(1.0, float(high))


def is_format_violation(result) -> bool:
    """Math, missing_info and short_answer results carry a `format` component (a clearly marked final
    answer); a code completion's format fails when it is not a program defining the entry point."""
    if result.status == "error":
        return False
    if "format" in result.components:
        return result.components["format"] == 0.0
    error = str((result.details or {}).get("error") or "")
    return error.startswith("SyntaxError") or "defines no function named" in error


def _capped(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _prompt_text(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


def summarise(attempts: list[Attempt]) -> dict:
    """The figures of one checkpoint on one family (or on all of them) from scored attempts."""
    by_task: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        by_task.setdefault(attempt.task["task_id"], []).append(attempt)
    shares = []
    for task_attempts in by_task.values():
        scored = [a for a in task_attempts if a.result.status != "error"]
        if scored:
            shares.append(sum(a.result.status == "correct" for a in scored) / len(scored))
    n_tasks = len(shares)
    success = sum(shares) / n_tasks if n_tasks else None
    low, high = wilson_interval(sum(shares), n_tasks)
    failures = [a for a in attempts if a.result.status in ("wrong", "timeout")]
    # Worst first: lowest reward, then the longest text (a long wrong answer costs most), then by id.
    failures.sort(key=lambda a: (a.result.reward or 0.0, -len(a.text), a.task["task_id"], a.sample))
    errors = [a for a in attempts if a.result.status == "error"]
    return {
        "tasks": len(by_task),
        "tasks_scored": n_tasks,
        "completions": len(attempts),
        "correct": sum(a.result.status == "correct" for a in attempts),
        "success_rate": None if success is None else round(success, 4),
        "interval": [round(low, 4), round(high, 4)] if n_tasks else None,
        "mean_length_tokens": round(sum(a.tokens for a in attempts) / len(attempts), 2) if attempts else None,
        "mean_length_chars": round(sum(len(a.text) for a in attempts) / len(attempts), 2) if attempts else None,
        "format_violations": sum(is_format_violation(a.result) for a in attempts),
        "verifier_errors": len(errors),
        "timeouts": sum(a.result.status == "timeout" for a in attempts),
        "worst_failures": [
            {
                "task_id": a.task["task_id"],
                "sample": a.sample,
                "status": a.result.status,
                "reward": a.result.reward,
                "reason": a.result.reason,
                "prompt": _capped(_prompt_text(a.task["prompt"])),
                "completion": _capped(a.text),
            }
            for a in failures[:WORST_FAILURES]
        ],
        "verifier_error_reasons": sorted({a.result.reason for a in errors})[:WORST_FAILURES],
        "scorers": sorted({a.result.scorer for a in attempts}),
    }


def task_outcomes(attempts: list[Attempt]) -> dict[str, list[int]]:
    """Per task of one checkpoint: [samples judged correct, samples scored] (a verifier error is not scored)."""
    outcomes: dict[str, list[int]] = {}
    for attempt in attempts:
        counts = outcomes.setdefault(attempt.task["task_id"], [0, 0])
        if attempt.result.status != "error":
            counts[0] += attempt.result.status == "correct"
            counts[1] += 1
    return outcomes


# Why a t interval over per-task differences (and not McNemar's test on samples, or a bootstrap):
# - The task is what pairs. Parent and child answer the same tasks, and a task's samples are not independent
#   draws (one prompt; a hard task is hard for every sample): the reason the Wilson intervals above count tasks.
#   Sample k of the parent and sample k of the child are no pair at all: the same seed draws unrelated text once
#   the two models' probabilities differ. McNemar's test on per-sample pairs would count K correlated pairs per
#   task as K independent ones and overstate certainty; with one sample per task it is the same pairing as here.
# - The mean of the per-task differences is the child's success rate minus the parent's over the tasks both
#   scored: the figure the table shows side by side, with its own interval.
# - No resampling: there is no seed to choose or record, and the order of the tasks changes no digit (the sums
#   are exactly rounded, training/paired.py). A bootstrap over 10-50 tasks needs both, and is narrower than t.
# - Honest for binary answers: with one sample per task the differences are -1, 0 or +1 and this is the paired
#   Wald interval with t's quantile. tests/runs/test_eval_change.py checks by simulation that it calls a change
#   that is not there no more than 5% of the time (at one and at several samples per task), and checks its bounds
#   against scipy and statsmodels. Its weak spot: a handful of tasks all moving one way among many that did not
#   (4 of 100) can exclude 0 where McNemar's exact test would not; the counts of tasks better, worse and the same
#   go with every figure, so a reader sees how few moved.
def paired_change(parent: dict[str, list[int]], child: dict[str, list[int]],
                  confidence: float = CHANGE_CONFIDENCE) -> dict:
    """The child's change from its parent in success rate, task by task, from each one's `task_outcomes`:
    the mean per-task difference (child's share correct minus parent's) over the tasks both scored, its t
    interval, the tasks better, worse and the same, the tasks left out (unscored on either side, or evaluated
    on one side only), and `real`: the interval excludes 0 (`direction` "better" or "worse", else None)."""
    from training.paired import mean_t_interval

    paired = sorted(t for t in parent.keys() & child.keys() if parent[t][1] and child[t][1])
    deltas = [child[t][0] / child[t][1] - parent[t][0] / parent[t][1] for t in paired]
    figures = {"tasks": len(paired), "left_out": len(parent.keys() | child.keys()) - len(paired),
               "better": sum(d > 0 for d in deltas), "worse": sum(d < 0 for d in deltas),
               "same": sum(d == 0 for d in deltas), "confidence": confidence}
    if not deltas:
        return {**figures, "difference": None, "interval": None, "real": False, "direction": None}
    if len(deltas) == 1:  # one difference has no spread: no interval at all
        return {**figures, "difference": round(deltas[0], 4), "interval": None, "real": False, "direction": None}
    mean, low, high = mean_t_interval(deltas, confidence)
    interval = [round(low, 4), round(high, 4)]
    real = interval[0] > 0 or interval[1] < 0
    return {**figures, "difference": round(mean, 4), "interval": interval, "real": real,
            "direction": ("better" if mean > 0 else "worse") if real else None}


def _counted(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def change_sentence(change: dict, *, against: str, parent: bool, samples: int) -> str:
    """What a reader is told of a `paired_change` from `against` (a checkpoint's name; `parent`: it is the child's
    parent): "Better than its parent tiny-sft: +0.120 [+0.030, +0.210] in success rate, ...", "Worse than ...", or
    "Too short to show a difference from its parent tiny-sft: the change ... includes no change (...)"."""
    size = f"{_counted(change['tasks'], 'task')} × {_counted(samples, 'sample')}"
    versus = f"its parent {against}" if parent else against
    if change["interval"] is None:
        return f"Too few tasks to show a difference from {versus}: {change['tasks']} scored by both ({size})."
    moved = f"{_counted(change['better'], 'task')} better, {change['worse']} worse, {change['same']} the same"
    low, high = change["interval"]
    figure = f"{change['difference']:+.3f} [{low:+.3f}, {high:+.3f}]"
    if change["real"]:
        return (f"{change['direction'].capitalize()} than {versus}: {figure} in success rate, "
                f"{change.get('confidence', CHANGE_CONFIDENCE):.0%} paired interval over {size} ({moved}).")
    # "Too short": the run that made the child trained too little to move it beyond chance (or the tasks are too
    # few to show it). Against a checkpoint that is not its parent, no run is in question.
    lead = "Too short to show a difference from" if parent else "No difference shown from"
    return f"{lead} {versus}: the change {figure} includes no change ({size}; {moved})."


def _load_model(checkpoint: str, *, chat_prompts: bool, weights: bool = True):
    """The checkpoint's model and tokenizer (its tokenizer alone, model None, when `weights` is false: vLLM loads
    the weights itself)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    from training.generation import check_chat_template
    from training.run_folder import check_causal_lm_checkpoint

    transformers_logging.disable_progress_bar()  # eval prints its own progress, one line per checkpoint

    folder = check_causal_lm_checkpoint(checkpoint, key="--checkpoint")
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    check_chat_template(tokenizer, f"--checkpoint {checkpoint}")
    if chat_prompts and not getattr(tokenizer, "chat_template", None):
        raise PairwiseInputError(f"--checkpoint {checkpoint}: its tokenizer has no chat template, and the task "
                                 "file has chat-message prompts; use a chat (SFT) checkpoint or string prompts")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # generation continues after the prompt, so pad before it
    if not weights:
        return None, tokenizer
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    model.eval()
    return model, tokenizer


def generate_attempts(checkpoint: str, tasks: list[dict], *, samples: int, temperature: float,
                      max_new_tokens: int, seed: int, batch_size: int = 64, engine: str = "transformers") -> list[Attempt]:
    """`samples` completions per task from one checkpoint, in the order of `tasks`, sampled by `engine`."""
    from transformers import set_seed

    from training.generation import generate_completions, generate_completions_vllm

    model, tokenizer = _load_model(checkpoint, chat_prompts=any(not isinstance(t["prompt"], str) for t in tasks),
                                   weights=engine != "vllm")
    try:
        prompts = [t["prompt"] for t in tasks]
        if engine == "vllm":
            texts = generate_completions_vllm(checkpoint, tokenizer, prompts, samples=samples, temperature=temperature,
                                              max_new_tokens=max_new_tokens, seed=seed)
        else:
            set_seed(seed)  # every checkpoint draws from the same seed, whatever its place in the list
            texts = generate_completions(model, tokenizer, prompts, samples=samples, temperature=temperature,
                                         max_new_tokens=max_new_tokens, batch_size=batch_size)
        attempts = []
        for task, task_texts in zip(tasks, texts, strict=True):
            for sample, text in enumerate(task_texts):
                # Re-encoded, since generate_completions returns text: the count of the checkpoint's own tokens.
                tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
                attempts.append(Attempt(checkpoint, task, sample, text, tokens))
        return attempts
    finally:
        del model
        gc.collect()


def _labels(checkpoints: list[str]) -> dict[str, str]:
    # A run's output is always RUN/checkpoint: the run folder's name says which checkpoint it is.
    names = [(Path(c).parent.name if Path(c).name == "checkpoint" else Path(c).name) or str(c)
             for c in checkpoints]
    return {c: (name if names.count(name) == 1 else str(c)) for c, name in zip(checkpoints, names, strict=True)}


def check_settings(*, checkpoints: list[str], samples: int, temperature: float, max_new_tokens: int,
                   engine: str = "transformers") -> None:
    """Raises PairwiseInputError for settings that cannot give a meaningful evaluation."""
    from training.vllm_generation import check_engine

    check_engine(engine, where="--engine")
    if not checkpoints:
        raise PairwiseInputError("give at least one --checkpoint")
    if len(set(map(str, checkpoints))) != len(checkpoints):
        raise PairwiseInputError("a --checkpoint is given twice; give each checkpoint once")
    if samples < 1:
        raise PairwiseInputError(f"--samples must be at least 1, got {samples}")
    if temperature < 0:
        raise PairwiseInputError(f"--temperature must be >= 0 (0 is greedy), got {temperature}")
    if samples > 1 and temperature == 0:
        raise PairwiseInputError(f"--samples {samples} at --temperature 0 repeats one greedy answer {samples} "
                                 "times; give --temperature above 0 (e.g. 1.0) or --samples 1")
    if max_new_tokens < 1:
        raise PairwiseInputError(f"--max-new-tokens must be at least 1, got {max_new_tokens}")


def evaluate_checkpoints(*, checkpoints: list[str], tasks: list[dict], samples: int, temperature: float,
                         max_new_tokens: int, seed: int, scorer=None, batch_size: int = 64,
                         log: Callable[[str], None] | None = None, engine: str = "transformers") -> dict:
    """Generates `samples` completions per task with each checkpoint, scores them, and returns the
    figures per checkpoint and per family (see the module docstring; docs/training.md, "Evaluation").

    `scorer` has `verify_many([(task, completion)]) -> [VerificationResult]`; by default a TaskVerifier
    is started here and closed at the end.
    """
    from training.run_folder import checkpoint_content_hash

    log = log or (lambda line: None)
    check_settings(checkpoints=checkpoints, samples=samples, temperature=temperature, max_new_tokens=max_new_tokens,
                   engine=engine)
    if not tasks:
        raise PairwiseInputError("there are no tasks to evaluate on")
    ordered = sorted(tasks, key=lambda t: t["task_id"])
    own_scorer = scorer is None
    if own_scorer:
        from training.verifiers.task_verifier import TaskVerifier

        scorer = TaskVerifier()
    try:
        if any(t["kind"] == "code" for t in ordered) and hasattr(scorer, "start_sandbox"):
            from training.verifiers.sandbox import SandboxUnavailable

            try:
                scorer.start_sandbox()  # before generating: minutes of sampling must not end in this error
            except SandboxUnavailable as exc:
                raise PairwiseInputError(f"the task file has code tasks, which cannot be run safely here: {exc}; "
                                         "leave the code tasks out or run eval where the sandbox works") from None
        attempts: list[Attempt] = []
        for checkpoint in map(str, checkpoints):
            log(f"{checkpoint}: generating {len(ordered) * samples} completions")
            attempts += generate_attempts(checkpoint, ordered, samples=samples, temperature=temperature,
                                          max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size,
                                          engine=engine)
        log(f"scoring {len(attempts)} completions")
        results = scorer.verify_many([(a.task, a.text) for a in attempts])
    finally:
        if own_scorer:
            scorer.close()
    for attempt, result in zip(attempts, results, strict=True):
        attempt.result = result

    return eval_report(attempts, checkpoints=list(map(str, checkpoints)), tasks=ordered,
                       settings={"samples": samples, "temperature": temperature, "max_new_tokens": max_new_tokens,
                                 "seed": seed, "engine": engine},
                       content_hashes={str(c): checkpoint_content_hash(str(c)) for c in checkpoints})


def eval_report(attempts: list[Attempt], *, checkpoints: list[str], tasks: list[dict], settings: dict,
                content_hashes: dict[str, str]) -> dict:
    """The JSON of `python -m training eval` from scored attempts: per checkpoint its figures per family and over
    all, and its per-task counts; each checkpoint after the first read against the first (`changes`)."""
    families = sorted({task_family(t) for t in tasks})
    labels = _labels(checkpoints)
    report = []
    for checkpoint in checkpoints:
        mine = [a for a in attempts if a.checkpoint == checkpoint]
        report.append({
            "checkpoint": checkpoint,
            "label": labels[checkpoint],
            "content_hash": content_hashes[checkpoint],
            "families": {f: summarise([a for a in mine if task_family(a.task) == f]) for f in families},
            "all": summarise(mine),
            "per_task": task_outcomes(mine),
        })
    first = report[0]
    return {
        "format": EVAL_FORMAT,
        "settings": {**settings, "tasks": len(tasks)},
        "success_rate": SUCCESS_DEFINITION,
        "interval": INTERVAL_METHOD,
        "change": CHANGE_METHOD,
        "families": families,
        "checkpoints": report,
        "changes": [{"checkpoint": later["checkpoint"], "against": first["checkpoint"],
                     **paired_change(first["per_task"], later["per_task"])} for later in report[1:]],
    }


def _figure(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_eval_table(result: dict) -> str:
    """The eval result as a plain-text table: one line per family and checkpoint, side by side."""
    settings = result["settings"]
    checkpoints = result["checkpoints"]
    width = max([10, *(len(c["label"]) for c in checkpoints)])
    family_width = max([8, *(len(f) for f in result["families"])])
    lines = [
        f"eval: {settings['tasks']} tasks, {settings['samples']} sample(s) each, temperature "
        f"{settings['temperature']:g}, at most {settings['max_new_tokens']} new tokens, seed {settings['seed']}"
        + (", sampled by vLLM" if settings.get("engine") == "vllm" else ""),
        "success: share of samples judged correct, averaged over tasks; interval: 95% Wilson over tasks",
        "",
        f"{'family':<{family_width}}  {'checkpoint':<{width}}  {'tasks':>5}  {'success':>7}  {'95% interval':>14}  "
        f"{'mean tok':>8}  {'format':>6}  {'errors':>6}  {'timeouts':>8}",
    ]
    for family in [*result["families"], "all"]:
        for checkpoint in checkpoints:
            row = checkpoint["all"] if family == "all" else checkpoint["families"][family]
            interval = "-" if row["interval"] is None else f"[{row['interval'][0]:.2f}, {row['interval'][1]:.2f}]"
            lines.append(
                f"{family:<{family_width}}  {checkpoint['label']:<{width}}  {row['tasks']:>5}  "
                f"{_figure(row['success_rate']):>7}  {interval:>14}  {_figure(row['mean_length_tokens'], 1):>8}  "
                f"{row['format_violations']:>6}  {row['verifier_errors']:>6}  {row['timeouts']:>8}"
            )
    if result.get("changes"):
        against = {c["checkpoint"]: c["label"] for c in checkpoints}
        lines += ["", f"change from {against[result['changes'][0]['against']]}, task by task (paired, 95% t "
                      "interval over the tasks both scored):"]
        for change in result["changes"]:
            sentence = change_sentence(change, against=against[change["against"]], parent=False,
                                       samples=settings["samples"])
            lines.append(f"  {against[change['checkpoint']]}: {sentence}")
    lines += ["", "scored by:"]
    for family in result["families"]:
        scorers = sorted({s for c in checkpoints for s in c["families"][family]["scorers"]})
        lines.append(f"  {family:<{family_width}}  {', '.join(scorers) or '-'}")
    lines += ["", f"worst failure per family and checkpoint (up to {WORST_FAILURES} each in the JSON):"]
    for checkpoint in checkpoints:
        for family in result["families"]:
            for failure in checkpoint["families"][family]["worst_failures"][:1]:
                lines.append(f"  {checkpoint['label']} / {failure['task_id']} #{failure['sample']} "
                             f"({failure['status']}, reward {_figure(failure['reward'], 2)}): {failure['reason']}")
                lines.append(f"      prompt: {_one_line(failure['prompt'], 160)}")
                lines.append(f"      answer: {_one_line(failure['completion'], 160)}")
    return "\n".join(lines)


def _one_line(text: str, limit: int) -> str:
    flat = text.replace("\n", "\\n")
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def eval_main(args) -> int:
    """`python -m training eval --checkpoint A [--checkpoint B ...] --tasks F [--samples K] [--out FILE]`."""
    from training.run_folder import check_causal_lm_checkpoint, write_json_atomic
    from training.tasks import load_tasks
    from training.verifiers.task_verifier import TaskVerifier

    engine = getattr(args, "engine", "transformers")
    check_settings(checkpoints=args.checkpoint, samples=args.samples, temperature=args.temperature,
                   max_new_tokens=args.max_new_tokens, engine=engine)
    for checkpoint in args.checkpoint:
        check_causal_lm_checkpoint(checkpoint, key="--checkpoint")  # before any slow work
    out = Path(args.out) if args.out else None
    if out is not None and (out.is_dir() or not out.parent.is_dir()):
        raise PairwiseInputError(f"--out {out}: give a file path in an existing folder, e.g. results/eval.json")
    if not Path(args.tasks).is_file():
        raise PairwiseInputError(f"--tasks {args.tasks} is not a file; make one with `python -m training tasks make`")
    with TaskVerifier() as verifier:
        tasks = load_tasks(args.tasks, verifier=verifier)  # a TaskFileError is the CLI's one line
        result = evaluate_checkpoints(
            checkpoints=args.checkpoint, tasks=tasks, samples=args.samples, temperature=args.temperature,
            max_new_tokens=args.max_new_tokens, seed=args.seed, scorer=verifier,
            log=lambda line: print(line, file=sys.stderr, flush=True), engine=engine,
        )
    print(format_eval_table(result))
    if out is not None:
        write_json_atomic(out, result)
        print(f"wrote {out}", file=sys.stderr)
    return 0
