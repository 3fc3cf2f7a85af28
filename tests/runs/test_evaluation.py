"""Evaluation runs: a parent and its child scored side by side on held-out variants by `python -m training
eval`, shown per task family on the run page and on both checkpoints' pages, with the child's change from its parent
task by task (tests/runs/test_eval_change.py has the figures)."""

import html
import re

import pytest

from annotate.runs import execute
from annotate.runs.evaluation import eval_launch
from annotate.runs.models import Checkpoint, Run
from tests.training.conftest import run_training_cli
from training.evaluate import paired_change

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_a_parent_and_its_child_side_by_side_on_held_out_variants(base_checkpoint, second_checkpoint, make_user,
                                                                  client, tmp_path):
    Checkpoint.objects.filter(pk=second_checkpoint.pk).update(parent=base_checkpoint)  # the child of tiny-sft
    tasks = tmp_path / "heldout.jsonl"
    made = run_training_cli("tasks", "make", "--family", "speed,arithmetic", "--n", "10", "--seed", "1", "--out",
                            str(tasks), "--variant", "heldout")
    assert made.returncode == 0, made.stderr
    run = eval_launch(checkpoints=["tiny-sft", "tiny-nudged"], tasks=str(tasks), max_new_tokens=48, enqueue=False)
    run = execute.run_execute(run_id=run.pk, worker="w1@test")
    assert run.status == "succeeded", (run.error, run.log_tail)
    result = Run.objects.get(pk=run.pk).record["eval"]
    assert [c["content_hash"] for c in result["checkpoints"]] == [base_checkpoint.content_hash,
                                                                  second_checkpoint.content_hash]
    assert result["families"] == ["arithmetic", "speed"]

    client.force_login(make_user("eve", "engineer"))
    run_page = client.get(f"/runs/{run.pk}/").content.decode()
    table = run_page.split('class="data compact evaluation"')[1].split("</table>")[0]
    assert "tiny-sft" in table and "tiny-nudged" in table and "arithmetic" in table and "speed" in table
    # Below the table, one sentence: the child against its parent on the ten tasks, paired.
    change = paired_change(*(report["per_task"] for report in result["checkpoints"]))
    [sentence] = [" ".join(html.unescape(re.sub(r"<[^>]+>", "", p)).split())
                  for p in re.findall(r'<p class="eval-change[^"]*"[^>]*>(.*?)</p>', run_page, re.S)]
    figure = re.escape(f"{change['difference']:+.3f} [{change['interval'][0]:+.3f}, {change['interval'][1]:+.3f}]")
    assert re.fullmatch(r"tiny-nudged: (Better than|Worse than|Too short to show a difference from) its parent "
                        rf"tiny-sft: (the change )?{figure} .*10 tasks × 1 sample.*", sentence), sentence
    for checkpoint in (base_checkpoint, second_checkpoint):
        page = client.get(f"/checkpoints/{checkpoint.pk}/").content.decode()
        assert f"run {run.pk}" in page.split('id="evaluations"')[1].split('id="children"')[0]
        assert f"run {run.pk}" not in page.split('id="children"')[1]  # it trained nothing


def test_an_evaluation_needs_a_registered_checkpoint_and_a_task_file(base_checkpoint, engineer_api, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("")
    cases = [
        ({"checkpoints": ["nope"], "tasks": str(tmp_path)},
         "checkpoint 'nope' is not a registered checkpoint (registered: tiny-sft); register it with manage.py "
         "register_checkpoint PATH"),
        ({"checkpoints": ["tiny-sft"], "tasks": str(tmp_path / "missing.jsonl")},
         f"tasks {tmp_path / 'missing.jsonl'} is not a file; make one with python -m training tasks make "
         "--variant heldout"),
        ({"checkpoints": ["tiny-sft"], "tasks": str(tasks), "samples": 4},
         "temperature 0 is greedy and gives one answer per task; set samples to 1 or raise it"),
    ]
    for body, detail in cases:
        refused = engineer_api.post("/api/v1/runs/evaluate", body, format="json")
        assert (refused.status_code, refused.json()["detail"]) == (400, detail)
    assert not Run.objects.exists()
