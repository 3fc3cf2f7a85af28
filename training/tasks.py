"""Task files (docs/training.md, "Task files"): JSONL, one task a line (math, code, missing_info, short_answer,
open).

`load_tasks` reads and validates a whole file: every row against the schema, then every reference
solution (and worked `solution`) through the row's own verifier, which must call it correct. A bad
file is rejected whole with every problem given as `line N: reason`; nothing is half-loaded.
`write_tasks` checks the schema, then writes aside and renames, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import keyword
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training.atomic_write import atomic_file
from training.errors import PairwiseInputError
from training.json_input import JsonRefused, read_json_line
from training.text_input import hidden_character

KINDS = ("math", "code", "missing_info", "short_answer", "open")
# An open task is a prompt without a verifier (an explanation, advice, a summary): only a reward model scores it.
OPEN = "open"
# `solution` is a worked answer used as the SFT target; it is never shown in a prompt nor used to score.
COMMON_KEYS = {"task_id", "kind", "prompt", "meta", "tags", "solution"}
MATH_KEYS = COMMON_KEYS | {"answer", "unit", "unit_exact"}
CODE_KEYS = COMMON_KEYS | {
    "entry_point", "reference_solution", "public_tests", "hidden_tests", "random_tests", "limits",
    "float_tolerance",
}
MISSING_INFO_KEYS = COMMON_KEYS | {"missing", "missing_terms"}
SHORT_ANSWER_KEYS = COMMON_KEYS | {"answer", "accept", "max_chars"}
KEYS_BY_KIND = {"math": MATH_KEYS, "code": CODE_KEYS, "missing_info": MISSING_INFO_KEYS,
                "short_answer": SHORT_ANSWER_KEYS, OPEN: COMMON_KEYS}
LIMIT_KEYS = {"time_s", "memory_mb"}
MAX_TIME_S = 60
MAX_MEMORY_MB = 8192


class TaskFileError(PairwiseInputError):
    """A task file that cannot be used; `errors` holds every problem as "line N: reason".

    A PairwiseInputError, so a command that meets one prints its one line and exits 2 like any input error; as
    text it is `one_line()`. A command reading another kind of JSONL file names it with `listing`."""

    def __init__(self, path: str | os.PathLike, errors: list[str], *, advice: str = "fix these lines and run again"):
        self.path = str(path)
        self.errors = errors
        self.advice = advice
        super().__init__(self.one_line())

    @property
    def listing(self) -> str:
        """The file and every problem: "PATH: line N: reason; ..."."""
        return f"{self.path}: " + "; ".join(self.errors)

    def one_line(self) -> str:
        """What a command prints: the file, every problem and what to do, on one line (a reason that quotes
        a multi-line error is joined up)."""
        return " ".join(f"tasks file {self.listing}; {self.advice}".split())


def _is_number(value: Any) -> bool:
    """A JSON number a task may hold: never true/false, NaN or an infinity (which no answer or limit can equal)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_prompt(prompt: Any) -> list[str]:
    if isinstance(prompt, str):
        return [] if prompt.strip() else ["prompt is empty"]
    if isinstance(prompt, list) and prompt:
        for message in prompt:
            if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                    and isinstance(message.get("content"), str)):
                return ["prompt messages need a string 'role' and 'content'"]
        return []
    return ["prompt must be a string or a non-empty list of chat messages"]


def _check_tests(task: dict, key: str) -> list[str]:
    tests = task.get(key, [])
    if not isinstance(tests, list):
        return [f"{key} must be a list"]
    errors = []
    for number, test in enumerate(tests, start=1):
        if not isinstance(test, dict) or not isinstance(test.get("args"), list):
            errors.append(f"{key}[{number}] needs 'args', a list of arguments")
        elif set(test) - {"args", "expected"}:
            errors.append(f"{key}[{number}] has unknown keys {sorted(set(test) - {'args', 'expected'})}")
    return errors


def _check_code(task: dict) -> list[str]:
    errors = []
    entry = task.get("entry_point")
    if not (isinstance(entry, str) and entry.isidentifier() and not keyword.iskeyword(entry)):
        errors.append("entry_point must be a Python function name")
    reference = task.get("reference_solution")
    if not isinstance(reference, str) or not reference.strip():
        errors.append("reference_solution must be Python source")
    else:
        try:
            compile(reference, "reference_solution", "exec")
        except SyntaxError as exc:
            errors.append(f"reference_solution does not compile: {exc.msg} (its line {exc.lineno})")
    for key in ("public_tests", "hidden_tests"):
        errors += _check_tests(task, key)
    random_tests = task.get("random_tests")
    count = 0
    if random_tests is not None:
        if not isinstance(random_tests, dict) or not isinstance(random_tests.get("generator"), str):
            errors.append("random_tests needs 'generator' (source defining generate(rng)) and 'count'")
        else:
            count = random_tests.get("count")
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                errors.append("random_tests.count must be a whole number >= 0")
                count = 0
            if set(random_tests) - {"generator", "count", "seed"}:
                errors.append(f"random_tests has unknown keys {sorted(set(random_tests) - {'generator', 'count', 'seed'})}")
            try:
                compile(random_tests["generator"], "generator", "exec")
            except SyntaxError as exc:
                errors.append(f"random_tests.generator does not compile: {exc.msg}")
    n_tests = sum(len(task.get(k) or []) for k in ("public_tests", "hidden_tests") if isinstance(task.get(k), list))
    if not errors and n_tests + count == 0:
        errors.append("a code task needs at least one test (public, hidden or random)")
    limits = task.get("limits")
    if limits is not None:
        if not isinstance(limits, dict) or set(limits) - LIMIT_KEYS:
            errors.append(f"limits may only hold {sorted(LIMIT_KEYS)}")
        else:
            time_s, memory_mb = limits.get("time_s", 2), limits.get("memory_mb", 256)
            if not _is_number(time_s) or not 0 < time_s <= MAX_TIME_S:
                errors.append(f"limits.time_s must be a number in (0, {MAX_TIME_S}]")
            if not isinstance(memory_mb, int) or isinstance(memory_mb, bool) or not 16 <= memory_mb <= MAX_MEMORY_MB:
                errors.append(f"limits.memory_mb must be a whole number in [16, {MAX_MEMORY_MB}]")
    tolerance = task.get("float_tolerance")
    if tolerance is not None and (not _is_number(tolerance) or tolerance < 0):
        errors.append("float_tolerance must be a number >= 0")
    return errors


def _check_answer(task: dict) -> list[str]:
    answer = task.get("answer")
    if isinstance(answer, float) and not math.isfinite(answer):
        return [f"answer is {answer}, which no answer can equal; give a finite number or a string"]
    if isinstance(answer, bool) or not (isinstance(answer, str) and answer.strip() or _is_number(answer)):
        return ["answer must be a non-empty string (or a number)"]
    return []


def _is_word_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.strip() for v in value)


def _check_math(task: dict) -> list[str]:
    errors = _check_answer(task)
    unit = task.get("unit")
    if unit is not None:
        from training.verifiers.units import parse_unit

        if not isinstance(unit, str) or parse_unit(unit) is None:
            errors.append(f"unit {unit!r} is not a unit pint knows (try 'km/h', 'm/s', 'kg')")
    if "unit_exact" in task:
        if not isinstance(task["unit_exact"], bool):
            errors.append("unit_exact must be true or false")
        elif task["unit_exact"] and unit is None:
            errors.append("unit_exact needs a unit: the unit the answer must be written in")
    return errors


def _check_missing_info(task: dict) -> list[str]:
    errors = []
    if not isinstance(task.get("missing"), str) or not task["missing"].strip():
        errors.append("missing must name the absent quantity (a non-empty string such as 'time')")
    if "missing_terms" in task and not _is_word_list(task["missing_terms"]):
        errors.append("missing_terms must be a non-empty list of non-empty strings")
    return errors


def _check_short_answer(task: dict) -> list[str]:
    errors = _check_answer(task)
    if "accept" in task and not _is_word_list(task["accept"]):
        errors.append("accept must be a non-empty list of non-empty strings (other right answers)")
    budget = task.get("max_chars")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        errors.append("max_chars must be a whole number >= 1 (the length budget of the answer, in characters)")
    return errors


_CHECKS_BY_KIND = {"math": _check_math, "code": _check_code, "missing_info": _check_missing_info,
                   "short_answer": _check_short_answer, OPEN: lambda task: []}


def validate_task(task: Any) -> list[str]:
    """Every problem with one task row, as short reasons (empty when the row is valid)."""
    if not isinstance(task, dict):
        return ["a task must be a JSON object"]
    errors = []
    task_id = task.get("task_id")
    if not isinstance(task_id, str) or not task_id.strip():
        errors.append("task_id must be a non-empty string")
    elif hidden := hidden_character("task_id", task_id):
        errors.append(hidden)
    kind = task.get("kind")
    if kind not in KINDS:
        return errors + [f"kind must be one of {', '.join(KINDS)}, not {kind!r}"]
    if "solution" in task and not isinstance(task["solution"], str):
        errors.append("solution must be a string (a worked answer)")
    unknown = set(task) - KEYS_BY_KIND[kind]
    if unknown:
        errors.append(f"unknown keys for a {kind} task: {', '.join(sorted(unknown))}")
    if "prompt" not in task:
        errors.append("prompt is missing")
    else:
        errors += check_prompt(task["prompt"])
    errors += _CHECKS_BY_KIND[kind](task)
    return errors


def solution_problems(numbered_tasks: list[tuple[int, dict]], *, verifier=None) -> list[str]:
    """`line N: reason` for every task whose reference solution (code) or worked `solution` its own
    verifier does not call correct: a task that fails its own tests would score every answer wrongly. An open
    task's `solution` is an SFT target only: no verifier exists to check it.

    Code runs only in the sandbox; where the sandbox cannot isolate code (neither root nor user
    namespaces), code references are left to be checked when they are scored, which then fails with the sandbox's reason.
    """
    from training.verifiers.sandbox import SandboxUnavailable
    from training.verifiers.task_verifier import TaskVerifier

    checks: list[tuple[int, str, dict, str]] = []
    for number, task in numbered_tasks:
        if task["kind"] == OPEN:
            continue
        if task["kind"] == "code":
            checks.append((number, "reference_solution", task, task["reference_solution"]))
        solution = task.get("solution")
        if isinstance(solution, str) and solution != task.get("reference_solution"):
            checks.append((number, "solution", task, solution))
    if not checks:
        return []
    own_verifier = verifier is None
    verifier = verifier or TaskVerifier()
    try:
        if any(task["kind"] == "code" for _, _, task, _ in checks):
            try:
                verifier.start_sandbox()
            except SandboxUnavailable:
                checks = [check for check in checks if check[2]["kind"] != "code"]
        results = verifier.verify_many([(task, text) for _, _, task, text in checks])
    finally:
        if own_verifier:
            verifier.close()
    problems = []
    for (number, key, _, _), result in zip(checks, results, strict=True):
        if result.status == "error":
            problems.append(f"line {number}: the task cannot be scored ({result.reason})")
        elif result.status != "correct":
            problems.append(f"line {number}: the {key} fails its own task ({result.status}: {result.reason})")
    return problems


def read_jsonl_lines(path: str | os.PathLike, errors: list[str]) -> Iterator[tuple[int, Any]]:
    """(line number, decoded value) for each non-blank line of a JSONL file; a line that is not JSON adds
    `line N: ...` to `errors` instead. A file that cannot be read raises TaskFileError."""
    yield from _decoded_lines(_text_lines(path), errors)


def _text_lines(path: str | os.PathLike) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError(path, [f"cannot read the file ({exc})"],
                            advice="give the path of a readable JSONL task file") from exc


def _decoded_lines(lines: list[str], errors: list[str]) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, read_json_line(line)
        except JsonRefused as refused:
            errors.append(f"line {number}: {refused.reason}")


def parse_tasks(lines: list[str], path: str | os.PathLike = "<tasks>", *, check_solutions: bool = False,
                verifier=None) -> list[dict]:
    """Task rows of JSONL lines; raises TaskFileError listing every problem, in line order.

    With check_solutions, every schema-valid row's reference solution and worked `solution` are also
    scored by its own verifier (`verifier`, else a TaskVerifier started and closed here)."""
    tasks, errors, seen, valid = [], [], {}, []
    for number, task in _decoded_lines(lines, errors):
        problems = validate_task(task)
        errors += [f"line {number}: {problem}" for problem in problems]
        if not problems:
            valid.append((number, task))
        if isinstance(task, dict) and isinstance(task.get("task_id"), str):
            if task["task_id"] in seen:
                errors.append(f"line {number}: task_id {task['task_id']!r} repeats line {seen[task['task_id']]}")
            seen.setdefault(task["task_id"], number)
        tasks.append(task)
    if not errors and not tasks:
        errors.append("line 1: the file holds no tasks")
    if check_solutions and valid:
        errors += solution_problems(valid, verifier=verifier)
    if errors:
        errors.sort(key=_line_number)  # stable: one line's problems keep their order
        raise TaskFileError(path, errors)
    return tasks


def _line_number(error: str) -> int:
    return int(error.split(":", 1)[0].removeprefix("line "))


def load_tasks(path: str | os.PathLike, *, check_solutions: bool = True, verifier=None) -> list[dict]:
    """Reads and validates a task file, reference solutions included; raises TaskFileError listing
    every bad line. check_solutions=False checks the schema only (no verifier runs)."""
    return parse_tasks(_text_lines(path), path, check_solutions=check_solutions, verifier=verifier)


def write_jsonl_atomically(path: str | os.PathLike, rows: list[dict]) -> None:
    """Writes rows next to path, then renames, so path is either the old file or the whole new one. The file is
    readable by its owner only, the mode these files have always had."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(target, "w", private=True) as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_tasks(path: str | os.PathLike, tasks: list[dict]) -> None:
    """Validates every task against the schema, then writes the file atomically. (Reference solutions
    are run when the file is loaded, not here: writing stays fast for generated families.)"""
    parse_tasks([json.dumps(task) for task in tasks], path)
    write_jsonl_atomically(path, tasks)
