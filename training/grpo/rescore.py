"""`python -m training rescore --run DIR --scorer VERSION | --reward-model CKPT`: score a run's saved completions again.

A changed exam is not a better model: when the scorer changes, old and new figures must not be mixed up.
Rescoring reads rollouts/ and the run's own copy of its tasks (tasks.jsonl), scores every completion
with the scorer asked for, and writes `rescored/<scorer>.parquet` beside rollouts/, one row per rollout
with the new verdict next to the original one. The original rollouts are never touched, and a scorer
whose scores are already stored is refused rather than overwritten. run.json lists every rescore.

`--scorer` takes what this installation can score with: `current` (the verifiers installed here),
a scorer name or its leading part (`math@1`, `code@1`; several separated by commas), or a YAML file of
math scorer settings (training.verifiers.math_verifier.MathScorerConfig: weights, tolerances), which
gives the math scorer a version of its own (`...+config-<digest>`).

`--reward-model` scores every completion with another reward model instead (a fixed or retrained one), into
`rescored/reward_model@sha256_<hash>.parquet`, one row per rollout with the new score next to the score the
run recorded (and the reward model that gave it, if any); figures: the mean of each, their Pearson correlation
and how often both pick the same best answer of a group.
"""

import json
import re
import sys
from dataclasses import fields
from pathlib import Path

from training.errors import PairwiseInputError
from training.reward_model_scorer import over_max_length_line

RESCORED_DIR = "rescored"


def _math_config(spec: str):
    from training.verifiers.math_verifier import DEFAULT_MATH_CONFIG, MathScorerConfig

    path = Path(spec)
    if not (spec.endswith((".yaml", ".yml", ".json")) or path.is_file()):
        return DEFAULT_MATH_CONFIG
    if not path.is_file():
        raise PairwiseInputError(f"--scorer {spec}: no such file; give a YAML file of math scorer settings, "
                                 "a scorer name, or 'current'")
    from training.config import yaml_config

    data = yaml_config(path.read_text(encoding="utf-8"), f"--scorer {spec}") or {}  # ConfigError: one line
    known = {f.name for f in fields(MathScorerConfig)}
    if not isinstance(data, dict) or set(data) - known:
        unknown = sorted(set(data) - known) if isinstance(data, dict) else data
        raise PairwiseInputError(f"--scorer {spec}: unknown math scorer settings {unknown}; known: "
                                 f"{', '.join(sorted(known))}")
    values = {}
    for key, value in data.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise PairwiseInputError(f"--scorer {spec}: {key} must be a number >= 0, got {value!r}")
        values[key] = float(value)
    return MathScorerConfig(**values)


def installed_scorers(math_config) -> dict[str, str]:
    """kind -> the scorer name@version this installation scores that kind of task with."""
    from training.verifiers.code_verifier import CODE_SCORER
    from training.verifiers.math_verifier import math_scorer_name

    return {"math": math_scorer_name(math_config), "code": CODE_SCORER}


def _check_requested(spec: str, installed: dict[str, str], kinds: set[str]) -> None:
    if spec == "current" or Path(spec).suffix in (".yaml", ".yml", ".json"):
        return
    available = ", ".join(installed[kind] for kind in sorted(kinds))
    for wanted in (part.strip() for part in spec.split(",") if part.strip()):
        if not any(installed[kind] == wanted or installed[kind].startswith(wanted + "+") for kind in kinds):
            raise PairwiseInputError(f"--scorer {wanted} is not installed here: this Pairwise scores these rollouts "
                                     f"with {available}; install the version you want, pass one of those, 'current', "
                                     "or a YAML file of math scorer settings")


def _slug(names: list[str]) -> str:
    return re.sub(r"[^A-Za-z0-9@.+-]+", "_", "__".join(names))


def rescore_run(*, run: str | Path, scorer: str, workers: int | None = None) -> dict:
    """Score every rollout of `run` again; write rescored/<scorer>.parquet; return the comparison."""
    import pyarrow as pa

    from training.run_folder import utc_now, write_json_atomic
    from training.tasks import TaskFileError, load_tasks
    from training.verifiers.sandbox import SandboxUnavailable
    from training.verifiers.task_verifier import TaskVerifier

    folder, record, table = _rescorable_run(run)
    try:
        tasks = {task["task_id"]: task for task in load_tasks(folder.path / "tasks.jsonl")}
    except TaskFileError as error:
        raise PairwiseInputError(f"the run's task copy {error.listing}") from None
    rows = table.select(["rollout_id", "task_id", "completion", "status", "reward", "scorer"]).to_pylist()
    missing = sorted({row["task_id"] for row in rows} - set(tasks))
    if missing:
        raise PairwiseInputError(f"{folder.path}/tasks.jsonl lacks tasks {missing[:3]} that rollouts refer to")
    math_config = _math_config(scorer)
    installed = installed_scorers(math_config)
    kinds = {tasks[row["task_id"]]["kind"] for row in rows}
    _check_requested(scorer, installed, kinds)
    names = sorted({installed[kind] for kind in kinds})
    target = folder.path / RESCORED_DIR / f"{_slug(names)}.parquet"
    if target.exists():
        raise PairwiseInputError(f"{target} already holds this run's scores under {', '.join(names)}; rescoring "
                                 "never overwrites stored scores (remove that file to score again)")

    with TaskVerifier(workers=workers, math_config=math_config) as verifier:
        if "code" in kinds:
            try:
                verifier.start_sandbox()
            except SandboxUnavailable as error:
                raise PairwiseInputError(f"code rollouts of {folder.path} cannot be run safely here: {error}") from None
        results = verifier.verify_many([(tasks[row["task_id"]], row["completion"]) for row in rows])

    new_rows = [{
        "rollout_id": row["rollout_id"],
        "task_id": row["task_id"],
        "status": result.status,
        "reward": None if result.reward is None else float(result.reward),
        "components": json.dumps(result.components, sort_keys=True, default=str),
        "reason": result.reason,
        "scorer": result.scorer,
        "original_status": row["status"],
        "original_reward": row["reward"],
        "original_scorer": row["scorer"],
    } for row, result in zip(rows, results, strict=True)]
    schema = pa.schema([("rollout_id", pa.string()), ("task_id", pa.string()), ("status", pa.string()),
                        ("reward", pa.float64()), ("components", pa.string()), ("reason", pa.string()),
                        ("scorer", pa.string()), ("original_status", pa.string()), ("original_reward", pa.float64()),
                        ("original_scorer", pa.string())])
    _write_rescored(target, pa.Table.from_pylist(new_rows, schema=schema))

    comparison = {
        "original": _figures([(r["original_status"], r["original_reward"]) for r in new_rows],
                             sorted({r["original_scorer"] for r in new_rows})),
        "rescored": _figures([(r["status"], r["reward"]) for r in new_rows], names),
        "verdicts_changed": sum((r["status"] == "correct") != (r["original_status"] == "correct") for r in new_rows),
        "file": str(target.relative_to(folder.path)),
        "at": utc_now(),
    }
    record.setdefault("rescores", []).append(comparison)
    write_json_atomic(folder.run_json, record)
    return comparison


def _write_rescored(target: Path, table) -> None:
    """The new scores, written aside and renamed: a failed rescore leaves no file, so it can be run again."""
    import pyarrow.parquet as pq

    from training.atomic_write import atomic_path

    target.parent.mkdir(exist_ok=True)
    with atomic_path(target) as partial:
        pq.write_table(table, partial)


def _figures(verdicts: list[tuple[str, float | None]], scorers: list[str]) -> dict:
    scored = [reward for _, reward in verdicts if reward is not None]
    return {
        "scorers": scorers,
        "completions": len(verdicts),
        "correct": sum(status == "correct" for status, _ in verdicts),
        "success_rate": round(sum(status == "correct" for status, _ in verdicts) / len(verdicts), 4),
        "mean_reward": round(sum(scored) / len(scored), 4) if scored else None,
        "errors": sum(status in ("error", "timeout") for status, _ in verdicts),
    }


def format_rescore(comparison: dict) -> str:
    lines = [f"{'scores':<10}{'completions':>12}{'correct':>9}{'success':>9}{'mean reward':>13}{'errors':>8}  scorer"]
    for label in ("original", "rescored"):
        f = comparison[label]
        mean = "-" if f["mean_reward"] is None else f"{f['mean_reward']:.3f}"
        lines.append(f"{label:<10}{f['completions']:>12}{f['correct']:>9}{f['success_rate']:>9.3f}{mean:>13}"
                     f"{f['errors']:>8}  {', '.join(f['scorers'])}")
    lines.append(f"verdicts changed: {comparison['verdicts_changed']}; new scores in {comparison['file']} "
                 "(the original rollouts are unchanged)")
    return "\n".join(lines)


def rescore_with_reward_model(*, run: str | Path, reward_model: str, batch_size: int = 8) -> dict:
    """Score every rollout of `run` with `reward_model`; write rescored/<identity>.parquet; return the comparison."""
    import statistics
    from collections import defaultdict

    import pyarrow as pa

    from training.reward_model_scorer import RewardModelScorer, reward_model_identity
    from training.run_folder import (
        check_reward_model_checkpoint,
        checkpoint_content_hash,
        utc_now,
        write_json_atomic,
    )
    from training.tasks import TaskFileError, load_tasks

    folder, record, table = _rescorable_run(run)
    try:
        tasks = {task["task_id"]: task for task in load_tasks(folder.path / "tasks.jsonl", check_solutions=False)}
    except TaskFileError as error:
        raise PairwiseInputError(f"the run's task copy {error.listing}") from None
    check_reward_model_checkpoint(reward_model, key="--reward-model")
    content_hash = checkpoint_content_hash(reward_model)  # known before the model loads: stored scores are refused
    identity = reward_model_identity(content_hash)
    target = folder.path / RESCORED_DIR / f"{_slug([identity])}.parquet"
    if target.exists():
        raise PairwiseInputError(f"{target} already holds this run's scores under {identity[:36]}...; rescoring never "
                                 "overwrites stored scores (remove that file to score again)")
    rows = table.select(["rollout_id", "group_id", "task_id", "completion", "reward_model_score",
                         "reward_model"]).to_pylist()
    missing = sorted({row["task_id"] for row in rows} - set(tasks))
    if missing:
        raise PairwiseInputError(f"{folder.path}/tasks.jsonl lacks tasks {missing[:3]} that rollouts refer to")
    scorer = RewardModelScorer(reward_model, batch_size=batch_size, key="--reward-model", content_hash=content_hash)
    prompts = [tasks[row["task_id"]]["prompt"] for row in rows]
    # The policy saw plain prompts as chat messages when its tokenizer had a chat template (training.grpo.run).
    chat = scorer.tokenizer.chat_template is not None
    prompts = [[{"role": "user", "content": p}] if chat and isinstance(p, str) else p for p in prompts]
    scorer.check_prompts(prompts, where=f"{folder.path}/tasks.jsonl")
    scores = scorer.score(prompts, [row["completion"] for row in rows])

    new_rows = [{"rollout_id": row["rollout_id"], "task_id": row["task_id"], "reward_model_score": score,
                 "reward_model": identity, "original_reward_model_score": row["reward_model_score"],
                 "original_reward_model": row["reward_model"]} for row, score in zip(rows, scores, strict=True)]
    schema = pa.schema([("rollout_id", pa.string()), ("task_id", pa.string()), ("reward_model_score", pa.float64()),
                        ("reward_model", pa.string()), ("original_reward_model_score", pa.float64()),
                        ("original_reward_model", pa.string())])
    _write_rescored(target, pa.Table.from_pylist(new_rows, schema=schema))

    # A completion longer than the reward model's max_length has no new score (fits_max_length): counted, left out.
    paired = [(row["reward_model_score"], score) for row, score in zip(rows, scores, strict=True)
              if row["reward_model_score"] is not None and score is not None]
    try:
        pearson = round(statistics.correlation(*zip(*paired, strict=True)), 4) if len(paired) >= 2 else None
    except statistics.StatisticsError:  # every score the same on one side
        pearson = None
    groups: dict[str, list[tuple[float | None, float]]] = defaultdict(list)
    for row, score in zip(rows, scores, strict=True):
        groups[row["group_id"]].append((row["reward_model_score"], score))
    comparable = [members for members in groups.values()
                  if all(old is not None and new is not None for old, new in members)]
    same_best = sum(max(range(len(m)), key=lambda i: m[i][0]) == max(range(len(m)), key=lambda i: m[i][1])
                    for m in comparable)
    originals = [row["reward_model_score"] for row in rows if row["reward_model_score"] is not None]
    scored = [score for score in scores if score is not None]
    comparison = {
        "original": {"reward_models": sorted({r["reward_model"] for r in rows if r["reward_model"]}),
                     "completions": len(originals),
                     "mean_score": round(statistics.fmean(originals), 4) if originals else None},
        "rescored": {"reward_models": [identity], "completions": len(scored),
                     "mean_score": round(statistics.fmean(scored), 4) if scored else None,
                     "over_max_length": scorer.over_max_length, "max_length": scorer.max_length},
        "pearson": pearson,
        "same_best_answer": {"groups": len(comparable), "same": same_best},
        "file": str(target.relative_to(folder.path)),
        "at": utc_now(),
    }
    record.setdefault("rescores", []).append(comparison)
    write_json_atomic(folder.run_json, record)
    return comparison


def format_reward_model_rescore(comparison: dict) -> str:
    def mean(value) -> str:
        return "-" if value is None else f"{value:.3f}"

    lines = [f"{'scores':<10}{'completions':>12}{'mean score':>12}  reward model"]
    for label in ("original", "rescored"):
        block = comparison[label]
        models = ", ".join(m[:36] + "..." for m in block["reward_models"]) or "none (the run had no reward model)"
        lines.append(f"{label:<10}{block['completions']:>12}{mean(block['mean_score']):>12}  {models}")
    best = comparison["same_best_answer"]
    lines.append(f"Pearson r between the two: {mean(comparison['pearson'])}; same best answer in {best['same']} of "
                 f"{best['groups']} groups; new scores in {comparison['file']} (the original rollouts are unchanged)")
    rescored = comparison["rescored"]
    if rescored.get("over_max_length"):
        lines.append(over_max_length_line(rescored["over_max_length"], rescored["over_max_length"]
                                          + rescored["completions"], rescored["max_length"], "completions")
                     + "; their new score is null")
    return "\n".join(lines)


def _rescorable_run(run: str | Path):
    """The run folder, its record and its rollouts, or PairwiseInputError saying why they cannot be rescored."""
    from training.grpo.rollouts import read_rollouts
    from training.run_folder import RunFolder

    folder = RunFolder(run)
    record = folder.read_record()
    if record is None or record.get("kind") != "grpo":
        raise PairwiseInputError(f"--run {folder.path} is not a GRPO run folder (no run.json of kind grpo); give "
                                 "the output_dir of a python -m training grpo run")
    table = read_rollouts(folder.path)
    if table.num_rows == 0:
        raise PairwiseInputError(f"--run {folder.path} has no rollouts to rescore (rollouts/ is empty)")
    return folder, record, table


def rescore_main(args) -> int:
    """`python -m training rescore --run DIR --scorer VERSION | --reward-model CKPT`."""
    if args.reward_model:
        print(format_reward_model_rescore(rescore_with_reward_model(run=args.run, reward_model=args.reward_model)))
        sys.stdout.flush()
        return 0
    comparison = rescore_run(run=args.run, scorer=args.scorer)
    print(format_rescore(comparison))
    sys.stdout.flush()
    return 0
