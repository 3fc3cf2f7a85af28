"""Scoring code completions: run the candidate in the sandbox, compare outputs in the trusted parent.

A code task (docs/training.md, "Task files") has public, hidden and random tests. Tests without
`expected` take it from the reference solution, and random tests take their arguments from the
task's generator; both run in the sandbox too, once per task, and are cached. Expected outputs stay
in this process: the sandbox only reports what the candidate returned, as plain JSON, and this
module decides.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import threading
from dataclasses import dataclass, field

from training.verifiers.code_extraction import extract_code
from training.verifiers.results import CORRECT, ERROR, TIMEOUT, WRONG, VerificationResult
from training.verifiers.sandbox import SandboxFailed, SandboxPool, SandboxUnavailable

CODE_SCORER_NAME = "code"
# Bump when anything that changes a verdict changes: extraction, comparison, limits, the sandbox.
# 2: candidates run under a seccomp allow-list (a call outside it now fails with EPERM).
CODE_SCORER_VERSION = "2"
# The candidate runs on this interpreter, whose version also decides what code does.
CODE_SCORER = f"{CODE_SCORER_NAME}@{CODE_SCORER_VERSION}+python-{sys.version_info[0]}.{sys.version_info[1]}"

DEFAULT_TIME_S = 2.0
DEFAULT_MEMORY_MB = 256
OUTPUT_REPR_CHARS = 200
SUITES = ("public", "hidden", "random")
GENERATOR_ENTRY_POINT = "_pairwise_generate_all"
GENERATOR_WRAPPER = f"""

def {GENERATOR_ENTRY_POINT}(seed, count):
    import random
    return [list(generate(random.Random(seed * 1000003 + index))) for index in range(count)]
"""


class TaskBroken(RuntimeError):
    """The task itself cannot be scored (its reference or generator fails); no candidate is at fault."""


@dataclass
class PreparedCodeTask:
    task_id: str
    entry_point: str
    time_s: float
    memory_mb: int
    float_tolerance: float | None
    suites: dict[str, list[tuple[list, object]]] = field(default_factory=dict)

    @property
    def calls(self) -> list[list]:
        return [args for suite in SUITES for args, _ in self.suites.get(suite, [])]


def strict_equal(expected, actual, float_tolerance: float | None = None) -> bool:
    """Equality that a lying __eq__ cannot fake and that keeps 1, True and 1.0 apart.

    Both sides are plain JSON values. With a float tolerance, int and float compare by value within
    it (relative or absolute); bool never equals a number.
    """
    if float_tolerance is not None and _is_number(expected) and _is_number(actual):
        if isinstance(expected, float) and math.isnan(expected):
            return isinstance(actual, float) and math.isnan(actual)
        return math.isclose(expected, actual, rel_tol=float_tolerance, abs_tol=float_tolerance)
    if type(expected) is not type(actual):
        return False
    if type(expected) is list:
        return len(expected) == len(actual) and all(
            strict_equal(e, a, float_tolerance) for e, a in zip(expected, actual, strict=True)
        )
    if type(expected) is dict:
        return expected.keys() == actual.keys() and all(
            strict_equal(expected[key], actual[key], float_tolerance) for key in expected
        )
    if type(expected) is float and math.isnan(expected):
        return math.isnan(actual)
    return expected == actual


def _is_number(value) -> bool:
    return type(value) is int or type(value) is float


def _to_plain_json(value):
    """Task files are JSON: a tuple in a test is a list, as the sandbox reports it."""
    return json.loads(json.dumps(value))


def _capped_repr(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= OUTPUT_REPR_CHARS else text[: OUTPUT_REPR_CHARS - 3] + "..."


def _limit_from(report: dict) -> str | None:
    """Names the resource limit a run hit, from the sandbox's report and the errors raised."""
    if report.get("limit"):
        return report["limit"]
    texts = [report.get("load_error") or ""] + [
        (r or {}).get("error") or "" for r in report.get("results", [])
    ]
    for text in texts:
        if text.startswith("MemoryError"):
            return "memory"
        if "File too large" in text:
            return "file_size"
        if "No space left on device" in text:
            return "disk"
        if text.startswith("BlockingIOError") and "Resource temporarily unavailable" in text:
            return "processes"
    return None


class CodeVerifier:
    """Scores code completions against code tasks. Thread-safe; holds a pool of fork servers."""

    def __init__(self, workers: int | None = None, pool: SandboxPool | None = None):
        self.pool = pool or SandboxPool(workers)
        self._prepared: dict[str, PreparedCodeTask | TaskBroken] = {}
        self._prepare_lock = threading.Lock()

    # ------------------------------------------------------------ tasks

    def prepare(self, task: dict) -> PreparedCodeTask:
        """Resolves every test's arguments and expected output, once per distinct task."""
        key = hashlib.sha256(json.dumps(task, sort_keys=True).encode()).hexdigest()
        with self._prepare_lock:
            cached = self._prepared.get(key)
        if cached is None:
            try:
                cached = self._prepare_uncached(task)
            except TaskBroken as exc:
                cached = exc
            with self._prepare_lock:
                self._prepared[key] = cached
        if isinstance(cached, TaskBroken):
            raise cached
        return cached

    def _prepare_uncached(self, task: dict) -> PreparedCodeTask:
        limits = task.get("limits") or {}
        prepared = PreparedCodeTask(
            task_id=task["task_id"],
            entry_point=task["entry_point"],
            time_s=float(limits.get("time_s", DEFAULT_TIME_S)),
            memory_mb=int(limits.get("memory_mb", DEFAULT_MEMORY_MB)),
            float_tolerance=task.get("float_tolerance"),
        )
        cases: dict[str, list[list]] = {}
        for suite in ("public", "hidden"):
            cases[suite] = [
                [_to_plain_json(test["args"]), _to_plain_json(test["expected"]) if "expected" in test else None,
                 "expected" in test]
                for test in task.get(f"{suite}_tests") or []
            ]
        random_spec = task.get("random_tests")
        cases["random"] = []
        if random_spec and random_spec.get("count", 0) > 0:
            report = self.pool.run(
                code=random_spec["generator"] + GENERATOR_WRAPPER,
                entry_point=GENERATOR_ENTRY_POINT,
                calls=[[int(random_spec.get("seed", 0)), int(random_spec["count"])]],
                time_s=max(prepared.time_s, 5.0),
                memory_mb=prepared.memory_mb,
            )
            outcome = (report["results"] or [None])[0]
            if report["load_error"] or not outcome or "out" not in outcome:
                why = report["load_error"] or (outcome or {}).get("error") or report.get("limit") or "no output"
                raise TaskBroken(f"the random-test generator failed: {why}")
            for args in outcome["out"]:
                if type(args) is not list:
                    raise TaskBroken("the random-test generator must return a list of arguments")
                cases["random"].append([args, None, False])

        missing = [case for suite in SUITES for case in cases[suite] if not case[2]]
        if missing:
            report = self.pool.run(
                code=task["reference_solution"],
                entry_point=prepared.entry_point,
                calls=[case[0] for case in missing],
                time_s=prepared.time_s,
                memory_mb=prepared.memory_mb,
            )
            if report["load_error"]:
                raise TaskBroken(f"the reference solution failed to load: {report['load_error']}")
            for index, (case, outcome) in enumerate(zip(missing, report["results"], strict=True)):
                if not outcome or "out" not in outcome:
                    why = (outcome or {}).get("error") or report.get("limit") or "no output"
                    raise TaskBroken(f"the reference solution failed on test input {index}: {why}")
                case[1] = outcome["out"]
        prepared.suites = {suite: [(case[0], case[1]) for case in cases[suite]] for suite in SUITES}
        return prepared

    # ------------------------------------------------------------ scoring

    def verify(self, task: dict, completion: str) -> VerificationResult:
        task_id = task.get("task_id", "")
        try:
            prepared = self.prepare(task)
            code = extract_code(completion, prepared.entry_point)
            report = self.pool.run(
                code=code,
                entry_point=prepared.entry_point,
                calls=prepared.calls,
                time_s=prepared.time_s,
                memory_mb=prepared.memory_mb,
            )
        except TaskBroken as exc:
            return VerificationResult(task_id, ERROR, None, {}, f"task cannot be scored: {exc}", CODE_SCORER)
        except (SandboxFailed, SandboxUnavailable) as exc:
            return VerificationResult(task_id, ERROR, None, {}, str(exc), CODE_SCORER)
        return self._judge(prepared, report)

    def verify_many(self, pairs: list[tuple[dict, str]]) -> list[VerificationResult]:
        """Scores many (task, completion) pairs, as many at once as the pool has servers."""
        self.pool.start()
        futures = [self.pool.submit(self.verify, task, completion) for task, completion in pairs]
        return [future.result() for future in futures]

    def _judge(self, prepared: PreparedCodeTask, report: dict) -> VerificationResult:
        results = report["results"]
        limit = _limit_from(report)
        components: dict[str, dict[str, int]] = {}
        suites_detail: dict[str, list[dict]] = {}
        first_failure = None
        index = 0
        for suite in SUITES:
            tests = prepared.suites.get(suite, [])
            passed = 0
            detail = []
            for number, (_, expected) in enumerate(tests, start=1):
                outcome = results[index] if index < len(results) else None
                index += 1
                if outcome is None:
                    entry = {"passed": False, "error": "did not return"}
                elif "error" in outcome:
                    entry = {"passed": False, "error": outcome["error"]}
                else:
                    ok = strict_equal(expected, outcome["out"], prepared.float_tolerance)
                    entry = {"passed": ok, "output": _capped_repr(outcome["out"])}
                    if not ok:
                        entry["error"] = "wrong output"
                        if suite == "public":
                            entry["error"] = f"expected {_capped_repr(expected)}, got {entry['output']}"
                passed += entry["passed"]
                detail.append(entry)
                if not entry["passed"] and first_failure is None:
                    first_failure = f"{suite} test {number}: {entry['error']}"
            components[suite] = {"passed": passed, "total": len(tests)}
            suites_detail[suite] = detail
        total = sum(c["total"] for c in components.values())
        all_passed = sum(c["passed"] for c in components.values()) == total
        details = {
            "suites": suites_detail,
            "error": report["load_error"],
            "wall_s": report["wall_s"],
            "limit": limit,
            "exit_code": report["exit_code"],
            "exit_signal": report["exit_signal"],
        }

        if report["protocol_error"]:
            status, reason = WRONG, f"the candidate tampered with the result channel ({report['protocol_error']})"
        elif report["load_error"]:
            status, reason = WRONG, f"the code failed to load: {report['load_error']}"
            if limit in ("time", "cpu"):
                status = TIMEOUT
        elif limit in ("time", "cpu"):
            status = TIMEOUT
            reason = f"hit the {limit} limit ({prepared.time_s:g} s per test); {first_failure or 'at the end'}"
        elif all_passed:
            status, reason = CORRECT, f"passed all {total} tests"
        else:
            status = WRONG
            reason = first_failure or "failed"
            if report["exit_code"] is not None or report["exit_signal"]:
                how = report["exit_signal"] or f"code {report['exit_code']}"
                reason = f"the process exited ({how}) before every test returned; first failure: {reason}"
            if limit:
                reason = f"hit the {limit} limit; {reason}"
        reward = 1.0 if status == CORRECT else 0.0
        return VerificationResult(prepared.task_id, status, reward, components, reason, CODE_SCORER, details)

    def close(self) -> None:
        self.pool.close()

    def __enter__(self) -> CodeVerifier:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
