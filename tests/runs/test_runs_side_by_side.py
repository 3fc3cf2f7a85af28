"""Runs side by side: the runs table filtered by kind, status, base checkpoint and input; two or more runs' curves
on shared charts; a run launched again with its config prefilled."""

import re

import pytest
import yaml

from annotate.exports.models import Export
from annotate.runs.checkpoints import checkpoint_register
from annotate.runs.filters import launch_values_from_run
from annotate.runs.models import Run, TaskSet

pytestmark = pytest.mark.django_db


def train_rows(steps, **curves) -> list[dict]:
    """metrics.jsonl rows: one training row per step, each curve a function of the step."""
    return [{"event": "train", "step": step, **{key.replace("__", "/"): curve(step) for key, curve in curves.items()}}
            for step in steps]


@pytest.fixture
def engineer_client(client, make_user):
    client.force_login(make_user("eve", "engineer"))
    return client


@pytest.fixture
def runs_of_every_input(make_project, base_checkpoint, tmp_path):
    """A DPO run on export 1, a DPO run on a snapshot path, a GRPO run on a task set, a GRPO run on a task file
    from another base checkpoint, and an evaluation."""
    other_folder = tmp_path / "other-sft"
    other_folder.mkdir()
    (other_folder / "model.safetensors").write_bytes(b"other weights")
    other_base = checkpoint_register(uri=str(other_folder), name="other-sft")
    export = Export.objects.create(project=make_project("speed"), filters={}, status=Export.Status.DONE,
                                   out_dir=str(tmp_path / "snapshots" / "speed-1"), snapshot_id="speed-1")
    task_set = TaskSet.objects.create(name="arith-train", path=str(tmp_path / "tasks" / "arith.jsonl"), sha256="a" * 64,
                                      count=12, source=TaskSet.Source.MADE)
    runs = {
        "dpo_export": Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=base_checkpoint,
                                         export=export, snapshot_path=export.out_dir, folder="f1"),
        "dpo_path": Run.objects.create(kind="dpo", status="failed", base_checkpoint=base_checkpoint,
                                       snapshot_path=str(tmp_path / "elsewhere" / "snap-9"), folder="f2"),
        "grpo_set": Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base_checkpoint,
                                       task_set=task_set, tasks_path=task_set.path, folder="f3"),
        "grpo_file": Run.objects.create(kind="grpo", status="running", base_checkpoint=other_base,
                                        tasks_path=str(tmp_path / "tasks" / "mine.jsonl"), folder="f4"),
        "eval": Run.objects.create(kind="eval", status="succeeded", base_checkpoint=base_checkpoint,
                                   tasks_path=task_set.path, folder="f5"),
    }
    return {"runs": runs, "export": export, "task_set": task_set, "other_base": other_base}


def shown_runs(page) -> set[int]:
    section = page.content.decode().split('id="runs"', 1)[1]
    return {int(run_id) for run_id in re.findall(r'href="/runs/(\d+)/">run \d+</a>', section)}


def test_the_runs_table_filters_by_kind_status_base_and_input(engineer_client, runs_of_every_input):
    runs, fixture = runs_of_every_input["runs"], runs_of_every_input
    ids = {name: run.pk for name, run in runs.items()}
    cases = [
        ({}, set(ids.values())),
        ({"kind": "grpo"}, {ids["grpo_set"], ids["grpo_file"]}),
        ({"status": "succeeded"}, {ids["dpo_export"], ids["grpo_set"], ids["eval"]}),
        ({"kind": "dpo", "status": "failed"}, {ids["dpo_path"]}),
        ({"base": fixture["other_base"].pk}, {ids["grpo_file"]}),
        ({"export": fixture["export"].pk}, {ids["dpo_export"]}),
        ({"export": runs["dpo_path"].snapshot_path}, {ids["dpo_path"]}),
        # The task set, picked or given by its path (the evaluation read its file).
        ({"task_set": fixture["task_set"].pk}, {ids["grpo_set"], ids["eval"]}),
        ({"task_set": runs["grpo_file"].tasks_path}, {ids["grpo_file"]}),
    ]
    for params, expected in cases:
        page = engineer_client.get("/runs/", params)
        assert page.status_code == 200
        assert shown_runs(page) == expected, params
    filtered = engineer_client.get("/runs/", {"kind": "grpo"}).content.decode()
    assert 'id="clear-filters"' in filtered
    assert '<option value="grpo" selected>grpo</option>' in filtered
    assert 'id="clear-filters"' not in engineer_client.get("/runs/").content.decode()


def test_the_runs_table_names_each_runs_input(engineer_client, runs_of_every_input):
    html = engineer_client.get("/runs/").content.decode().split('id="runs"', 1)[1]
    runs = runs_of_every_input["runs"]
    assert f"export {runs_of_every_input['export'].pk} · speed-1" in html
    assert "arith-train" in html
    assert runs["dpo_path"].snapshot_path in html and runs["grpo_file"].tasks_path in html
    # Training runs can be ticked for the curves page; an evaluation has no training curves.
    for name, run in runs.items():
        ticked = f'name="run" value="{run.pk}"' in html
        assert ticked == (name != "eval"), name


def test_a_filter_value_nothing_knows_is_ignored_with_a_visible_note(engineer_client, runs_of_every_input):
    page = engineer_client.get("/runs/", {"kind": "ppo", "status": "failed"})
    assert page.status_code == 200
    assert shown_runs(page) == {runs_of_every_input["runs"]["dpo_path"].pk}
    assert "run type &#x27;ppo&#x27; is not one the runs know; that filter is ignored" in page.content.decode()
    nothing = engineer_client.get("/runs/", {"kind": "sample"})
    assert shown_runs(nothing) == set() and "No run matches these filters." in nothing.content.decode()


def test_two_runs_curves_share_one_chart_per_metric(engineer_client, base_checkpoint):
    dpo = Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=base_checkpoint, folder="a",
                             metrics=train_rows(range(1, 6), loss=lambda s: 0.7 - 0.05 * s))
    grpo = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base_checkpoint, folder="b",
                              metrics=train_rows(range(1, 9), loss=lambda s: 0.5 - 0.01 * s,
                                                 reward=lambda s: 0.1 * s, kl=lambda s: 0.001 * s,
                                                 completions__mean_length=lambda s: 40 - s,
                                                 zero_variance__share=lambda s: 0.5))
    page = engineer_client.get("/runs/curves", {"run": [dpo.pk, grpo.pk]})
    assert page.status_code == 200
    html = page.content.decode()
    figures = dict(re.findall(r'<figure id="curve-([a-z_]+)">(.*?)</figure>', html, re.S))
    assert set(figures) == {"loss", "reward", "kl", "completion_length", "zero_variance"}
    dpo_name, grpo_name = f"run {dpo.pk} · dpo · tiny-sft", f"run {grpo.pk} · grpo · tiny-sft"
    loss = figures["loss"]
    assert loss.count("<polyline") == 2
    assert f">{dpo_name}</text>" in loss and f">{grpo_name}</text>" in loss
    # Told apart without colour: the second line is dashed, the first is not.
    first, second = re.findall(r"<polyline[^>]*>", loss)
    assert "stroke-dasharray" not in first and "stroke-dasharray" in second
    # The DPO run logs no reward, KL, completion length nor groups: one line each, and it says so under the chart.
    for name in ("reward", "kl", "completion_length", "zero_variance"):
        assert figures[name].count("<polyline") == 1, name
        assert f"{dpo_name} logs no " in figures[name], name
    assert "logs no" not in loss
    # Both runs are listed with a link to their pages.
    assert f'href="/runs/{dpo.pk}/"' in html and f'href="/runs/{grpo.pk}/"' in html


def test_runs_drawing_different_reward_metrics_say_which(engineer_client, base_checkpoint):
    dpo = Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=base_checkpoint, folder="a",
                             metrics=train_rows(range(1, 4), loss=lambda s: 0.7, rewards__margins=lambda s: 0.1 * s))
    grpo = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base_checkpoint, folder="b",
                              metrics=train_rows(range(1, 4), loss=lambda s: 0.5, reward=lambda s: 0.2 * s))
    html = engineer_client.get("/runs/curves", {"run": [dpo.pk, grpo.pk]}).content.decode()
    reward = re.search(r'<figure id="curve-reward">(.*?)</figure>', html, re.S).group(1)
    assert reward.count("<polyline") == 2
    assert f"run {dpo.pk} · dpo · tiny-sft (implicit reward margin)" in reward
    assert f"run {grpo.pk} · grpo · tiny-sft (mean reward)" in reward


def test_a_wrong_choice_of_runs_is_one_line_and_400(engineer_client, base_checkpoint):
    one = Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=base_checkpoint, folder="a")
    two = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base_checkpoint, folder="b")
    cases = [
        ({"run": [one.pk]}, "choose two or more runs to compare their curves (got 1)"),
        ({"run": [one.pk, one.pk]}, "choose two or more runs to compare their curves (got 1)"),
        ({}, "choose two or more runs to compare their curves (got 0)"),
        ({"run": [one.pk, 999999]}, "there is no run 999999; tick runs in the runs table"),
        ({"run": [one.pk, "two"]}, "run &#x27;two&#x27; is not a run id; tick runs in the runs table"),
        ({"run": [one.pk, two.pk, *range(10, 17)]}, "at most 8 runs fit on one chart (got 9); tick fewer runs"),
    ]
    for params, line in cases:
        page = engineer_client.get("/runs/curves", params)
        assert page.status_code == 400, params
        html = page.content.decode()
        assert f'<p class="error" role="alert" id="curves-error">{line}' in html, params
        assert "<svg" not in html


def test_reviewers_cannot_see_the_curves_page(client, make_user, base_checkpoint):
    client.force_login(make_user("rita", "reviewer"))
    assert client.get("/runs/curves", {"run": [1, 2]}).status_code == 403


def test_launch_again_prefills_the_form_with_the_runs_own_config(engineer_client, base_checkpoint, tmp_path):
    snapshot = str(tmp_path / "snapshots" / "speed-2")
    run = Run.objects.create(
        kind="dpo", status="succeeded", backend="slurm", base_checkpoint=base_checkpoint, snapshot_path=snapshot,
        folder="/runs/run-000001",
        config={"learning_rate": 2e-5, "max_steps": 30, "beta": 0.2, "base_checkpoint": base_checkpoint.uri,
                "snapshot": snapshot, "output_dir": "/runs/run-000001", "hub_token": "hf_secret"})
    values = launch_values_from_run(run_id=str(run.pk))
    assert {key: values[key] for key in ("kind", "backend", "base_checkpoint", "snapshot", "tasks")} == {
        "kind": "dpo", "backend": "slurm", "base_checkpoint": "tiny-sft", "snapshot": snapshot, "tasks": ""}
    assert yaml.safe_load(values["config"]) == {"learning_rate": 2e-5, "max_steps": 30, "beta": 0.2}
    for key in ("output_dir", "base_checkpoint", "snapshot", "hub_token", "hf_secret"):
        assert key not in values["config"]
    # The page's link fills the launch form's config box with those keys.
    page = engineer_client.get("/runs/", {"again": run.pk})
    assert page.status_code == 200
    box = re.search(r'<textarea name="config"[^>]*>(.*?)</textarea>', page.content.decode(), re.S).group(1)
    assert "beta: 0.2" in box and "max_steps: 30" in box and "output_dir" not in box


def test_launch_again_picks_the_export_or_task_set_the_run_read(base_checkpoint, make_project, tmp_path):
    export = Export.objects.create(project=make_project("speed"), filters={}, status=Export.Status.DONE,
                                   out_dir=str(tmp_path / "speed-1"))
    task_set = TaskSet.objects.create(name="arith", path=str(tmp_path / "arith.jsonl"), sha256="b" * 64, count=4,
                                      source=TaskSet.Source.MADE)
    dpo = Run.objects.create(kind="dpo", base_checkpoint=base_checkpoint, export=export, snapshot_path=export.out_dir,
                             folder="a", config={"max_steps": 5})
    grpo = Run.objects.create(kind="grpo", base_checkpoint=base_checkpoint, task_set=task_set,
                              tasks_path=task_set.path, folder="b", config={"num_generations": 4})
    assert launch_values_from_run(run_id=dpo.pk)["export"] == str(export.pk)
    assert launch_values_from_run(run_id=dpo.pk)["snapshot"] == ""
    grpo_values = launch_values_from_run(run_id=grpo.pk)
    assert grpo_values["task_set"] == str(task_set.pk) and grpo_values["kind"] == "grpo"
    assert yaml.safe_load(grpo_values["config"]) == {"num_generations": 4}


def test_only_trainer_runs_can_be_launched_again(engineer_client, base_checkpoint):
    evaluation = Run.objects.create(kind="eval", status="succeeded", base_checkpoint=base_checkpoint, folder="e")
    trained = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base_checkpoint, folder="g")
    assert 'id="launch-again"' not in engineer_client.get(f"/runs/{evaluation.pk}/").content.decode()
    assert f'href="/runs/?again={trained.pk}#launch"' in engineer_client.get(f"/runs/{trained.pk}/").content.decode()
    page = engineer_client.get("/runs/", {"again": evaluation.pk}).content.decode()
    assert f"run {evaluation.pk} is eval: only dpo, grpo and reward runs are launched from this form" in page
    assert "there is no run &#x27;999999&#x27; to launch again" in engineer_client.get(
        "/runs/", {"again": 999999}).content.decode()


def test_a_grpo_run_on_a_reward_model_shows_its_score_and_length_beside_the_reward(engineer_client, base_checkpoint):
    """Reward hacking shows: the run page draws the reward model's mean score on the reward chart and the mean
    completion length on its own chart beside it."""
    metrics = train_rows(range(1, 5), loss=lambda s: 0.1, reward=lambda s: 0.2 * s,
                         rewards__pairwise_reward_model__mean=lambda s: 0.2 * s,
                         completions__mean_length=lambda s: 20 + 5 * s)
    run = Run.objects.create(kind="grpo", status="succeeded", base_checkpoint=base_checkpoint, folder="c",
                             metrics=metrics)
    html = engineer_client.get(f"/runs/{run.pk}/").content.decode()
    reward = re.search(r'<div id="chart-reward">(.*?)</div>', html, re.S).group(1)
    assert reward.count("<polyline") == 2 and "reward model&#x27;s mean score" in reward
    length = re.search(r'<div id="chart-completion_length">(.*?)</div>', html, re.S).group(1)
    assert length.count("<polyline") == 1 and "mean completion length" in length
    dpo = Run.objects.create(kind="dpo", status="succeeded", base_checkpoint=base_checkpoint, folder="d",
                             metrics=train_rows(range(1, 3), loss=lambda s: 0.5))
    html = engineer_client.get(f"/runs/{dpo.pk}/").content.decode()
    assert "only GRPO generates during training" in html
