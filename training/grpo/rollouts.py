"""rollouts/: every completion a GRPO run generated, one Parquet row each (docs/training.md, "Rollouts").

One file per generation batch and process (`batch-000012-rank0.parquet`), written aside and renamed
once the batch is complete, so a crash loses at most the batch in flight and never leaves half a file.
`read_rollouts(run)` reads them all; `recompute_advantages(rows, ...)` rebuilds every advantage from the
rewards of its group (or batch) and the run's config, as TRL's GRPOTrainer computes it.
"""

import json
import math
import os
import re
from collections import defaultdict
from pathlib import Path

from training.atomic_write import atomic_path

ROLLOUT_FORMAT = "pairwise.rollouts/1"
BATCH_FILE = re.compile(r"batch-(\d+)-rank(\d+)\.parquet$")
# TRL adds this to the standard deviation before dividing (grpo_trainer.py, _generate_and_score_completions).
STD_EPSILON = 1e-4


def rollout_schema():
    import pyarrow as pa

    return pa.schema([
        pa.field("rollout_id", pa.string(), nullable=False),   # "<batch>-<group>-<member>"
        pa.field("batch", pa.int64(), nullable=False),          # one scoring call: the unit of scale_rewards=batch
        pa.field("group_id", pa.string(), nullable=False),      # "<batch>-<group>": the completions of one prompt
        pa.field("member", pa.int32(), nullable=False),         # index within the group
        pa.field("task_id", pa.string(), nullable=False),
        pa.field("prompt", pa.string(), nullable=False),        # the task's prompt (JSON for chat messages)
        pa.field("completion", pa.string(), nullable=False),
        pa.field("completion_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("logprobs", pa.list_(pa.float32())),           # per completion token, under the generating policy
        pa.field("logprobs_source", pa.string(), nullable=False),
        pa.field("finish_reason", pa.string(), nullable=False),  # "stopped" (EOS) or "truncated" (length limit)
        pa.field("length", pa.int32(), nullable=False),          # completion tokens, EOS included
        pa.field("status", pa.string(), nullable=False),         # correct / wrong / error / timeout
        pa.field("reward", pa.float64()),                        # the verifier's total; null when it could not score
        pa.field("components", pa.string(), nullable=False),     # the verifier's components, as JSON
        pa.field("component_scores", pa.map_(pa.string(), pa.float64()), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("scorer", pa.string(), nullable=False),         # name@version of the verifier ("none": open task)
        pa.field("reward_model_score", pa.float64()),            # the reward model's score; null without one
        pa.field("reward_model", pa.string()),                   # reward_model@sha256:... of the model that scored it
        pa.field("advantage", pa.float64(), nullable=False),
        pa.field("in_batch", pa.bool_(), nullable=False),        # false: dropped by dynamic sampling, not trained on
        pa.field("policy_step", pa.int64(), nullable=False),     # optimizer steps taken when it was generated
        pa.field("policy_weights_sha256", pa.string()),          # of the generating weights; null under ZeRO-3
        pa.field("policy_version", pa.string()),                 # v0003: the policy version that generated it
        pa.field("process_index", pa.int32(), nullable=False),
    ], metadata={"format": ROLLOUT_FORMAT})


def write_batch(folder: Path, batch: int, process_index: int, rows: list[dict]) -> Path:
    """One batch's rows into folder/batch-NNNNNN-rankR.parquet, written aside and renamed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"batch-{batch:06d}-rank{process_index}.parquet"
    table = pa.Table.from_pylist(rows, schema=rollout_schema())
    with atomic_path(path) as partial:
        pq.write_table(table, partial)
    return path


def rollout_files(run: str | os.PathLike) -> list[Path]:
    folder = Path(run) / "rollouts"
    return sorted(p for p in folder.glob("batch-*.parquet") if BATCH_FILE.search(p.name)) if folder.is_dir() else []


def next_batch_number(run: str | os.PathLike) -> int:
    """The first batch number not used yet (a resumed run continues the numbering)."""
    numbers = [int(BATCH_FILE.search(p.name).group(1)) for p in rollout_files(run)]
    return max(numbers) + 1 if numbers else 0


def read_rollouts(run: str | os.PathLike):
    """Every rollout row of a run as one pyarrow Table (empty, with the schema, if there are none)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = rollout_files(run)
    if not files:
        return rollout_schema().empty_table()
    return pa.concat_tables([pq.read_table(path, schema=rollout_schema()) for path in files])


def _nanmean(values: list[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return sum(present) / len(present) if present else math.nan


def _nanstd(values: list[float]) -> float:
    """Standard deviation ignoring NaN, with Bessel's correction; NaN below two values (trl.trainer.utils.nanstd)."""
    present = [v for v in values if not math.isnan(v)]
    if len(present) < 2:
        return math.nan
    mean = sum(present) / len(present)
    return math.sqrt(sum((v - mean) ** 2 for v in present) / (len(present) - 1))


def _row_rewards(row: dict, functions: int) -> list[float]:
    """A row's reward per reward function, NaN where it gave none: the verifier's, then the reward model's."""
    values = [row["reward"], row.get("reward_model_score")][:functions]
    return [math.nan if value is None else float(value) for value in values]


def recompute_advantages(rows: list[dict], *, scale_rewards: str, multi_objective_aggregation: str = "sum_then_normalize",
                         reward_weights: tuple[float, ...] = (1.0,)) -> dict[str, float]:
    """rollout_id -> advantage, from each row's rewards and the rows of its group (or batch).

    The same arithmetic as TRL's GRPOTrainer: `reward_weights` has one weight per reward function, the verifier's
    reward first and the reward model's score second (when the run had one). sum_then_normalize: the weighted sum
    (NaN sums ignored; a row where every function gave None is left out) minus the group mean, divided by the group's
    (scale_rewards=group) or the batch's (=batch) standard deviation plus 1e-4, or not divided (=none).
    normalize_then_sum: each function normalised within its group, weighted and summed, then normalised over the
    batch. A completion no function could score gets advantage 0.
    """
    functions = len(reward_weights)

    def weighted_sum(values: list[float]) -> float:
        if all(math.isnan(v) for v in values):
            return math.nan
        return sum(w * v for w, v in zip(reward_weights, values, strict=True) if not math.isnan(v))

    groups: dict[str, list[dict]] = defaultdict(list)
    batches: dict[int, list[dict]] = defaultdict(list)
    for row in rows:
        groups[row["group_id"]].append(row)
        batches[row["batch"]].append(row)
    advantages: dict[str, float] = {}
    if multi_objective_aggregation == "normalize_then_sum":
        # Per group and function: (r - mean) / (std + eps); weighted sum; then over the batch: (x - mean) / (std + eps).
        summed: dict[str, float] = {}
        for members in groups.values():
            per_function = [[_row_rewards(r, functions)[k] for r in members] for k in range(functions)]
            normalised = []
            for values in per_function:
                mean, std = _nanmean(values), _nanstd(values)
                normalised.append([(v - mean) / (std + STD_EPSILON) for v in values])
            for index, row in enumerate(members):
                raw = _row_rewards(row, functions)
                if all(math.isnan(v) for v in raw):
                    summed[row["rollout_id"]] = math.nan
                else:
                    summed[row["rollout_id"]] = weighted_sum([column[index] for column in normalised])
        for members in batches.values():
            values = [summed[r["rollout_id"]] for r in members]
            mean, std = _nanmean(values), _nanstd(values)
            for row, value in zip(members, values, strict=True):
                advantage = (value - mean) / (std + STD_EPSILON)
                advantages[row["rollout_id"]] = 0.0 if math.isnan(advantage) else advantage
        return advantages

    def reward_of(row: dict) -> float:
        return weighted_sum(_row_rewards(row, functions))

    for members in groups.values():
        values = [reward_of(r) for r in members]
        mean = _nanmean(values)
        if scale_rewards == "batch":
            std = _nanstd([reward_of(r) for r in batches[members[0]["batch"]]])
        else:
            std = _nanstd(values)
        for row, value in zip(members, values, strict=True):
            advantage = value - mean
            if scale_rewards != "none":
                advantage /= std + STD_EPSILON
            advantages[row["rollout_id"]] = 0.0 if math.isnan(advantage) else advantage
    return advantages


def prompt_text(prompt) -> str:
    return prompt if isinstance(prompt, str) else json.dumps(prompt, ensure_ascii=False)
