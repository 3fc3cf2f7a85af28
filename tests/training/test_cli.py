"""`python -m training`: every subcommand of docs/design.md exists; bad input is one line and exit code 2."""

import json

import pytest

from training.cli import main

from .conftest import run_training_cli


@pytest.mark.parametrize(("argv", "message"), [
    (["grpo", "--config", "x.yaml"], "config file x.yaml does not exist"),
    (["rescore", "--run", "r", "--scorer", "current"], "--run r is not a GRPO run folder"),
    (["grpo-filter", "--checkpoint", "c", "--tasks", "t.jsonl", "--out", "k.jsonl", "--samples", "0"],
     "--samples must be at least 1"),
])
def test_grpo_commands_refuse_bad_input_with_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize(("command", "inputs", "message"), [
    ("dpo", "snapshot: missing-snapshot\n", "snapshot missing-snapshot does not exist"),
    ("grpo", "tasks: missing.jsonl\n", "tasks file missing.jsonl: cannot read the file"),
    ("reward", "snapshot: missing-snapshot\n", "is not a Hugging Face checkpoint"),
])
@pytest.mark.parametrize("value", ["true", "false"])
def test_gradient_checkpointing_leaves_the_answer_one_line(command, inputs, message, value, tmp_path, capsys):
    """The documented key `gradient_checkpointing` brings no transformers FutureWarning before the answer."""
    import warnings

    config = tmp_path / f"{command}.yaml"
    config.write_text(f"base_checkpoint: {tmp_path}\n{inputs}output_dir: {tmp_path / 'run'}\n"
                      f"gradient_checkpointing: {value}\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # what a user's terminal would show before the answer
        assert main([command, "--config", str(config), "--check"]) == 2
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("family", ["speed", "arithmetic", "code"])
def test_made_tasks_score_their_own_worked_solutions_correct(family, tmp_path):
    """`tasks make` and `verify` agree: every task's worked solution is a correct completion."""
    tasks, completions, results = tmp_path / "tasks.jsonl", tmp_path / "completions.jsonl", tmp_path / "out.jsonl"
    assert main(["tasks", "make", "--family", family, "--n", "6", "--seed", "3", "--out", str(tasks)]) == 0
    rows = [json.loads(line) for line in tasks.read_text().splitlines()]
    completions.write_text("".join(
        json.dumps({"task_id": row["task_id"], "completion": row["solution"]}) + "\n" for row in rows
    ))
    assert main(["verify", "--tasks", str(tasks), "--completions", str(completions), "--out", str(results)]) == 0
    verdicts = [json.loads(line) for line in results.read_text().splitlines()]
    assert [v["task_id"] for v in verdicts] == [row["task_id"] for row in rows]
    assert all(v["status"] == "correct" for v in verdicts), [v["reason"] for v in verdicts if v["status"] != "correct"]


def test_help_lists_every_design_command():
    result = run_training_cli("--help", timeout=60)
    for command in ("tiny-sft", "tasks", "verify", "dpo", "grpo", "grpo-filter", "rescore", "eval"):
        assert command in result.stdout


def test_dpo_help_config_lists_keys(capsys):
    assert main(["dpo", "--help-config"]) == 0
    out = capsys.readouterr().out
    assert "base_checkpoint" in out and "learning_rate" in out and "beta" in out


@pytest.mark.parametrize("command", ["dpo", "grpo", "reward"])
@pytest.mark.parametrize("check", [["--check"], []])
@pytest.mark.parametrize(("nested", "message"), [
    ("model_init_kwargs: {trust_remote_code: true}\n", "model_init_kwargs.trust_remote_code is refused"),
    ("model_init_kwargs: '{\"token\": \"hf_abc\"}'\n", "model_init_kwargs.token is a credential"),
])
def test_a_nested_refusal_is_one_line_and_leaves_no_run_folder(command, check, nested, message, tmp_path, capsys):
    inputs = "tasks: tasks.jsonl\n" if command == "grpo" else "snapshot: snap\n"
    config = tmp_path / f"{command}.yaml"
    config.write_text(f"base_checkpoint: {tmp_path}\n{inputs}output_dir: {tmp_path / 'run'}\n{nested}")
    assert main([command, "--config", str(config), *check]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {config}: {message}") and "hf_abc" not in err[0]
    assert not (tmp_path / "run").exists()
