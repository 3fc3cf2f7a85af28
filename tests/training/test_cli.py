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
    # --check answers with the run's first refusal: here the base checkpoint, a folder without config.json
    ("dpo", "snapshot: missing-snapshot\n", "is not a Hugging Face checkpoint"),
    ("grpo", "tasks: missing.jsonl\n", "is not a Hugging Face checkpoint"),
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


# --- --check refuses what the run refuses --------------------------------------------------------------------


def without_chat_template(checkpoint, folder):
    """A copy of `checkpoint` whose tokenizer has no chat template."""
    import shutil

    shutil.copytree(checkpoint, folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return folder


def chat_prompt_tasks(path):
    from training.task_families import make_tasks
    from training.tasks import write_tasks

    write_tasks(path, [{**task, "prompt": [{"role": "user", "content": task["prompt"]}]}
                       for task in make_tasks("speed", n=4, seed=5)])
    return path


def open_tasks_file(path):
    from training.task_families import make_tasks, open_tasks
    from training.tasks import write_tasks

    write_tasks(path, open_tasks(make_tasks("speed", n=4, seed=5)))
    return path


def occupied(folder):
    folder.mkdir()
    (folder / "notes.txt").write_text("another run's file\n")
    return {}


# Each refusal a run makes of its inputs before it trains: (kind, what the config changes, the line's words). `f` holds
# tmp_path, checkpoint, snapshot, tasks and reward_model; a builder may write files and returns the keys it overrides.
RUN_REFUSALS = {
    **{f"{kind}: {case}": (kind, build, words) for kind in ("dpo", "reward") for case, build, words in (
        ("output_dir holds another run", lambda f: occupied(f.tmp_path / "run"), "already exists and is not empty"),
        ("resume with no checkpoint", lambda f: {"resume_from_checkpoint": True}, "holds no checkpoint"),
        ("resume from a file", lambda f: {"resume_from_checkpoint": str(f.snapshot / "manifest.json")},
         "is not a folder"),
        ("no base checkpoint", lambda f: {"base_checkpoint": str(f.tmp_path / "gone")}, "does not exist"),
        ("no snapshot", lambda f: {"snapshot": str(f.tmp_path / "gone")}, "does not exist"),
        ("a snapshot with no train rows", lambda f: {"snapshot": str(f.empty_snapshot())}, "has no train rows"),
        ("a chat snapshot, a base without a chat template", lambda f: {
            "base_checkpoint": str(without_chat_template(f.checkpoint, f.tmp_path / "plain"))}, "has no chat template"),
    )},
    "reward: margin_from_strength on rows without a strength": (
        "reward", lambda f: {"margin_from_strength": True}, "has no judgment strength"),
    "grpo: output_dir holds another run": ("grpo", lambda f: occupied(f.tmp_path / "grpo"),
                                           "already exists and is not empty"),
    "grpo: no base checkpoint": ("grpo", lambda f: {"base_checkpoint": str(f.tmp_path / "gone")}, "does not exist"),
    "grpo: no task file": ("grpo", lambda f: {"tasks": str(f.tmp_path / "gone.jsonl")}, "cannot read the file"),
    "grpo: a reference of another architecture": ("grpo", lambda f: {
        "beta": 0.04, "reference_checkpoint": str(f.reward_model)}, "reference_checkpoint"),
    "grpo: chat prompts, a base without a chat template": ("grpo", lambda f: {
        "base_checkpoint": str(without_chat_template(f.checkpoint, f.tmp_path / "plain")),
        "tasks": str(chat_prompt_tasks(f.tmp_path / "chat.jsonl"))}, "has no chat template"),
    "grpo: open tasks, no reward model": ("grpo", lambda f: {"tasks": str(open_tasks_file(f.tmp_path / "open.jsonl"))},
                                         "which no verifier scores; set reward_model"),
    "grpo: a causal LM as the reward model": ("grpo", lambda f: {
        "tasks": str(open_tasks_file(f.tmp_path / "open.jsonl")), "reward_model": str(f.checkpoint)},
        "is not a trained reward model"),
    "grpo: open tasks, the reward model weighted 0": ("grpo", lambda f: {
        "tasks": str(open_tasks_file(f.tmp_path / "open.jsonl")), "reward_model": str(f.reward_model),
        "reward_weights": [1.0, 0.0]}, "give it a weight above 0"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(RUN_REFUSALS))
def test_check_refuses_each_input_the_run_refuses_with_the_same_line(case, tmp_path, tiny_checkpoint, tiny_snapshot,
                                                                    speed_tasks, tiny_reward_model, capsys):
    """`--check` (what the app's launch runs before it answers 202) and the run share one check of their inputs, so
    nothing --check passes is refused seconds after the run starts."""
    from types import SimpleNamespace

    from tests.training.helpers import write_grpo_config, write_snapshot_run_config
    from training.snapshot import SnapshotWriter

    def empty_snapshot():
        with SnapshotWriter(tmp_path / "empty", project="p", created_at="2025-01-01T00:00:00Z", criteria_version=1,
                            filters={}, agreement=None) as writer:
            writer.add_pair("test", prompt="What is 2 + 2?", chosen="4", rejected="5", meta={})
        return tmp_path / "empty"

    kind, build, words = RUN_REFUSALS[case]
    overrides = build(SimpleNamespace(tmp_path=tmp_path, checkpoint=tiny_checkpoint, snapshot=tiny_snapshot,
                                      reward_model=tiny_reward_model, empty_snapshot=empty_snapshot))
    if kind == "grpo":
        config = write_grpo_config(tmp_path, tiny_checkpoint, overrides.pop("tasks", speed_tasks), **overrides)
    else:
        config = write_snapshot_run_config(tmp_path, tiny_checkpoint, overrides.pop("snapshot", tiny_snapshot),
                                           name=kind, **overrides)
    answers = []
    for check in ([], ["--check"]):
        assert main([kind, "--config", str(config), *check]) == 2, check
        answers.append(capsys.readouterr().err.strip().splitlines())
    run_line, check_line = answers
    assert len(run_line) == 1 and words in run_line[0], run_line
    assert check_line == run_line
