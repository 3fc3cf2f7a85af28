import json

import pytest

from training.tasks import TaskFileError, load_tasks, write_tasks

MATH = {"task_id": "speed-001", "kind": "math", "prompt": "How fast?", "answer": "50", "unit": "km/h"}
CODE = {
    "task_id": "sort-001", "kind": "code", "prompt": "Write sort_numbers(xs).", "entry_point": "sort_numbers",
    "reference_solution": "def sort_numbers(xs):\n    return sorted(xs)",
    "public_tests": [{"args": [[3, 1, 2]], "expected": [1, 2, 3]}],
    "hidden_tests": [{"args": [[]]}],
    "random_tests": {"generator": "def generate(rng):\n    return [[rng.randint(-9, 9)]]", "count": 20},
    "limits": {"time_s": 2, "memory_mb": 256},
}


def write_lines(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_design_examples_load_unchanged(tmp_path):
    path = write_lines(tmp_path / "tasks.jsonl", [MATH, CODE])
    assert load_tasks(path) == [MATH, CODE]


def test_bad_file_reports_every_bad_line(tmp_path):
    rows = [
        MATH,
        "{not json",
        {**MATH, "task_id": "speed-002", "unit": "furlongs per bogus"},
        {**CODE, "entry_point": "not a name"},
        {**CODE, "task_id": "x", "hiden_tests": []},
        {**MATH},
        {**CODE, "task_id": "y", "limits": {"time_s": -1}},
        {"task_id": "z", "kind": "essay", "prompt": "?"},
    ]
    with pytest.raises(TaskFileError) as caught:
        load_tasks(write_lines(tmp_path / "tasks.jsonl", rows))
    errors = caught.value.errors
    lines = sorted({int(e.split(":")[0].split()[1]) for e in errors})
    assert lines == [2, 3, 4, 5, 6, 7, 8]
    assert any("line 5:" in e and "hiden_tests" in e for e in errors)
    assert any("line 6:" in e and "repeats line 1" in e for e in errors)


def test_code_task_without_tests_is_rejected(tmp_path):
    task = {**CODE, "public_tests": [], "hidden_tests": []}
    task.pop("random_tests")
    with pytest.raises(TaskFileError, match="at least one test"):
        load_tasks(write_lines(tmp_path / "t.jsonl", [task]))


def test_write_tasks_is_atomic_and_refuses_bad_rows(tmp_path):
    path = tmp_path / "out.jsonl"
    write_tasks(path, [MATH])
    with pytest.raises(TaskFileError):
        write_tasks(path, [MATH, {"kind": "math"}])
    assert load_tasks(path) == [MATH]
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]
