"""Pairwise verifiers as a GRPO reward function in TRL's shape.

TRL calls `reward_function(prompts=..., completions=..., completion_ids=..., **columns)`, where each
column of the training dataset arrives as a list aligned with `completions`. The dataset rows are
Pairwise task rows (docs/training.md), or carry at least `task_id` when the tasks are given up front.

Returns one float per completion, or None where the verifier could not score it (its own error or
a math-verify hang), which TRL treats as "no reward" rather than a silent 0.
"""

from __future__ import annotations

from training.verifiers.results import ERROR, VerificationResult
from training.verifiers.task_verifier import TaskVerifier

# Columns TRL adds that are not part of a task.
_NOT_TASK_COLUMNS = {"prompts", "completion_ids", "trainer_state", "log_extra", "log_metric"}


def completion_text(completion) -> str:
    """The text of a completion: a plain string, or the last message of a conversational one."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


class VerifierReward:
    """A reward function backed by one long-lived TaskVerifier. Call close() when training ends."""

    __name__ = "pairwise_verifier"

    def __init__(self, tasks: list[dict] | None = None, *, workers: int | None = None):
        self.tasks_by_id = {task["task_id"]: task for task in tasks or []}
        self.verifier = TaskVerifier(workers=workers)
        self.last_results: list[VerificationResult] = []

    def _task_for(self, index: int, columns: dict) -> dict:
        task_id = (columns.get("task_id") or [None] * (index + 1))[index]
        if task_id in self.tasks_by_id:
            return self.tasks_by_id[task_id]
        # Dataset rows: drop the None that a table fills in for keys other rows have.
        return {
            key: values[index]
            for key, values in columns.items()
            if key not in _NOT_TASK_COLUMNS and isinstance(values, list) and values[index] is not None
        }

    def __call__(self, completions: list, **columns) -> list[float | None]:
        pairs = [(self._task_for(index, columns), completion_text(c)) for index, c in enumerate(completions)]
        self.last_results = self.verifier.verify_many(pairs)
        return [None if r.status == ERROR or r.reward is None else float(r.reward) for r in self.last_results]

    def close(self) -> None:
        self.verifier.close()


def make_reward_function(tasks: list[dict] | None = None, *, workers: int | None = None) -> VerifierReward:
    """`(completions, **columns) -> list[float | None]` for TRL's GRPOTrainer(reward_funcs=[...])."""
    return VerifierReward(tasks, workers=workers)
