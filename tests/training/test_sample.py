"""`python -m training sample`: answers of two or more checkpoints to the same prompts, for reviewers to compare."""

import json

import pytest

from .conftest import run_training_cli

pytestmark = pytest.mark.slow


def test_checkpoints_that_answer_alike_are_one_line_and_no_file(tiny_checkpoint, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_id": f"p{i}", "prompt": f"What is {i} + 2?"}) + "\n"
                               for i in range(2)))
    out = tmp_path / "items.jsonl"
    # The same weights under two names, sampled under one seed: every answer is the same.
    result = run_training_cli("sample", "--checkpoint", f"a={tiny_checkpoint}", "--checkpoint", f"b={tiny_checkpoint}",
                              "--prompts", str(prompts), "--out", str(out), "--max-new-tokens", "8")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: every checkpoint gave the same answers to all 2 prompts, so there is nothing to compare; use more "
        "prompts, more or longer answers (--samples, --max-new-tokens), or checkpoints that differ more"]
    assert not out.exists()
