"""What every Pairwise verifier returns: one result per (task, completion), never a bare number."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CORRECT = "correct"
WRONG = "wrong"
ERROR = "error"
TIMEOUT = "timeout"
# An open task has no verifier: nothing was checked, and the reward is None (a reward model scores it instead).
UNVERIFIED = "unverified"
STATUSES = (CORRECT, WRONG, ERROR, TIMEOUT, UNVERIFIED)
NO_VERIFIER = "none"


@dataclass
class VerificationResult:
    """One verdict.

    `status` is correct / wrong / timeout (the candidate's doing), error (the verifier or the task
    failed; `reward` is then None, never a silent 0 or 1) or unverified (an open task: no verifier exists;
    `reward` is None). `scorer` is "<name>@<version>", or "none".
    `details` records what ran (code: suites, per-test outcomes, capped outputs, limits hit).
    """

    task_id: str
    status: str
    reward: float | None
    components: dict[str, Any]
    reason: str
    scorer: str
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        if self.status in (ERROR, UNVERIFIED) and self.reward is not None:
            raise ValueError(f"an {self.status} result has no reward")

    def to_row(self) -> dict[str, Any]:
        """The verification row of docs/training.md, plus `details`."""
        return {
            "task_id": self.task_id,
            "status": self.status,
            "reward": self.reward,
            "components": self.components,
            "reason": self.reason,
            "scorer": self.scorer,
            "details": self.details,
        }


def unverified_result(task_id: str) -> VerificationResult:
    """An open task's verdict: nothing to check; a reward model, where the run has one, gives the reward."""
    return VerificationResult(task_id, UNVERIFIED, None, {}, "open task: no verifier; a reward model scores it",
                              NO_VERIFIER)


def error_result(task_id: str, scorer: str, reason: str) -> VerificationResult:
    return VerificationResult(task_id, ERROR, None, {}, reason, scorer)
