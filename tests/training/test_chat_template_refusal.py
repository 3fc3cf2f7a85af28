"""A checkpoint whose chat template cannot render a conversation is refused in one line, naming the folder and the
template's own error, by every command that renders prompts through it (DPO and the reward model on a snapshot,
GRPO, evaluation), before a model loads; not with a Jinja traceback from deep inside TRL."""

import shutil

import pytest

from tests.training.helpers import write_grpo_config, write_snapshot_run_config

from .conftest import run_training_cli

BROKEN = "{% for message in messages %}{{ message.content }{% endfor %}"  # "}}" left unclosed


@pytest.fixture
def broken_template(tmp_path, tiny_checkpoint):
    folder = tmp_path / "broken-template"
    shutil.copytree(tiny_checkpoint, folder)
    (folder / "chat_template.jinja").write_text(BROKEN)
    return folder


def assert_one_line_naming_the_template(result, folder):
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error: ")]  # eval's progress line may come before it
    assert errors == lines[-1:] and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert str(folder) in errors[0] and "its chat template fails to render a conversation (TemplateSyntaxError" in \
        errors[0] and errors[0].endswith("fix chat_template.jinja (or tokenizer_config.json's chat_template) in that "
                                         "folder")


@pytest.mark.parametrize("command", ["dpo", "grpo", "eval"])
def test_a_chat_template_that_fails_to_render_is_one_line(command, broken_template, tiny_snapshot, speed_tasks,
                                                         tmp_path):
    if command == "dpo":
        config = write_snapshot_run_config(tmp_path, broken_template, tiny_snapshot, name="dpo", max_steps=1)
        result = run_training_cli("dpo", "--config", str(config))
        assert not (tmp_path / "run" / "checkpoint").exists()
    elif command == "grpo":
        config = write_grpo_config(tmp_path, broken_template, speed_tasks, name="grpo", max_steps=1)
        result = run_training_cli("grpo", "--config", str(config))
    else:
        out = tmp_path / "eval.json"
        result = run_training_cli("eval", "--checkpoint", str(broken_template), "--tasks", str(speed_tasks),
                                  "--out", str(out))
        assert not out.exists()
    assert_one_line_naming_the_template(result, broken_template)


def test_a_template_that_renders_is_left_alone(tiny_checkpoint):
    from transformers import AutoTokenizer

    from training.generation import check_chat_template

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    assert tokenizer.chat_template  # so the check renders it rather than returning early
    check_chat_template(tokenizer, "the tiny checkpoint")  # raises nothing
