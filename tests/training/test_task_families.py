"""Synthetic task families: task rows per docs/training.md, deterministic, held-out problems never seen in training."""

import json
import re
import string

import pytest

from training.task_families import FAMILIES, WORDINGS, make_tasks
from training.tasks import validate_task
from training.verifiers.task_verifier import TaskVerifier
from training.verifiers.units import convert, parse_unit

from .conftest import run_training_cli

SEEDS = range(4)


def all_rows(family: str, variant: str, n: int) -> list[dict]:
    return [row for seed in SEEDS for row in make_tasks(family, n=n, seed=seed, variant=variant)]


def wording_pattern(wording: str) -> re.Pattern:
    """A wording with its fields as wildcards: matches every prompt written with it."""
    parts = []
    for literal, name, _, _ in string.Formatter().parse(wording):
        parts.append(re.escape(literal))
        if name:
            parts.append(".+?")
    return re.compile("".join(parts))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_rows_follow_the_task_file_format(family):
    for row in make_tasks(family, n=20, seed=3) + make_tasks(family, n=10, seed=3, variant="heldout"):
        assert validate_task(row) == [], row
        assert row["task_id"].startswith(family) and row["prompt"] and row["solution"]
        assert row["meta"]["family"] == family
        if row["kind"] == "math":
            assert float(row["answer"]) == int(row["answer"])
            assert row["solution"].endswith(f"Answer: {row['answer']}" + (f" {row['unit']}" if row.get("unit") else ""))
        elif row["kind"] == "code":
            namespace: dict = {}
            exec(row["reference_solution"], namespace)
            function = namespace[row["entry_point"]]
            for test in row["public_tests"]:
                assert function(*test["args"]) == test["expected"]
            assert all("expected" not in t for t in row["hidden_tests"])
            assert "def generate(rng)" in row["random_tests"]["generator"]
        elif row["kind"] == "missing_info":
            assert row["missing"] in row["solution"] and "cannot be determined" in row["solution"]
            # The answer to a question with a missing quantity states no number at all.
            assert not re.search(r"\d", row["solution"])
        else:
            assert row["kind"] == "short_answer"
            assert len(row["solution"]) <= row["max_chars"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_worked_solution_is_scored_correct_by_its_verifier(family):
    rows = make_tasks(family, n=24, seed=5) + make_tasks(family, n=24, seed=5, variant="heldout")
    with TaskVerifier(workers=1) as verifier:
        results = verifier.verify_many([(row, row["solution"]) for row in rows])
    assert [(r.status, r.reason) for r in results if r.status != "correct"] == []


def test_speed_problems_carry_units():
    units = {row["unit"] for row in make_tasks("speed", n=60, seed=0)}
    assert units == {"km/h", "mph", "m/s"}


def test_rates_conversions_and_missing_information_cover_their_kinds():
    rate_units = {row.get("unit") for row in make_tasks("rate", n=80, seed=0)}
    assert rate_units == {"L/min", "kg/h", None}  # None: prices and pages per minute, plain numbers
    conversions = make_tasks("convert", n=120, seed=0)
    assert {row["unit"] for row in conversions} >= {"m", "min", "°F", "g"}
    missing = {row["missing"] for row in make_tasks("missing", n=60, seed=0)}
    assert {"time", "distance"} <= missing


def test_conversion_answers_agree_with_pint():
    for row in all_rows("convert", "train", 60) + all_rows("convert", "heldout", 30):
        given = re.search(r"(-?\d+) (°C|km|m|kg|L|hours|minutes|feet) ", row["prompt"])
        expected = convert(int(given.group(1)), parse_unit(given.group(2)), parse_unit(row["unit"]))
        assert expected == pytest.approx(int(row["answer"]), abs=1e-9), row["prompt"]
        assert row["unit_exact"] is True


def test_same_seed_same_tasks_and_other_seed_other_tasks():
    assert make_tasks("arithmetic", n=10, seed=1) == make_tasks("arithmetic", n=10, seed=1)
    assert make_tasks("arithmetic", n=10, seed=1) != make_tasks("arithmetic", n=10, seed=2)
    assert make_tasks("missing,simple", n=10, seed=1, variant="heldout") == \
        make_tasks("missing,simple", n=10, seed=1, variant="heldout")


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_heldout_problems_never_appear_in_training(family):
    train = all_rows(family, "train", 200)
    heldout = all_rows(family, "heldout", 60)
    assert heldout and not {r["prompt"] for r in train} & {r["prompt"] for r in heldout}
    # Changed numbers: no held-out problem has the given values of a training problem of its structure.
    def problems(rows):
        return {(r["meta"]["structure"], json.dumps(sorted(r["meta"]["values"], key=repr))) for r in rows
                if r["meta"]["values"]}
    assert not problems(train) & problems(heldout)
    # The values in meta are the numbers the prompt shows (so the check above is about the prompts).
    for row in train[:50] + heldout[:50]:
        shown = sorted(int(n) for n in re.findall(r"(?<![\w.])-?\d+", row["prompt"]))
        numbers = sorted(v for v in row["meta"]["values"] if isinstance(v, int))
        assert shown == numbers, row["prompt"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_heldout_wordings_never_appear_in_training(family):
    train, heldout = all_rows(family, "train", 200), all_rows(family, "heldout", 60)
    for structure, wordings in WORDINGS[family].items():
        heldout_patterns = [wording_pattern(w) for w in wordings["heldout"]]
        train_patterns = [wording_pattern(w) for w in wordings["train"]]
        assert heldout_patterns and train_patterns
        for row in train:
            if row["meta"]["structure"] == structure:
                assert not any(p.fullmatch(row["prompt"]) for p in heldout_patterns), row["prompt"]
                assert any(p.fullmatch(row["prompt"]) for p in train_patterns), row["prompt"]
        for row in heldout:
            if row["meta"]["structure"] == structure:
                assert any(p.fullmatch(row["prompt"]) for p in heldout_patterns), row["prompt"]
                assert not any(p.fullmatch(row["prompt"]) for p in train_patterns), row["prompt"]
    # Every held-out wording is used, so none is dead text that the check above would pass vacuously.
    used = {(r["meta"]["structure"], r["meta"]["wording"]) for r in heldout}
    expected = {(s, f"heldout-{i + 1}") for s, w in WORDINGS[family].items() for i in range(len(w["heldout"]))}
    structures_drawn = {r["meta"]["structure"] for r in heldout}
    assert {pair for pair in expected if pair[0] in structures_drawn} <= used


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
                                                  "arithmetic, code, convert, missing, multistep, rate, simple, speed"]
    assert not (tmp_path / "x.jsonl").exists()
