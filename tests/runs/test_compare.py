"""Compare checkpoints: answers sampled from two checkpoints by `python -m training sample` in a sample run,
imported into a project as new pairs; reviewers get them without model names."""

import json

import pytest

from annotate.runs import execute
from annotate.runs.compare import compare_launch
from annotate.runs.models import Run
from tests.conftest import import_rows, make_items

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def test_sampled_answers_become_pairs_reviewers_judge_blind(base_checkpoint, second_checkpoint, make_project,
                                                            make_user, client_for, tmp_path):
    project = make_project(slug="compare")
    import_rows(project, make_items(1))  # the project's earlier batch stays as it was
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_id": f"sum-{i}", "prompt": f"What is {i} + {i + 3}?"}) + "\n"
                               for i in range(3)))
    run = compare_launch(checkpoints=["tiny-sft", "tiny-nudged"], prompts=str(prompts), project="compare",
                         max_new_tokens=24, temperature=1.0, enqueue=False)
    run = execute.run_execute(run_id=run.pk, worker="w1@test")
    assert run.status == "succeeded", (run.error, run.log_tail)
    imported = Run.objects.get(pk=run.pk).record["imported"]
    assert imported["prompts_created"] == 3 and imported["pairs_created"] == 3

    pairs = project.prompts.get(external_id="sum-1").pairs.select_related("response_a", "response_b").get()
    assert {pairs.response_a.model, pairs.response_b.model} == {"tiny-sft", "tiny-nudged"}
    assert pairs.response_a.model_version == base_checkpoint.content_hash

    reviewer = client_for(make_user("rae", "reviewer"))
    served = reviewer.get("/api/v1/projects/compare/assignments/next")
    assert served.status_code == 200
    assert not {"tiny-sft", "tiny-nudged", "sha256"} & set(served.content.decode().replace('"', " ").split())


def test_a_comparison_needs_two_checkpoints_a_project_and_a_prompts_file(base_checkpoint, make_project, make_user,
                                                                         client_for, tmp_path):
    admin_api = client_for(make_user("ada", "admin"))  # a comparison imports into a project: admins only
    make_project(slug="compare")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt_id": "a", "prompt": "hi"}) + "\n")
    cases = [
        ({"checkpoints": ["tiny-sft", "tiny-sft"], "prompts": str(prompts), "project": "compare"},
         "choose at least 2 different checkpoints to compare"),
        ({"checkpoints": ["tiny-sft", "nope"], "prompts": str(prompts), "project": "compare"},
         "checkpoint 'nope' is not a registered checkpoint (registered: tiny-sft); register it with manage.py "
         "register_checkpoint PATH"),
    ]
    for body, detail in cases:
        refused = admin_api.post("/api/v1/runs/compare", body, format="json")
        assert (refused.status_code, refused.json()["detail"]) == (400, detail)
    assert not Run.objects.exists()
