"""Synthetic task families: task rows per docs/training.md, deterministic, held-out problems never seen in training."""

import json

import pytest

from training.task_families import FAMILIES, make_tasks

from .conftest import run_training_cli


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_rows_follow_the_task_file_format(family):
    for row in make_tasks(family, n=20, seed=3):
        assert row["task_id"].startswith(family) and row["prompt"]
        if row["kind"] == "math":
            assert float(row["answer"]) == int(row["answer"])
            assert row["solution"].endswith(f"Answer: {row['answer']}" + (f" {row['unit']}" if row.get("unit") else ""))
        else:
            assert row["kind"] == "code"
            namespace: dict = {}
            exec(row["reference_solution"], namespace)
            function = namespace[row["entry_point"]]
            for test in row["public_tests"]:
                assert function(*test["args"]) == test["expected"]
            assert all("expected" not in t for t in row["hidden_tests"])
            assert "def generate(rng)" in row["random_tests"]["generator"]


def test_speed_problems_carry_units():
    units = {row["unit"] for row in make_tasks("speed", n=60, seed=0)}
    assert units == {"km/h", "mph", "m/s"}


def test_same_seed_same_tasks_and_other_seed_other_tasks():
    assert make_tasks("arithmetic", n=10, seed=1) == make_tasks("arithmetic", n=10, seed=1)
    assert make_tasks("arithmetic", n=10, seed=1) != make_tasks("arithmetic", n=10, seed=2)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_heldout_problems_never_appear_in_training(family):
    train = {row["prompt"] for seed in range(3) for row in make_tasks(family, n=300, seed=seed)}
    heldout = {row["prompt"] for row in make_tasks(family, n=100, seed=0, variant="heldout")}
    assert heldout and not train & heldout


def test_tasks_make_command_writes_the_file(tmp_path):
    out = tmp_path / "speed.jsonl"
    result = run_training_cli("tasks", "make", "--family", "speed", "--n", "5", "--seed", "7", "--out", str(out),
                              "--variant", "heldout", timeout=60)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["task_id"] for r in rows] == [f"speed-heldout-{i:04d}" for i in range(1, 6)]


def test_unknown_family_is_one_line_and_exit_2(tmp_path):
    result = run_training_cli("tasks", "make", "--family", "poetry", "--n", "5", "--seed", "1",
                              "--out", str(tmp_path / "x.jsonl"), timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: unknown task family 'poetry'; choose one of: "
                                                  "arithmetic, code, speed"]
    assert not (tmp_path / "x.jsonl").exists()
