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


def test_an_engine_that_cannot_sample_here_is_refused_in_one_line_before_anything_is_queued(
        base_checkpoint, second_checkpoint, make_project, make_user, client_for, tmp_path, monkeypatch):
    from training.vllm_generation import MISSING, PYTHON_ENV

    admin_api = client_for(make_user("ada", "admin"))
    make_project(slug="compare")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt_id": "a", "prompt": "hi"}) + "\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"task_id": "t", "kind": "math", "prompt": "1+1?", "answer": "2"}) + "\n")
    compare = {"checkpoints": ["tiny-sft", "tiny-nudged"], "prompts": str(prompts), "project": "compare"}
    evaluate = {"checkpoints": ["tiny-sft"], "tasks": str(tasks)}
    monkeypatch.setenv(PYTHON_ENV, str(tmp_path / "no-python"))
    for route, body in (("/api/v1/runs/compare", compare), ("/api/v1/runs/evaluate", evaluate)):
        refused = admin_api.post(route, {**body, "engine": "vllm"}, format="json")
        assert (refused.status_code, refused.json()["detail"]) == (
            400, f"{PYTHON_ENV}={tmp_path / 'no-python'} is not an executable file; {MISSING}")
        refused = admin_api.post(route, {**body, "engine": "sglang"}, format="json")
        assert (refused.status_code, refused.json()["detail"]) == (
            400, "engine: the generation engine must be one of transformers, vllm, got 'sglang'")
    assert not Run.objects.exists()


def test_a_comparison_samples_with_vllm_when_asked(base_checkpoint, second_checkpoint, make_project, tmp_path):
    """The app's comparison through `python -m training sample --engine vllm` in the generation environment
    (scripts/install_vllm.sh; the test fails, never skips, without it), imported as pairs as any other."""
    from annotate.runs.queue import vllm_ready

    assert vllm_ready(), "this test needs vLLM's generation environment: run scripts/install_vllm.sh"
    project = make_project(slug="compare")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt_id": f"sum-{i}", "prompt": f"What is {i} + {i + 3}?"}) + "\n"
                               for i in range(2)))
    run = compare_launch(checkpoints=["tiny-sft", "tiny-nudged"], prompts=str(prompts), project="compare",
                         max_new_tokens=12, temperature=1.0, engine="vllm", enqueue=False)
    assert run.config["engine"] == "vllm"
    run = execute.run_execute(run_id=run.pk, worker="w1@test")
    assert run.status == "succeeded", (run.error, run.log_tail)
    assert Run.objects.get(pk=run.pk).record["imported"]["pairs_created"] == 2
    assert "from tiny-nudged by vLLM" in Run.objects.get(pk=run.pk).log_tail
    pair = project.prompts.get(external_id="sum-1").pairs.select_related("response_a", "response_b").get()
    assert {pair.response_a.model, pair.response_b.model} == {"tiny-sft", "tiny-nudged"}
