"""Launching from the API and the page: who may; the app's own rules answered in one line before anything is
recorded; the training command's own check (in a subprocess) off the request: the run is recorded `checking`,
then queued, or failed with "config refused: <the line>"."""

import pytest

from annotate.exports.models import Export
from annotate.runs.launch import run_config_check
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


def checked(api, answer) -> dict:
    """The run an accepted launch recorded, once its config check ran (the check a launch hands off after commit)."""
    assert answer.status_code == 202, answer.json()
    assert answer.json()["status"] == "checking"
    run_config_check(answer.json()["id"], enqueue=False)
    return api.get(answer.json()["url"]).json()


def test_a_bad_config_key_fails_the_run_with_the_training_commands_own_line(engineer_api, base_checkpoint,
                                                                             tiny_snapshot):
    refused = checked(engineer_api, launch(engineer_api, kind="dpo", base_checkpoint="tiny-sft",
                                           snapshot=str(tiny_snapshot), config={**TWO_STEPS, "learnig_rate": 1e-4}))
    assert refused["status"] == "failed"
    assert refused["error"] == ("config refused: config: unknown key 'learnig_rate' (did you mean 'learning_rate'?); "
                                "see the keys with --help-config")
    assert refused["resolved_config"] is None


def test_a_grpo_launch_with_a_bad_task_file_gets_the_training_commands_own_line(engineer_api, base_checkpoint,
                                                                               tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"task_id": "t1", "prompt": "2 + 2?"}\nnot json\n')
    refused = checked(engineer_api, launch(engineer_api, kind="grpo", base_checkpoint="tiny-sft", tasks=str(tasks),
                                           config={"max_steps": 2, "num_generations": 2,
                                                   "per_device_train_batch_size": 2}))
    assert refused["status"] == "failed"
    assert refused["error"].startswith(f"config refused: tasks file {tasks}") and "line 2" in refused["error"]
    assert "\n" not in refused["error"]


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
         "snapshot, task_set, tasks, train_on_heldout (TRL keys go inside config)"),
        ({"kind": "dpo", "base_checkpoint": "tiny-sft", "snapshot": str(tiny_snapshot), "config": "max_steps: [1"},
         "config: expected ',' or ']', but got '<stream end>' at line 1; fix the YAML syntax"),
    ]
    for body, detail in cases:
        refused = engineer_api.post("/api/v1/runs", body, format="json")
        assert (refused.status_code, refused.json()) == (400, {"detail": detail}), body
    assert not Run.objects.exists()


def test_a_valid_launch_answers_checking_then_is_queued_with_its_resolved_config(engineer_api, base_checkpoint,
                                                                                  tiny_snapshot, run_root):
    started = launch(engineer_api, kind="dpo", base_checkpoint="tiny-sft", snapshot=str(tiny_snapshot),
                     config=TWO_STEPS)
    assert started.status_code == 202, started.json()
    body = started.json()
    # Answered before the training command's check ran: it runs after commit, which this test never reaches.
    assert body["status"] == "checking" and body["launched_by"] == "eve"
    assert engineer_api.get(body["url"]).json()["resolved_config"] is None
    run_config_check(body["id"], enqueue=False)
    assert engineer_api.get(body["url"]).json()["status"] == "queued"
    assert body["base_checkpoint"]["name"] == "tiny-sft"
    assert body["snapshot"]["snapshot_id"].startswith("snap-") and body["snapshot"]["criteria_version"] == 1
    assert body["folder"] == str(run_root / f"run-{body['id']:06d}")

    detail = engineer_api.get(body["url"]).json()
    assert detail["config"]["max_steps"] == 2 and detail["config"]["base_checkpoint"] == base_checkpoint.uri
    assert detail["resolved_config"]["beta"] == 0.1  # TRL's default, filled in by the check
    assert detail["resolved_config"]["output_dir"] == body["folder"]
    assert "Not enough data" in detail["charts"]["loss"]


@pytest.mark.slow
def test_the_page_shows_a_refused_config_on_the_run_and_when_launched_again(make_user, make_project, client,
                                                                               base_checkpoint, tiny_snapshot):
    client.force_login(make_user("eve", "engineer"))
    export = Export.objects.create(project=make_project("speed"), filters={}, status=Export.Status.DONE,
                                   out_dir=str(tiny_snapshot), counts={"train": 24, "test": 8})
    page = client.post("/runs/", {"kind": "dpo", "base_checkpoint": "tiny-sft", "export": str(export.pk),
                                  "backend": "local", "config": "max_step: 2\n"}, follow=True)
    run = Run.objects.get()
    assert page.redirect_chain[-1][0] == f"/runs/{run.pk}/"
    assert "Checking the config with the training command (usually under a minute)" in page.content.decode()
    assert '>checking config</span>' in page.content.decode()

    run_config_check(run.pk, enqueue=False)
    refused_line = "config refused: config: unknown key &#x27;max_step&#x27; (did you mean &#x27;max_steps&#x27;?)"
    run_page = client.get(f"/runs/{run.pk}/").content.decode()
    assert refused_line in run_page and f"?again={run.pk}" in run_page
    assert 'id="run-checking" role="status" hidden' in run_page  # no longer checking
    again = client.get(f"/runs/?again={run.pk}").content.decode()
    assert refused_line in again and "max_step: 2" in again
    client.force_login(make_user("rita", "reviewer"))
    assert client.get("/runs/").status_code == 403
