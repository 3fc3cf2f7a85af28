"""One entry point for every task kind: routes math tasks to MathVerifier and code to CodeVerifier;
missing_info and short_answer tasks are scored in this process (see their modules); open tasks have no
verifier and come back unverified, with no reward."""

from __future__ import annotations

from training.verifiers.length import score_short_answer
from training.verifiers.missing_info import score_missing_info
from training.verifiers.results import VerificationResult, error_result, unverified_result
from training.verifiers.unit_exact import require_exact_unit

# Kinds whose scoring is bounded regular-expression work, run here without a worker pool.
IN_PROCESS_SCORERS = {"missing_info": score_missing_info, "short_answer": score_short_answer}


class TaskVerifier:
    """Scores (task, completion) pairs of any kind. Back ends start on first use; close() stops them."""

    def __init__(self, *, workers: int | None = None, math_config=None):
        self.workers = workers
        self.math_config = math_config
        self._math = None
        self._code = None

    @property
    def math(self):
        if self._math is None:
            from training.verifiers.math_verifier import DEFAULT_MATH_CONFIG, MathVerifier

            self._math = MathVerifier(self.math_config or DEFAULT_MATH_CONFIG, workers=self.workers)
        return self._math

    @property
    def code(self):
        if self._code is None:
            from training.verifiers.code_verifier import CodeVerifier

            self._code = CodeVerifier(workers=self.workers)
        return self._code

    def start_sandbox(self) -> None:
        """Starts the code sandbox now, raising SandboxUnavailable if it cannot isolate code."""
        self.code.pool.start()

    def verify_many(self, pairs: list[tuple[dict, str]]) -> list[VerificationResult]:
        """Results in the order of pairs."""
        results: list[VerificationResult | None] = [None] * len(pairs)
        by_kind: dict[str, list[int]] = {"math": [], "code": []}
        for index, (task, completion) in enumerate(pairs):
            kind = task.get("kind")
            if kind in by_kind:
                by_kind[kind].append(index)
            elif kind in IN_PROCESS_SCORERS:
                results[index] = IN_PROCESS_SCORERS[kind](task, completion)
            elif kind == "open":
                results[index] = unverified_result(task.get("task_id", ""))
            else:
                results[index] = error_result(task.get("task_id", ""), "none", f"unknown task kind {kind!r}")
        for kind, indices in by_kind.items():
            if indices:
                backend = self.math if kind == "math" else self.code
                for index, result in zip(indices, backend.verify_many([pairs[i] for i in indices]), strict=True):
                    if kind == "math":
                        result = require_exact_unit(*pairs[index], result, self.math.config)
                    results[index] = result
        return results

    def verify(self, task: dict, completion: str) -> VerificationResult:
        return self.verify_many([(task, completion)])[0]

    def close(self) -> None:
        for backend in (self._math, self._code):
            if backend is not None:
                backend.close()
        self._math = self._code = None

    def __enter__(self) -> TaskVerifier:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
