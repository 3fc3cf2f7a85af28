"""Task files (docs/training.md, "Task files"): JSONL, one math or code task a line.

`load_tasks` reads and validates a whole file; a bad file is rejected whole with every problem given
as `line N: reason`. `write_tasks` validates, then writes aside and renames, so a reader never sees
half a file.
"""

from __future__ import annotations

import json
import keyword
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

KINDS = ("math", "code")
# `solution` is a worked answer used as the SFT target; it is never shown in a prompt nor used to score.
COMMON_KEYS = {"task_id", "kind", "prompt", "meta", "tags", "solution"}
MATH_KEYS = COMMON_KEYS | {"answer", "unit"}
CODE_KEYS = COMMON_KEYS | {
    "entry_point", "reference_solution", "public_tests", "hidden_tests", "random_tests", "limits",
    "float_tolerance",
}
LIMIT_KEYS = {"time_s", "memory_mb"}
MAX_TIME_S = 60
MAX_MEMORY_MB = 8192


class TaskFileError(ValueError):
    """A task file that cannot be used; `errors` holds every problem as "line N: reason"."""

    def __init__(self, path: str | os.PathLike, errors: list[str]):
        self.path = str(path)
        self.errors = errors
        super().__init__(f"{self.path}: " + "; ".join(errors))


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_prompt(prompt: Any) -> list[str]:
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


def _check_math(task: dict) -> list[str]:
    errors = []
    answer = task.get("answer")
    if isinstance(answer, bool) or not (isinstance(answer, str) and answer.strip() or _is_number(answer)):
        errors.append("answer must be a non-empty string (or a number)")
    unit = task.get("unit")
    if unit is not None:
        from training.verifiers.units import parse_unit

        if not isinstance(unit, str) or parse_unit(unit) is None:
            errors.append(f"unit {unit!r} is not a unit pint knows (try 'km/h', 'm/s', 'kg')")
    return errors


def validate_task(task: Any) -> list[str]:
    """Every problem with one task row, as short reasons (empty when the row is valid)."""
    if not isinstance(task, dict):
        return ["a task must be a JSON object"]
    errors = []
    task_id = task.get("task_id")
    if not isinstance(task_id, str) or not task_id.strip():
        errors.append("task_id must be a non-empty string")
    kind = task.get("kind")
    if kind not in KINDS:
        return errors + [f"kind must be one of {', '.join(KINDS)}, not {kind!r}"]
    if "solution" in task and not isinstance(task["solution"], str):
        errors.append("solution must be a string (a worked answer)")
    unknown = set(task) - (MATH_KEYS if kind == "math" else CODE_KEYS)
    if unknown:
        errors.append(f"unknown keys for a {kind} task: {', '.join(sorted(unknown))}")
    if "prompt" not in task:
        errors.append("prompt is missing")
    else:
        errors += _check_prompt(task["prompt"])
    errors += _check_math(task) if kind == "math" else _check_code(task)
    return errors


def read_jsonl_lines(path: str | os.PathLike, errors: list[str]) -> Iterator[tuple[int, Any]]:
    """(line number, decoded value) for each non-blank line of a JSONL file; a line that is not JSON adds
    `line N: ...` to `errors` instead. A file that cannot be read raises TaskFileError."""
    yield from _decoded_lines(_text_lines(path), errors)


def _text_lines(path: str | os.PathLike) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFileError(path, [f"line 0: cannot read the file ({exc})"]) from exc


def _decoded_lines(lines: list[str], errors: list[str]) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"line {number}: not valid JSON ({exc.msg} at column {exc.colno})")


def parse_tasks(lines: list[str], path: str | os.PathLike = "<tasks>") -> list[dict]:
    tasks, errors, seen = [], [], {}
    for number, task in _decoded_lines(lines, errors):
        problems = validate_task(task)
        errors += [f"line {number}: {problem}" for problem in problems]
        if isinstance(task, dict) and isinstance(task.get("task_id"), str):
            if task["task_id"] in seen:
                errors.append(f"line {number}: task_id {task['task_id']!r} repeats line {seen[task['task_id']]}")
            seen.setdefault(task["task_id"], number)
        tasks.append(task)
    if not errors and not tasks:
        errors.append("line 1: the file holds no tasks")
    if errors:
        raise TaskFileError(path, errors)
    return tasks


def load_tasks(path: str | os.PathLike) -> list[dict]:
    """Reads and validates a task file; raises TaskFileError listing every bad line."""
    return parse_tasks(_text_lines(path), path)


def write_jsonl_atomically(path: str | os.PathLike, rows: list[dict]) -> None:
    """Writes rows next to path, then renames, so path is either the old file or the whole new one."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_tasks(path: str | os.PathLike, tasks: list[dict]) -> None:
    """Validates every task, then writes the file atomically."""
    parse_tasks([json.dumps(task) for task in tasks], path)
    write_jsonl_atomically(path, tasks)
