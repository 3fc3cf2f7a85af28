"""Launching from the API and the page: who may, and bad input answered in one line before anything is
queued (the config checked by the training command itself, in a subprocess)."""

import pytest

from annotate.exports.models import Export
from annotate.runs.models import Run

pytestmark = pytest.mark.django_db

TWO_STEPS = {"learning_rate": 1e-3, "max_steps": 2, "per_device_train_batch_size": 4, "logging_steps": 1,
             "torch_threads": 1, "use_cpu": True, "report_to": ["none"]}


def launch(api, **body):
    return api.post("/api/v1/runs", body, format="json")


def test_reviewers_and_adjudicators_cannot_launch_or_see_runs(make_user, client_for, base_checkpoint, tiny_snapshot):
    for role in ("reviewer", "adjudicator"):
        api = client_for(make_user(f"someone-{role}", role))
        refused = launch(api, kind="dpo", base_checkpoint="tiny-sft", snapshot=str(tiny_snapshot), config=TWO_STEPS)
        assert refused.status_code == 403
        assert refused.json() == {"detail": "only admins and engineers can do this"}
        assert api.get("/api/v1/runs").status_code == 403
    assert not Run.objects.exists()


def test_an_unknown_base_checkpoint_is_one_line_and_nothing_is_queued(engineer_api, base_checkpoint, tiny_snapshot):
    refused = launch(engineer_api, kind="dpo", base_checkpoint="tiny-sfy", snapshot=str(tiny_snapshot),
                     config=TWO_STEPS)
    assert refused.status_code == 400
    assert refused.json() == {"detail": "base_checkpoint 'tiny-sfy' is not a registered checkpoint (registered: "
                                        "tiny-sft); register it with manage.py register_checkpoint PATH"}
    assert not Run.objects.exists()


def test_a_bad_config_key_gets_the_training_commands_own_line(engineer_api, base_checkpoint, tiny_snapshot):
    refused = launch(engineer_api, kind="dpo", base_checkpoint="tiny-sft", snapshot=str(tiny_snapshot),
                     config={**TWO_STEPS, "learnig_rate": 1e-4})
    assert refused.status_code == 400
    assert refused.json() == {"detail": "config: unknown key 'learnig_rate' (did you mean 'learning_rate'?); see "
                                        "the keys with --help-config"}
    assert not Run.objects.exists()


def test_a_grpo_launch_with_a_bad_task_file_gets_the_training_commands_own_line(engineer_api, base_checkpoint,
                                                                               tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"task_id": "t1", "prompt": "2 + 2?"}\nnot json\n')
    refused = launch(engineer_api, kind="grpo", base_checkpoint="tiny-sft", tasks=str(tasks),
                     config={"max_steps": 2, "num_generations": 2, "per_device_train_batch_size": 2})
    assert refused.status_code == 400
    detail = refused.json()["detail"]
    assert detail.startswith(f"tasks file {tasks}") and "line 2" in detail and "\n" not in detail
    assert not Run.objects.exists()


def test_launch_inputs_the_app_sets_itself_or_the_kind_needs_are_refused(engineer_api, base_checkpoint, tiny_snapshot):
    cases = [
        ({"kind": "dpo", "base_checkpoint": "tiny-sft", "snapshot": str(tiny_snapshot),
          "config": {"output_dir": "/tmp/elsewhere"}},
         "config: output_dir is set by the launch itself (the run folder (chosen by the app)); remove it from the config"),
        ({"kind": "dpo", "base_checkpoint": "tiny-sft"},
         "snapshot is required for a dpo run: give a snapshot (an export of a project, or a snapshot folder)"),
        ({"kind": "grpo", "base_checkpoint": "tiny-sft", "snapshot": str(tiny_snapshot)},
         "a grpo run takes a task set, not a snapshot"),
        ({"kind": "sft", "base_checkpoint": "tiny-sft"}, "kind must be one of dpo, grpo, reward, got 'sft'"),
        ({"kind": "dpo", "base_checkpoint": "tiny-sft", "snapshot": str(tiny_snapshot), "learning_rate": 1},
         "unknown field 'learning_rate'; a launch takes backend, base_checkpoint, config, export, kind, reward_model, "
         "snapshot, task_set, tasks (TRL keys go inside config)"),
        ({"kind": "dpo", "base_checkpoint": "tiny-sft", "snapshot": str(tiny_snapshot), "config": "max_steps: [1"},
         "config: expected ',' or ']', but got '<stream end>' at line 1; fix the YAML syntax"),
    ]
    for body, detail in cases:
        refused = engineer_api.post("/api/v1/runs", body, format="json")
        assert (refused.status_code, refused.json()) == (400, {"detail": detail}), body
    assert not Run.objects.exists()


def test_a_valid_launch_is_queued_with_its_resolved_config_and_lineage(engineer_api, base_checkpoint, tiny_snapshot,
                                                                       run_root):
    started = launch(engineer_api, kind="dpo", base_checkpoint="tiny-sft", snapshot=str(tiny_snapshot),
                     config=TWO_STEPS)
    assert started.status_code == 202, started.json()
    body = started.json()
    assert body["status"] == "queued" and body["launched_by"] == "eve"
    assert body["base_checkpoint"]["name"] == "tiny-sft"
    assert body["snapshot"]["snapshot_id"].startswith("snap-") and body["snapshot"]["criteria_version"] == 1
    assert body["folder"] == str(run_root / f"run-{body['id']:06d}")

    detail = engineer_api.get(body["url"]).json()
    assert detail["config"]["max_steps"] == 2 and detail["config"]["base_checkpoint"] == base_checkpoint.uri
    assert detail["resolved_config"]["beta"] == 0.1  # TRL's default, filled in by the check
    assert detail["resolved_config"]["output_dir"] == body["folder"]
    assert "Not enough data" in detail["charts"]["loss"]


@pytest.mark.slow
def test_the_page_form_shows_the_same_one_line_error(make_user, make_project, client, base_checkpoint, tiny_snapshot):
    client.force_login(make_user("eve", "engineer"))
    export = Export.objects.create(project=make_project("speed"), filters={}, status=Export.Status.DONE,
                                   out_dir=str(tiny_snapshot), counts={"train": 24, "test": 8})
    page = client.post("/runs/", {"kind": "dpo", "base_checkpoint": "tiny-sft", "export": str(export.pk),
                                  "backend": "local", "config": "max_step: 2\n"})
    assert page.status_code == 200
    assert "config: unknown key &#x27;max_step&#x27; (did you mean &#x27;max_steps&#x27;?)" in page.content.decode()
    assert not Run.objects.exists()
    client.force_login(make_user("rita", "reviewer"))
    assert client.get("/runs/").status_code == 403
