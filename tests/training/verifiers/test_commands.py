import json
from types import SimpleNamespace

from training.cli import main
from training.tasks import load_tasks
from training.verifier_commands import import_humaneval_main, verify_main

MATH = {"task_id": "speed-001", "kind": "math", "prompt": "How fast?", "answer": "50", "unit": "km/h"}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_verify_writes_one_row_per_completion(tmp_path, add_task, add_solution, capsys):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [MATH, add_task])
    completions = write_jsonl(tmp_path / "completions.jsonl", [
        {"task_id": "speed-001", "completion": "The answer is 50 km/h."},
        {"task_id": "speed-001", "completion": "The answer is not 50, it is 75 km/h."},
        {"task_id": "add-001", "completion": f"```python\n{add_solution}```"},
        {"task_id": "add-001", "completion": "import sys\nsys.exit(0)"},
    ])
    out = tmp_path / "results.jsonl"
    assert verify_main(SimpleNamespace(tasks=tasks, completions=completions, out=str(out))) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["status"]) for r in rows] == [
        ("speed-001", "correct"), ("speed-001", "wrong"), ("add-001", "correct"), ("add-001", "wrong")
    ]
    for row in rows:
        assert {"task_id", "status", "reward", "components", "reason", "scorer"} <= row.keys()
    assert rows[0]["components"] == {"answer": 1.0, "unit": 1.0, "format": 1.0}
    assert rows[2]["components"]["public"] == {"passed": 1, "total": 1}
    assert "4 completions" in capsys.readouterr().err


def test_verify_prints_rows_to_stdout_without_out(tmp_path, capsys):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [MATH])
    completions = write_jsonl(tmp_path / "c.jsonl", [{"task_id": "speed-001", "completion": "50 km/h"}])
    assert verify_main(SimpleNamespace(tasks=tasks, completions=completions, out=None)) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "correct"


def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path, capsys):
    tasks = write_jsonl(tmp_path / "tasks.jsonl", [MATH, {"task_id": "b", "kind": "math"}])
    completions = write_jsonl(tmp_path / "c.jsonl", [{"task_id": "speed-001", "completion": "50"}])
    out = tmp_path / "results.jsonl"
    # A bad task file reaches the command line's own one-line answer, as `python -m training verify` shows it.
    assert main(["verify", "--tasks", tasks, "--completions", completions, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 2:" in err and "Traceback" not in err
    assert not out.exists()

    good_tasks = write_jsonl(tmp_path / "good.jsonl", [MATH])
    completions = write_jsonl(tmp_path / "c.jsonl", [{"task_id": "nope", "completion": "50"}, "oops"])
    assert verify_main(SimpleNamespace(tasks=good_tasks, completions=completions, out=str(out))) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "line 1:" in err and "line 2:" in err
    assert not out.exists()


def test_import_humaneval_writes_164_loadable_tasks(tmp_path, capsys):
    out = tmp_path / "humaneval.jsonl"
    assert import_humaneval_main(SimpleNamespace(out=str(out))) == 0
    tasks = load_tasks(out)
    assert len(tasks) == 164 and tasks[0]["task_id"] == "HumanEval/0"
    assert import_humaneval_main(SimpleNamespace(out=str(tmp_path))) == 2
    assert capsys.readouterr().err.count("error:") == 1
