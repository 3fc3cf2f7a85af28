"""`python -m training eval`: checkpoints side by side per family, as a table and as JSON."""

import json
import random

import pytest

from training.cli import main
from training.evaluate import Attempt, evaluate_checkpoints, format_eval_table, summarise, wilson_interval
from training.task_families import make_tasks
from training.verifiers.task_verifier import TaskVerifier

from .conftest import run_training_cli

FIGURES = {"tasks", "tasks_scored", "completions", "correct", "success_rate", "interval", "mean_length_tokens",
           "mean_length_chars", "format_violations", "verifier_errors", "timeouts", "worst_failures",
           "verifier_error_reasons", "scorers"}


@pytest.fixture(scope="module")
def child_checkpoint(tiny_checkpoint, tmp_path_factory):
    """The tiny checkpoint with its weights moved a little: a second checkpoint that answers differently."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("child") / "child"
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_checkpoint).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def eval_tasks():
    return make_tasks("speed,missing,simple", n=6, seed=0, variant="heldout")


@pytest.fixture(scope="module")
def two_checkpoint_result(tiny_checkpoint, child_checkpoint, eval_tasks):
    return evaluate_checkpoints(checkpoints=[str(tiny_checkpoint), str(child_checkpoint)], tasks=eval_tasks,
                                samples=2, temperature=1.0, max_new_tokens=24, seed=3)


def test_every_checkpoint_gets_every_figure_per_family(two_checkpoint_result):
    result = two_checkpoint_result
    assert result["families"] == ["missing", "simple", "speed"]
    assert [c["label"] for c in result["checkpoints"]] == ["sft", "child"]
    assert result["checkpoints"][0]["content_hash"] != result["checkpoints"][1]["content_hash"]
    for checkpoint in result["checkpoints"]:
        for family, row in [*checkpoint["families"].items(), ("all", checkpoint["all"])]:
            assert set(row) == FIGURES
            assert row["completions"] == 2 * row["tasks"] and row["tasks"] == (6 if family == "all" else 2)
            low, high = row["interval"]
            assert 0.0 <= low <= row["success_rate"] <= high <= 1.0
            assert row["mean_length_tokens"] > 0
            for failure in row["worst_failures"]:
                assert failure["prompt"] and failure["reason"] and failure["status"] in ("wrong", "timeout")
        assert checkpoint["families"]["missing"]["scorers"] == ["missing-info@1"]
        assert checkpoint["families"]["simple"]["scorers"] == ["short-answer@1"]
        assert checkpoint["families"]["speed"]["scorers"][0].startswith("math@")
    json.dumps(result)  # the JSON the CLI writes


def test_figures_do_not_depend_on_task_order_or_checkpoint_order(two_checkpoint_result, tiny_checkpoint,
                                                                  child_checkpoint, eval_tasks):
    shuffled = list(eval_tasks)
    random.Random(1).shuffle(shuffled)
    again = evaluate_checkpoints(checkpoints=[str(child_checkpoint), str(tiny_checkpoint)], tasks=shuffled,
                                 samples=2, temperature=1.0, max_new_tokens=24, seed=3)
    first = {c["checkpoint"]: c for c in two_checkpoint_result["checkpoints"]}
    second = {c["checkpoint"]: c for c in again["checkpoints"]}
    assert first == second


def test_table_shows_families_side_by_side_with_scorers_and_failures(two_checkpoint_result):
    table = format_eval_table(two_checkpoint_result)
    lines = table.splitlines()
    for family in ("missing", "simple", "speed", "all"):
        rows = [line for line in lines if line.startswith(family + " ")]
        assert [row.split()[1] for row in rows] == ["sft", "child"]
    assert "missing-info@1" in table and "short-answer@1" in table
    assert "95% Wilson" in table and "worst failure" in table


def scored(attempts: list[Attempt]) -> list[Attempt]:
    with TaskVerifier(workers=1) as verifier:
        for attempt, result in zip(attempts, verifier.verify_many([(a.task, a.text) for a in attempts]), strict=True):
            attempt.result = result
    return attempts


def test_summary_counts_success_per_task_and_shows_the_worst_failures():
    missing = make_tasks("missing", n=2, seed=0, variant="heldout")
    simple = make_tasks("simple", n=2, seed=0, variant="heldout")
    speed = {"task_id": "speed-x", "kind": "math", "prompt": "?", "answer": "50", "unit": "km/h"}
    broken = {"task_id": "speed-y", "kind": "math", "prompt": "?", "answer": "\\frac{", "unit": "km/h"}
    attempts = scored([
        Attempt("c", missing[0], 0, missing[0]["solution"], 10),
        Attempt("c", missing[0], 1, "It took 3 hours, so the speed is 70.\nAnswer: 70 km/h", 10),
        Attempt("c", missing[1], 0, missing[1]["solution"], 10),
        Attempt("c", missing[1], 1, missing[1]["solution"], 10),
        Attempt("c", simple[0], 0, simple[0]["solution"], 4),
        Attempt("c", simple[0], 1, "Let me explain this slowly and carefully, step by step. " * 3
                + simple[0]["solution"], 40),
        Attempt("c", simple[1], 0, "Hmm.\nI do not know", 4),
        Attempt("c", simple[1], 1, "Hmm.\nI do not know", 4),
        Attempt("c", speed, 0, "It is 50 km/h, I think", 6),  # right, but no marked final answer
        Attempt("c", broken, 0, "Answer: 50 km/h", 6),
    ])
    summary = summarise(attempts)
    # Per task: 1/2, 2/2, 1/2, 0/2, 1/1; the broken task is a verifier error, not a failure.
    assert summary["tasks"] == 6 and summary["tasks_scored"] == 5
    assert summary["success_rate"] == pytest.approx((0.5 + 1 + 0.5 + 0 + 1) / 5)
    assert summary["interval"] == [round(x, 4) for x in wilson_interval(3.0, 5)]
    assert summary["verifier_errors"] == 1 and summary["verifier_error_reasons"][0].startswith("the task's answer")
    assert summary["format_violations"] == 3  # the speed answer and the two unmarked "I do not know"
    # Per family, as eval reports them: the invented quantity, and the long answer to a simple question.
    worst_missing = summarise(attempts[:4])["worst_failures"]
    assert [f["reason"][:13] for f in worst_missing] == ["invents 3, 70"]
    assert "Answer: 70 km/h" in worst_missing[0]["completion"]
    worst_simple = summarise(attempts[4:8])["worst_failures"]
    assert "over the 60-character budget" in worst_simple[0]["reason"] and len(worst_simple) == 3


def test_wilson_interval_matches_the_textbook_values():
    assert wilson_interval(0, 10) == (0.0, pytest.approx(0.2775, abs=1e-4))
    assert wilson_interval(5, 10) == (pytest.approx(0.2366, abs=1e-4), pytest.approx(0.7634, abs=1e-4))


@pytest.mark.slow
def test_eval_command_prints_the_table_and_writes_json(tiny_checkpoint, tmp_path):
    tasks, out = tmp_path / "tasks.jsonl", tmp_path / "results.json"
    assert main(["tasks", "make", "--family", "simple,missing", "--n", "4", "--seed", "1", "--variant", "heldout",
                 "--out", str(tasks)]) == 0
    result = run_training_cli("eval", "--checkpoint", str(tiny_checkpoint), "--tasks", str(tasks), "--out", str(out),
                              "--max-new-tokens", "16", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "missing" in result.stdout and "short-answer@1" in result.stdout and "Traceback" not in result.stderr
    written = json.loads(out.read_text())
    assert written["format"] == "pairwise.eval/1" and written["settings"]["samples"] == 1
    assert written["checkpoints"][0]["families"]["simple"]["tasks"] == 2


@pytest.mark.parametrize("argv, expected", [
    (["--checkpoint", "/nonexistent/ckpt"], "--checkpoint /nonexistent/ckpt does not exist"),
    (["--samples", "4"], "--samples 4 at --temperature 0 repeats one greedy answer"),
    (["--samples", "0"], "--samples must be at least 1"),
])
def test_mistakes_are_one_line_and_exit_2(argv, expected, tiny_checkpoint, tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(make_tasks("simple", n=1, seed=0)[0]) + "\n")
    if "--checkpoint" not in argv:
        argv = ["--checkpoint", str(tiny_checkpoint), *argv]
    assert main(["eval", *argv, "--tasks", str(tasks)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err


def test_a_bad_task_file_is_one_line_naming_every_bad_line(tiny_checkpoint, tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    good = make_tasks("simple", n=1, seed=0)[0]
    tasks.write_text("\n".join([json.dumps({**good, "kind": "poem"}), json.dumps(good),
                                json.dumps({**good, "task_id": "x", "solution": "Answer: wrong"})]) + "\n")
    assert main(["eval", "--checkpoint", str(tiny_checkpoint), "--tasks", str(tasks)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "line 1: kind must be one of" in err[0] and "line 3: the solution fails" in err[0]


def test_a_runs_checkpoint_is_labelled_by_its_run_folder():
    from training.evaluate import _labels

    labels = _labels(["/ckpt/sft", "/runs/dpo-speed/checkpoint", "/runs/grpo-speed/checkpoint"])
    assert list(labels.values()) == ["sft", "dpo-speed", "grpo-speed"]
