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


MISSING = {"task_id": "missing-001", "kind": "missing_info", "prompt": "A car travels 120 km. What is its average speed?",
           "missing": "time", "missing_terms": ["how long", "hours"],
           "solution": "The time is not given.\nAnswer: cannot be determined (the time is missing)"}
SHORT = {"task_id": "simple-001", "kind": "short_answer", "prompt": "What day comes after Monday?",
         "answer": "Tuesday", "accept": ["Tue"], "max_chars": 40, "solution": "Answer: Tuesday"}
CONVERT = {"task_id": "convert-001", "kind": "math", "prompt": "Convert 3 km to m.", "answer": "3000", "unit": "m",
           "unit_exact": True, "solution": "3 * 1000 = 3000\nAnswer: 3000 m"}


def test_evaluation_kinds_and_conversions_load(tmp_path):
    rows = [MISSING, SHORT, CONVERT, {**MATH, "solution": "150 / 3 = 50\nAnswer: 50 km/h"}]
    assert load_tasks(write_lines(tmp_path / "tasks.jsonl", rows)) == rows


@pytest.mark.parametrize("row, reason", [
    ({**MISSING, "missing": ""}, "missing must name the absent quantity"),
    ({**MISSING, "missing_terms": "time"}, "missing_terms must be a non-empty list"),
    ({**MISSING, "answer": "50"}, "unknown keys for a missing_info task: answer"),
    ({**SHORT, "max_chars": 0}, "max_chars must be a whole number >= 1"),
    ({key: value for key, value in SHORT.items() if key != "max_chars"}, "max_chars must be a whole number >= 1"),
    ({**SHORT, "accept": []}, "accept must be a non-empty list"),
    ({**SHORT, "answer": ""}, "answer must be a non-empty string"),
    ({key: value for key, value in CONVERT.items() if key != "unit"}, "unit_exact needs a unit"),
    ({**CONVERT, "unit_exact": "yes"}, "unit_exact must be true or false"),
])
def test_malformed_evaluation_rows_are_rejected_with_their_line(tmp_path, row, reason):
    with pytest.raises(TaskFileError) as caught:
        load_tasks(write_lines(tmp_path / "t.jsonl", [MATH, row]))
    errors = caught.value.errors
    assert len(errors) == 1 and errors[0].startswith(f"line 2: {reason}"), errors


def test_reference_solutions_that_fail_their_own_tests_are_rejected_all_at_once(tmp_path):
    rows = [
        MATH,
        {**CODE, "task_id": "c1", "public_tests": [{"args": [[3, 1, 2]], "expected": [3, 2, 1]}]},
        {**CODE, "task_id": "c2", "reference_solution": "def sort_numbers(xs):\n    return sorted(xs) if xs else 1 / 0"},
        {**MATH, "task_id": "m1", "solution": "150 / 3 = 40\nAnswer: 40 km/h"},
        {**CONVERT, "solution": "Answer: 3 km"},
        {**MISSING, "solution": "Probably 2 hours, so 60 km/h.\nAnswer: 60 km/h"},
        {**SHORT, "solution": "Let me think. " * 5 + "Answer: Tuesday"},
        {"task_id": "z", "kind": "essay", "prompt": "?"},
        {**SHORT, "task_id": "simple-002"},
    ]
    path = write_lines(tmp_path / "t.jsonl", rows)
    with pytest.raises(TaskFileError) as caught:
        load_tasks(path)
    errors = caught.value.errors
    assert [int(e.split(":")[0].removeprefix("line ")) for e in errors] == [2, 3, 4, 5, 6, 7, 8]
    assert "reference_solution fails its own task" in errors[0] and "expected [3, 2, 1], got [1, 2, 3]" in errors[0]
    assert "cannot be scored" in errors[1] and "ZeroDivisionError" in errors[1]
    assert "solution fails its own task" in errors[2] and "40" in errors[2]
    assert "written in km, not in m" in errors[3]
    assert "invents 2, 60" in errors[4]
    assert "over the 40-character budget" in errors[5]
    assert "kind must be one of math, code, missing_info, short_answer, open, not 'essay'" in errors[6]
    # The schema alone does not run anything: the same file passes when solutions are not checked.
    assert len(load_tasks(write_lines(tmp_path / "ok.jsonl", rows[:7] + rows[8:]), check_solutions=False)) == 8


def test_open_tasks_have_no_verifier_and_keep_their_worked_solution(tmp_path):
    from training.task_families import make_tasks, open_tasks
    from training.verifiers.task_verifier import TaskVerifier

    speed = make_tasks("speed", n=3, seed=1)
    path = tmp_path / "open.jsonl"
    write_tasks(path, open_tasks(speed))
    loaded = load_tasks(path)  # a worked solution is an SFT target: no verifier checks it
    assert [t["kind"] for t in loaded] == ["open"] * 3
    assert [t["prompt"] for t in loaded] == [t["prompt"] for t in speed]
    assert all("answer" not in t and t["meta"]["verifiable_kind"] == "math" for t in loaded)
    with TaskVerifier() as verifier:
        result = verifier.verify(loaded[0], speed[0]["solution"])
    assert result.status == "unverified" and result.reward is None and result.scorer == "none"

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "o1", "kind": "open", "prompt": "Explain", "answer": "42"}) + "\n")
    with pytest.raises(TaskFileError) as refused:
        load_tasks(bad)
    assert refused.value.errors == ["line 1: unknown keys for a open task: answer"]


def test_describe_checks_several_files_with_one_verifier_and_names_the_bad_file(tmp_path):
    """`tasks describe` (what the app runs to keep task sets) checks every file with the same verifier workers;
    each file's summary is its own, and a failing reference solution in the second file is reported with its file
    and line."""
    from tests.training.conftest import run_training_cli

    good = write_lines(tmp_path / "good.jsonl", [MATH, CODE])
    other = write_lines(tmp_path / "other.jsonl", [{**MATH, "task_id": "m2"}])
    described = run_training_cli("tasks", "describe", "--tasks", str(good), "--tasks", str(other))
    assert described.returncode == 0, described.stderr
    first, second = map(json.loads, described.stdout.splitlines())
    assert (first["count"], first["kinds"], second["count"], second["kinds"]) == (2, ["code", "math"], 1, ["math"])
    assert first["sha256"] != second["sha256"]

    broken = write_lines(tmp_path / "broken.jsonl", [MATH, {**MATH, "task_id": "m1", "solution": "Answer: 41 km/h"}])
    refused = run_training_cli("tasks", "describe", "--tasks", str(good), "--tasks", str(broken))
    assert refused.returncode == 2
    assert str(broken) in refused.stderr and "line 2: the solution fails its own task" in refused.stderr


def test_lines_pythons_json_reader_cannot_read_are_refused_by_line(tmp_path):
    """100 KB of "[" and a 100,000-digit number stop Python's own reader (RecursionError, int's digit limit): a task
    file holding them is refused by line like any other bad JSON, not with a traceback."""
    rows = [MATH, "[" * 100_000, '{"task_id": "n", "kind": "math", "prompt": "?", "answer": ' + "9" * 100_000 + "}"]
    with pytest.raises(TaskFileError) as refused:
        load_tasks(write_lines(tmp_path / "t.jsonl", rows))
    assert refused.value.errors == ["line 2: nests arrays or objects more than 64 levels deep",
                                    "line 3: holds a number written with 100,000 characters; at most 4,300"]


def test_a_task_id_with_an_invisible_character_or_an_answer_no_number_equals_is_refused_by_line(tmp_path):
    """The training command and the app (which checks uploads with `tasks describe`) share one rule."""
    from tests.training.conftest import run_training_cli

    rows = [MATH, {**MATH, "task_id": "speed-\x00002"}, '{"task_id": "m3", "kind": "math", "prompt": "?", "answer": NaN}',
            '{"task_id": "m4", "kind": "short_answer", "prompt": "?", "answer": -Infinity, "max_chars": 9}',
            {**MATH, "task_id": "speed\u202e-005"}]
    path = write_lines(tmp_path / "t.jsonl", rows)
    with pytest.raises(TaskFileError) as refused:
        load_tasks(path, check_solutions=False)
    assert refused.value.errors == [
        "line 2: task_id holds U+0000 (a control character) at character 7, an invisible or control character; "
        "remove it",
        "line 3: answer is nan, which no answer can equal; give a finite number or a string",
        "line 4: answer is -inf, which no answer can equal; give a finite number or a string",
        "line 5: task_id holds U+202E (right-to-left override) at character 6, an invisible or control character; "
        "remove it"]
    described = run_training_cli("tasks", "describe", "--tasks", str(path))
    assert described.returncode == 2 and described.stdout == ""
    [line] = described.stderr.strip().splitlines()
    assert "line 2: task_id holds U+0000" in line and "line 3: answer is nan" in line and "Traceback" not in line
